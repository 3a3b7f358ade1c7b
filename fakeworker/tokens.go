package fakeworker

import (
	"bytes"
	"encoding/json"
	"fmt"

	"github.com/pdrouter/pdrouter/router/tokenize"
	"github.com/pdrouter/pdrouter/router/wire"
	"github.com/pdrouter/pdrouter/workloads"
)

// promptTokenizer is the real tokenizer fakeworker uses with --tokenizer-path
// (*tokenize.Tokenizer); without one, prompts go through the approximate workloads tokenizer.
type promptTokenizer interface {
	Encode(dst []uint32, text string, addSpecial bool) []uint32
	RenderChat(messages []tokenize.Message, tools []any, addGenerationPrompt bool) (string, error)
}

var _ promptTokenizer = (*tokenize.Tokenizer)(nil)

// loadTokenizer loads --tokenizer-path (and --chat-template); nil without a path.
func loadTokenizer(path, chatTemplate string) (promptTokenizer, error) {
	if path == "" {
		return nil, nil
	}
	t, err := tokenize.Load(path, chatTemplate)
	if err != nil {
		return nil, fmt.Errorf("fakeworker: --tokenizer-path %s: %w", path, err)
	}
	return t, nil
}

// tokenBody is what the prompt depends on in chat, completions and generate bodies.
type tokenBody struct {
	Messages             []tokenize.Message `json:"messages"`
	Tools                []any              `json:"tools"`
	ContinueFinalMessage bool               `json:"continue_final_message"`
	AddGenerationPrompt  *bool              `json:"add_generation_prompt"`
	Prompt               json.RawMessage    `json:"prompt"`
	Text                 json.RawMessage    `json:"text"`
	InputIDs             json.RawMessage    `json:"input_ids"`
}

// promptIDs returns the prompt token ids of an inference body. A body carrying ids (generate
// input_ids, completions token-id prompts) is taken as is; text goes through the worker's
// tokenizer as SGLang's tokenizer manager does (encode with special tokens for raw text; chat
// messages rendered by the chat template with the generation prompt, then encoded without
// adding special tokens, as apply_chat_template(tokenize=True) does), or, without
// --tokenizer-path, through workloads.PromptIDs.
func (w *Worker) promptIDs(route wire.Route, raw []byte) ([]uint32, error) {
	if w.tok == nil {
		return workloads.PromptIDs(apiOf(route), raw)
	}
	return promptIDsWith(w.tok, route, raw)
}

func promptIDsWith(tok promptTokenizer, route wire.Route, raw []byte) ([]uint32, error) {
	var b tokenBody
	if err := json.Unmarshal(raw, &b); err != nil {
		return nil, fmt.Errorf("fakeworker: %s body: %w", route, err)
	}
	switch route {
	case wire.Chat:
		if len(b.Messages) == 0 {
			return nil, fmt.Errorf("fakeworker: chat body has no messages")
		}
		gen := !b.ContinueFinalMessage
		if b.AddGenerationPrompt != nil {
			gen = *b.AddGenerationPrompt && gen
		}
		text, err := tok.RenderChat(b.Messages, b.Tools, gen)
		if err != nil {
			return nil, fmt.Errorf("fakeworker: chat template: %w", err)
		}
		return tok.Encode(nil, text, false), nil
	case wire.Completions:
		return textOrIDs(tok, b.Prompt, "prompt")
	default:
		if ids, ok, err := firstIDs(b.InputIDs, "input_ids"); err != nil || ok {
			return ids, err
		}
		return textOrIDs(tok, b.Text, "text")
	}
}

// textOrIDs encodes a string (or the first of a list of strings) or returns token ids (or the
// first list of ids).
func textOrIDs(tok promptTokenizer, raw json.RawMessage, field string) ([]uint32, error) {
	v := bytes.TrimSpace(raw)
	if len(v) == 0 || string(v) == "null" {
		return nil, fmt.Errorf("fakeworker: the body has no %s", field)
	}
	var s string
	if v[0] == '"' {
		if err := json.Unmarshal(v, &s); err != nil {
			return nil, fmt.Errorf("fakeworker: %s: %w", field, err)
		}
		return tok.Encode(nil, s, true), nil
	}
	var strs []string
	if json.Unmarshal(v, &strs) == nil && len(strs) > 0 {
		return tok.Encode(nil, strs[0], true), nil
	}
	ids, ok, err := firstIDs(v, field)
	if err == nil && !ok {
		err = fmt.Errorf("fakeworker: the body has no %s", field)
	}
	return ids, err
}

// firstIDs returns a list of token ids, or the first list of a list of lists; ok is false
// when raw is absent or null.
func firstIDs(raw json.RawMessage, field string) ([]uint32, bool, error) {
	v := bytes.TrimSpace(raw)
	if len(v) == 0 || string(v) == "null" {
		return nil, false, nil
	}
	var ids []uint32
	if err := json.Unmarshal(v, &ids); err == nil {
		return ids, true, nil
	}
	var lists [][]uint32
	if err := json.Unmarshal(v, &lists); err != nil || len(lists) == 0 {
		return nil, false, fmt.Errorf("fakeworker: %s is not a list of token ids", field)
	}
	return lists[0], true, nil
}

// replyIDs are the token ids of a reply text, by the tokenizer the prompts use (so a finished
// request's cached outputs match the next turn's prompt).
func (w *Worker) replyIDs(text string) []uint32 {
	if w.tok == nil {
		return workloads.Tokenize(text)
	}
	return w.tok.Encode(nil, text, false)
}
