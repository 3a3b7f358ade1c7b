package tokenize

import (
	"strings"
	"unicode/utf8"

	"golang.org/x/text/unicode/norm"
)

// nfc returns s in Unicode Normalization Form C, as tokenizer.json's "NFC" normalizer computes
// it (TestNFCMatchesOracle). norm.NFC does the work but for two kinds of segment (a code point
// and the marks that may combine or reorder with it), where golang.org/x/text v0.36.0 answers
// otherwise and nfcSegment composes instead:
//   - a code point above U+FFFF with marks: norm's composition lookup keeps the low 16 bits of a
//     code point, so U+11F41 U+0301 U+0323 becomes U+1F45 U+0323 (golang/go#81028);
//   - more than 30 marks: norm inserts U+034F after the 30th (UAX #15's Stream-Safe Text Format),
//     which tokenizers and String.prototype.normalize do not.
func nfc(s string) string {
	// Nothing below U+0300 (UTF-8 lead byte 0xCC) changes under NFC.
	k := 0
	for k < len(s) && s[k] < 0xCC {
		k++
	}
	if k == len(s) {
		return s
	}
	// norm's quick check: s[:n] is in NFC and s[n] starts a segment.
	n := norm.NFC.QuickSpanString(s)
	if n == len(s) {
		return s
	}
	var b strings.Builder
	done := 0 // s[:done] is in b
	for i := n; i < len(s); {
		j, exact := nextSegment(s, i)
		if exact {
			b.WriteString(norm.NFC.String(s[done:i]))
			b.WriteString(nfcSegment(s[i:j]))
			done = j
		}
		i = j
	}
	if done == 0 {
		return norm.NFC.String(s)
	}
	b.WriteString(norm.NFC.String(s[done:]))
	return b.String()
}

// nextSegment returns the end of the segment that starts at s[i] and whether it needs
// nfcSegment. A code point decomposes to at most 3 marks, so norm's 30-mark limit needs more
// than 10 code points.
func nextSegment(s string, i int) (end int, exact bool) {
	r, w := utf8.DecodeRuneInString(s[i:])
	wide, n := r > 0xFFFF, 1
	for end = i + w; end < len(s); end += w {
		p := norm.NFC.PropertiesString(s[end:])
		if p.BoundaryBefore() || p.Size() == 0 { // Size 0: not UTF-8
			break
		}
		w = p.Size()
		wide = wide || w == 4
		n++
	}
	return end, (n > 10 || wide && n > 1) && utf8.ValidString(s[i:end]) // nfcSegment takes runes
}

// nfcSegment composes one segment as UAX #15 does, asking norm only about one or two code
// points at a time: decompositions, combining classes, and primary composites.
func nfcSegment(seg string) string {
	d := make([]rune, 0, 2*len(seg))
	for _, r := range seg {
		d = append(d, []rune(norm.NFD.String(string(r)))...)
	}
	ccc := make([]uint8, len(d))
	for k, r := range d {
		ccc[k] = norm.NFD.PropertiesString(string(r)).CCC()
	}
	// Canonical ordering: a stable sort of each run of marks by combining class.
	for k := 1; k < len(d); k++ {
		for m := k; m > 0 && ccc[m] != 0 && ccc[m-1] > ccc[m]; m-- {
			d[m-1], d[m] = d[m], d[m-1]
			ccc[m-1], ccc[m] = ccc[m], ccc[m-1]
		}
	}
	// Canonical composition: a mark joins the last starter unless blocked by a starter or a mark
	// of the same or a higher class between them.
	out := d[:0]
	starter, lastCC := -1, -1
	for k, r := range d {
		cc := int(ccc[k])
		if starter >= 0 && (len(out)-1 == starter || lastCC != 0 && lastCC < cc) {
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
	return string(out)
}

// composePair returns the primary composite of a and b, if there is one: what norm composes
// them to, unless that is not canonically equivalent to them (golang/go#81028).
func composePair(a, b rune) (rune, bool) {
	s := norm.NFC.String(string(a) + string(b))
	c, n := utf8.DecodeRuneInString(s)
	if n != len(s) || norm.NFD.String(s) != norm.NFD.String(string(a))+string(b) {
		return 0, false
	}
	return c, true
}
