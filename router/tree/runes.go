package tree

import "unicode/utf8"

// A text is a sequence of runes as a range loop yields them: valid UTF-8 sequences, and each
// byte of invalid UTF-8 as a rune of its own. Two runes are equal when their bytes are, so an
// invalid byte never equals U+FFFD or another invalid byte. Edges are always cut between runes
// of every text stored through them, which keeps byte-wise comparison and rune counting exact.

// badKey is the child key base for an invalid byte b: badKey+b, beyond every valid rune.
const badKey = utf8.MaxRune + 1

// firstKey is the child key of s's first rune. s must not be empty.
func firstKey(s string) int32 {
	c := s[0]
	if c < utf8.RuneSelf {
		return int32(c)
	}
	r, w := utf8.DecodeRuneInString(s)
	if r == utf8.RuneError && w == 1 {
		return badKey + int32(c)
	}
	return r
}

// commonPrefix is the length in bytes of the longest common prefix of a and b that ends on a
// rune boundary of both.
func commonPrefix(a, b string) int {
	n := min(len(a), len(b))
	k := 0
	if a[:n] == b[:n] {
		k = n
	} else {
		for k+32 <= n && a[k:k+32] == b[k:k+32] {
			k += 32
		}
		for k+8 <= n && a[k:k+8] == b[k:k+8] {
			k += 8
		}
		for k < n && a[k] == b[k] {
			k++
		}
	}
	return boundary(a, b, k)
}

// boundary moves k (a and b agree on their first k bytes) back to the last position that is a
// rune boundary of both and before which both decode to the same runes.
//
// Every byte that is not a continuation byte starts a rune, and runes never extend across such a
// byte, so only the rune starting at the last non-continuation byte before k can differ: it may
// be complete in one text and extend past k (or be invalid) in the other. Continuation bytes
// after it are single invalid runes in both.
func boundary(a, b string, k int) int {
	if k == 0 || a[k-1] < utf8.RuneSelf {
		return k
	}
	lo := max(0, k-utf8.UTFMax)
	q := k - 1
	for q >= lo && isCont(a[q]) {
		q--
	}
	if q < lo {
		// At least UTFMax trailing continuation bytes (or only continuation bytes): the byte at
		// k-1 cannot belong to a valid rune, so it is a rune of its own in both.
		return k
	}
	_, wa := utf8.DecodeRuneInString(a[q:])
	_, wb := utf8.DecodeRuneInString(b[q:])
	if wa == wb && q+wa <= k {
		return k
	}
	return q
}

func isCont(c byte) bool { return c&0xC0 == 0x80 }

// runeCount counts s's runes the way a range loop does (each invalid byte is one). It skips
// ASCII 8 bytes at a time (the compiler merges the byte loads), about twice as fast as
// utf8.RuneCountInString on prompts.
func runeCount(s string) int {
	i := 0
	for ; i+8 <= len(s); i += 8 {
		w := uint64(s[i]) | uint64(s[i+1])<<8 | uint64(s[i+2])<<16 | uint64(s[i+3])<<24 |
			uint64(s[i+4])<<32 | uint64(s[i+5])<<40 | uint64(s[i+6])<<48 | uint64(s[i+7])<<56
		if w&0x8080808080808080 != 0 {
			break
		}
	}
	return i + utf8.RuneCountInString(s[i:])
}
