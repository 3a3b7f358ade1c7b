package workloads

import (
	"fmt"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/pdrouter/pdrouter/router/wire"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestRenderPrompt(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name string
		api  API
		body string
		want string
	}{
		{"chat string content", APIChat,
			`{"messages":[{"role":"system","content":"Be brief."},{"role":"user","content":"Hi"}]}`,
			"<|im_start|>system\nBe brief.<|im_end|>\n<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n"},
		{"chat text parts, images skipped", APIChat,
			`{"messages":[{"role":"user","content":[{"type":"text","text":"a"},{"type":"image_url","image_url":{"url":"x"}},{"type":"text","text":" b"}]}]}`,
			"<|im_start|>user\na b<|im_end|>\n<|im_start|>assistant\n"},
		{"chat reasoning and tool calls", APIChat,
			`{"messages":[{"role":"assistant","content":null,"reasoning_content":"think","tool_calls":[{"type":"function","function":{"name":"f","arguments":"{}"}}]},{"role":"tool","content":"42"}]}`,
			"<|im_start|>assistant\n<think>\nthink\n</think>\n<tool_call>\nf {}\n</tool_call><|im_end|>\n" +
				"<|im_start|>tool\n42<|im_end|>\n<|im_start|>assistant\n"},
		{"completions string", APICompletions, `{"prompt":"once upon"}`, "once upon"},
		{"completions batch takes the first", APICompletions, `{"prompt":["a","b"]}`, "a"},
		{"completions token ids", APICompletions, `{"prompt":[1,2,3]}`, "1 2 3"},
		{"generate text", APIGenerate, `{"text":"hello"}`, "hello"},
		{"generate batch text", APIGenerate, `{"text":["x","y"]}`, "x"},
		{"generate input_ids", APIGenerate, `{"input_ids":[7,8]}`, "7 8"},
		{"generate batch input_ids", APIGenerate, `{"input_ids":[[5],[6]]}`, "5"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := RenderPrompt(tc.api, []byte(tc.body))
			require.NoError(t, err)
			assert.Equal(t, tc.want, got)
		})
	}
}

func TestRenderPromptErrors(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name string
		api  API
		body string
		want string
	}{
		{"bad json", APIChat, `{`, "chat body"},
		{"no messages", APIChat, `{"model":"m"}`, "no messages"},
		{"no role", APIChat, `{"messages":[{"content":"x"}]}`, "messages[0] has no role"},
		{"bad content", APIChat, `{"messages":[{"role":"user","content":5}]}`, "messages[0]"},
		{"no prompt", APICompletions, `{}`, "no prompt"},
		{"bad prompt", APICompletions, `{"prompt":{}}`, "prompt"},
		{"no text", APIGenerate, `{}`, "neither text nor input_ids"},
		{"bad ids", APIGenerate, `{"input_ids":["a"]}`, "input_ids"},
		{"unknown api", API("embed"), `{}`, "unknown api"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := RenderPrompt(tc.api, []byte(tc.body))
			require.Error(t, err)
			assert.Contains(t, err.Error(), tc.want)
			assert.Contains(t, err.Error(), "workloads: ")
		})
	}
}

func TestPromptIDs(t *testing.T) {
	t.Parallel()
	ids, err := PromptIDs(APIGenerate, []byte(`{"input_ids":[3,1,4]}`))
	require.NoError(t, err)
	assert.Equal(t, []uint32{3, 1, 4}, ids, "input_ids pass through")
	ids, err = PromptIDs(APICompletions, []byte(`{"prompt":"hello world"}`))
	require.NoError(t, err)
	assert.Equal(t, Tokenize("hello world"), ids)
}

func TestReplyText(t *testing.T) {
	t.Parallel()
	p1, p2 := Tokenize("first prompt"), Tokenize("second prompt")
	for _, n := range []int{0, 1, 2, 7, 128, 1000} {
		r := ReplyText(p1, n)
		assert.Equal(t, n, Count(r), "n=%d", n)
		assert.Equal(t, r, ReplyText(p1, n), "deterministic")
		assert.Equal(t, n, Count("<|im_start|>assistant\n"+r)-genPromptTokens, "appends exactly its tokens")
		if n > 0 {
			assert.NotEqual(t, r, ReplyText(p2, n), "different prompts, different replies")
			assert.Equal(t, ' ', rune(r[0]))
		}
	}
	assert.Equal(t, ReplyText(p1, 10), ReplyText(p1, 30)[:len(ReplyText(p1, 10))], "shorter reply is a prefix")
	assert.Empty(t, ReplyText(p1, -1))
}

func TestAppendJSONString(t *testing.T) {
	t.Parallel()
	got := string(wire.AppendJSONString(nil, "a\"b\\c\nd\te\x01f\xffg<>é"))
	assert.Equal(t, `"a\"b\\c\nd\te\u0001f\ufffdg<>é"`, got)
}

// FuzzSessionInputTokens checks that Turn.InputTokens equals the tokens of the rendered prompt
// whatever reply text the caller appends (a live server's reply is arbitrary text).
func FuzzSessionInputTokens(f *testing.F) {
	for _, s := range []string{"", " plain reply", "Reply\nwith lines ", "  <|im_end|> tricky", "日本語!", "\t\r\n"} {
		f.Add(s, "next question")
	}
	f.Fuzz(func(t *testing.T, reply, question string) {
		if !utf8.ValidString(reply) || !utf8.ValidString(question) {
			t.Skip("replies arrive JSON-decoded, hence valid UTF-8")
		}
		for _, api := range []API{APIChat, APICompletions, APIGenerate} {
			p := DefaultParams()
			p.API = api
			sys := systemPiece(p, domSystem, 0, 5)
			s := newSession("fuzz", p.form(), sys, 2, func(k int) (string, int, int, time.Duration) {
				if k == 0 {
					return " first", 1, 3, 0
				}
				return question, Count(question), 3, 0
			})
			s.TrackPromptIDs()
			for _, prev := range []string{"", reply} {
				turn, ok := s.Next(prev)
				require.True(t, ok)
				text, err := RenderPrompt(api, turn.Body)
				require.NoError(t, err)
				require.Equal(t, Count(text), turn.InputTokens, "api %s turn %d", api, turn.Index)
				require.Equal(t, Tokenize(text), turn.PromptIDs, "api %s turn %d", api, turn.Index)
			}
		}
	})
}

// FuzzRenderPrompt: any body either renders or fails with an error, never a panic.
func FuzzRenderPrompt(f *testing.F) {
	for _, s := range []string{`{"messages":[{"role":"user","content":"hi"}]}`, `{"prompt":[1,2]}`,
		`{"text":["a"]}`, `{"input_ids":[[1],[2]]}`, `{"messages":[{"role":"user","content":[{"type":"text","text":"x"}]}]}`} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, body string) {
		for _, api := range []API{APIChat, APICompletions, APIGenerate} {
			text, err := RenderPrompt(api, []byte(body))
			if err == nil {
				ids, err := PromptIDs(api, []byte(body))
				require.NoError(t, err)
				if !strings.ContainsAny(body, "0123456789") { // no token-id prompts possible
					require.Equal(t, Tokenize(text), ids)
				}
			}
		}
	})
}

func ExampleReplyText() {
	prompt := Tokenize("<|im_start|>user\nHello<|im_end|>\n<|im_start|>assistant\n")
	reply := ReplyText(prompt, 5)
	fmt.Println(Count(reply), reply == ReplyText(prompt, 5))
	// Output: 5 true
}

func ExampleSplit() {
	fmt.Printf("%q\n", Split("Hello, world!\n internationalization"))
	// Output: ["Hello" "," " world" "!" "\n" " intern" "ationa" "lizati" "on"]
}
