package wire

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestMergeLogprobs(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name, prefill, decode, want string
	}{
		{
			name:    "object",
			prefill: `{"text":"","meta_info":{"input_token_logprobs":[[-0.1,1,null],[-0.2,2,null]],"prompt_tokens":2}}`,
			decode:  `{"text":"hi","meta_info":{"id":"x","input_token_logprobs":[[-0.3,3,null]],"big":12345678901234567890}}`,
			want:    `{"text":"hi","meta_info":{"id":"x","input_token_logprobs":[[-0.1,1,null],[-0.2,2,null],[-0.3,3,null]],"big":12345678901234567890}}`,
		},
		{
			name:    "empty decode array",
			prefill: `{"meta_info":{"input_token_logprobs":[[-0.1,1,null]]}}`,
			decode:  `{"meta_info":{"input_token_logprobs":[ ]}}`,
			want:    `{"meta_info":{"input_token_logprobs":[[-0.1,1,null]]}}`,
		},
		{
			name:    "empty prefill array",
			prefill: `{"meta_info":{"input_token_logprobs":[]}}`,
			decode:  `{"meta_info":{"input_token_logprobs":[[-0.3,3,null]]}}`,
			want:    `{"meta_info":{"input_token_logprobs":[[-0.3,3,null]]}}`,
		},
		{
			name:    "batch element-wise",
			prefill: `[{"meta_info":{"input_token_logprobs":[[1]]}},{"meta_info":{"input_token_logprobs":[[2]]}}]`,
			decode:  `[{"meta_info":{"input_token_logprobs":[[10]]}}, {"meta_info":{"input_token_logprobs":[[20]]}}]`,
			want:    `[{"meta_info":{"input_token_logprobs":[[1],[10]]}},{"meta_info":{"input_token_logprobs":[[2],[20]]}}]`,
		},
		{
			name:    "batch with a missing element",
			prefill: `[{"meta_info":{}},{"meta_info":{"input_token_logprobs":[[2]]}}]`,
			decode:  `[{"meta_info":{"input_token_logprobs":[[10]]}},{"meta_info":{"input_token_logprobs":[[20]]}},{"x":1}]`,
			want:    `[{"meta_info":{"input_token_logprobs":[[10]]}},{"meta_info":{"input_token_logprobs":[[2],[20]]}},{"x":1}]`,
		},
		{"prefill not json", `{"meta_info":`, `{"meta_info":{"input_token_logprobs":[]}}`, `{"meta_info":{"input_token_logprobs":[]}}`},
		{"decode not json", `{"meta_info":{"input_token_logprobs":[[1]]}}`, `{"meta_info":{"input_`, `{"meta_info":{"input_`},
		{"decode field null", `{"meta_info":{"input_token_logprobs":[[1]]}}`, `{"meta_info":{"input_token_logprobs":null}}`, `{"meta_info":{"input_token_logprobs":null}}`},
		{"prefill field missing", `{"meta_info":{}}`, `{"meta_info":{"input_token_logprobs":[[3]]}}`, `{"meta_info":{"input_token_logprobs":[[3]]}}`},
		{"object vs array", `{"meta_info":{"input_token_logprobs":[[1]]}}`, `[{"meta_info":{"input_token_logprobs":[[3]]}}]`, `[{"meta_info":{"input_token_logprobs":[[3]]}}]`},
		{"openai body untouched", `{"meta_info":{"input_token_logprobs":[[1]]}}`, `{"choices":[]}`, `{"choices":[]}`},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			assert.Equal(t, tc.want, string(MergeLogprobs([]byte(tc.prefill), []byte(tc.decode))))
		})
	}
}

func TestPrefillLogprobs(t *testing.T) {
	t.Parallel()
	tests := []struct{ name, body, want string }{
		{"json", ` {"meta_info":{"input_token_logprobs":[[-1,5,null]]}}`, `[[-1,5,null]]`},
		{"sse first data event", ": ping\n\ndata: {\"meta_info\":{\"input_token_logprobs\":[[-1,5,null]]}}\n\ndata: {\"meta_info\":{\"input_token_logprobs\":[[9]]}}\n\ndata: [DONE]\n\n", `[[-1,5,null]]`},
		{"sse crlf unterminated", "data: {\"meta_info\":{\"input_token_logprobs\":[]}}\r\n", `[]`},
		{"sse no logprobs", "data: {\"meta_info\":{}}\n\ndata: [DONE]\n\n", ``},
		{"sse not json", "data: nope\n\n", ``},
		{"batch json", `[{"meta_info":{"input_token_logprobs":[[1]]}}]`, ``},
		{"empty", ``, ``},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			assert.Equal(t, tc.want, string(PrefillLogprobs([]byte(tc.body))))
		})
	}
}

// decodeStream is a multi-event decode stream: mergeable events, a comment, an event name and
// id, a non-JSON event, a JSON event without logprobs, a pretty-printed multi-line event and
// [DONE].
const decodeStream = "data: {\"text\":\"a\",\"meta_info\":{\"input_token_logprobs\":[[-0.5,3,null]]}}\n\n" +
	": keep-alive\n\n" +
	"event: chunk\nid: 2\ndata: {\"meta_info\":{\"input_token_logprobs\":[]},\"x\":\"é\"}\n\n" +
	"data: {\"not\":\"merged\"}\n\n" +
	"data: not json\n\n" +
	"data: {\"meta_info\": {\ndata:   \"input_token_logprobs\": [[-1,2,null]]}}\n\n" +
	"data: [DONE]\n\n"

const mergedStream = "data: {\"text\":\"a\",\"meta_info\":{\"input_token_logprobs\":[[-0.1,1,null],[-0.5,3,null]]}}\n\n" +
	": keep-alive\n\n" +
	"event: chunk\nid: 2\ndata: {\"meta_info\":{\"input_token_logprobs\":[[-0.1,1,null]]},\"x\":\"é\"}\n\n" +
	"data: {\"not\":\"merged\"}\n\n" +
	"data: not json\n\n" +
	"data: {\"meta_info\": {\ndata:   \"input_token_logprobs\": [[-0.1,1,null],[-1,2,null]]}}\n\n" +
	"data: [DONE]\n\n"

func mergeChunks(pre []byte, chunks ...[]byte) string {
	m := newLogprobMerger(pre)
	var out []byte
	for _, c := range chunks {
		out = m.Write(out, c)
	}
	return string(m.Close(out))
}

func TestLogprobMergerAnyChunking(t *testing.T) {
	t.Parallel()
	pre := PrefillLogprobs([]byte("data: {\"meta_info\":{\"input_token_logprobs\":[[-0.1,1,null]]}}\n\ndata: [DONE]\n\n"))
	require.Equal(t, `[[-0.1,1,null]]`, string(pre))
	variants := []struct{ name, eol string }{{"eol=lf", "\n"}, {"eol=crlf", "\r\n"}, {"eol=cr", "\r"}}
	for _, v := range variants {
		t.Run(v.name, func(t *testing.T) {
			t.Parallel()
			in := []byte(strings.ReplaceAll(decodeStream, "\n", v.eol))
			whole := mergeChunks(pre, in)
			if v.eol == "\n" {
				assert.Equal(t, mergedStream, whole)
			}
			// Untouched events keep their original line endings; merged ones are re-encoded.
			assert.Contains(t, whole, "data: [DONE]"+v.eol+v.eol)
			assert.Contains(t, whole, "[[-0.1,1,null],[-1,2,null]]")
			assert.Equal(t, whole, mergeChunks(pre, bytewise(in)...), "byte by byte")
			for i := 0; i <= len(in); i++ {
				require.Equal(t, whole, mergeChunks(pre, in[:i], in[i:]), "split at %d", i)
			}
			for i := 0; i <= len(in); i += 7 {
				for j := i; j <= len(in); j += 5 {
					require.Equal(t, whole, mergeChunks(pre, in[:i], in[i:j], in[j:]), "split at %d,%d", i, j)
				}
			}
		})
	}
}

func TestLogprobMergerNilPassesThrough(t *testing.T) {
	t.Parallel()
	assert.Equal(t, decodeStream, mergeChunks(nil, []byte(decodeStream)))
}

// logprobMerger rewrites a decode SSE stream (the tests' harness for AppendMergedEvent over a
// Parser, as serve's relay drives them), prepending the prefill logprobs to every event
// that carries meta_info.input_token_logprobs; all other events pass through byte for byte. Its
// output does not depend on how the input is chunked. Not safe for concurrent use.
type logprobMerger struct {
	pre []byte
	p   Parser
}

// newLogprobMerger returns a merger that prepends pre (from PrefillLogprobs; nil → pass
// everything through).
func newLogprobMerger(pre []byte) *logprobMerger { return &logprobMerger{pre: pre} }

// Write feeds a chunk of the decode stream and appends every event it completes, merged, to
// dst.
func (m *logprobMerger) Write(dst, chunk []byte) []byte {
	m.p.Feed(chunk)
	return m.drain(dst)
}

// Close ends the stream and appends what remains: a final event without its blank line.
func (m *logprobMerger) Close(dst []byte) []byte {
	m.p.Close()
	return m.drain(dst)
}

func (m *logprobMerger) drain(dst []byte) []byte {
	for {
		ev, ok := m.p.Next()
		if !ok {
			return dst
		}
		dst = AppendMergedEvent(dst, m.pre, &ev)
	}
}
