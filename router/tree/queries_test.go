package tree

// Queries only the tests make: what one tenant holds, as the policy never asks.

// prefixMatchTenant is the length in runes of the longest prefix of text stored for tenant: it
// descends only into nodes that carry tenant. An unknown tenant gives 0. It does not refresh
// stamps.
func (t *Tree) prefixMatchTenant(text, tenant string) int {
	id, ok := t.lookup(tenant)
	if !ok {
		return 0
	}
	matched := 0
	n := t.root
	for len(text) > 0 {
		i, ok := n.find(firstKey(text))
		if !ok || !n.children[i].n.has(id) {
			break
		}
		c := n.children[i].n
		j := commonPrefix(text, c.edge)
		if j < len(c.edge) {
			return matched + runeCount(c.edge[:j])
		}
		matched += int(c.runes)
		text = text[j:]
		n = c
	}
	return matched
}

// tenantChars is the number of runes tenant owns: the sum of the edge lengths of the nodes
// carrying it (shared nodes count for each of their tenants). Unknown tenants own 0.
func (t *Tree) tenantChars(tenant string) int {
	id, ok := t.lookup(tenant)
	if !ok {
		return 0
	}
	return t.chars[id]
}

// tenants returns the registered tenants in the order the tree first saw them.
func (t *Tree) tenants() []string {
	var out []string
	for id, ok := range t.live {
		if ok {
			out = append(out, t.names[id])
		}
	}
	return out
}
