package fakeworker

import (
	"fmt"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/pdrouter/pdrouter/router/tokenize"
	"github.com/pdrouter/pdrouter/router/wire"
)

// fakeTok encodes each byte as its value (+1000 when special tokens are added, as a BOS
// marker) and renders chats as "role:content|…", recording the generation-prompt flag.
type fakeTok struct{ gen []bool }

func (f *fakeTok) Encode(dst []uint32, text string, addSpecial bool) []uint32 {
	if addSpecial {
		dst = append(dst, 1000)
	}
	for _, b := range []byte(text) {
		dst = append(dst, uint32(b))
	}
	return dst
}

func (f *fakeTok) RenderChat(messages []tokenize.Message, tools []any, gen bool) (string, error) {
	f.gen = append(f.gen, gen)
	var parts []string
	for _, m := range messages {
		parts = append(parts, fmt.Sprintf("%v:%v", m["role"], m["content"]))
	}
	if len(tools) > 0 {
		parts = append(parts, "T")
	}
	return strings.Join(parts, "|"), nil
}

func bytesOf(s string) []uint32 {
	var out []uint32
	for _, b := range []byte(s) {
		out = append(out, uint32(b))
	}
	return out
}

func TestPromptIDsWithTokenizer(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name    string
		route   wire.Route
		body    string
		want    []uint32
		wantGen []bool
	}{
		{"chat renders the template and encodes without special tokens", wire.Chat,
			`{"messages":[{"role":"user","content":"hi"}],"tools":[{"type":"function"}]}`, bytesOf("user:hi|T"), []bool{true}},
		{"continue_final_message drops the generation prompt", wire.Chat,
			`{"messages":[{"role":"assistant","content":"x"}],"continue_final_message":true}`, bytesOf("assistant:x"), []bool{false}},
		{"generate input_ids are taken as they are", wire.Generate, `{"input_ids":[5,6,7],"text":"ignored"}`, []uint32{5, 6, 7}, nil},
		{"generate text is encoded with special tokens", wire.Generate, `{"text":"ab"}`, append([]uint32{1000}, bytesOf("ab")...), nil},
		{"a completions batch uses its first prompt", wire.Completions, `{"prompt":["xy","z"]}`, append([]uint32{1000}, bytesOf("xy")...), nil},
		{"completions token ids", wire.Completions, `{"prompt":[[9,8],[7]]}`, []uint32{9, 8}, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			tok := &fakeTok{}
			got, err := promptIDsWith(tok, tc.route, []byte(tc.body))
			require.NoError(t, err)
			assert.Equal(t, tc.want, got)
			assert.Equal(t, tc.wantGen, tok.gen)
		})
	}
	_, err := promptIDsWith(&fakeTok{}, wire.Generate, []byte(`{"sampling_params":{}}`))
	assert.ErrorContains(t, err, "text")
	_, err = promptIDsWith(&fakeTok{}, wire.Chat, []byte(`{"messages":[]}`))
	assert.ErrorContains(t, err, "messages")
}

// Without --tokenizer-path a worker counts tokens with the approximate workloads tokenizer
// (and generate's input_ids pass through), as before.
func TestWorkerWithoutTokenizer(t *testing.T) {
	t.Parallel()
	w := startWorker(t, Config{})
	assert.Nil(t, w.tok)
	ids, err := w.promptIDs(wire.Generate, []byte(`{"input_ids":[3,4]}`))
	require.NoError(t, err)
	assert.Equal(t, []uint32{3, 4}, ids)
}
