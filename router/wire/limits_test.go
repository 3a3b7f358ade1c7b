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

// The PD rewrite of a batch allocates a fixed number of times, whatever the batch size.
func TestPDBatchAllocationsIndependentOfSize(t *testing.T) {
	allocsFor := func(n int) float64 {
		b, err := Parse(Generate, []byte(`{"text":`+list(`"x"`, n)+`}`))
		require.NoError(t, err)
		g := NewIDGen(NewRand(1), "10.0.0.1")
		return testing.AllocsPerRun(5, func() { b.PD(g, PDOptions{Host: "h"}) })
	}
	assert.Equal(t, allocsFor(8), allocsFor(1024))
}
