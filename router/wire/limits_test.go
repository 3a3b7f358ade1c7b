package wire

import (
	"errors"
	"math/rand/v2"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// list returns a JSON list of n copies of elem.
func list(elem string, n int) string {
	return "[" + strings.TrimSuffix(strings.Repeat(elem+",", n), ",") + "]"
}

func TestParseLimitedBatch(t *testing.T) {
	t.Parallel()
	const limit = 4
	tests := []struct {
		name  string
		route Route
		body  string
		field string // "" when the body is within the limit
		batch int
	}{
		// Every batch form, at the limit (accepted) and one over it (refused, naming its field).
		{"generate text at limit", Generate, `{"text":` + list(`""`, limit) + `}`, "", limit},
		{"generate text over", Generate, `{"text":` + list(`""`, limit+1) + `}`, "text", 0},
		{"generate input_ids at limit", Generate, `{"input_ids":` + list(`[1,2]`, limit) + `}`, "", limit},
		{"generate input_ids over", Generate, `{"input_ids":` + list(`[1]`, limit+1) + `}`, "input_ids", 0},
		// A flat list of token ids is one prompt, however long: not a batch.
		{"generate one long input_ids", Generate, `{"input_ids":` + list(`7`, 100) + `}`, "", 0},
		{"generate input_embeds over", Generate, `{"input_embeds":` + list(`[[0.5]]`, limit+1) + `}`, "input_embeds", 0},
		{"completions prompt strings over", Completions, `{"prompt":` + list(`"a"`, limit+1) + `}`, "prompt", 0},
		{"completions prompt token lists over", Completions, `{"prompt":` + list(`[1]`, limit+1) + `}`, "prompt", 0},
		{"completions prompt at limit", Completions, `{"prompt":` + list(`"a"`, limit) + `}`, "", limit},
		{"chat n over", Chat, `{"messages":[{"role":"user","content":"hi"}],"n":5}`, "n", 0},
		{"chat n at limit", Chat, `{"messages":[{"role":"user","content":"hi"}],"n":4}`, "", limit},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			b, err := ParseLimited(tc.route, []byte(tc.body), Limits{MaxBatch: limit})
			if tc.field == "" {
				require.NoError(t, err)
				assert.Equal(t, tc.batch, b.Batch)
				return
			}
			var we *Error
			require.True(t, errors.As(err, &we), "want a *wire.Error, got %v", err)
			assert.Equal(t, 400, we.Status)
			assert.Equal(t, tc.field, we.Field)
			assert.Contains(t, we.Message, "--max-batch-size 4")
			// Parse without limits accepts the same body.
			_, err = Parse(tc.route, []byte(tc.body))
			assert.NoError(t, err)
		})
	}
}

// A rid list longer than the batch is refused without building a string for every element.
func TestParseRIDListLongerThanBatch(t *testing.T) {
	body := []byte(`{"text":["a","b"],"rid":` + list(`"r"`, 10000) + `}`)
	allocs := testing.AllocsPerRun(5, func() {
		_, err := Parse(Generate, body)
		require.Error(t, err)
	})
	assert.Less(t, allocs, 100.0)
}

// A million-element prompt list is refused after counting limit+1 elements: the cost does not
// grow with the list.
func TestParseLimitedStopsCounting(t *testing.T) {
	body := []byte(`{"text":` + list(`""`, 1_000_000) + `}`)
	allocs := testing.AllocsPerRun(3, func() {
		_, err := ParseLimited(Generate, body, Limits{MaxBatch: 1024})
		require.Error(t, err)
	})
	assert.Less(t, allocs, 100.0)
}

// The generated rids of a batch are the ones single draws give, in the same order (one buffer
// for all of them changes no id).
func TestPDBatchRIDsMatchSingleDraws(t *testing.T) {
	t.Parallel()
	b, err := Parse(Generate, []byte(`{"text":["a","b","c"]}`))
	require.NoError(t, err)
	g1 := NewIDGen(rand.New(rand.NewPCG(1, 2)), "10.0.0.1")
	legs := b.PD(g1, PDOptions{Host: "h"})
	g2 := NewIDGen(rand.New(rand.NewPCG(1, 2)), "10.0.0.1")
	for i := range 3 {
		assert.Equal(t, g2.RID(Generate), legs.RIDs[i], "rid %d", i)
		assert.Equal(t, g2.Room(), legs.Rooms[i], "room %d", i)
	}
}

// (AllocsPerRun tests do not run in parallel: the count is process-wide.)

// The PD rewrite of a batch allocates a fixed number of times, whatever the batch size: small
// bodies (written whole, up to smallBody) and large ones (pieces) each.
func TestPDBatchAllocationsIndependentOfSize(t *testing.T) {
	allocsFor := func(n int) float64 {
		b, err := Parse(Generate, []byte(`{"text":`+list(`"x"`, n)+`}`))
		require.NoError(t, err)
		g := NewIDGen(NewRand(1), "10.0.0.1")
		return testing.AllocsPerRun(5, func() { b.PD(g, PDOptions{Host: "h"}) })
	}
	assert.Equal(t, allocsFor(8), allocsFor(256), "small bodies")
	assert.Equal(t, allocsFor(2048), allocsFor(8192), "large bodies")
}

// A clipped JSON string decodes to a prefix of the whole string's decoding, within the limit
// and close to it, wherever the cut falls: inside an escape, a surrogate pair or a multi-byte
// character.
func TestClipQuotedDecodesToPrefix(t *testing.T) {
	t.Parallel()
	raw := []byte(`"ab\n\"é😀\ud83d\ude00\u00e9x\\y` + strings.Repeat(`z\t`, 5) + `"`)
	whole := string(appendUnquote(nil, raw))
	prev := ""
	for limit := range len(raw) {
		clipped := clipQuoted(raw, limit)
		got := string(appendUnquoted(nil, clipped))
		assert.True(t, strings.HasPrefix(whole, got), "limit %d: %q is not a prefix of %q", limit, got, whole)
		assert.LessOrEqual(t, len(got), limit, "limit %d", limit)
		// The cut backs off at most one escape (12 raw bytes for a surrogate pair).
		assert.GreaterOrEqual(t, len(clipped), min(limit, len(raw)-2)-11, "limit %d: %q cut too short", limit, clipped)
		assert.True(t, strings.HasPrefix(got, prev), "limit %d: shorter than at a smaller limit", limit)
		prev = got
	}
	assert.Equal(t, whole, prev)
}

// The routing text of an outsized body is its first MaxRoutingText bytes, in every form.
func TestRoutingTextCapped(t *testing.T) {
	t.Parallel()
	long := strings.Repeat("é", MaxRoutingText/2+10) // two bytes each: over the cap
	for _, tc := range []struct {
		name  string
		route Route
		body  string
	}{
		{"generate text", Generate, `{"text":"` + long + `"}`},
		{"generate text list", Generate, `{"text":["` + long + `","x"]}`},
		{"completions prompt", Completions, `{"prompt":"` + long + `"}`},
		{"chat", Chat, `{"messages":[{"role":"user","content":"` + long + `"},{"role":"user","content":"more"}]}`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			b, err := Parse(tc.route, []byte(tc.body))
			require.NoError(t, err)
			assert.Equal(t, MaxRoutingText, len(b.Text))
			assert.True(t, strings.HasPrefix(long, b.Text))
		})
	}
	ids := strings.TrimSuffix(strings.Repeat("123456,", MaxRoutingText/7+10), ",")
	b, err := Parse(Generate, []byte(`{"input_ids":[`+ids+`]}`))
	require.NoError(t, err)
	assert.LessOrEqual(t, len(b.Text), MaxRoutingText)
	assert.Greater(t, len(b.Text), MaxRoutingText-8)
}
