package tokenize

import (
	"strings"
	"unicode/utf8"
)

//go:generate go run gen_nfc.go

// nfc returns s in Unicode Normalization Form C (tokenizer.json's "NFC" normalizer): canonical
// decomposition, canonical ordering of combining marks, canonical composition (UAX #15), over the
// tables in nfc_tables.go.
func nfc(s string) string {
	for i := 0; i < len(s); i++ {
		if s[i] >= 0xCC { // U+0300 and up: the first code point that NFC can change
			return nfcSlow(s, i)
		}
	}
	return s
}

// nfcFlag marks the code points below nfcFlagMax that NFC may change or that may combine with
// what precedes them: decomposable, a non-zero combining class, or the second of a composition
// pair. A string without one is already in NFC.
const nfcFlagMax = 0x30000

var nfcFlag = func() *[nfcFlagMax / 64]uint64 {
	var f [nfcFlagMax / 64]uint64
	set := func(r rune) {
		if r < nfcFlagMax {
			f[r/64] |= 1 << (r % 64)
		}
	}
	for r := range nfcCCC {
		set(r)
	}
	for r := range nfcDecomp {
		set(r)
	}
	for k := range nfcComp {
		set(rune(uint32(k)))
	}
	for r := rune(hangulV); r < hangulV+hangulVCount; r++ {
		set(r)
	}
	for r := rune(hangulT + 1); r < hangulT+hangulTCount; r++ {
		set(r)
	}
	return &f
}()

func flagged(r rune) bool { return r < nfcFlagMax && nfcFlag[r/64]&(1<<(r%64)) != 0 }

// Hangul syllable arithmetic (Unicode §3.12).
const (
	hangulS      = 0xAC00
	hangulL      = 0x1100
	hangulV      = 0x1161
	hangulT      = 0x11A7
	hangulLCount = 19
	hangulVCount = 21
	hangulTCount = 28
	hangulNCount = hangulVCount * hangulTCount
	hangulSCount = hangulLCount * hangulNCount
)

func nfcSlow(s string, from int) string {
	// Quick check: nothing flagged, nothing to do.
	i := from
	for i < len(s) {
		r, w := utf8.DecodeRuneInString(s[i:])
		if flagged(r) {
			break
		}
		i += w
	}
	if i == len(s) {
		return s
	}
	// Normalize from the last starter before the first flagged code point (a code point that is
	// not flagged has combining class 0).
	start := i
	for start > 0 {
		r, w := utf8.DecodeLastRuneInString(s[:start])
		start -= w
		if nfcCCC[r] == 0 {
			break
		}
	}
	var d []rune
	for _, r := range s[start:] {
		d = decompose(d, r)
	}
	order(d)
	d = compose(d)
	var b strings.Builder
	b.Grow(len(s))
	b.WriteString(s[:start])
	for _, r := range d {
		b.WriteRune(r)
	}
	return b.String()
}

func decompose(d []rune, r rune) []rune {
	if hangulS <= r && r < hangulS+hangulSCount {
		si := r - hangulS
		d = append(d, hangulL+si/hangulNCount, hangulV+(si%hangulNCount)/hangulTCount)
		if t := si % hangulTCount; t != 0 {
			d = append(d, hangulT+t)
		}
		return d
	}
	if dec, ok := nfcDecomp[r]; ok {
		for _, x := range dec {
			d = append(d, x)
		}
		return d
	}
	return append(d, r)
}

// order sorts each run of non-starters by combining class, stably.
func order(d []rune) {
	for i := 1; i < len(d); i++ {
		c := nfcCCC[d[i]]
		if c == 0 {
			continue
		}
		for j := i; j > 0; j-- {
			p := nfcCCC[d[j-1]]
			if p == 0 || p <= c {
				break
			}
			d[j-1], d[j] = d[j], d[j-1]
		}
	}
}

// compose applies canonical composition in place.
func compose(d []rune) []rune {
	out := d[:0]
	starter := -1
	lastCC := -1
	for _, r := range d {
		cc := int(nfcCCC[r])
		if starter >= 0 && (len(out)-1 == starter || (lastCC != 0 && lastCC < cc)) {
			if c, ok := composePair(out[starter], r); ok {
				out[starter] = c
				continue
			}
		}
		if cc == 0 {
			starter = len(out)
		}
		lastCC = cc
		out = append(out, r)
	}
	return out
}

func composePair(a, b rune) (rune, bool) {
	if hangulL <= a && a < hangulL+hangulLCount && hangulV <= b && b < hangulV+hangulVCount {
		return hangulS + ((a-hangulL)*hangulVCount+(b-hangulV))*hangulTCount, true
	}
	if hangulS <= a && a < hangulS+hangulSCount && (a-hangulS)%hangulTCount == 0 && hangulT < b && b < hangulT+hangulTCount {
		return a + (b - hangulT), true
	}
	c, ok := nfcComp[uint64(a)<<32|uint64(b)]
	return c, ok
}
