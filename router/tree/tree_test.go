package tree

import (
	"container/heap"
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"
	"unicode/utf8"
	"unsafe"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// ins is one Insert.
type ins struct{ text, tenant string }

func build(t *testing.T, ops ...ins) *Tree {
	t.Helper()
	tr := New()
	for _, op := range ops {
		tr.Insert(op.text, op.tenant)
		require.NoError(t, tr.Check(), "after inserting %q for %s", op.text, op.tenant)
	}
	return tr
}

// match is PrefixMatch with a fresh dst, nil tenants normalised to empty.
func match(tr *Tree, text string) (int, []string) {
	n, ts := tr.PrefixMatch(text, nil)
	if ts == nil {
		ts = []string{}
	}
	return n, ts
}

// TestPrefixMatch covers the black-box cases of research/sgl-router.md §4.4, adapted: the stop
// node reports all its tenants in first-seen order instead of one arbitrary tenant.
func TestPrefixMatch(t *testing.T) {
	t.Parallel()
	type want struct {
		text    string
		matched int
		tenants []string
	}
	tests := []struct {
		name string
		ops  []ins
		want []want
	}{
		{
			name: "cold start",
			want: []want{{"hello", 0, []string{}}, {"", 0, []string{}}},
		},
		{
			name: "exact match",
			ops:  []ins{{"hello", "t1"}, {"apple", "t2"}, {"banana", "t3"}},
			want: []want{{"hello", 5, []string{"t1"}}, {"apple", 5, []string{"t2"}}, {"banana", 6, []string{"t3"}}},
		},
		{
			name: "utf-8 split",
			ops:  []ins{{"你好嗎", "t1"}, {"你好喔", "t2"}, {"你心情好嗎", "t3"}},
			want: []want{
				{"你好嗎", 3, []string{"t1"}},
				{"你好喔", 3, []string{"t2"}},
				{"你心情好嗎", 5, []string{"t3"}},
				{"你好", 2, []string{"t1", "t2"}},       // stops exactly on the split node
				{"你", 1, []string{"t1", "t2", "t3"}},  // the shared first rune
				{"你好嗎？", 3, []string{"t1"}},           // text longer than the tree
				{"你们", 1, []string{"t1", "t2", "t3"}}, // no child for 们
				{"好", 0, []string{"t1", "t2", "t3"}},  // miss: the root's tenants
			},
		},
		{
			// v0.3.2: a partial edge match counts the shared runes and stops on that child.
			name: "partial match appl",
			ops:  []ins{{"application", "t1"}, {"app", "t2"}},
			want: []want{
				{"apple", 4, []string{"t1"}},
				{"application", 11, []string{"t1"}},
				{"app", 3, []string{"t1", "t2"}},
				{"ap", 2, []string{"t1", "t2"}},
			},
		},
		{
			name: "counts",
			ops:  []ins{{"hello world", "t1"}},
			want: []want{{"hello world and more", 11, []string{"t1"}}, {"goodbye", 0, []string{"t1"}}},
		},
		{
			name: "counts utf-8",
			ops:  []ins{{"你好世界呀", "t1"}, {"hello你好", "t1"}},
			want: []want{{"hello你好世界", 7, []string{"t1"}}},
		},
		{
			// v0.3.2 returns t1 alone; the root carries every registered tenant.
			name: "empty string",
			ops:  []ins{{"", "t1"}, {"hello", "t2"}},
			want: []want{{"", 0, []string{"t1", "t2"}}, {"hello", 5, []string{"t2"}}},
		},
		{
			name: "splits",
			ops:  []ins{{"abcdefgh", "t1"}, {"abcdef", "t2"}, {"abcd", "t3"}, {"ab", "t4"}},
			want: []want{
				{"abcdefgh", 8, []string{"t1"}},
				{"abcdef", 6, []string{"t1", "t2"}},
				{"abcd", 4, []string{"t1", "t2", "t3"}},
				{"ab", 2, []string{"t1", "t2", "t3", "t4"}},
				{"a", 1, []string{"t1", "t2", "t3", "t4"}},
				{"abcdeX", 5, []string{"t1", "t2"}},
			},
		},
		{
			name: "tenants in first-seen order",
			ops:  []ins{{"x", "zeta"}, {"x", "alpha"}, {"x", "mid"}, {"x", "zeta"}},
			want: []want{{"x", 1, []string{"zeta", "alpha", "mid"}}},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			tr := build(t, tc.ops...)
			for _, w := range tc.want {
				n, ts := match(tr, w.text)
				assert.Equal(t, w.matched, n, "matched runes of %q", w.text)
				assert.Equal(t, w.tenants, ts, "tenants at the stop node of %q", w.text)
			}
			require.NoError(t, tr.Check())
		})
	}
}

func TestPrefixMatchTenant(t *testing.T) {
	t.Parallel()
	tr := build(t, ins{"hello", "t1"}, ins{"hello", "t2"}, ins{"hello world", "t2"}, ins{"help", "t1"}, ins{"helicopter", "t2"})
	tests := []struct {
		tenant, text string
		want         int
	}{
		{"t1", "hello", 5},
		{"t1", "help", 4},
		{"t1", "hel", 3},
		{"t1", "hello world", 5}, // " world" is t2's only
		{"t1", "helicopter", 3},
		{"t2", "hello world", 11},
		{"t2", "helicopter", 10},
		{"t2", "help", 3},
		{"t2", "helium", 4}, // partial match inside t2's "icopter" counts
		{"t3", "hello", 0},  // unknown tenant
		{"t1", "", 0},
	}
	for _, tc := range tests {
		t.Run(tc.tenant+"/"+tc.text, func(t *testing.T) {
			assert.Equal(t, tc.want, tr.prefixMatchTenant(tc.text, tc.tenant))
		})
	}
	require.NoError(t, tr.Check())
}

func TestCounts(t *testing.T) {
	t.Parallel()
	tr := build(t, ins{"hello", "t1"}, ins{"world", "t1"})
	assert.Equal(t, map[string]int{"t1": 10}, tr.TenantCounts())

	tr.Insert("hello", "t2")
	tr.Insert("help", "t2")
	require.NoError(t, tr.Check())
	assert.Equal(t, map[string]int{"t1": 10, "t2": 6}, tr.TenantCounts(), `t2 owns "hello" + "p"`)
	assert.Equal(t, 11, tr.TotalChars(), `"hel" "lo" "p" "world"`)
	assert.Equal(t, 4, tr.Nodes())

	tr.Insert("你好", "t3")
	require.NoError(t, tr.Check())
	assert.Equal(t, 2, tr.tenantChars("t3"))
	assert.Equal(t, 0, tr.tenantChars("nobody"))
	assert.Equal(t, 13, tr.TotalChars())

	tr.Insert("", "t4")
	require.NoError(t, tr.Check())
	assert.Equal(t, map[string]int{"t1": 10, "t2": 6, "t3": 2, "t4": 0}, tr.TenantCounts(), "Insert(\"\") registers with 0")
	assert.Equal(t, []string{"t1", "t2", "t3", "t4"}, tr.tenants())

	// TenantCounts is a copy.
	tr.TenantCounts()["t1"] = 99
	assert.Equal(t, 10, tr.tenantChars("t1"))
}

func TestNodesAndSplits(t *testing.T) {
	t.Parallel()
	// sgl-router's leaf_of case, observed through the node count and matches.
	tr := build(t, ins{"hello", "t1"})
	assert.Equal(t, 1, tr.Nodes())
	tr.Insert("hello", "t2")
	assert.Equal(t, 1, tr.Nodes())
	tr.Insert("hi", "t1")
	require.NoError(t, tr.Check())
	assert.Equal(t, 3, tr.Nodes(), `"h" splits into "h" → "ello", "i"`)
	n, ts := match(tr, "hx")
	assert.Equal(t, 1, n)
	assert.Equal(t, []string{"t1", "t2"}, ts, `the "h" node inherits "hello"'s tenants`)
	n, ts = match(tr, "hi")
	assert.Equal(t, 2, n)
	assert.Equal(t, []string{"t1"}, ts)
}

func TestRemoveTenant(t *testing.T) {
	t.Parallel()
	t.Run("simple", func(t *testing.T) {
		t.Parallel()
		tr := build(t, ins{"hello", "t1"}, ins{"world", "t1"}, ins{"hello", "t2"}, ins{"help", "t2"})
		tr.RemoveTenant("t1")
		require.NoError(t, tr.Check())
		assert.Equal(t, map[string]int{"t2": 6}, tr.TenantCounts())
		assert.Equal(t, 0, tr.prefixMatchTenant("hello", "t1"))
		assert.Equal(t, 4, tr.prefixMatchTenant("help", "t2"))
		assert.Equal(t, 6, tr.TotalChars(), `"world" is unlinked`)
		n, ts := match(tr, "world")
		assert.Equal(t, 0, n)
		assert.Equal(t, []string{"t2"}, ts)
	})
	t.Run("complex", func(t *testing.T) {
		t.Parallel()
		tr := build(t,
			ins{"apple", "t1"}, ins{"application", "t1"},
			ins{"apple", "t2"}, ins{"appetite", "t2"},
			ins{"banana", "t1"}, ins{"banana", "t2"}, ins{"ball", "t2"})
		tr.RemoveTenant("t1")
		require.NoError(t, tr.Check())
		assert.Equal(t, map[string]int{"t2": 18}, tr.TenantCounts(), `"apple"+"etite"+"banana"+"ll"`)
		n, ts := match(tr, "application")
		assert.Equal(t, 4, n, `"lication" is gone, "appl" is t2's "apple"`)
		assert.Equal(t, []string{"t2"}, ts)
	})
	t.Run("unknown and repeated", func(t *testing.T) {
		t.Parallel()
		tr := build(t, ins{"hello", "t1"})
		tr.RemoveTenant("nobody")
		require.NoError(t, tr.Check())
		assert.Equal(t, map[string]int{"t1": 5}, tr.TenantCounts())
		tr.RemoveTenant("t1")
		tr.RemoveTenant("t1")
		require.NoError(t, tr.Check())
		assert.Empty(t, tr.TenantCounts())
		assert.Zero(t, tr.TotalChars())
		assert.Zero(t, tr.Nodes())
		n, ts := match(tr, "hello")
		assert.Equal(t, 0, n)
		assert.Empty(t, ts)
	})
	t.Run("re-added tenant keeps its place", func(t *testing.T) {
		t.Parallel()
		tr := build(t, ins{"x", "a"}, ins{"x", "b"})
		tr.RemoveTenant("a")
		tr.Insert("x", "a")
		require.NoError(t, tr.Check())
		_, ts := match(tr, "x")
		assert.Equal(t, []string{"a", "b"}, ts)
	})
}

func TestEvictPerTenant(t *testing.T) {
	t.Parallel()
	t.Run("simple", func(t *testing.T) {
		t.Parallel()
		// sgl-router's "simple eviction", with LRU order instead of a sleep.
		tr := build(t, ins{"hello", "t1"}, ins{"hello", "t2"}, ins{"world", "t2"})
		assert.Equal(t, 0, tr.Evict(5, 0), `"hello" is still t1's`)
		require.NoError(t, tr.Check())
		assert.Equal(t, map[string]int{"t1": 5, "t2": 5}, tr.TenantCounts())
		n, ts := match(tr, "world")
		assert.Equal(t, 5, n)
		assert.Equal(t, []string{"t2"}, ts)
		n, ts = match(tr, "hello")
		assert.Equal(t, 5, n)
		assert.Equal(t, []string{"t1"}, ts, "t2's older hello leaf was evicted")
	})
	t.Run("lru order", func(t *testing.T) {
		t.Parallel()
		tr := build(t, ins{"aa", "t"}, ins{"bb", "t"}, ins{"cc", "t"}, ins{"dd", "t"}, ins{"aa", "t"})
		assert.Equal(t, 4, tr.Evict(4, 0))
		require.NoError(t, tr.Check())
		for text, want := range map[string]int{"aa": 2, "bb": 0, "cc": 0, "dd": 2} {
			assert.Equal(t, want, tr.prefixMatchTenant(text, "t"), text)
		}
	})
	t.Run("match does not refresh", func(t *testing.T) {
		t.Parallel()
		tr := build(t, ins{"a", "t"}, ins{"b", "t"})
		tr.PrefixMatch("a", nil)
		tr.prefixMatchTenant("a", "t")
		tr.Evict(1, 0)
		assert.Equal(t, 0, tr.prefixMatchTenant("a", "t"))
		assert.Equal(t, 1, tr.prefixMatchTenant("b", "t"))
	})
	t.Run("parent becomes a leaf", func(t *testing.T) {
		t.Parallel()
		// "abcd" then "abef" (split "ab" → "cd", "ef"), "zz" newest: evicting 5 of 6 runes
		// takes "cd", "ef", then "ab" (a leaf for t once its children are gone).
		tr := build(t, ins{"abcd", "t"}, ins{"abef", "t"}, ins{"zz", "t"})
		assert.Equal(t, 8, tr.tenantChars("t"))
		assert.Equal(t, 6, tr.Evict(3, 0))
		require.NoError(t, tr.Check())
		assert.Equal(t, map[string]int{"t": 2}, tr.TenantCounts())
		assert.Equal(t, 1, tr.Nodes())
	})
	t.Run("shared nodes stay for other tenants", func(t *testing.T) {
		t.Parallel()
		tr := build(t, ins{"hello", "t1"}, ins{"hello", "t2"}, ins{"hello world", "t2"}, ins{"hello", "t1"})
		assert.Equal(t, 6, tr.Evict(6, 0), `t2 (11) loses " world", its only leaf`)
		require.NoError(t, tr.Check())
		assert.Equal(t, map[string]int{"t1": 5, "t2": 5}, tr.TenantCounts())
		assert.Equal(t, 5, tr.Evict(4, 0), `both lose "hello"; the node goes with the last one`)
		require.NoError(t, tr.Check())
		assert.Equal(t, map[string]int{"t1": 0, "t2": 0}, tr.TenantCounts())
	})
	t.Run("disabled bounds", func(t *testing.T) {
		t.Parallel()
		tr := build(t, ins{"hello", "t1"}, ins{"world", "t2"})
		assert.Equal(t, 0, tr.Evict(0, 0))
		assert.Equal(t, 0, tr.Evict(-1, -1))
		assert.Equal(t, 10, tr.TotalChars())
	})
	t.Run("tenant stays registered", func(t *testing.T) {
		t.Parallel()
		tr := build(t, ins{"hello", "t1"})
		tr.Evict(1, 0)
		require.NoError(t, tr.Check())
		assert.Equal(t, map[string]int{"t1": 0}, tr.TenantCounts())
		_, ts := match(tr, "hello")
		assert.Equal(t, []string{"t1"}, ts)
	})
}

func TestEvictTotal(t *testing.T) {
	t.Parallel()
	t.Run("oldest leaves first", func(t *testing.T) {
		t.Parallel()
		tr := build(t, ins{"aaaa", "t1"}, ins{"bbbb", "t2"}, ins{"cccc", "t1"})
		assert.Equal(t, 4, tr.Evict(0, 8))
		require.NoError(t, tr.Check())
		assert.Equal(t, map[string]int{"t1": 4, "t2": 4}, tr.TenantCounts())
		assert.Equal(t, 0, tr.prefixMatchTenant("aaaa", "t1"))
		assert.Equal(t, 4, tr.Evict(0, 4))
		assert.Equal(t, map[string]int{"t1": 4, "t2": 0}, tr.TenantCounts())
		assert.Equal(t, 0, tr.Evict(0, 4), "within the bound")
	})
	t.Run("newest stamp on a shared leaf counts", func(t *testing.T) {
		t.Parallel()
		tr := build(t, ins{"aaaa", "t1"}, ins{"bbbb", "t2"}, ins{"aaaa", "t2"})
		assert.Equal(t, 4, tr.Evict(0, 4))
		require.NoError(t, tr.Check())
		assert.Equal(t, map[string]int{"t1": 4, "t2": 4}, tr.TenantCounts(), `"bbbb" was older than t2's refresh of "aaaa"`)
	})
	t.Run("parent becomes a leaf", func(t *testing.T) {
		t.Parallel()
		tr := build(t, ins{"abcd", "t1"}, ins{"abef", "t2"}, ins{"xy", "t3"})
		assert.Equal(t, 6, tr.Evict(0, 2))
		require.NoError(t, tr.Check())
		assert.Equal(t, map[string]int{"t1": 0, "t2": 0, "t3": 2}, tr.TenantCounts())
		assert.Equal(t, 2, tr.TotalChars())
		assert.Equal(t, 1, tr.Nodes())
	})
	t.Run("after per-tenant", func(t *testing.T) {
		t.Parallel()
		tr := build(t, ins{"aaaa", "t1"}, ins{"bbbbbbbb", "t2"}, ins{"cc", "t1"})
		// Per tenant (6): t2 loses "bbbbbbbb" (8); then total 6 > 4: "aaaa" goes.
		assert.Equal(t, 12, tr.Evict(6, 4))
		require.NoError(t, tr.Check())
		assert.Equal(t, map[string]int{"t1": 2, "t2": 0}, tr.TenantCounts())
	})
}

func TestInvalidUTF8(t *testing.T) {
	t.Parallel()
	// "\xe4\xbd\xa0" is 你; "\xe4\xbdX" is two invalid bytes and X (3 runes).
	tr := build(t,
		ins{"\xe4\xbdX", "bad"}, ins{"\xe4\xbd\xa0", "good"}, ins{"\xff\xfe", "ff"},
		ins{"\uFFFD", "fffd"}, ins{"\xe4\xbd", "pair"}, ins{"a\xe4", "a"}, ins{"a\xe4\xbd\xa0", "a你"})
	tests := []struct {
		text    string
		matched int
		tenants []string
	}{
		{"\xe4\xbdX", 3, []string{"bad"}},
		{"\xe4\xbd\xa0", 1, []string{"good"}},
		{"\xe4\xbd", 2, []string{"bad", "pair"}},
		{"\xe4\xbdY", 2, []string{"bad", "pair"}},
		{"\xe4", 1, []string{"bad", "pair"}},
		{"\xff\xfe\xfd", 2, []string{"ff"}},
		{"\xff", 1, []string{"ff"}},
		{"\uFFFD", 1, []string{"fffd"}},
		{"\xef\xbf", 0, []string{"bad", "good", "ff", "fffd", "pair", "a", "a你"}}, // a truncated U+FFFD is two invalid runes
		{"a\xe4", 2, []string{"a"}},
		{"a你", 2, []string{"a你"}},
		{"a\xe4\xbd", 2, []string{"a"}}, // a, \xe4, \xbd: the truncated 你 is not 你
	}
	for _, tc := range tests {
		n, ts := match(tr, tc.text)
		assert.Equal(t, tc.matched, n, "%q", tc.text)
		assert.Equal(t, tc.tenants, ts, "%q", tc.text)
	}
	// "\xe4\xbd" → "X", 你, "\xff\xfe", U+FFFD, "a" → "\xe4" and 你.
	assert.Equal(t, 2+1+1+2+1+1+1+1, tr.TotalChars())
	require.NoError(t, tr.Check())
	tr.RemoveTenant("bad")
	tr.Evict(1, 3)
	require.NoError(t, tr.Check())
}

func TestEdgesAreOwned(t *testing.T) {
	t.Parallel()
	prompt := strings.Repeat("x", 100) + "tail"
	tr := New()
	tr.Insert(prompt[:50], "t")       // leaf from a substring
	tr.Insert(prompt[:30]+"yy", "t")  // splits it
	tr.Insert(prompt[:20]+"zzz", "t") // splits again
	require.NoError(t, tr.Check())
	lo := uintptr(unsafe.Pointer(unsafe.StringData(prompt)))
	hi := lo + uintptr(len(prompt))
	tr.walk(func(n *node) {
		p := uintptr(unsafe.Pointer(unsafe.StringData(n.edge)))
		assert.False(t, p >= lo && p < hi, "edge %q points into the caller's text", n.edge)
	})
}

func TestPrefixMatchAllocs(t *testing.T) {
	tr := build(t, ins{"hello world", "t1"}, ins{"hello there", "t2"}, ins{"你好", "t3"})
	dst := make([]string, 0, 8)
	allocs := testing.AllocsPerRun(100, func() {
		_, dst = tr.PrefixMatch("hello wor", dst)
		_, dst = tr.PrefixMatch("你好吗", dst)
		_ = tr.prefixMatchTenant("hello there", "t2")
	})
	assert.Zero(t, allocs)
	allocs = testing.AllocsPerRun(100, func() { tr.Insert("hello world", "t1") })
	assert.Zero(t, allocs, "re-inserting a present text only refreshes stamps")
}

func TestRunesHelpers(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		a, b string
		want int // bytes
	}{
		{"ascii", "hello", "help", 3},
		{"equal", "abc", "abc", 3},
		{"empty", "", "abc", 0},
		{"multibyte differs in last byte", "你", "佢", 0},
		{"after multibyte", "你好", "你们", 3},
		{"valid vs invalid lead", "\xe4\xbd\xa0", "\xe4\xbdX", 0},
		{"prefix is truncated rune", "\xe4\xbd", "\xe4\xbd\xa0", 0},
		{"both truncated", "\xe4\xbd", "\xe4\xbdX", 2},
		{"continuation bytes alone", "\x80\x81\x82", "\x80\x81\x83", 2},
		{"five continuation bytes", "a\x80\x80\x80\x80\x80", "a\x80\x80\x80\x80\x80b", 6},
		{"4-byte rune", "x😀", "x😁", 1},
		{"long ascii", strings.Repeat("a", 100) + "b", strings.Repeat("a", 100) + "c", 100},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			got := commonPrefix(tc.a, tc.b)
			assert.Equal(t, tc.want, got)
			assert.Equal(t, got, commonPrefix(tc.b, tc.a), "symmetric")
			assert.Equal(t, tc.want, lcpBytes(tc.a, tc.b), "the reference")
		})
	}
	assert.Equal(t, int32('a'), firstKey("ab"))
	assert.Equal(t, int32('你'), firstKey("你"))
	assert.Equal(t, int32(badKey+0xe4), firstKey("\xe4\xbdX"))
	assert.NotEqual(t, firstKey("\uFFFD"), firstKey("\xff"))
	assert.Less(t, int32(utf8.MaxRune), int32(badKey))
}

// lcpBytes is the reference: decode both texts rune by rune from the start and stop at the
// first rune whose bytes differ.
func lcpBytes(a, b string) int {
	i := 0
	for i < len(a) && i < len(b) {
		_, wa := utf8.DecodeRuneInString(a[i:])
		_, wb := utf8.DecodeRuneInString(b[i:])
		if wa != wb || a[i:i+wa] != b[i:i+wb] {
			break
		}
		i += wa
	}
	return i
}

func TestRuneCount(t *testing.T) {
	t.Parallel()
	for _, s := range []string{"", "a", "abcdefgh", "abcdefghi", strings.Repeat("x", 17) + "你好" + strings.Repeat("y", 9),
		"\xff\xfe\xfd\xfc\xfb\xfa\xf9\xf8\xf7", "12345678\xe4\xbd", "1234567\xe4\xbd\xa0abcdefgh"} {
		assert.Equal(t, utf8.RuneCountInString(s), runeCount(s), "%q", s)
	}
}

func TestRecount(t *testing.T) {
	t.Parallel()
	tr := build(t, ins{"hello", "t1"}, ins{"help", "t2"}, ins{"", "t3"}, ins{"你好", "t1"})
	counts, total, nodes := tr.Recount()
	assert.Equal(t, tr.TenantCounts(), counts)
	assert.Equal(t, map[string]int{"t1": 7, "t2": 4, "t3": 0}, counts)
	assert.Equal(t, tr.TotalChars(), total)
	assert.Equal(t, 8, total)
	assert.Equal(t, tr.Nodes(), nodes)
	assert.Equal(t, 4, nodes)
}

// TestCheckDetects corrupts one thing at a time and expects Check to notice.
func TestCheckDetects(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name    string
		corrupt func(tr *Tree)
		want    string
	}{
		{"tenant count", func(tr *Tree) { tr.chars[0]++ }, "maintained tenant counts"},
		{"total", func(tr *Tree) { tr.total-- }, "maintained total"},
		{"nodes", func(tr *Tree) { tr.nodes++ }, "maintained 6 nodes, recount 5"},
		{"cached runes", func(tr *Tree) { tr.root.children[0].n.runes++ }, "caches"},
		{"child order", func(tr *Tree) {
			c := tr.root.children
			c[0], c[1] = c[1], c[0]
		}, "not sorted"},
		{"tenant missing on parent", func(tr *Tree) {
			n := tr.root.children[0].n // "hel"
			n.marks = n.marks[:1]      // t1 only, its child "p" carries t2
		}, "its parent"},
		{"cut inside a rune", func(tr *Tree) {
			n := tr.root.children[1].n.children[0].n // "你" → "好" becomes "\xe4\xbd" → "\xa0好"
			p := n.parent
			p.edge, n.edge = "\xe4\xbd", "\xa0好"
			p.runes, n.runes = 2, 2
			p.children[0].key = firstKey(n.edge)
		}, "cut inside a rune"},
		{"unregistered tenant on root", func(tr *Tree) { tr.live[2] = false }, "root carries unregistered tenant"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			tr := build(t, ins{"hello", "t1"}, ins{"help", "t2"}, ins{"", "t3"}, ins{"你好", "t1"}, ins{"你", "t2"})
			tc.corrupt(tr)
			err := tr.Check()
			require.Error(t, err)
			assert.Contains(t, err.Error(), tc.want)
		})
	}
}

func TestDeterministic(t *testing.T) {
	t.Parallel()
	run := func() (int, []string, map[string]int, int) {
		tr := New()
		for i := range 200 {
			tr.Insert(strings.Repeat(string(rune('a'+i%7)), 1+i%5)+string(rune('k'+i%3)), []string{"a", "b", "c"}[i%3])
			if i%50 == 49 {
				tr.Evict(6, 20)
			}
		}
		n, ts := tr.PrefixMatch("aaab", nil)
		return n, ts, tr.TenantCounts(), tr.Nodes()
	}
	n1, ts1, c1, nodes1 := run()
	n2, ts2, c2, nodes2 := run()
	assert.Equal(t, n1, n2)
	assert.Equal(t, ts1, ts2)
	assert.Equal(t, c1, c2)
	assert.Equal(t, nodes1, nodes2)
}

// evictTotalByWalk is evictTotal as it was before the leaf registry: the leaves collected by a
// depth-first walk in key order, ties broken by that order.
func (t *Tree) evictTotalByWalk(limit int) {
	h := &lruHeap{}
	t.walk(func(n *node) {
		if len(n.children) == 0 {
			h.push(newest(n), 0, n)
		}
	})
	heap.Init(h)
	for t.total > limit && h.Len() > 0 {
		n := heap.Pop(h).(lruEntry).n
		p := n.parent
		for _, m := range n.marks {
			t.chars[m.id] -= int(n.runes)
		}
		n.marks = nil
		t.unlink(n)
		if p != t.root && len(p.children) == 0 {
			h.push(newest(p), 0, p)
			heap.Fix(h, h.Len()-1)
		}
	}
}

// dump lists every node's path and marks, depth first in key order.
func (t *Tree) dump() string {
	var sb strings.Builder
	var rec func(n *node, path string)
	rec = func(n *node, path string) {
		fmt.Fprintf(&sb, "%q %v\n", path, n.marks)
		for _, c := range n.children {
			rec(c.n, path+c.n.edge)
		}
	}
	rec(t.root, "")
	return sb.String()
}

// The total eviction takes leaves from the registry in no particular order and evicts exactly
// what the depth-first walk did (leaves never tie on their newest stamp), through per-tenant
// evictions, removals, re-inserts and matched-then-inserted texts; the cursor a match leaves
// never survives a change of the tree.
func TestEvictTotalFromTheRegistryAsByWalk(t *testing.T) {
	t.Parallel()
	rng := rand.New(rand.NewPCG(7, 43))
	words := []string{"the", "then", "they", "a", "an", "system", "prompt", "é", "你好", "x"}
	text := func() string {
		var sb strings.Builder
		sb.WriteString(fmt.Sprintf("sys %d:", rng.IntN(4)))
		for range 1 + rng.IntN(12) {
			sb.WriteString(" " + words[rng.IntN(len(words))])
		}
		return sb.String()
	}
	a, b := New(), New()
	var dst []string
	var texts []string
	for step := range 4000 {
		switch op := rng.IntN(100); {
		case op < 70:
			s, tenant := text(), fmt.Sprintf("w%d", rng.IntN(6))
			if len(texts) > 0 && rng.IntN(4) == 0 {
				s = texts[rng.IntN(len(texts))] + " more" // a conversation's next turn
			}
			texts = append(texts, s)
			if rng.IntN(2) == 0 {
				ma, _ := a.PrefixMatch(s, dst)
				mb, _ := b.PrefixMatch(s, dst)
				require.Equal(t, ma, mb)
			}
			a.Insert(s, tenant)
			b.Insert(s, tenant)
		case op < 85:
			limit := a.TotalChars() * (50 + rng.IntN(50)) / 100
			a.evictTotal(limit)
			b.evictTotalByWalk(limit)
		case op < 95:
			per := 20 + rng.IntN(200)
			a.Evict(per, 0)
			b.Evict(per, 0)
		default:
			tenant := fmt.Sprintf("w%d", rng.IntN(6))
			a.RemoveTenant(tenant)
			b.RemoveTenant(tenant)
		}
		require.NoError(t, a.Check(), "step %d", step)
		require.Equal(t, b.dump(), a.dump(), "step %d", step)
	}
	require.Positive(t, a.Nodes())
}

// An Insert resumes the walk of the PrefixMatch of the same text before it, and only then: a
// change in between (another Insert, an Evict, a RemoveTenant) makes it walk from the root.
func TestInsertResumesTheMatch(t *testing.T) {
	t.Parallel()
	for _, between := range []string{"nothing", "insert", "evict", "remove"} {
		t.Run("between="+between, func(t *testing.T) {
			t.Parallel()
			tr, ref := New(), New()
			for _, s := range []string{"hello world", "hello there", "help me"} {
				tr.Insert(s, "a")
				ref.Insert(s, "a")
			}
			tr.Insert("zzz", "b")
			ref.Insert("zzz", "b")
			n, _ := tr.PrefixMatch("hello world, again", nil)
			require.Equal(t, len("hello world"), n)
			require.Len(t, tr.cur.path, 3, "hel, lo , world")
			switch between {
			case "insert":
				tr.Insert("hello worlds", "b")
				ref.Insert("hello worlds", "b")
			case "evict":
				tr.Evict(0, tr.TotalChars()-1)
				ref.Evict(0, ref.TotalChars()-1)
			case "remove":
				tr.RemoveTenant("b")
				ref.RemoveTenant("b")
			}
			if between == "nothing" {
				require.Equal(t, tr.gen, tr.cur.gen, "the cursor is valid")
			} else {
				require.Empty(t, tr.cur.path, "the cursor is dropped by the change")
			}
			tr.Insert("hello world, again", "c")
			ref.Insert("hello world, again", "c")
			require.NoError(t, tr.Check())
			require.Equal(t, ref.dump(), tr.dump())
			require.Empty(t, tr.cur.path)
			require.Empty(t, tr.cur.text, "the caller's text is not kept")
		})
	}
}

// A tree that retains its texts (and is given their rune counts) holds what a copying tree
// holds, matches and evicts the same, through random inserts (a conversation's turns extend one buffer, as the simulator's do),
// matches, trims and removals; its new edges alias the inserted text, the upper halves of
// split edges do not.
func TestRetainTextsAsCopies(t *testing.T) {
	t.Parallel()
	rng := rand.New(rand.NewPCG(3, 43))
	words := []string{"the", "then", "a", "system", "prompt", "é", "你好", "x"}
	var bufs [][]byte
	next := func() string { // the next turn of a random conversation: its buffer grown, a prefix view
		i := rng.IntN(len(bufs) + 1)
		if i == len(bufs) {
			bufs = append(bufs, append(make([]byte, 0, 4096), fmt.Sprintf("sys %d:", rng.IntN(3))...))
		}
		for range 1 + rng.IntN(6) {
			bufs[i] = append(bufs[i], " "+words[rng.IntN(len(words))]...)
		}
		return unsafe.String(unsafe.SliceData(bufs[i]), len(bufs[i]))
	}
	a, b := New(), New()
	a.RetainTexts()
	var dst []string
	for step := range 3000 {
		switch op := rng.IntN(100); {
		case op < 75:
			s, tenant := next(), fmt.Sprintf("w%d", rng.IntN(4))
			ma, _ := a.PrefixMatch(s, dst)
			mb, _ := b.PrefixMatch(s, dst)
			require.Equal(t, mb, ma)
			a.InsertRunes(s, utf8.RuneCountInString(s), tenant) // as cache_aware inserts
			b.Insert(s, tenant)
		case op < 90:
			limit := a.TotalChars() * 8 / 10
			require.Equal(t, b.Evict(0, limit), a.Evict(0, limit))
		case op < 97:
			per := 50 + rng.IntN(300)
			require.Equal(t, b.Evict(per, 0), a.Evict(per, 0))
		default:
			tenant := fmt.Sprintf("w%d", rng.IntN(4))
			a.RemoveTenant(tenant)
			b.RemoveTenant(tenant)
		}
		require.NoError(t, a.Check(), "step %d", step)
		require.Equal(t, b.dump(), a.dump(), "step %d", step)
	}

	text := strings.Repeat("x", 100) + "tail"
	tr := New()
	tr.RetainTexts()
	tr.Insert(text[:50], "t")      // a leaf: the caller's substring
	tr.Insert(text[:30]+"yy", "t") // splits it: "x"×30 copied, "x"×20 still the caller's
	inText := func(s string) bool {
		lo := uintptr(unsafe.Pointer(unsafe.StringData(text)))
		p := uintptr(unsafe.Pointer(unsafe.StringData(s)))
		return p >= lo && p < lo+uintptr(len(text))
	}
	up := tr.root.children[0].n
	require.Equal(t, strings.Repeat("x", 30), up.edge)
	assert.False(t, inText(up.edge), "the upper half of a split is a copy")
	assert.True(t, inText(up.children[0].n.edge), "the lower half stays the caller's")
}
