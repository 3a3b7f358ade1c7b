package tokenize

import (
	"unicode"
	"unicode/utf8"
)

// The pre-tokenizer of the Llama-3 and Qwen-2/2.5/3 tokenizer.json files is a Split on
//
//	(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+
//
// (Qwen: \p{N} instead of \p{N}{1,3}), behaviour "Isolated". Go's regexp has no (?!\S), so
// splitter below is a hand-written scanner that returns, at each position, the end of the match
// the regex (leftmost-first alternation, greedy quantifiers with backtracking, as Oniguruma in
// the tokenizers crate runs it) would find there. Every position starts a match (letters, numbers,
// whitespace and "other" are each covered by an alternative), so the splits tile the text.
//
// The GPT-2 pattern ('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+,
// the ByteLevel pre-tokenizer's own when use_regex is true) is covered as well.

// The two patterns the scanner implements, as tokenizer.json spells them.
const (
	patLlama3 = `(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+`
	patQwen2  = `(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+`
	patGPT2   = `'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+`
)

// splitter is one of the known pre-tokenizer regexes, as a scanner.
type splitter struct {
	gpt2      bool // the GPT-2 pattern (case-sensitive contractions, " ?" prefixes, \p{N}+)
	maxDigits int  // \p{N}{1,maxDigits}; 0 means unbounded
}

func splitterFor(pattern string) (splitter, bool) {
	switch pattern {
	case patLlama3:
		return splitter{maxDigits: 3}, true
	case patQwen2:
		return splitter{maxDigits: 1}, true
	case patGPT2:
		return splitter{gpt2: true}, true
	}
	return splitter{}, false
}

// Character classes of the regex.
const (
	clsOther   = iota // [^\s\p{L}\p{N}]
	clsLetter         // \p{L}
	clsNumber         // \p{N}
	clsSpace          // \s other than \r \n
	clsNewline        // \r or \n
)

var asciiClass = func() (t [utf8.RuneSelf]uint8) {
	for r := rune(0); r < utf8.RuneSelf; r++ {
		t[r] = classOf(r)
	}
	return t
}()

// classOf classifies r as Oniguruma's Unicode classes do: \p{L} is L*, \p{N} is N*, \s is the
// White_Space property (Go's unicode.IsSpace is exactly that set, U+0085 included).
func classOf(r rune) uint8 {
	switch {
	case r == '\r' || r == '\n':
		return clsNewline
	case unicode.IsSpace(r):
		return clsSpace
	case unicode.IsLetter(r):
		return clsLetter
	case unicode.IsNumber(r):
		return clsNumber
	}
	return clsOther
}

// at decodes the rune at s[i] and returns its class and width. An invalid byte is one
// "other" character of width 1 (a Python str cannot hold one; it only needs a total order).
func at(s string, i int) (uint8, int) {
	if c := s[i]; c < utf8.RuneSelf {
		return asciiClass[c], 1
	}
	r, w := utf8.DecodeRuneInString(s[i:])
	if r == utf8.RuneError && w <= 1 {
		return clsOther, 1
	}
	return classOf(r), w
}

// next returns the end of the piece that starts at i (i < len(s)).
func (p splitter) next(s string, i int) int {
	if p.gpt2 {
		return p.nextGPT2(s, i)
	}
	c, w := at(s, i)
	// '(?i:'s|'t|'re|'ve|'m|'ll|'d)
	if s[i] == '\'' {
		if n := contraction(s[i+1:], true); n > 0 {
			return i + 1 + n
		}
	}
	// [^\r\n\p{L}\p{N}]?\p{L}+
	if c == clsLetter {
		return scanClass(s, i+w, clsLetter)
	}
	if (c == clsOther || c == clsSpace) && i+w < len(s) {
		if c2, w2 := at(s, i+w); c2 == clsLetter {
			return scanClass(s, i+w+w2, clsLetter)
		}
	}
	// \p{N}{1,n}
	if c == clsNumber {
		j, n := i+w, 1
		for j < len(s) && (p.maxDigits == 0 || n < p.maxDigits) {
			c2, w2 := at(s, j)
			if c2 != clsNumber {
				break
			}
			j += w2
			n++
		}
		return j
	}
	// ' ?[^\s\p{L}\p{N}]+[\r\n]*'
	j := -1
	if c == clsOther {
		j = i + w
	} else if s[i] == ' ' && i+1 < len(s) {
		if c2, w2 := at(s, i+1); c2 == clsOther {
			j = i + 1 + w2
		}
	}
	if j >= 0 {
		j = scanClass(s, j, clsOther)
		for j < len(s) && (s[j] == '\r' || s[j] == '\n') {
			j++
		}
		return j
	}
	// Whitespace from here on: c is clsSpace or clsNewline.
	return wsEnd(s, i, w, true)
}

// wsEnd resolves the whitespace alternatives at i, the start of a whitespace rune of width w:
// \s*[\r\n]+ (when newlines is set), then \s+(?!\S), then \s+.
func wsEnd(s string, i, w int, newlines bool) int {
	end, last := i+w, i // end of the whitespace run; start of its last rune
	for end < len(s) {
		c, w2 := at(s, end)
		if c != clsSpace && c != clsNewline {
			break
		}
		last = end
		end += w2
	}
	if newlines {
		// \s*[\r\n]+: greedy \s* gives back up to the run's last \r or \n (ASCII bytes never
		// occur inside a multi-byte rune, so a byte scan finds it).
		for k := end - 1; k >= i; k-- {
			if s[k] == '\r' || s[k] == '\n' {
				return k + 1
			}
		}
	}
	// \s+(?!\S): the whole run at the end of the text, else all but its last rune.
	if end == len(s) || last > i {
		if end == len(s) {
			return end
		}
		return last
	}
	// \s+: a single whitespace rune before a non-space.
	return end
}

// nextGPT2 is next for the GPT-2 pattern.
func (p splitter) nextGPT2(s string, i int) int {
	if s[i] == '\'' {
		if n := contraction(s[i+1:], false); n > 0 {
			return i + 1 + n
		}
	}
	if s[i] == ' ' && i+1 < len(s) {
		if c, w := at(s, i+1); c == clsLetter || c == clsNumber || c == clsOther {
			return scanClass(s, i+1+w, c)
		}
	}
	c, w := at(s, i)
	if c == clsLetter || c == clsNumber || c == clsOther {
		return scanClass(s, i+w, c)
	}
	return wsEnd(s, i, w, false)
}

// scanClass returns the end of the run of class c starting at j.
func scanClass(s string, j int, c uint8) int {
	for j < len(s) {
		c2, w := at(s, j)
		if c2 != c {
			break
		}
		j += w
	}
	return j
}

// contraction returns the length of the contraction suffix (after the apostrophe) that s
// starts with: s t re ve m ll d. foldCase matches as Oniguruma's (?i:…) does, which folds ASCII
// case and U+017F (ſ, long s) to s.
func contraction(s string, foldCase bool) int {
	lower := func(k int) byte {
		if k >= len(s) {
			return 0
		}
		b := s[k]
		if foldCase && 'A' <= b && b <= 'Z' {
			b += 'a' - 'A'
		}
		return b
	}
	switch lower(0) {
	case 's', 't', 'm', 'd':
		return 1
	case 'r', 'v':
		if lower(1) == 'e' {
			return 2
		}
	case 'l':
		if lower(1) == 'l' {
			return 2
		}
	case 0xC5: // U+017F is C5 BF
		if foldCase && len(s) >= 2 && s[1] == 0xBF {
			return 2
		}
	}
	return 0
}
