package workloads

import (
	"unicode"
	"unicode/utf8"
)

// maxWordRunes is the longest run of word runes one token holds (rule 2 and 3 of doc.go).
const maxWordRunes = 6

// Tokenize returns the token ids of text under the rules in doc.go. It never fails: any byte
// sequence, valid UTF-8 or not, has a tokenization (an invalid byte is a one-byte token).
func Tokenize(text string) []uint32 {
	return AppendTokens(make([]uint32, 0, len(text)/4+1), text)
}

// AppendTokens appends the token ids of text to dst and returns the extended slice.
func AppendTokens(dst []uint32, text string) []uint32 {
	for i := 0; i < len(text); {
		end := tokenEnd(text, i)
		dst = append(dst, tokenID(text[i:end]))
		i = end
	}
	return dst
}

// Count returns the number of tokens in text (len(Tokenize(text)) without allocating).
func Count(text string) int {
	n := 0
	for i := 0; i < len(text); n++ {
		i = tokenEnd(text, i)
	}
	return n
}

// Split returns the tokens of text as strings; their concatenation is text. Meant for tests and
// debugging: Tokenize is the fast path.
func Split(text string) []string {
	var out []string
	forEachToken(text, func(tok string) { out = append(out, tok) })
	return out
}

// tokenID is the 32-bit FNV-1a hash of a token's bytes.
func tokenID(tok string) uint32 {
	h := uint32(2166136261)
	for i := 0; i < len(tok); i++ {
		h ^= uint32(tok[i])
		h *= 16777619
	}
	return h
}

// runeAt decodes the rune at text[i] with an ASCII fast path.
func runeAt(text string, i int) (rune, int) {
	if c := text[i]; c < utf8.RuneSelf {
		return rune(c), 1
	}
	return utf8.DecodeRuneInString(text[i:])
}

// isCJK reports whether r is a letter that forms a token on its own (rule 4).
func isCJK(r rune) bool { return r >= 0x2E80 && unicode.IsLetter(r) }

// isWord reports whether r joins word tokens (rules 2 and 3).
func isWord(r rune) bool {
	if r < utf8.RuneSelf {
		return r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9'
	}
	return r != utf8.RuneError && (unicode.IsLetter(r) || unicode.IsDigit(r)) && !isCJK(r)
}

// isSpace reports whether r is whitespace other than "\n" (rule 5).
func isSpace(r rune) bool {
	if r < utf8.RuneSelf {
		return r == ' ' || r == '\t' || r == '\r' || r == '\v' || r == '\f'
	}
	return unicode.IsSpace(r)
}

// ASCII byte classes for the fast path.
const (
	clsOther uint8 = iota
	clsWord
	clsSpace
	clsNewline
)

var asciiClass = func() (t [utf8.RuneSelf]uint8) {
	for c := range t {
		switch r := rune(c); {
		case r == '\n':
			t[c] = clsNewline
		case isWord(r):
			t[c] = clsWord
		case isSpace(r):
			t[c] = clsSpace
		}
	}
	return t
}()

// wordAt reports whether a word rune starts at text[i].
func wordAt(text string, i int) bool {
	if i >= len(text) {
		return false
	}
	if c := text[i]; c < utf8.RuneSelf {
		return asciiClass[c] == clsWord
	}
	r, _ := utf8.DecodeRuneInString(text[i:])
	return isWord(r)
}

// wordEnd returns the end of a run of at most maxWordRunes word runes starting at i.
func wordEnd(text string, i int) int {
	for n := 0; n < maxWordRunes && i < len(text); n++ {
		if c := text[i]; c < utf8.RuneSelf {
			if asciiClass[c] != clsWord {
				break
			}
			i++
			continue
		}
		r, size := utf8.DecodeRuneInString(text[i:])
		if !isWord(r) {
			break
		}
		i += size
	}
	return i
}

// tokenEnd returns the end of the token that starts at text[i] (i < len(text)).
func tokenEnd(text string, i int) int {
	c := text[i]
	var r rune
	size := 1
	if c < utf8.RuneSelf {
		switch asciiClass[c] {
		case clsNewline:
			return i + 1
		case clsWord:
			return wordEnd(text, i)
		case clsOther:
			return i + 1
		}
		r = rune(c)
	} else {
		r, size = utf8.DecodeRuneInString(text[i:])
	}
	switch {
	case r == ' ' && wordAt(text, i+1):
		return wordEnd(text, i+1)
	case isWord(r):
		return wordEnd(text, i)
	case isSpace(r):
		end := i + size
		for end < len(text) {
			r2, s2 := runeAt(text, end)
			if !isSpace(r2) || r2 == ' ' && wordAt(text, end+1) {
				break
			}
			end += s2
		}
		return end
	}
	return i + size // CJK, punctuation, symbols, invalid bytes
}

// forEachToken calls fn with each token of text in order; the tokens concatenate to text.
func forEachToken(text string, fn func(tok string)) {
	for i := 0; i < len(text); {
		end := tokenEnd(text, i)
		fn(text[i:end])
		i = end
	}
}
