package server

import (
	"encoding/json"
	"fmt"

	"github.com/pdrouter/pdrouter/router/tokenize"
	"github.com/pdrouter/pdrouter/router/wire"
)

// promptTokens returns the prompt token ids a worker will see for a single (non-batch)
// request, as SGLang derives them, or nil when the router cannot know them (a batch, a body it
// cannot read, text without a tokenizer): the request is then routed on the approximate tree.
//
//   - input_ids (/generate) or a token-list prompt (/v1/completions): used as they are
//     (sglang managers/tokenizer_manager.py _tokenize_one_request takes input_ids verbatim).
//   - text (/generate) and a string prompt (/v1/completions, which SGLang turns into a
//     GenerateReqInput with text): encoded with special tokens added, as the tokenizer
//     manager's tokenizer.encode(text) does (Llama-3 gains <|begin_of_text|>).
//   - messages (/v1/chat/completions): the chat template rendered with add_generation_prompt
//     (true unless the request sets it false or asks continue_final_message) and the tools,
//     then encoded without special tokens — the template writes them itself
//     (entrypoints/openai/serving_chat.py applies the template with tokenize=True).
func promptTokens(tok *tokenize.Tokenizer, b *wire.Body) ([]uint32, error) {
	if b.Batch > 0 {
		return nil, nil
	}
	switch b.Route {
	case wire.Generate:
		if raw, ok := b.Field("input_ids"); ok && !isNull(raw) {
			return tokenList(raw, "input_ids")
		}
		if raw, ok := b.Field("text"); ok && tok != nil {
			return encodeText(tok, raw, "text")
		}
	case wire.Completions:
		raw, ok := b.Field("prompt")
		if !ok {
			return nil, nil
		}
		if len(raw) > 0 && raw[0] == '[' {
			return tokenList(raw, "prompt")
		}
		if tok != nil {
			return encodeText(tok, raw, "prompt")
		}
	case wire.Chat:
		if tok == nil {
			return nil, nil
		}
		return chatTokens(tok, b)
	}
	return nil, nil
}

func isNull(raw []byte) bool { return len(raw) == 4 && string(raw) == "null" }

// tokenList reads a JSON array of token ids.
func tokenList(raw []byte, field string) ([]uint32, error) {
	var ids []uint32
	if err := json.Unmarshal(raw, &ids); err != nil {
		return nil, fmt.Errorf("%q is not a list of token ids: %w", field, err)
	}
	return ids, nil
}

// encodeText encodes a JSON string field with special tokens added.
func encodeText(tok *tokenize.Tokenizer, raw []byte, field string) ([]uint32, error) {
	var s string
	if err := json.Unmarshal(raw, &s); err != nil {
		return nil, fmt.Errorf("%q is not a string: %w", field, err)
	}
	return tok.Encode(nil, s, true), nil
}

// chatTokens renders a chat request's messages with the chat template and encodes them.
func chatTokens(tok *tokenize.Tokenizer, b *wire.Body) ([]uint32, error) {
	raw, ok := b.Field("messages")
	if !ok {
		return nil, nil
	}
	var msgs []tokenize.Message
	if err := json.Unmarshal(raw, &msgs); err != nil {
		return nil, fmt.Errorf(`"messages" is not a list of message objects: %w`, err)
	}
	var tools []any
	if rt, ok := b.Field("tools"); ok && !isNull(rt) {
		if err := json.Unmarshal(rt, &tools); err != nil {
			return nil, fmt.Errorf(`"tools" is not a list: %w`, err)
		}
	}
	addGen := true
	if v, ok := b.Field("add_generation_prompt"); ok && string(v) == "false" {
		addGen = false
	}
	if v, ok := b.Field("continue_final_message"); ok && string(v) == "true" {
		addGen = false
	}
	text, err := tok.RenderChat(msgs, tools, addGen)
	if err != nil {
		return nil, fmt.Errorf("chat template: %w", err)
	}
	return tok.Encode(nil, text, false), nil
}
