package bench

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/pdrouter/pdrouter/workloads"
)

// TestRequestEvents feeds event sequences 10 ms apart and checks the resulting record.
func TestRequestEvents(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name   string
		api    workloads.API
		events []string
		ttft   float64 // 0: none
		itl    []float64
		out    int
		cached int
		reply  string
		err    string // record error; "" = success
	}{
		{name: "chat with role chunk and usage", api: workloads.APIChat, events: []string{
			`{"choices":[{"delta":{"role":"assistant","content":""}}]}`, // no text: not the first token
			`{"choices":[{"delta":{"content":" a"}}]}`,
			`{"choices":[{"delta":{"reasoning_content":" b"}}]}`,
			`{"choices":[{"delta":{"content":" c"},"finish_reason":"length"}]}`,
			`{"choices":[],"usage":{"prompt_tokens":7,"completion_tokens":3,"prompt_tokens_details":{"cached_tokens":5}}}`,
			`[DONE]`}, ttft: 20, itl: []float64{10, 10}, out: 3, cached: 5, reply: " a b c"},
		{name: "completions", api: workloads.APICompletions, events: []string{
			`{"choices":[{"text":" x"}]}`, `{"choices":[{"text":" y"}]}`,
			`{"choices":[],"usage":{"prompt_tokens":7,"completion_tokens":2}}`, `[DONE]`},
			ttft: 10, itl: []float64{10}, out: 2, reply: " x y"},
		{name: "generate cumulative", api: workloads.APIGenerate, events: []string{
			`{"text":" x","meta_info":{"prompt_tokens":7,"completion_tokens":1,"cached_tokens":2}}`,
			`{"text":" x y","meta_info":{"prompt_tokens":7,"completion_tokens":2,"cached_tokens":2}}`,
			`{"text":" x y","meta_info":{"prompt_tokens":7,"completion_tokens":2,"cached_tokens":2}}`, // no new text
			`[DONE]`}, ttft: 10, itl: []float64{10}, out: 2, cached: 2, reply: " x y"},
		{name: "error event", api: workloads.APIChat, events: []string{
			`{"choices":[{"delta":{"content":" a"}}]}`,
			`{"error":{"message":"room 7 failed: prefill at 10.0.0.1:8998 never arrived","type":"server_error","code":503}}`,
			`[DONE]`}, ttft: 10, out: 1, err: "server_error: room 7 failed: prefill at 10.0.0.1:8998 never arrived"},
		{name: "unparsable event", api: workloads.APIChat, events: []string{`{"choices":[`},
			err: `bad_reply: unparsable SSE event: {"choices":[`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			start := time.Unix(1000, 0)
			r := &request{id: "x", turn: workloads.Turn{API: tc.api, Session: "s", Index: 1, InputTokens: 9}, start: start}
			for i, ev := range tc.events {
				if r.event(start.Add(time.Duration(i+1)*10*time.Millisecond), []byte(ev)) {
					break
				}
			}
			rec := r.record("c1", start)
			assert.Equal(t, "s/1", rec.ID)
			if tc.err != "" {
				require.NotNil(t, rec.Error)
				assert.Equal(t, tc.err, *rec.Error)
				return
			}
			require.Nil(t, rec.Error)
			require.NotNil(t, rec.TTFTMs)
			assert.InDelta(t, tc.ttft, *rec.TTFTMs, 1e-9)
			assert.Equal(t, tc.itl, rec.ITLMs)
			assert.Equal(t, tc.out, rec.OutputTokens)
			assert.Equal(t, 7, rec.InputTokens, "usage wins over the workload's count")
			assert.Equal(t, tc.cached, rec.CachedTokens)
			assert.Equal(t, tc.reply, r.reply.String())
			assert.InDelta(t, float64(10*len(tc.events)), rec.E2EMs, 1e-9, "E2E ends at [DONE]")
		})
	}
}
