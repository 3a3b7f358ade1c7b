package tokenize

import (
	"unicode"
	"unicode/utf8"
)

// addedToken is one entry of tokenizer.json's "added_tokens" (special or not).
type addedToken struct {
	ID         uint32 `json:"id"`
	Content    string `json:"content"`
	SingleWord bool   `json:"single_word"`
	LStrip     bool   `json:"lstrip"`
	RStrip     bool   `json:"rstrip"`
	Normalized bool   `json:"normalized"`
	Special    bool   `json:"special"`
}

// addedMatcher finds added tokens in text as tokenizers' AddedVocabulary does: leftmost-longest
// matching over all contents (its aho-corasick automaton is built with MatchKind::LeftmostLongest),
// then single_word, lstrip and rstrip applied to each match (AddedVocabulary::find_matches).
type addedMatcher struct {
	first [256]bool // bytes that start some token
	nodes []trieNode
	toks  []addedToken
}

type trieNode struct {
	next map[byte]int32
	tok  int32 // index into toks + 1; 0 = no token ends here
}

func newAddedMatcher(toks []addedToken) *addedMatcher {
	m := &addedMatcher{nodes: []trieNode{{}}}
	for _, t := range toks {
		if t.Content == "" {
			continue
		}
		m.toks = append(m.toks, t)
		m.first[t.Content[0]] = true
		n := 0
		for i := 0; i < len(t.Content); i++ {
			b := t.Content[i]
			nx, ok := m.nodes[n].next[b]
			if !ok {
				if m.nodes[n].next == nil {
					m.nodes[n].next = make(map[byte]int32, 1)
				}
				nx = int32(len(m.nodes))
				m.nodes[n].next[b] = nx
				m.nodes = append(m.nodes, trieNode{})
			}
			n = int(nx)
		}
		m.nodes[n].tok = int32(len(m.toks))
	}
	return m
}

// longestAt returns the longest token that s[i:] starts with (index into toks, length), or -1.
func (m *addedMatcher) longestAt(s string, i int) (int, int) {
	best, bestLen, n := -1, 0, 0
	for j := i; j < len(s); j++ {
		nx, ok := m.nodes[n].next[s[j]]
		if !ok {
			break
		}
		n = int(nx)
		if t := m.nodes[n].tok; t != 0 {
			best, bestLen = int(t-1), j+1-i
		}
	}
	return best, bestLen
}

// addedSpan is one added token found in the text: bytes [start, end) become token id.
type addedSpan struct {
	start, end int
	id         uint32
}

// find appends the added-token spans of s to dst, in order and non-overlapping.
func (m *addedMatcher) find(dst []addedSpan, s string) []addedSpan {
	if m == nil || len(m.toks) == 0 {
		return dst
	}
	prevEnd := 0
	for i := 0; i < len(s); i++ {
		if !m.first[s[i]] {
			continue
		}
		k, n := m.longestAt(s, i)
		if k < 0 {
			continue
		}
		t := &m.toks[k]
		start, end := i, i+n
		if t.SingleWord && (endsWithWord(s[:start]) || startsWithWord(s[end:])) {
			i = end - 1 // the automaton still consumed this match
			continue
		}
		if t.LStrip {
			start = max(trailingSpaceStart(s[:start]), prevEnd)
		}
		if t.RStrip {
			end += leadingSpaceLen(s[end:])
		}
		dst = append(dst, addedSpan{start: start, end: end, id: t.ID})
		prevEnd = end
		i = end - 1
	}
	return dst
}

func isWordRune(r rune) bool { return r == '_' || unicode.IsLetter(r) || unicode.IsDigit(r) }

func endsWithWord(s string) bool {
	r, _ := utf8.DecodeLastRuneInString(s)
	return s != "" && isWordRune(r)
}

func startsWithWord(s string) bool {
	r, _ := utf8.DecodeRuneInString(s)
	return s != "" && isWordRune(r)
}

func trailingSpaceStart(s string) int {
	i := len(s)
	for i > 0 {
		r, w := utf8.DecodeLastRuneInString(s[:i])
		if !unicode.IsSpace(r) {
			break
		}
		i -= w
	}
	return i
}

func leadingSpaceLen(s string) int {
	i := 0
	for i < len(s) {
		r, w := utf8.DecodeRuneInString(s[i:])
		if !unicode.IsSpace(r) {
			break
		}
		i += w
	}
	return i
}
