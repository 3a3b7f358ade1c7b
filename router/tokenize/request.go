package tokenize

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
)

// ChatRequest is the part of a /v1/chat/completions body that decides the prompt, as raw JSON
// (nil when the body lacks the field).
type ChatRequest struct {
	Messages             json.RawMessage // "messages": a list of message objects
	Tools                json.RawMessage // "tools"
	AddGenerationPrompt  json.RawMessage // "add_generation_prompt" (default true)
	ContinueFinalMessage json.RawMessage // "continue_final_message" (default false)
	ChatTemplateKwargs   json.RawMessage // "chat_template_kwargs", e.g. {"enable_thinking": false}
}

// ChatPromptIDs appends the prompt token ids SGLang computes for a chat request to dst: the
// messages reshaped as SGLang's OpenAI layer hands them to the template (sglang
// entrypoints/openai/serving_chat.py _apply_jinja_template: a null content becomes "", a tool
// call's JSON-string arguments become an object), rendered with add_generation_prompt (false
// when the request says so or asks continue_final_message) and the request's
// chat_template_kwargs, then encoded without special tokens (see Encode). Keys keep their
// written order, as templates that print tools with tojson need. serve and fakeworker both
// call this, so a router and its workers agree on the ids.
func (t *Tokenizer) ChatPromptIDs(dst []uint32, req ChatRequest) ([]uint32, error) {
	var msgs []json.RawMessage
	if err := json.Unmarshal(req.Messages, &msgs); err != nil {
		return dst, fmt.Errorf(`"messages" is not a list of message objects: %w`, err)
	}
	for i, m := range msgs {
		r, err := reshapeMessage(m)
		if err != nil {
			return dst, fmt.Errorf("messages[%d]: %w", i, err)
		}
		msgs[i] = r
	}
	var tools []any
	if present(req.Tools) {
		var list []json.RawMessage
		if err := json.Unmarshal(req.Tools, &list); err != nil {
			return dst, fmt.Errorf(`"tools" is not a list: %w`, err)
		}
		for _, x := range list {
			tools = append(tools, x)
		}
	}
	addGen := !bytes.Equal(bytes.TrimSpace(req.AddGenerationPrompt), []byte("false")) &&
		!bytes.Equal(bytes.TrimSpace(req.ContinueFinalMessage), []byte("true"))
	var kwargs map[string]any
	if present(req.ChatTemplateKwargs) {
		if err := json.Unmarshal(req.ChatTemplateKwargs, &kwargs); err != nil {
			return dst, fmt.Errorf(`"chat_template_kwargs" is not an object: %w`, err)
		}
	}
	prompt, err := t.RenderChatJSON(msgs, tools, addGen, kwargs)
	if err != nil {
		return dst, err
	}
	return t.Encode(dst, prompt, false), nil
}

func present(raw json.RawMessage) bool {
	raw = bytes.TrimSpace(raw)
	return len(raw) > 0 && !bytes.Equal(raw, []byte("null"))
}

// reshapeMessage rewrites one message object, keeping its key order: "content": null → "",
// and each tool_calls[].function.arguments that is a string holding a JSON object → that object.
func reshapeMessage(m json.RawMessage) (json.RawMessage, error) {
	return rewriteObject(m, func(key string, v json.RawMessage) (json.RawMessage, error) {
		switch key {
		case "content":
			if !present(v) {
				return json.RawMessage(`""`), nil
			}
		case "tool_calls":
			var calls []json.RawMessage
			if json.Unmarshal(v, &calls) != nil {
				return v, nil
			}
			for i, c := range calls {
				r, err := rewriteObject(c, func(k string, fv json.RawMessage) (json.RawMessage, error) {
					if k != "function" {
						return fv, nil
					}
					return rewriteObject(fv, func(ak string, av json.RawMessage) (json.RawMessage, error) {
						var s string
						if ak != "arguments" || json.Unmarshal(av, &s) != nil {
							return av, nil
						}
						if b := []byte(s); json.Valid(b) && len(bytes.TrimSpace(b)) > 0 && bytes.TrimSpace(b)[0] == '{' {
							return b, nil
						}
						return av, nil
					})
				})
				if err != nil {
					return nil, fmt.Errorf("tool_calls[%d]: %w", i, err)
				}
				calls[i] = r
			}
			return joinList(calls), nil
		}
		return v, nil
	})
}

// rewriteObject re-emits a JSON object with each member's value passed through fn, in the
// written order. A value that is not an object comes back unchanged.
func rewriteObject(raw json.RawMessage, fn func(key string, v json.RawMessage) (json.RawMessage, error)) (json.RawMessage, error) {
	dec := json.NewDecoder(bytes.NewReader(raw))
	if tok, err := dec.Token(); err != nil || tok != json.Delim('{') {
		return raw, nil
	}
	var out bytes.Buffer
	out.WriteByte('{')
	for n := 0; dec.More(); n++ {
		tok, err := dec.Token()
		if err != nil {
			return nil, err
		}
		key, _ := tok.(string)
		var v json.RawMessage
		if err := dec.Decode(&v); err != nil {
			return nil, fmt.Errorf("%q: %w", key, err)
		}
		if v, err = fn(key, v); err != nil {
			return nil, err
		}
		if n > 0 {
			out.WriteByte(',')
		}
		k, _ := json.Marshal(key)
		out.Write(k)
		out.WriteByte(':')
		out.Write(v)
	}
	out.WriteByte('}')
	return out.Bytes(), nil
}

func joinList(items []json.RawMessage) json.RawMessage {
	var out bytes.Buffer
	out.WriteByte('[')
	for i, x := range items {
		if i > 0 {
			out.WriteByte(',')
		}
		out.Write(x)
	}
	out.WriteByte(']')
	return out.Bytes()
}

// API names the request body formats PromptIDs reads.
type API uint8

const (
	Generate    API = iota + 1 // SGLang's /generate: input_ids, or text
	Chat                       // /v1/chat/completions: messages (+ tools, chat_template_kwargs…)
	Completions                // /v1/completions: prompt, a string or token ids
)

// promptBody is what the prompt depends on in the three body formats.
type promptBody struct {
	Text                 json.RawMessage `json:"text"`
	InputIDs             json.RawMessage `json:"input_ids"`
	Prompt               json.RawMessage `json:"prompt"`
	Messages             json.RawMessage `json:"messages"`
	Tools                json.RawMessage `json:"tools"`
	AddGenerationPrompt  json.RawMessage `json:"add_generation_prompt"`
	ContinueFinalMessage json.RawMessage `json:"continue_final_message"`
	ChatTemplateKwargs   json.RawMessage `json:"chat_template_kwargs"`
}

// ErrNoPrompt is returned (wrapped) when a body has none of the fields its API takes the
// prompt from.
var ErrNoPrompt = errors.New("no prompt")

// PromptIDs appends to dst the prompt token ids of a request body as an SGLang worker derives
// them (sglang managers/tokenizer_manager.py _tokenize_one_request), and returns dst:
//   - token ids the body carries (generate input_ids, a completions prompt of ids) as they are;
//   - text (generate text, a completions string prompt, which SGLang's OpenAI layer passes on as
//     text) encoded with special tokens, as tokenizer.encode(text) does;
//   - chat messages through ChatPromptIDs.
//
// A batch (a list of texts or of id lists) gives its first element. A nil Tokenizer still
// reads token ids and returns ErrNoPrompt for text. serve and fakeworker both call this, so a
// router's token view of a request is the worker's.
func (t *Tokenizer) PromptIDs(dst []uint32, api API, body []byte) ([]uint32, error) {
	var b promptBody
	if err := json.Unmarshal(body, &b); err != nil {
		return dst, fmt.Errorf("request body: %w", err)
	}
	var field string
	var raw json.RawMessage
	switch api {
	case Chat:
		if !present(b.Messages) {
			return dst, fmt.Errorf(`"messages": %w`, ErrNoPrompt)
		}
		if t == nil {
			return dst, fmt.Errorf("chat messages need a tokenizer: %w", ErrNoPrompt)
		}
		return t.ChatPromptIDs(dst, ChatRequest{Messages: b.Messages, Tools: b.Tools, AddGenerationPrompt: b.AddGenerationPrompt,
			ContinueFinalMessage: b.ContinueFinalMessage, ChatTemplateKwargs: b.ChatTemplateKwargs})
	case Completions:
		field, raw = "prompt", b.Prompt
	default:
		if present(b.InputIDs) {
			return appendIDs(dst, b.InputIDs, "input_ids")
		}
		field, raw = "text", b.Text
	}
	raw = bytes.TrimSpace(raw)
	if !present(raw) {
		return dst, fmt.Errorf("%q: %w", field, ErrNoPrompt)
	}
	var s string
	if raw[0] == '"' {
		if err := json.Unmarshal(raw, &s); err != nil {
			return dst, fmt.Errorf("%q: %w", field, err)
		}
	} else {
		var strs []string
		if json.Unmarshal(raw, &strs) != nil || len(strs) == 0 {
			return appendIDs(dst, raw, field)
		}
		s = strs[0]
	}
	if t == nil {
		return dst, fmt.Errorf("%q is text and there is no tokenizer: %w", field, ErrNoPrompt)
	}
	return t.Encode(dst, s, true), nil
}

// appendIDs appends a list of token ids, or the first list of a list of lists.
func appendIDs(dst []uint32, raw json.RawMessage, field string) ([]uint32, error) {
	var ids []uint32
	if err := json.Unmarshal(raw, &ids); err == nil {
		return append(dst, ids...), nil
	}
	var lists [][]uint32
	if err := json.Unmarshal(raw, &lists); err != nil || len(lists) == 0 {
		return dst, fmt.Errorf("%q is not a list of token ids", field)
	}
	return append(dst, lists[0]...), nil
}
