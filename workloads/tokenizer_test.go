package workloads

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestSplit(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name, text string
		want       []string
	}{
		{"empty", "", nil},
		{"words keep their leading space", "hello world", []string{"hello", " world"}},
		{"long words split every 6 runes", " internationalization", []string{" intern", "ationa", "lizati", "on"}},
		{"newline is its own token", "a\n\nb", []string{"a", "\n", "\n", "b"}},
		{"space before a word joins it", "\n alpha", []string{"\n", " alpha"}},
		{"space runs leave the last space to the word", "a   b", []string{"a", "  ", " b"}},
		{"space before punctuation stays whitespace", "a !", []string{"a", " ", "!"}},
		{"punctuation one rune each", "<|im_end|>", []string{"<", "|", "im", "_", "end", "|", ">"}},
		{"digits are word runes", " 1234567", []string{" 123456", "7"}},
		{"CJK one rune each", "日本語", []string{"日", "本", "語"}},
		{"accented letters are word runes", " café", []string{" café"}},
		{"tabs and CR are whitespace", "a\t\r\nb", []string{"a", "\t\r", "\n", "b"}},
		{"invalid UTF-8 is a one-byte token", "a\xffb", []string{"a", "\xff", "b"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := Split(tc.text)
			assert.Equal(t, tc.want, got)
			assert.Equal(t, len(tc.want), Count(tc.text))
			assert.Len(t, Tokenize(tc.text), len(tc.want))
		})
	}
}

func TestVocab(t *testing.T) {
	t.Parallel()
	require.Len(t, vocab, vocabSize)
	seen := map[uint32]string{}
	letters := 0
	for i, w := range vocab {
		require.Equal(t, []string{w}, Split(w), "word %q must be one token", w)
		require.Equal(t, vocabIDs[i], Tokenize(w)[0])
		prev, dup := seen[vocabIDs[i]]
		require.False(t, dup, "id collision between %q and %q", prev, w)
		seen[vocabIDs[i]] = w
		letters += len(w)
	}
	perToken := float64(letters) / vocabSize
	assert.InDelta(t, 4.5, perToken, 0.5, "characters per generated token")
}

func TestCharsPerTokenOnEnglish(t *testing.T) {
	t.Parallel()
	text := "The quick brown fox jumps over the lazy dog. Serving large language models " +
		"efficiently requires careful scheduling of prefill and decode work across GPUs, " +
		"and routers that understand which worker already holds a prompt's prefix in cache."
	perToken := float64(len(text)) / float64(Count(text))
	assert.InDelta(t, 4.5, perToken, 1.0)
}

func TestGeneratedTextConcatenates(t *testing.T) {
	t.Parallel()
	var all []uint32
	var text strings.Builder
	for k := range 50 {
		n := 1 + k*7%33
		piece := genText(7, domQuestion, uint64(k), 0, n)
		ids := Tokenize(piece)
		require.Len(t, ids, n, "generated piece %d", k)
		all = append(all, ids...)
		text.WriteString(piece)
	}
	assert.Equal(t, all, Tokenize(text.String()))
}

// FuzzTokenize checks the invariants RenderPrompt's exact counts rely on: tokens concatenate back
// to the text, and a text between the template's "\n" and "<" keeps its own tokens.
func FuzzTokenize(f *testing.F) {
	for _, s := range []string{"", "hello world", " a  b\n\tc", "日本 語!", "a\xff b", "  x", "x  ", "\n \n"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		toks := Split(s)
		require.Equal(t, s, strings.Join(toks, ""))
		require.Equal(t, len(toks), Count(s))
		require.Len(t, Tokenize(s), len(toks))
		require.Equal(t, Count(s)+2, Count("\n"+s+"<"), "boundary tokens of %q", s)
		require.Equal(t, Count(s)+2, Count("\n"+s+"\n"), "newline boundaries of %q", s)
	})
}

func BenchmarkTokenize(b *testing.B) {
	text := genText(1, domRandom, 0, 0, 4000)
	b.ReportAllocs()
	b.SetBytes(int64(len(text)))
	dst := make([]uint32, 0, 4096)
	for b.Loop() {
		dst = AppendTokens(dst[:0], text)
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/4000, "ns/token")
}
