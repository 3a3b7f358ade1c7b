package tokenize

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
)

// TestNFCWhereNormDiffers pins the segments nfc composes itself because norm.NFC (x/text v0.36.0)
// answers otherwise; the wants are node's String.prototype.normalize("NFC"), as the oracle's.
// The oracle corpus reaches only the first kind, and only through U+11F41.
func TestNFCWhereNormDiffers(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name, in, want string
	}{
		// golang/go#81028: norm composes U+20041 U+0301 to U+00C1 (Á).
		{"supplementary starter", "\U00020041\u0301", "\U00020041\u0301"},
		// … and U+1099 U+110BA to U+1109A.
		{"supplementary mark", "\u1099\U000110ba", "\u1099\U000110ba"},
		// A real supplementary composition still composes.
		{"supplementary pair", "\U00011099\U000110ba", "\U0001109a"},
		// norm: U+1F45 U+0323.
		{"supplementary mark first", "\U00011f41\u0301\u0323", "\U00011f41\u0323\u0301"},
		// norm inserts U+034F after 30 marks.
		{"31 marks", "e" + strings.Repeat("\u0301", 31), "\u00e9" + strings.Repeat("\u0301", 30)},
		{"40 marks to reorder", "a" + strings.Repeat("\u0301\u0323", 20),
			"\u1ea1" + strings.Repeat("\u0323", 19) + strings.Repeat("\u0301", 20)},
		// norm's spans between the segments nfc composes itself.
		{"mixed", "Cafe\u0301 \U00020041\u0301 na\u0308ive", "Caf\u00e9 \U00020041\u0301 n\u00e4ive"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			assert.Equal(t, tc.want, nfc(tc.in))
		})
	}
}
