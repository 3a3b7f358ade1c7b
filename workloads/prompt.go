package workloads

import (
	"encoding/json"
	"fmt"
	"slices"
	"strconv"
	"strings"
)

// API is the request form: which endpoint a body is for.
type API string

// The request forms of --api (default chat).
const (
	APIChat        API = "chat"        // POST /v1/chat/completions
	APICompletions API = "completions" // POST /v1/completions
	APIGenerate    API = "generate"    // POST /generate (SGLang native)
)

// Path returns the HTTP path of the API ("/v1/chat/completions", "/v1/completions",
// "/generate"), or "" for an unknown API.
func (a API) Path() string {
	switch a {
	case APIChat:
		return "/v1/chat/completions"
	case APICompletions:
		return "/v1/completions"
	case APIGenerate:
		return "/generate"
	}
	return ""
}

// ParseAPI returns the API named s, or an error naming --api.
func ParseAPI(s string) (API, error) {
	switch a := API(s); a {
	case APIChat, APICompletions, APIGenerate:
		return a, nil
	}
	return "", fmt.Errorf("workloads: --api %q is not one of chat, completions, generate", s)
}

// The chat template (ChatML-like). A conversation renders as, per message,
//
//	<|im_start|>{role}\n{content}<|im_end|>\n
//
// followed by the generation prompt "<|im_start|>assistant\n". An assistant message with
// reasoning_content renders its content as "<think>\n{reasoning}\n</think>\n{content}", and each
// tool call appends "<tool_call>\n{name} {arguments}\n</tool_call>". Content is a string or the
// concatenation of its text parts (other parts, e.g. images, are skipped). Every content sits
// between a "\n" and a "<", so its tokens never merge with the template's: the rendered prompt
// has exactly Count(content) tokens per content plus the template's own tokens.
const (
	chatStart     = "<|im_start|>"
	chatEnd       = "<|im_end|>\n"
	chatGenPrompt = chatStart + "assistant\n"
)

// Token counts of the fixed template pieces, computed once.
var (
	genPromptTokens = Count(chatGenPrompt)
	chatEndTokens   = Count(chatEnd)
	newlineTokens   = Count("\n")
)

// messageOverhead returns the template tokens around one message's content for role.
func messageOverhead(role string) int { return Count(chatStart+role+"\n") + chatEndTokens }

// chatMessage is the subset of an OpenAI chat message the template reads.
type chatMessage struct {
	Role             string          `json:"role"`
	Content          json.RawMessage `json:"content"`
	ReasoningContent *string         `json:"reasoning_content"`
	ToolCalls        []struct {
		Function struct {
			Name      string `json:"name"`
			Arguments string `json:"arguments"`
		} `json:"function"`
	} `json:"tool_calls"`
}

// contentText returns a message content: a string, text parts concatenated, or "" for null.
func contentText(raw json.RawMessage) (string, error) {
	s := strings.TrimSpace(string(raw))
	if s == "" || s == "null" {
		return "", nil
	}
	if s[0] == '"' {
		var out string
		err := json.Unmarshal(raw, &out)
		return out, err
	}
	var parts []struct {
		Type string `json:"type"`
		Text string `json:"text"`
	}
	if err := json.Unmarshal(raw, &parts); err != nil {
		return "", fmt.Errorf("content is neither a string nor a list of parts: %w", err)
	}
	var b strings.Builder
	for _, p := range parts {
		if p.Type == "text" {
			b.WriteString(p.Text)
		}
	}
	return b.String(), nil
}

// renderChat applies the chat template to messages.
func renderChat(msgs []chatMessage) (string, error) {
	var b strings.Builder
	for i, m := range msgs {
		if m.Role == "" {
			return "", fmt.Errorf("workloads: messages[%d] has no role", i)
		}
		content, err := contentText(m.Content)
		if err != nil {
			return "", fmt.Errorf("workloads: messages[%d]: %w", i, err)
		}
		b.WriteString(chatStart)
		b.WriteString(m.Role)
		b.WriteByte('\n')
		if m.ReasoningContent != nil && *m.ReasoningContent != "" {
			b.WriteString("<think>\n")
			b.WriteString(*m.ReasoningContent)
			b.WriteString("\n</think>\n")
		}
		b.WriteString(content)
		for _, tc := range m.ToolCalls {
			b.WriteString("<tool_call>\n")
			b.WriteString(tc.Function.Name)
			b.WriteByte(' ')
			b.WriteString(tc.Function.Arguments)
			b.WriteString("\n</tool_call>")
		}
		b.WriteString(chatEnd)
	}
	b.WriteString(chatGenPrompt)
	return b.String(), nil
}

// promptBody is the subset of chat, completions and generate bodies the prompt depends on.
type promptBody struct {
	Messages []chatMessage   `json:"messages"`
	Prompt   json.RawMessage `json:"prompt"`
	Text     json.RawMessage `json:"text"`
	InputIDs json.RawMessage `json:"input_ids"`
}

// firstString returns a JSON string, or the first element of a list of strings.
func firstString(raw json.RawMessage, field string) (string, bool, error) {
	s := strings.TrimSpace(string(raw))
	if s == "" || s == "null" {
		return "", false, nil
	}
	if s[0] == '"' {
		var out string
		if err := json.Unmarshal(raw, &out); err != nil {
			return "", false, fmt.Errorf("workloads: %s: %w", field, err)
		}
		return out, true, nil
	}
	var list []json.RawMessage
	if err := json.Unmarshal(raw, &list); err != nil {
		return "", false, fmt.Errorf("workloads: %s is neither a string nor a list: %w", field, err)
	}
	if len(list) == 0 {
		return "", false, fmt.Errorf("workloads: %s is an empty list", field)
	}
	var out string
	if json.Unmarshal(list[0], &out) == nil {
		return out, true, nil
	}
	return "", false, nil // not strings: token ids, handled by firstIDs
}

// firstIDs returns a list of token ids, or the first list of a list of lists.
func firstIDs(raw json.RawMessage, field string) ([]uint32, bool, error) {
	s := strings.TrimSpace(string(raw))
	if s == "" || s == "null" {
		return nil, false, nil
	}
	var ids []uint32
	if err := json.Unmarshal(raw, &ids); err == nil {
		return ids, true, nil
	}
	var lists [][]uint32
	if err := json.Unmarshal(raw, &lists); err != nil {
		return nil, false, fmt.Errorf("workloads: %s is not a list of token ids: %w", field, err)
	}
	if len(lists) == 0 {
		return nil, false, fmt.Errorf("workloads: %s is an empty list", field)
	}
	return lists[0], true, nil
}

// joinIDs renders token ids as decimal numbers joined by single spaces.
func joinIDs(ids []uint32) string {
	b := make([]byte, 0, len(ids)*6)
	for i, id := range ids {
		if i > 0 {
			b = append(b, ' ')
		}
		b = strconv.AppendUint(b, uint64(id), 10)
	}
	return string(b)
}

// prompt returns the rendered text, or the token ids when the body carries ids instead of text.
func prompt(api API, body []byte) (string, []uint32, error) {
	var p promptBody
	if err := json.Unmarshal(body, &p); err != nil {
		return "", nil, fmt.Errorf("workloads: %s body: %w", api, err)
	}
	switch api {
	case APIChat:
		if len(p.Messages) == 0 {
			return "", nil, fmt.Errorf("workloads: chat body has no messages")
		}
		text, err := renderChat(p.Messages)
		return text, nil, err
	case APICompletions:
		if text, ok, err := firstString(p.Prompt, "prompt"); err != nil || ok {
			return text, nil, err
		}
		ids, ok, err := firstIDs(p.Prompt, "prompt")
		if err != nil {
			return "", nil, err
		}
		if !ok {
			return "", nil, fmt.Errorf("workloads: completions body has no prompt")
		}
		return "", ids, nil
	case APIGenerate:
		if text, ok, err := firstString(p.Text, "text"); err != nil || ok {
			return text, nil, err
		}
		ids, ok, err := firstIDs(p.InputIDs, "input_ids")
		if err != nil {
			return "", nil, err
		}
		if !ok {
			return "", nil, fmt.Errorf("workloads: generate body has neither text nor input_ids")
		}
		return "", ids, nil
	}
	return "", nil, fmt.Errorf("workloads: unknown api %q", api)
}

// RenderPrompt returns the prompt text a model sees for a request body of the given API:
// chat messages through the chat template above; completions `prompt` (a batch: the first
// element); generate `text` (a batch: the first element). A body carrying token ids
// (completions prompt ids, generate `input_ids`) renders as the ids joined by single spaces;
// use PromptIDs for those. Errors name the field at fault. Safe for concurrent use.
func RenderPrompt(api API, body []byte) (string, error) {
	text, ids, err := prompt(api, body)
	if ids != nil {
		return joinIDs(ids), err
	}
	return text, err
}

// promptIDs returns the prompt token ids of a request body: the body's own ids when it carries
// them (generate `input_ids`, completions token-id prompts), else Tokenize(RenderPrompt(…)).
// Safe for concurrent use.
func PromptIDs(api API, body []byte) ([]uint32, error) {
	text, ids, err := prompt(api, body)
	if err != nil {
		return nil, err
	}
	if ids != nil {
		return ids, nil
	}
	return Tokenize(text), nil
}

// ReplyText returns a deterministic reply of exactly n tokens (n ≤ 0: ""): generated words
// keyed by a hash of promptIDs, so the same prompt gives the same text, different prompts give
// different texts, and ReplyText(ids, m) is a prefix of ReplyText(ids, n) for m ≤ n. The reply
// starts with a space, so appending it to a prompt appends exactly its tokens. fakeworker
// answers with it and the simulator appends it, so both agree on every later prompt.
func ReplyText(promptIDs []uint32, n int) string {
	if n <= 0 {
		return ""
	}
	return string(replyStream(promptIDs).appendText(make([]byte, 0, n*5), n))
}

// AppendReply appends ReplyText(promptIDs, n) to text and its token ids (Tokenize of that
// text) to ids, generated together rather than tokenized back. A simulator that feeds each
// reply to [Session.NextReply] reuses the same two buffers for every turn (a new string and
// id slice per reply were a fifth of a million-request run's allocated bytes).
func AppendReply(text []byte, ids, promptIDs []uint32, n int) ([]byte, []uint32) {
	if n <= 0 {
		return text, ids
	}
	text, ids = slices.Grow(text, n*5), slices.Grow(ids, n)
	w := replyStream(promptIDs)
	ws := *w // the same stream twice: once for the words, once for their ids
	return w.appendText(text, n), ws.appendIDs(ids, n)
}

func replyStream(promptIDs []uint32) *wordStream {
	h := uint64(14695981039346656037)
	for _, id := range promptIDs {
		h ^= uint64(id)
		h *= 1099511628211
	}
	return newWordStream(mix(domReply, uint64(len(promptIDs))), h)
}
