package tokenize

// Calls only the tests make: rendering from Go maps (serve renders raw JSON with
// RenderChatJSON), the special tokens, and emptying the BPE word cache.

// renderChat renders messages (and tools, may be nil) with the chat template, as SGLang does
// for /v1/chat/completions (apply_chat_template with add_generation_prompt=true unless the
// last message is the assistant's and continue_final_message asks otherwise).
func (t *Tokenizer) renderChat(messages []Message, tools []any, addGenerationPrompt bool) (string, error) {
	return t.renderChatWith(messages, tools, addGenerationPrompt, nil)
}

// renderChatWith is renderChat with extra template variables (the request's
// chat_template_kwargs, e.g. enable_thinking for Qwen3, and reasoning_effort), as SGLang passes
// them to apply_chat_template. Messages may also be given as []any of json.RawMessage through
// RenderChatJSON, which serve calls.
func (t *Tokenizer) renderChatWith(messages []Message, tools []any, addGenerationPrompt bool, kwargs map[string]any) (string, error) {
	msgs, err := messageList(messages)
	if err != nil {
		return "", err
	}
	return t.render(msgs, tools, addGenerationPrompt, kwargs)
}

// bosToken returns tokenizer_config.json's bos_token ("" when it has none) and its id.
func (t *Tokenizer) bosToken() (string, uint32, bool) { return t.special(t.bos) }

// eosToken returns tokenizer_config.json's eos_token ("" when it has none) and its id.
func (t *Tokenizer) eosToken() (string, uint32, bool) { return t.special(t.eos) }

func (t *Tokenizer) special(s string) (string, uint32, bool) {
	if s == "" {
		return "", 0, false
	}
	id, ok := t.ids[s]
	return s, id, ok
}

// resetCache empties the word cache.
func (m *bpeModel) resetCache() {
	m.mu.Lock()
	m.cache = make(map[string][]uint32, 1024)
	m.mu.Unlock()
}
