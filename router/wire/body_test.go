package wire

import (
	"errors"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestParseView(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name     string
		route    Route
		body     string
		text     string
		batch    int
		stream   bool
		logprobs bool
		model    string
		n        int
		rid      string
		rids     []string
	}{
		{
			// Every role counts, in order; content parts contribute their text; reasoning
			// follows content; empty strings and non-text parts add nothing.
			name: "chat/all roles", route: Chat,
			body: `{"model":"llama","messages":[
				{"role":"system","content":"You are helpful."},
				{"role":"user","content":[{"type":"text","text":"look"},{"type":"image_url","image_url":{"url":"x"}},{"type":"text","text":"here"}]},
				{"role":"assistant","content":"ok","reasoning_content":"hmm"},
				{"role":"assistant","content":null,"tool_calls":[{"id":"1"}]},
				{"role":"tool","content":"42","tool_call_id":"1"},
				{"role":"user","content":""},
				{"role":"user","content":"tab\there \u00e9 \ud83d\ude00"}]}`,
			text:  "You are helpful. look here ok hmm 42 tab\there é 😀",
			model: "llama", n: 1,
		},
		{
			name: "chat/stream n logprobs", route: Chat,
			body: `{"messages":[{"role":"user","content":"q"}],"stream":true,"n":2,"logprobs":true,"rid":["a","b"]}`,
			text: "q", batch: 2, stream: true, logprobs: true, n: 2, rids: []string{"a", "b"},
		},
		{
			name: "chat/nulls are absent", route: Chat,
			body: `{"messages":[{"role":"user","content":"q"}],"stream":null,"n":null,"logprobs":null,"rid":null,"model":null}`,
			text: "q", n: 1,
		},
		{
			name: "chat/n=1 is not a batch", route: Chat,
			body: `{"messages":[{"role":"user","content":"q"}],"n":1.0,"rid":"mine"}`,
			text: "q", n: 1, rid: "mine",
		},
		{
			name: "completions/string", route: Completions,
			body: `{"prompt":"abc","logprobs":0,"n":4}`,
			text: "abc", logprobs: true, n: 4,
		},
		{
			name: "completions/list of strings", route: Completions,
			body: `{"prompt":["first","second","third"]}`,
			text: "first", batch: 3, n: 1,
		},
		{
			name: "completions/flat token ids are one prompt", route: Completions,
			body: `{"prompt":[1, 22 ,333]}`,
			text: "1 22 333", n: 1,
		},
		{
			name: "completions/token lists", route: Completions,
			body: `{"prompt":[[7,8],[9]]}`,
			text: "7 8", batch: 2, n: 1,
		},
		{
			name: "generate/text", route: Generate,
			body: `{"text":"hello","return_logprob":true,"stream":true,"n":5}`,
			text: "hello", logprobs: true, stream: true, n: 1,
		},
		{
			name: "generate/text list", route: Generate,
			body: `{"text":["a b","c"],"return_logprob":[false,true]}`,
			text: "a b", batch: 2, logprobs: true, n: 1,
		},
		{
			name: "generate/input_ids", route: Generate,
			body: `{"input_ids":[1,2,3]}`,
			text: "1 2 3", n: 1,
		},
		{
			name: "generate/input_ids batch", route: Generate,
			body: `{"input_ids":[[4,5],[6]]}`,
			text: "4 5", batch: 2, n: 1,
		},
		{
			name: "generate/text wins over input_ids", route: Generate,
			body: `{"input_ids":[[4,5],[6]],"text":"t"}`,
			text: "t", n: 1,
		},
		{
			name: "generate/input_embeds batch", route: Generate,
			body:  `{"input_embeds":[[[0.1,0.2]],[[0.3,0.4]]]}`,
			batch: 2, n: 1,
		},
		{
			name: "generate/escaped keys count", route: Generate,
			body: `{"\u0074ext":"esc","str\u0065am":true}`,
			text: "esc", stream: true, n: 1,
		},
		{
			name: "generate/last duplicate wins", route: Generate,
			body: `{"text":"one","text":"two"}`,
			text: "two", n: 1,
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			b, err := Parse(tc.route, []byte(tc.body))
			require.NoError(t, err)
			assert.Equal(t, tc.text, b.Text)
			assert.Equal(t, tc.batch, b.Batch)
			assert.Equal(t, max(tc.batch, 1), b.Size())
			assert.Equal(t, tc.stream, b.Stream)
			assert.Equal(t, tc.logprobs, b.Logprobs)
			assert.Equal(t, tc.model, b.Model)
			assert.Equal(t, tc.n, b.N)
			assert.Equal(t, tc.rid, b.RID)
			assert.Equal(t, tc.rids, b.RIDs)
			assert.Equal(t, tc.rid != "" || tc.rids != nil, b.HasRID)
		})
	}
}

func TestParseKeepsMembers(t *testing.T) {
	t.Parallel()
	raw := []byte(` { "b" : [1, 2] ,"a":{"x" :1},"\u0061":"dup", "text":"t" } `)
	b, err := Parse(Generate, raw)
	require.NoError(t, err)
	require.Equal(t, 4, len(b.members))
	var keys, vals []string
	for i := range len(b.members) {
		k, v := b.member(i)
		keys, vals = append(keys, string(k)), append(vals, string(v))
	}
	assert.Equal(t, []string{`"b"`, `"a"`, `"\u0061"`, `"text"`}, keys)
	assert.Equal(t, []string{`[1, 2]`, `{"x" :1}`, `"dup"`, `"t"`}, vals)
	v, ok := b.Field("a")
	require.True(t, ok)
	assert.Equal(t, `"dup"`, string(v), "the last duplicate wins")
	_, ok = b.Field("missing")
	assert.False(t, ok)
	assert.Equal(t, `{"b":[1, 2],"a":{"x" :1},"\u0061":"dup","text":"t"}`, string(b.Append(nil)))
}

func TestParseErrors(t *testing.T) {
	t.Parallel()
	deep := strings.Repeat("[", 20000) + strings.Repeat("]", 20000)
	tests := []struct {
		name  string
		route Route
		body  string
		field string
		msg   string // substring of the message
	}{
		{"empty", Chat, ``, "", "request body is empty"},
		{"space only", Chat, "  \n", "", "request body is empty"},
		{"not json", Chat, `hello`, "", "not valid JSON"},
		{"truncated", Chat, `{"messages":[`, "", "unexpected end of JSON input"},
		{"trailing garbage", Chat, `{"messages":[]} x`, "", "after top-level value"},
		{"two objects", Chat, `{}{}`, "", "after top-level value"},
		{"array body", Chat, `[1,2]`, "", "must be a JSON object, got an array"},
		{"string body", Generate, `"text"`, "", "must be a JSON object, got a string"},
		{"bad escape", Generate, `{"text":"\x"}`, "", "invalid escape"},
		{"control char", Generate, "{\"text\":\"a\x01\"}", "", "control character"},
		{"bad number", Generate, `{"text":"a","n":01}`, "", "not valid JSON"},
		{"huge nesting", Generate, `{"text":"a","x":` + deep + `}`, "", "nesting deeper than 10000"},
		{"huge nesting body", Generate, deep, "", "nesting deeper than 10000"},
		{"chat/missing messages", Chat, `{"model":"m"}`, "messages", "messages is required"},
		{"chat/null messages", Chat, `{"messages":null}`, "messages", "messages is required"},
		{"chat/messages string", Chat, `{"messages":"hi"}`, "messages", "messages must be an array, got a string"},
		{"chat/empty messages", Chat, `{"messages":[]}`, "messages", "messages must not be empty"},
		{"chat/message not object", Chat, `{"messages":[{"content":"a"},3]}`, "messages", "messages[1] must be an object, got a number"},
		{"chat/content number", Chat, `{"messages":[{"content":5}]}`, "messages", "messages[0].content must be a string or an array, got a number"},
		{"chat/part not object", Chat, `{"messages":[{"content":["a"]}]}`, "messages", "messages[0].content[0] must be an object"},
		{"chat/part text number", Chat, `{"messages":[{"content":[{"type":"text","text":1}]}]}`, "messages", "messages[0].content[0].text must be a string"},
		{"chat/reasoning number", Chat, `{"messages":[{"content":"a","reasoning_content":true}]}`, "messages", "messages[0].reasoning_content must be a string"},
		{"chat/stream string", Chat, `{"messages":[{"content":"a"}],"stream":"yes"}`, "stream", "stream must be a boolean, got a string"},
		{"chat/n string", Chat, `{"messages":[{"content":"a"}],"n":"2"}`, "n", "n must be an integer, got a string"},
		{"chat/n zero", Chat, `{"messages":[{"content":"a"}],"n":0}`, "n", "n must be an integer between 1"},
		{"chat/n fraction", Chat, `{"messages":[{"content":"a"}],"n":1.5}`, "n", "n must be an integer between 1"},
		{"chat/logprobs number", Chat, `{"messages":[{"content":"a"}],"logprobs":5}`, "logprobs", "logprobs must be a boolean"},
		{"chat/model number", Chat, `{"messages":[{"content":"a"}],"model":5}`, "model", "model must be a string"},
		{"chat/rid number", Chat, `{"messages":[{"content":"a"}],"rid":5}`, "rid", "rid must be a string or a list of strings, got a number"},
		{"chat/rid list single", Chat, `{"messages":[{"content":"a"}],"rid":["a"]}`, "rid", "rid must be a string for a single request"},
		{"chat/rid string batch", Chat, `{"messages":[{"content":"a"}],"n":2,"rid":"a"}`, "rid", "rid must be a list of 2 strings"},
		{"chat/rid list short", Chat, `{"messages":[{"content":"a"}],"n":3,"rid":["a","b"]}`, "rid", "rid must be a list of 3 strings"},
		{"completions/missing prompt", Completions, `{"model":"m"}`, "prompt", "prompt is required"},
		{"completions/prompt object", Completions, `{"prompt":{}}`, "prompt", "prompt must be a string, a list of strings"},
		{"completions/prompt empty list", Completions, `{"prompt":[]}`, "prompt", "prompt must not be empty"},
		{"completions/prompt mixed", Completions, `{"prompt":["a",1]}`, "prompt", "prompt[1] must be a string, got a number"},
		{"completions/prompt bad token list", Completions, `{"prompt":[[1],["x"]]}`, "prompt", "prompt[1] must be a list of token ids"},
		{"completions/prompt ints then list", Completions, `{"prompt":[1,[2]]}`, "prompt", "prompt must be a list of token ids or a list of token-id lists"},
		{"completions/logprobs string", Completions, `{"prompt":"a","logprobs":"5"}`, "logprobs", "logprobs must be an integer"},
		{"generate/missing input", Generate, `{"sampling_params":{}}`, "text", "one of text, input_ids or input_embeds is required"},
		{"generate/text number", Generate, `{"text":1}`, "text", "text must be a string or a list of strings, got a number"},
		{"generate/text empty list", Generate, `{"text":[]}`, "text", "text must not be empty"},
		{"generate/text list of numbers", Generate, `{"text":[1]}`, "text", "text[0] must be a string"},
		{"generate/input_ids string", Generate, `{"input_ids":"1 2"}`, "input_ids", "input_ids must be a list of token ids"},
		{"generate/input_ids empty", Generate, `{"input_ids":[]}`, "input_ids", "input_ids must not be empty"},
		{"generate/input_ids strings", Generate, `{"input_ids":["a"]}`, "input_ids", "input_ids must be a list of token ids"},
		{"generate/return_logprob string", Generate, `{"text":"a","return_logprob":"yes"}`, "return_logprob", "return_logprob must be a boolean"},
		{"generate/return_logprob list of numbers", Generate, `{"text":"a","return_logprob":[1]}`, "return_logprob", "return_logprob must be a boolean or a list of booleans"},
		{"generate/input_embeds number", Generate, `{"input_embeds":1}`, "input_embeds", "input_embeds must be an array"},
		{"invalid route", Route(0), `{}`, "", "unsupported route"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			b, err := Parse(tc.route, []byte(tc.body))
			require.Error(t, err)
			assert.Nil(t, b)
			var we *Error
			require.True(t, errors.As(err, &we), "%T", err)
			assert.Equal(t, 400, we.Status)
			assert.Equal(t, "invalid_request_error", we.Type)
			assert.Equal(t, tc.field, we.Field)
			assert.Contains(t, we.Message, tc.msg)
			assert.Equal(t, strings.ToLower(we.Message[:1]), we.Message[:1], "errors start lowercase")
			assert.JSONEq(t, `{"error":{"message":`+quoteJSON(we.Message)+`,"type":"invalid_request_error","code":400}}`, string(we.Body()))
		})
	}
}

func quoteJSON(s string) string { return string(appendQuote(nil, s)) }

// member returns the i-th top-level member of the original body (0 ≤ i < len(b.members)):
// the raw key, quotes and escapes included, and the raw value.
func (b *Body) member(i int) (key, value []byte) {
	m := b.members[i]
	return b.Raw[m.k0:m.k1], b.Raw[m.v0:m.v1]
}
