package tree

import (
	"fmt"
	"maps"
	"slices"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/stretchr/testify/require"
)

// model is the brute-force tree: the texts each registered tenant stored. The tree holds exactly
// the prefixes of these texts, so matching is a longest common prefix over them, and a tenant's
// count is the number of distinct non-empty prefixes of its texts. Eviction is checked for its
// bounds and for only removing, after which the model is re-read from the tree (exact eviction
// order is covered by the unit tests).
type model struct {
	texts map[string]map[string]bool // tenant → texts ("" registers)
	own   map[string]map[string]bool // tenant → non-empty rune prefixes of its texts (its nodes' runes)
	all   map[string]bool            // non-empty rune prefixes of every tenant's texts
	order []string                   // tenants in first-seen order, removed ones included
	ever  map[string]bool            // every text ever inserted
}

func newModel() *model {
	m := &model{texts: map[string]map[string]bool{}, ever: map[string]bool{"": true}}
	m.recount()
	return m
}

func (m *model) insert(text, tenant string) {
	if !slices.Contains(m.order, tenant) {
		m.order = append(m.order, tenant)
	}
	if m.texts[tenant] == nil {
		m.texts[tenant] = map[string]bool{"": true}
	}
	m.texts[tenant][text] = true
	m.ever[text] = true
	if m.own[tenant] == nil {
		m.own[tenant] = map[string]bool{}
	}
	prefixes(text, m.own[tenant])
	prefixes(text, m.all)
}

func (m *model) remove(tenant string) {
	delete(m.texts, tenant)
	m.recount()
}

// lcp is the longest common prefix of a and b in runes (each invalid byte one rune), and its
// length in bytes.
func lcp(a, b string) (runes, bytes int) {
	for bytes < len(a) && bytes < len(b) {
		_, wa := utf8.DecodeRuneInString(a[bytes:])
		_, wb := utf8.DecodeRuneInString(b[bytes:])
		if wa != wb || a[bytes:bytes+wa] != b[bytes:bytes+wb] {
			break
		}
		bytes += wa
		runes++
	}
	return runes, bytes
}

// match is what PrefixMatch must return.
func (m *model) match(text string) (int, []string) {
	best, bestBytes := 0, 0
	for _, texts := range m.texts {
		for s := range texts {
			if r, b := lcp(text, s); r > best {
				best, bestBytes = r, b
			}
		}
	}
	// The stop node carries exactly the tenants with a text running through the matched prefix.
	prefix := text[:bestBytes]
	tenants := []string{}
	for _, tenant := range m.order {
		for s := range m.texts[tenant] {
			if r, _ := lcp(s, prefix); r == best {
				tenants = append(tenants, tenant)
				break
			}
		}
	}
	return best, tenants
}

func (m *model) matchTenant(text, tenant string) int {
	best := 0
	for s := range m.texts[tenant] {
		best = max(best, lcpRunes(text, s))
	}
	return best
}

func lcpRunes(a, b string) int {
	r, _ := lcp(a, b)
	return r
}

// prefixes adds the non-empty rune prefixes of s to set.
func prefixes(s string, set map[string]bool) {
	for i := 0; i < len(s); {
		_, w := utf8.DecodeRuneInString(s[i:])
		i += w
		set[s[:i]] = true
	}
}

// recount rebuilds own and all from texts.
func (m *model) recount() {
	m.own, m.all = map[string]map[string]bool{}, map[string]bool{}
	for tenant, texts := range m.texts {
		m.own[tenant] = map[string]bool{}
		for s := range texts {
			prefixes(s, m.own[tenant])
			prefixes(s, m.all)
		}
	}
}

// countsMatch reports whether tr's counters are the model's.
func (m *model) countsMatch(tr *Tree) bool {
	if tr.TotalChars() != len(m.all) || len(tr.live) < len(m.own) {
		return false
	}
	n := 0
	for id, ok := range tr.live {
		if !ok {
			continue
		}
		n++
		own, found := m.own[tr.names[id]]
		if !found || len(own) != tr.chars[id] {
			return false
		}
	}
	return n == len(m.own)
}

func (m *model) counts() map[string]int {
	c := map[string]int{}
	for tenant, own := range m.own {
		c[tenant] = len(own)
	}
	return c
}

// resync re-reads the model from the tree: for each tenant, the paths of the nodes where it
// is a leaf, and "" for its registration at the root.
func (m *model) resync(tr *Tree) map[string]map[string]bool {
	texts := map[string]map[string]bool{}
	for _, mk := range tr.root.marks {
		texts[tr.names[mk.id]] = map[string]bool{"": true}
	}
	var rec func(n *node, path string)
	rec = func(n *node, path string) {
		for _, ch := range n.children {
			c := ch.n
			p := path + c.edge
			for _, mk := range c.marks {
				if !c.childCarries(mk.id) {
					texts[tr.names[mk.id]][p] = true
				}
			}
			rec(c, p)
		}
	}
	rec(tr.root, "")
	old := m.texts
	m.texts = texts
	m.recount()
	return old
}

// fuzzAlphabet mixes ASCII, valid multi-byte runes and bytes that form or break them
// ("\xe4\xbd\xa0" is 你, "\xc3\xa9" is é).
var fuzzAlphabet = []string{"a", "b", "c", "é", "你", "\xe4", "\xbd", "\xa0", "\xc3", "\xff"}

var fuzzTenants = []string{"t0", "t1", "t2", "t3"}

// fuzzReader turns fuzz input into operations; it reads zeros once the input is exhausted.
type fuzzReader struct{ data []byte }

func (r *fuzzReader) byte() byte {
	if len(r.data) == 0 {
		return 0
	}
	b := r.data[0]
	r.data = r.data[1:]
	return b
}

func (r *fuzzReader) text() string {
	var sb strings.Builder
	for n := int(r.byte() % 10); n > 0; n-- {
		sb.WriteString(fuzzAlphabet[int(r.byte())%len(fuzzAlphabet)])
	}
	return sb.String()
}

// FuzzPrefixMatch runs a sequence of operations against the tree and the brute-force model,
// checking every match and, after every operation, the counters (Check and the model's counts).
func FuzzPrefixMatch(f *testing.F) {
	seeds := [][]byte{
		{},
		{0, 0, 5, 0, 1, 2, 3, 4, 3, 3, 0, 1, 2}, // insert abcé你, match abc
		{0, 1, 3, 4, 4, 4, 0, 2, 3, 5, 6, 7, 3, 3, 5, 6, 7},                      // 你你你 vs \xe4\xbd\xa0
		{0, 0, 4, 0, 1, 2, 0, 0, 1, 4, 0, 1, 1, 1, 6, 3, 9, 3, 4, 0, 1, 2, 3},    // two tenants, evict
		{0, 0, 3, 8, 3, 3, 1, 2, 2, 8, 1, 3, 2, 3, 8, 3, 7, 3, 3, 8, 3, 7, 5, 0}, // é from pieces, remove
		{7, 1, 0, 2, 2, 0, 1, 6, 0, 5, 3, 0, 5, 1, 3, 0},                         // register, evict total
		{0, 0, 9, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 2, 5, 0, 0, 0, 0, 0, 6, 4, 3, 6, 0, 7, 4, 2, 0, 0},
		{1, 2, 6, 5, 6, 7, 5, 6, 7, 2, 1, 4, 5, 6, 7, 4, 1, 2, 5, 6, 3, 3, 5, 6, 7, 4, 1, 6, 2, 9, 6, 1, 1},
		{0, 3, 2, 9, 9, 0, 3, 3, 9, 9, 9, 0, 3, 1, 9, 6, 2, 3, 3, 2, 9, 9, 5, 3, 6, 0, 2},
		{0, 0, 3, 5, 6, 0, 0, 1, 1, 4, 3, 2, 5, 6, 3, 3, 5, 6, 7, 4, 0, 2, 5, 6}, // "\xe4\xbda" vs 你
		{0, 0, 2, 8, 7, 0, 1, 1, 3, 3, 2, 8, 7, 3, 1, 8, 0, 2, 1, 8, 3, 1, 8},    // "\xc3\xa0" is à; "\xc3" alone
		{0, 0, 4, 0, 5, 6, 0, 0, 1, 2, 0, 4, 3, 3, 0, 5, 6, 6, 2, 4, 11},         // a\xe4\xbda, a你, evict
		{0, 0, 8, 0, 5, 8, 6, 0, 0, 0, 0, 0, 0, 1, 3, 0, 5, 8, 3, 4, 0, 5, 8, 6}, // a\xe4ýaaaa: ý is "\xc3\xbd"
	}
	for _, s := range seeds {
		f.Add(s)
	}
	f.Fuzz(fuzzOps)
}

// fuzzOps is FuzzPrefixMatch's body.
func fuzzOps(t *testing.T, data []byte) {
	if len(data) > 256 {
		return // long inputs only slow the model down
	}
	r := &fuzzReader{data: data}
	tr := New()
	m := newModel()
	var dst []string
	for step := 0; len(r.data) > 0; step++ {
		op := r.byte() % 8
		var desc string
		switch op {
		case 0, 1, 2: // insert (2: after matching it, with its rune count, as cache_aware does)
			tenant, text := fuzzTenants[r.byte()%4], r.text()
			desc = fmt.Sprintf("Insert(%q, %s)", text, tenant)
			if op == 2 {
				desc = fmt.Sprintf("PrefixMatch(%q), Insert(%q, %s)", text, text, tenant)
				var got int
				got, dst = tr.PrefixMatch(text, dst)
				if want, _ := m.match(text); got != want {
					t.Fatalf("%d %s: matched %d runes, want %d", step, desc, got, want)
				}
			}
			if op == 2 {
				tr.InsertRunes(text, utf8.RuneCountInString(text), tenant)
			} else {
				tr.Insert(text, tenant)
			}
			m.insert(text, tenant)
			if got := tr.prefixMatchTenant(text, tenant); got != runeCount(text) {
				t.Fatalf("%d %s: PrefixMatchTenant of the inserted text = %d, want %d", step, desc, got, runeCount(text))
			}
		case 3: // match
			text := r.text()
			desc = fmt.Sprintf("PrefixMatch(%q)", text)
			var got int
			got, dst = tr.PrefixMatch(text, dst)
			want, wantTenants := m.match(text)
			if got != want || !slices.Equal(wantTenants, dst) {
				require.Equal(t, want, got, "%d %s: matched runes", step, desc)
				require.Equal(t, wantTenants, append([]string{}, dst...), "%d %s: tenants", step, desc)
			}
			everBest := 0
			for s := range m.ever {
				everBest = max(everBest, lcpRunes(text, s))
			}
			if got > everBest {
				t.Fatalf("%d %s: matched %d runes, more than any text ever inserted (%d)", step, desc, got, everBest)
			}
		case 4: // match for a tenant
			tenant, text := fuzzTenants[r.byte()%4], r.text()
			desc = fmt.Sprintf("PrefixMatchTenant(%q, %s)", text, tenant)
			if got, want := tr.prefixMatchTenant(text, tenant), m.matchTenant(text, tenant); got != want {
				t.Fatalf("%d %s = %d, want %d", step, desc, got, want)
			}
		case 5: // remove
			tenant := fuzzTenants[r.byte()%4]
			desc = fmt.Sprintf("RemoveTenant(%s)", tenant)
			tr.RemoveTenant(tenant)
			m.remove(tenant)
		case 6: // evict with small bounds; <= 0 disables
			per, total := int(r.byte()%12)-2, int(r.byte()%24)-2
			desc = fmt.Sprintf("Evict(%d, %d)", per, total)
			before := tr.TotalChars()
			freed := tr.Evict(per, total)
			require.Equal(t, before-tr.TotalChars(), freed, "%d %s: freed", step, desc)
			if per > 0 {
				for tenant, c := range tr.TenantCounts() {
					require.LessOrEqual(t, c, per, "%d %s: %s over its bound", step, desc, tenant)
				}
			}
			if total > 0 {
				require.LessOrEqual(t, tr.TotalChars(), total, "%d %s: total over its bound", step, desc)
			}
			old := m.resync(tr)
			require.Equal(t, slices.Sorted(maps.Keys(old)), slices.Sorted(maps.Keys(m.texts)), "%d %s: tenants stay registered", step, desc)
			for tenant, texts := range m.texts {
				for s := range texts {
					kept := false
					for o := range old[tenant] {
						if lcpRunes(s, o) == runeCount(s) {
							kept = true
							break
						}
					}
					require.True(t, kept, "%d %s: %s holds %q, which it did not before", step, desc, tenant, s)
				}
			}
		case 7: // register
			tenant := fuzzTenants[r.byte()%4]
			desc = fmt.Sprintf("Insert(\"\", %s)", tenant)
			tr.Insert("", tenant)
			m.insert("", tenant)
		}
		if err := tr.Check(); err != nil {
			require.NoError(t, err, "%d %s", step, desc)
		}
		if !m.countsMatch(tr) {
			require.Equal(t, m.counts(), tr.TenantCounts(), "%d %s: counts", step, desc)
			require.Equal(t, len(m.all), tr.TotalChars(), "%d %s: total", step, desc)
			t.Fatalf("%d %s: counters differ from the model", step, desc)
		}
	}
}
