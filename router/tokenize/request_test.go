package tokenize

import (
	"errors"
	"reflect"
	"strings"
	"testing"
)

// PromptIDs picks the prompt from each body format as SGLang does; chat bodies are reshaped
// (null content, JSON-string tool-call arguments) before the template sees them.
func TestPromptIDs(t *testing.T) {
	tok, err := Load(writeModel(t, tinyTokenizer(
		`{"type":"TemplateProcessing","single":[{"SpecialToken":{"id":"<s>","type_id":0}},{"Sequence":{"id":"A","type_id":0}}],"special_tokens":{"<s>":{"id":"<s>","ids":[259],"tokens":["<s>"]}}}`,
		`{"id":259,"content":"<s>","special":true}`),
		`{"bos_token":"<s>","chat_template":"{% for m in messages %}[{{ m.role }}]{{ m.content }}{% for c in m.tool_calls or [] %}({{ c.function.arguments.x }}){% endfor %}{% endfor %}{% if tools %}T{% endif %}{% if add_generation_prompt %}[a]{% endif %}"}`), "")
	if err != nil {
		t.Fatal(err)
	}
	enc := func(s string, special bool) []uint32 { return tok.Encode(nil, s, special) }
	for _, c := range []struct {
		name string
		api  API
		body string
		want []uint32
	}{
		{"chat renders and encodes without special tokens", Chat, `{"messages":[{"role":"user","content":"hi"}],"tools":[{"type":"function"}]}`, enc("[user]hiT[a]", false)},
		{"continue_final_message drops the generation prompt", Chat, `{"messages":[{"role":"user","content":"x"}],"continue_final_message":true}`, enc("[user]x", false)},
		{"add_generation_prompt false", Chat, `{"messages":[{"role":"user","content":"x"}],"add_generation_prompt":false}`, enc("[user]x", false)},
		{"null content and string arguments are reshaped", Chat,
			`{"messages":[{"role":"assistant","content":null,"tool_calls":[{"function":{"name":"f","arguments":"{\"x\":7}"}}]}]}`, enc("[assistant](7)[a]", false)},
		{"generate input_ids as they are", Generate, `{"input_ids":[5,6,7],"text":"ignored"}`, []uint32{5, 6, 7}},
		{"generate text with special tokens", Generate, `{"text":"ab"}`, enc("ab", true)},
		{"a completions batch gives its first prompt", Completions, `{"prompt":["abc","z"]}`, enc("abc", true)},
		{"completions token ids", Completions, `{"prompt":[[9,8],[7]]}`, []uint32{9, 8}},
	} {
		got, err := tok.PromptIDs(nil, c.api, []byte(c.body))
		if err != nil || !reflect.DeepEqual(got, c.want) {
			t.Errorf("%s: PromptIDs = %v, %v; want %v", c.name, got, err, c.want)
		}
	}
	if _, err := tok.PromptIDs(nil, Generate, []byte(`{"sampling_params":{}}`)); !errors.Is(err, ErrNoPrompt) || !strings.Contains(err.Error(), "text") {
		t.Errorf("no text: err = %v", err)
	}
	if _, err := tok.PromptIDs(nil, Chat, []byte(`{"messages":null}`)); !errors.Is(err, ErrNoPrompt) {
		t.Errorf("no messages: err = %v", err)
	}
	// Without a tokenizer ids still come through; text does not.
	var none *Tokenizer
	if got, err := none.PromptIDs(nil, Generate, []byte(`{"input_ids":[1,2]}`)); err != nil || !reflect.DeepEqual(got, []uint32{1, 2}) {
		t.Errorf("nil tokenizer, ids: %v, %v", got, err)
	}
	if _, err := none.PromptIDs(nil, Completions, []byte(`{"prompt":"x"}`)); !errors.Is(err, ErrNoPrompt) {
		t.Errorf("nil tokenizer, text: err = %v", err)
	}
}
