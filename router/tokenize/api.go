package tokenize

// The API below is filled in by the tokenizer work (stubs until then).

// Tokenizer encodes text exactly as the Hugging Face tokenizer it was loaded from and renders
// its chat template. Safe for concurrent use.
type Tokenizer struct{}

// Load reads a tokenizer from path: a tokenizer.json file, or a model directory holding
// tokenizer.json and (for the chat template and special tokens) tokenizer_config.json.
// chatTemplate, when not "", is a Jinja template file that replaces the config's template
// (SGLang's --chat-template).
func Load(path, chatTemplate string) (*Tokenizer, error) { panic("tokenize: not implemented yet") }

// Encode appends the token ids of text to dst, as the tokenizer's encode(text,
// add_special_tokens=addSpecial) does (special tokens written in the text are matched as
// themselves), and returns dst.
func (t *Tokenizer) Encode(dst []uint32, text string, addSpecial bool) []uint32 {
	panic("tokenize: not implemented yet")
}

// Message is one chat turn as OpenAI's chat API carries it; the raw JSON of the message goes
// to the template so fields this struct does not name (tool_calls, name, reasoning_content…)
// still render.
type Message = map[string]any

// RenderChat renders messages (and tools, may be nil) with the chat template, as SGLang does
// for /v1/chat/completions (apply_chat_template with add_generation_prompt=true unless the
// last message is the assistant's and continue_final_message asks otherwise).
func (t *Tokenizer) RenderChat(messages []Message, tools []any, addGenerationPrompt bool) (string, error) {
	panic("tokenize: not implemented yet")
}
