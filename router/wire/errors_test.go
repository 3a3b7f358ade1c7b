package wire

import (
	"encoding/json"
	"math"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestErrorBody(t *testing.T) {
	t.Parallel()
	got := ErrorBody(503, "service_unavailable", "no available prefill workers: \"all\" <down>\n")
	assert.Equal(t, `{"error":{"message":"no available prefill workers: \"all\" <down>\n","type":"service_unavailable","code":503}}`, string(got))
	assert.True(t, json.Valid(ErrorBody(400, "t", "bad \xff utf8 \u2028")))
}

func TestStreamError(t *testing.T) {
	t.Parallel()
	got := StreamError(502, "decode worker http://d:1 failed")
	assert.Equal(t, "data: {\"error\":{\"message\":\"decode worker http://d:1 failed\",\"type\":\"upstream_error\",\"code\":502}}\n\ndata: [DONE]\n\n", string(got))
	evs := feedAll(got)
	require.Len(t, evs, 2)
	assert.True(t, json.Valid([]byte(evs[0].Data)))
	assert.Equal(t, "[DONE]", evs[1].Data)
}

func TestAppendDecisionLine(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		line DecisionLine
		want string
	}{
		{
			name: "pd",
			line: DecisionLine{Seq: 7, ID: "req-1", RID: "chatcmpl-x-sim", Room: 9223372036854775807, Route: "/v1/chat/completions",
				Prefill: &DecisionTarget{Worker: "http://p:1", Index: 0, Rank: ip(2)},
				Decode:  &DecisionTarget{Worker: "http://d:1", Index: 3},
				Reason:  "cache_hit", MatchRate: 0.75},
			want: `{"seq":7,"id":"req-1","rid":"chatcmpl-x-sim","room":9223372036854775807,"route":"/v1/chat/completions",` +
				`"prefill":{"worker":"http://p:1","index":0,"rank":2},"decode":{"worker":"http://d:1","index":3,"rank":null},` +
				`"regular":null,"reason":"cache_hit","match_rate":0.75}` + "\n",
		},
		{
			name: "regular",
			line: DecisionLine{Seq: 1, ID: "a\"b", Route: "/generate", Regular: &DecisionTarget{Worker: "http://[::1]:3", Index: 1}, Reason: "imbalance", MatchRate: 1e-7},
			want: `{"seq":1,"id":"a\"b","rid":"","room":0,"route":"/generate","prefill":null,"decode":null,` +
				`"regular":{"worker":"http://[::1]:3","index":1,"rank":null},"reason":"imbalance","match_rate":1e-07}` + "\n",
		},
		{
			name: "tier",
			line: DecisionLine{Seq: 2, Regular: &DecisionTarget{Worker: "http://h:1", Signal: "cache_match", Tier: "host"}, Reason: "cache_hit", MatchRate: 0.9},
			want: `{"seq":2,"id":"","rid":"","room":0,"route":"","prefill":null,"decode":null,` +
				`"regular":{"worker":"http://h:1","index":0,"rank":null,"signal":"cache_match","tier":"host"},"reason":"cache_hit","match_rate":0.9}` + "\n",
		},
		{
			name: "nan",
			line: DecisionLine{MatchRate: math.NaN()},
			want: `{"seq":0,"id":"","rid":"","room":0,"route":"","prefill":null,"decode":null,"regular":null,"reason":"","match_rate":null}` + "\n",
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			got := string(AppendDecisionLine(nil, &tc.line))
			assert.Equal(t, tc.want, got)
			assert.Equal(t, 1, strings.Count(got, "\n"))
			assert.True(t, json.Valid([]byte(got)))
		})
	}
}
