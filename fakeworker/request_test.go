package fakeworker

import (
	"encoding/json"
	"testing"

	"github.com/pdrouter/pdrouter/router/wire"
	"github.com/pdrouter/pdrouter/sim/engine"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestParseParams(t *testing.T) {
	t.Parallel()
	const bs = `"bootstrap_host":"10.0.0.1","bootstrap_port":null,"bootstrap_room":42`
	for _, tc := range []struct {
		name   string
		route  wire.Route
		mode   engine.Role
		body   string
		header string
		want   params
		err    string // substring of the 400 message; "" no error
	}{
		{name: "chat defaults", route: wire.Chat, body: `{"messages":[{"role":"user","content":"x"}]}`,
			want: params{maxNew: 128, rank: -1}},
		{name: "chat max_tokens and usage", route: wire.Chat, body: `{"messages":[{"role":"user","content":"x"}],"max_tokens":7,"stream_options":{"include_usage":true}}`,
			want: params{maxNew: 7, rank: -1, includeUsage: true}},
		{name: "max_completion_tokens wins", route: wire.Chat, body: `{"messages":[{"role":"user","content":"x"}],"max_tokens":7,"max_completion_tokens":9}`,
			want: params{maxNew: 9, rank: -1}},
		{name: "generate max_new_tokens", route: wire.Generate, body: `{"text":"x","sampling_params":{"max_new_tokens":3,"temperature":0}}`,
			want: params{maxNew: 3, rank: -1}},
		{name: "zero tokens is one", route: wire.Completions, body: `{"prompt":"x","max_tokens":0}`,
			want: params{maxNew: 1, rank: -1}},
		{name: "negative max_tokens", route: wire.Completions, body: `{"prompt":"x","max_tokens":-1}`, err: "max_tokens"},
		{name: "regular dp rank", route: wire.Generate, body: `{"text":"x","data_parallel_rank":1}`,
			want: params{maxNew: 128, rank: 1}},
		{name: "regular routed rank", route: wire.Generate, body: `{"text":"x","routed_dp_rank":2}`,
			want: params{maxNew: 128, rank: 2}},
		{name: "null rank", route: wire.Generate, body: `{"text":"x","data_parallel_rank":null}`,
			want: params{maxNew: 128, rank: -1}},
		{name: "header rank", route: wire.Generate, body: `{"text":"x"}`, header: "3",
			want: params{maxNew: 128, rank: 3}},
		{name: "bad header rank", route: wire.Generate, body: `{"text":"x"}`, header: "9", err: "X-Data-Parallel-Rank"},
		{name: "rank out of range", route: wire.Generate, body: `{"text":"x","routed_dp_rank":4}`, err: "routed_dp_rank 4 is outside [0,4)"},
		{name: "prefill default port", route: wire.Generate, mode: engine.RolePrefill, body: `{"text":"x",` + bs + `,"data_parallel_rank":2}`,
			want: params{maxNew: 128, rank: 2, hasRoom: true, room: 42, bsAddr: "10.0.0.1:8998"}},
		{name: "decode uses the decode rank", route: wire.Generate, mode: engine.RoleDecode,
			body: `{"text":"x","bootstrap_host":"h","bootstrap_port":9000,"bootstrap_room":9223372036854775807,"data_parallel_rank":1,"data_parallel_rank_decode":3}`,
			want: params{maxNew: 128, rank: 3, hasRoom: true, room: 9223372036854775807, bsAddr: "h:9000"}},
		{name: "decode routed rank", route: wire.Generate, mode: engine.RoleDecode,
			body: `{"text":"x",` + bs + `,"routed_dp_rank":0,"disagg_prefill_dp_rank":2}`,
			want: params{maxNew: 128, rank: 0, hasRoom: true, room: 42, bsAddr: "10.0.0.1:8998"}},
		{name: "decode null decode rank", route: wire.Generate, mode: engine.RoleDecode,
			body: `{"text":"x",` + bs + `,"data_parallel_rank":1,"data_parallel_rank_decode":null}`,
			want: params{maxNew: 128, rank: -1, hasRoom: true, room: 42, bsAddr: "10.0.0.1:8998"}},
		{name: "ipv6 host keeps brackets", route: wire.Generate, mode: engine.RolePrefill,
			body: `{"text":"x","bootstrap_host":"[::1]","bootstrap_port":1,"bootstrap_room":1}`,
			want: params{maxNew: 128, rank: -1, hasRoom: true, room: 1, bsAddr: "[::1]:1"}},
		{name: "pd without room", route: wire.Generate, mode: engine.RolePrefill, body: `{"text":"x"}`, err: "bootstrap_room is required"},
		{name: "pd without host", route: wire.Generate, mode: engine.RoleDecode, body: `{"text":"x","bootstrap_room":1}`, err: "bootstrap_host is required"},
		{name: "room not a number", route: wire.Generate, mode: engine.RoleDecode, body: `{"text":"x","bootstrap_host":"h","bootstrap_room":"1"}`, err: "bootstrap_room must be an integer"},
		{name: "port out of range", route: wire.Generate, mode: engine.RoleDecode, body: `{"text":"x","bootstrap_host":"h","bootstrap_room":1,"bootstrap_port":0}`, err: "bootstrap_port 0"},
		{name: "batch", route: wire.Completions, body: `{"prompt":["a","b"]}`, err: "batch"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			b, err := wire.Parse(tc.route, []byte(tc.body))
			require.NoError(t, err)
			got, werr := parseParams(b, tc.mode, 4, tc.header)
			if tc.err != "" {
				require.NotNil(t, werr)
				assert.Equal(t, 400, werr.Status)
				assert.Contains(t, werr.Message, tc.err)
				return
			}
			require.Nil(t, werr)
			assert.Equal(t, tc.want, got)
		})
	}
}

func TestAppendStringMatchesJSON(t *testing.T) {
	t.Parallel()
	for _, s := range []string{"", "plain", `quote " and \ backslash`, "ctl \x00\x1f\n\r\t", "utf8 é ☃ 😀", "bad \xff utf8", "<html>&"} {
		var got string
		require.NoError(t, json.Unmarshal(appendString(nil, s), &got), "%q", s)
		want, _ := json.Marshal(s)
		var w string
		require.NoError(t, json.Unmarshal(want, &w))
		assert.Equal(t, w, got)
	}
}

func FuzzAppendString(f *testing.F) {
	for _, s := range []string{"", "a\"b", "\x00", "\xff\xfe", "😀"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		var got string
		if err := json.Unmarshal(appendString(nil, s), &got); err != nil {
			t.Fatalf("invalid JSON for %q: %v", s, err)
		}
		want, _ := json.Marshal(s)
		var w string
		_ = json.Unmarshal(want, &w)
		if got != w {
			t.Fatalf("appendString(%q) decodes to %q, encoding/json gives %q", s, got, w)
		}
	})
}

func TestTokenEnds(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		text string
		want []int
	}{
		{"", nil},
		{" a", []int{2}},
		{" ab cd e", []int{3, 6, 8}},
	} {
		assert.Equal(t, tc.want, tokenEnds(tc.text, nil), tc.text)
	}
}

// Every rendered body and event is valid JSON, for every route and end.
func TestRenderValidJSON(t *testing.T) {
	t.Parallel()
	for _, route := range wire.Routes {
		for _, meta := range []bool{false, true} {
			rd := render{route: route, id: appendString(nil, "id\"1"), model: appendString(nil, "m"), created: 1,
				text: " ab cd ef", prompt: []uint32{1, 2, 3}, logprobs: true, includeUsage: true, withMeta: meta}
			rd.ends = tokenEnds(rd.text, nil)
			u := usage{prompt: 3, completion: 3, cached: 1}
			for _, finish := range []string{finishLength, finishAbort} {
				var m map[string]any
				require.NoError(t, json.Unmarshal(rd.appendJSON(nil, 3, u, finish, "why"), &m), "%s %s", route, finish)
			}
			raw := rd.appendTokenEvents(nil, 0, 3, 3, &u)
			raw = rd.appendStreamEnd(raw, 3, u, finishLength, "", false)
			raw = appendStreamError(raw, 500, "boom \"x\"")
			var p wire.Parser
			p.Feed(raw)
			p.Close()
			n := 0
			for {
				ev, ok := p.Next()
				if !ok {
					break
				}
				if !ev.HasData() || ev.IsDone() {
					continue
				}
				var m map[string]any
				require.NoError(t, json.Unmarshal(ev.Data, &m), "%s: %s", route, ev.Data)
				n++
			}
			assert.GreaterOrEqual(t, n, 4, route.String())
		}
	}
}
