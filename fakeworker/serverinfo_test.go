package fakeworker

import (
	"net/http"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/pdrouter/pdrouter/sim/engine"
)

// /get_server_info reports what the engine runs with, under SGLang's keys — not the engine's
// default constants whatever the flags.
func TestServerInfoReportsEngineArgs(t *testing.T) {
	t.Parallel()
	// A model on a GPU: SGLang's defaults for an 80 GB GPU at TP2 (chunk 8192, graph 256),
	// the KV pool the profile derives, lowered by --max-total-tokens.
	w := startWorker(t, Config{ModelPath: "llama3-8b", GPU: engine.H100SXM.Name, TPSize: 2, EPSize: 1,
		Args: engine.ServerArgs{MaxTotalTokens: 12_000, MaxRunningRequests: 300}})
	_, want, err := engine.BuildServer("", engine.Llama3Dense8B, engine.H100SXM, engine.Parallelism{TP: 2}, engine.ServerArgs{MaxTotalTokens: 12_000, MaxRunningRequests: 300})
	require.NoError(t, err)
	status, raw := get(t, w.URL()+"/get_server_info")
	require.Equal(t, http.StatusOK, status)
	info := decodeJSON(t, raw)
	assert.EqualValues(t, 2, info["tp_size"])
	assert.EqualValues(t, 1, info["dp_size"])
	assert.EqualValues(t, 1, info["ep_size"])
	assert.Equal(t, false, info["enable_dp_attention"])
	assert.EqualValues(t, 8192, info["chunked_prefill_size"])
	assert.EqualValues(t, 256, info["cuda_graph_max_bs"])
	assert.EqualValues(t, 12_000, info["max_total_num_tokens"])
	assert.EqualValues(t, 12_000, info["max_total_tokens"])
	assert.EqualValues(t, 300, info["max_running_requests"])
	assert.EqualValues(t, 1, info["page_size"])
	assert.InDelta(t, want.MemFractionStatic, info["mem_fraction_static"], 1e-12)
	assert.InDelta(t, 1.0, info["schedule_conservativeness"], 1e-12)
	states := info["internal_states"].([]any)
	require.Len(t, states, 1)
	assert.EqualValues(t, 300, states[0].(map[string]any)["effective_max_running_requests_per_dp"])

	// A preset under DP attention: given arguments are the server's, divided among the ranks;
	// the unset ones are the engine's defaults; no memory fraction to report.
	d := startWorker(t, Config{Mode: engine.RoleDecode, Profile: engine.Instant(), DPSize: 4, DPAttention: true, TPSize: 4,
		Args: engine.ServerArgs{ChunkedPrefillSize: 4096, MaxRunningRequests: 256, ScheduleConservativeness: 2, CUDAGraphMaxBS: 160}})
	_, raw = get(t, d.URL()+"/get_server_info")
	info = decodeJSON(t, raw)
	assert.Equal(t, true, info["enable_dp_attention"])
	assert.EqualValues(t, 1024, info["chunked_prefill_size"], "per rank, as SGLang reports it")
	assert.EqualValues(t, 256, info["max_running_requests"], "the server's")
	assert.InDelta(t, 0.6, info["schedule_conservativeness"], 1e-12)
	assert.EqualValues(t, 160, info["cuda_graph_max_bs"])
	assert.Nil(t, info["mem_fraction_static"])
	assert.Nil(t, info["max_total_tokens"])
	assert.EqualValues(t, engine.Instant().MaxTotalTokens, info["max_total_num_tokens"])
	states = info["internal_states"].([]any)
	require.Len(t, states, 4)
	assert.EqualValues(t, 64, states[3].(map[string]any)["effective_max_running_requests_per_dp"])

	// Nothing set: the engine's defaults, as before.
	r := startWorker(t, Config{})
	_, raw = get(t, r.URL()+"/get_server_info")
	info = decodeJSON(t, raw)
	assert.EqualValues(t, engine.DefaultChunkedPrefillSize, info["chunked_prefill_size"])
	assert.EqualValues(t, engine.DefaultMaxRunningRequests, info["max_running_requests"])
	assert.Nil(t, info["cuda_graph_max_bs"])
}

func TestConfigEngineErrors(t *testing.T) {
	for _, tc := range []struct {
		c    Config
		want string
	}{
		{Config{GPU: "h100-sxm", ModelPath: "llama3-8b", Profile: engine.Instant()}, "--gpu (with --model-path) and --profile"},
		{Config{GPU: "h100-sxm"}, "--gpu h100-sxm needs --model-path"},
		{Config{GPU: "h100-sxm", ModelPath: "nope"}, "--model-path"},
		{Config{GPU: "nope", ModelPath: "llama3-8b"}, "--gpu"},
		{Config{Args: engine.ServerArgs{MemFractionStatic: 0.8}}, "--mem-fraction-static needs --model-path"},
		{Config{Args: engine.ServerArgs{PageSize: -2}}, "--page-size -2"},
		{Config{GPU: "h100-sxm", ModelPath: "llama3-70b"}, "do not fit"},
		{Config{GPU: "h100-sxm", ModelPath: "llama3-8b", TPSize: 2, DPSize: 4, DPAttention: true}, "--dp-size 4"},
	} {
		err := tc.c.Validate()
		if assert.Error(t, err, "%+v", tc.c) {
			assert.Contains(t, err.Error(), tc.want)
		}
	}
}
