package server

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/pdrouter/pdrouter/router"
)

// v1LoadsDP2 is SGLang's GET /v1/loads?include=core answer of a DP-2 worker.
const v1LoadsDP2 = `{"timestamp":"2026-08-06T09:15:23.481920+00:00","version":"0.5.4","loads":[
{"dp_rank":0,"num_running_reqs":24,"num_waiting_reqs":3,"num_waiting_uncached_tokens":6144,"num_used_tokens":382910,"num_total_tokens":401294,"max_total_num_tokens":524288,"max_running_requests":256,"token_usage":0.7303,"gen_throughput":1842.55,"cache_hit_rate":0.6412,"utilization":0.0},
{"dp_rank":1,"num_running_reqs":19,"num_waiting_reqs":0,"num_waiting_uncached_tokens":0,"num_used_tokens":291044,"num_total_tokens":291044,"max_total_num_tokens":524288,"max_running_requests":256,"token_usage":0.5551,"gen_throughput":1521.08,"cache_hit_rate":0.7130,"utilization":0.0,"memory":null}]}`

// gaugesDP2 is an older SGLang's /metrics, per dp rank (and two tp ranks of rank 1, which add).
const gaugesDP2 = `# HELP sglang:num_running_reqs The number of running requests.
# TYPE sglang:num_running_reqs gauge
sglang:num_running_reqs{dp_rank="0",model_name="m",tp_rank="0"} 24.0
sglang:num_running_reqs{dp_rank="1",model_name="m",tp_rank="0"} 19.0
# TYPE sglang:num_queue_reqs gauge
sglang:num_queue_reqs{dp_rank="0",model_name="m",tp_rank="0"} 3.0
sglang:num_queue_reqs{dp_rank="1",model_name="m",tp_rank="0"} 0.0
# TYPE sglang:token_usage gauge
sglang:token_usage{dp_rank="0",model_name="m",tp_rank="0"} 0.73
sglang:token_usage{dp_rank="1",model_name="m",tp_rank="0"} 0.55
# TYPE sglang:gen_throughput gauge
sglang:gen_throughput{dp_rank="0",model_name="m",tp_rank="0"} 1842.55
# TYPE sglang:time_to_first_token_seconds histogram
sglang:time_to_first_token_seconds_bucket{le="0.1",model_name="m"} 120.0
sglang:time_to_first_token_seconds_bucket{le="+Inf",model_name="m"} 130.0
sglang:time_to_first_token_seconds_sum{model_name="m"} 31.2
sglang:time_to_first_token_seconds_count{model_name="m"} 130.0
`

func TestParseV1Loads(t *testing.T) {
	t.Parallel()
	ranks, err := parseV1Loads([]byte(v1LoadsDP2))
	require.NoError(t, err)
	require.Len(t, ranks, 2)
	assert.Equal(t, rankLoad{rank: 0, load: router.EngineLoad{RunningReqs: 24, WaitingReqs: 3, WaitingUncachedTokens: 6144,
		UsedTokens: 382910, MaxTotalTokens: 524288, TokenUsage: 0.7303, GenThroughput: 1842.55, MaxRunningRequests: 256}}, ranks[0])
	assert.Equal(t, 1, ranks[1].rank)

	_, err = parseV1Loads([]byte(`{"timestamp":"x","version":"y","loads":[]}`))
	require.ErrorIs(t, err, errNoRanks, "SGLang's answer while its schedulers start")
	for _, bad := range []string{
		``, `[]`, `{"status":"ok"}`, `<html>404</html>`,
		`{"loads":[{"dp_rank":0,"num_running_reqs":-1}]}`,
		`{"loads":[{"dp_rank":0,"num_running_reqs":"many"}]}`,
		`{"loads":[{"dp_rank":-3}]}`,
		`{"loads":[{"dp_rank":0,"token_usage":-0.5}]}`,
		`{"loads":[{"dp_rank":0,"num_waiting_uncached_tokens":1e300}]}`,
	} {
		_, err := parseV1Loads([]byte(bad))
		assert.Error(t, err, "%q", bad)
	}
	// An older engine without num_waiting_uncached_tokens: unknown, not 0.
	ranks, err = parseV1Loads([]byte(`{"loads":[{"dp_rank":0,"num_running_reqs":2,"num_waiting_reqs":1}]}`))
	require.NoError(t, err)
	assert.Equal(t, -1, ranks[0].load.WaitingUncachedTokens)
}

func TestParseLoadGauges(t *testing.T) {
	t.Parallel()
	ranks, err := parseLoadGauges([]byte(gaugesDP2))
	require.NoError(t, err)
	require.Len(t, ranks, 2)
	assert.Equal(t, rankLoad{rank: 0, load: router.EngineLoad{RunningReqs: 24, WaitingReqs: 3, WaitingUncachedTokens: -1,
		TokenUsage: 0.73, GenThroughput: 1842.55}}, ranks[0])
	assert.Equal(t, router.EngineLoad{RunningReqs: 19, WaitingUncachedTokens: -1, TokenUsage: 0.55}, ranks[1].load)

	// /v1/loads?format=prometheus spells them sglang_… with dp_rank labels.
	ranks, err = parseLoadGauges([]byte("# TYPE sglang_num_running_reqs gauge\nsglang_num_running_reqs{dp_rank=\"0\"} 4\n# TYPE sglang_num_waiting_uncached_tokens gauge\nsglang_num_waiting_uncached_tokens{dp_rank=\"0\"} 512\n"))
	require.NoError(t, err)
	assert.Equal(t, router.EngineLoad{RunningReqs: 4, WaitingUncachedTokens: 512}, ranks[0].load)

	for _, bad := range []string{
		"", "# only comments\n", "go_goroutines 12\n", "sglang:num_running_reqs{dp_rank=\"x\"} 1\n",
		"sglang:num_running_reqs -4\n", "not prometheus at all {{{\n",
	} {
		_, err := parseLoadGauges([]byte(bad))
		assert.Error(t, err, "%q", bad)
	}
}

// Whatever a worker answers, the parsers return a report or an error: never a panic, never a
// negative count.
func FuzzParseV1Loads(f *testing.F) {
	f.Add([]byte(v1LoadsDP2))
	f.Add([]byte(`{"loads":[{"dp_rank":0}]}`))
	f.Add([]byte(`{"loads":[{"dp_rank":1e9,"num_running_reqs":1e30}]}`))
	f.Add([]byte(`{"loads":null}`))
	f.Fuzz(func(t *testing.T, in []byte) {
		ranks, err := parseV1Loads(in)
		if err != nil {
			return
		}
		checkRanks(t, ranks)
	})
}

func FuzzParseLoadGauges(f *testing.F) {
	f.Add([]byte(gaugesDP2))
	f.Add([]byte("sglang:num_running_reqs 1\n"))
	f.Add([]byte("sglang:num_running_reqs{dp_rank=\"70000\"} 1\n"))
	f.Add([]byte("sglang:token_usage NaN\nsglang:num_running_reqs 1\n"))
	f.Fuzz(func(t *testing.T, in []byte) {
		ranks, err := parseLoadGauges(in)
		if err != nil {
			return
		}
		checkRanks(t, ranks)
	})
}

func checkRanks(t *testing.T, ranks []rankLoad) {
	if len(ranks) == 0 {
		t.Fatal("a report without ranks and without an error")
	}
	for _, r := range ranks {
		l := r.load
		if r.rank < 0 || l.RunningReqs < 0 || l.WaitingReqs < 0 || l.WaitingUncachedTokens < -1 || l.UsedTokens < 0 ||
			l.MaxTotalTokens < 0 || l.MaxRunningRequests < 0 || !(l.TokenUsage >= 0) || !(l.GenThroughput >= 0) {
			t.Fatalf("rank %d: %+v", r.rank, l)
		}
	}
}
