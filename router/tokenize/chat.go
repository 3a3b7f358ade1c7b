package tokenize

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"sort"
	"strings"

	"github.com/ardanlabs/jinja"
)

// readConfig reads tokenizer_config.json: chat_template and the special tokens the template
// sees (transformers passes its special_tokens_map to the template: bos_token, eos_token,
// unk_token, pad_token, additional_special_tokens).
func (t *Tokenizer) readConfig(raw []byte) error {
	var cfg map[string]json.RawMessage
	if err := json.Unmarshal(raw, &cfg); err != nil {
		return err
	}
	if ct, ok := cfg["chat_template"]; ok && !isNull(ct) {
		s, err := pickTemplate(ct)
		if err != nil {
			return fmt.Errorf("chat_template: %w", err)
		}
		t.template = s
	}
	t.specials = make(map[string]jinja.Value)
	for _, name := range []string{"bos_token", "eos_token", "unk_token", "pad_token"} {
		v, ok := cfg[name]
		if !ok || isNull(v) {
			continue
		}
		s, err := tokenString(v)
		if err != nil {
			return fmt.Errorf("%s: %w", name, err)
		}
		t.specials[name] = jinja.NewString(s)
		switch name {
		case "bos_token":
			t.bos = s
		case "eos_token":
			t.eos = s
		}
	}
	if v, ok := cfg["additional_special_tokens"]; ok && !isNull(v) {
		var list []json.RawMessage
		if err := json.Unmarshal(v, &list); err != nil {
			return fmt.Errorf("additional_special_tokens: %w", err)
		}
		items := make([]jinja.Value, len(list))
		for i, e := range list {
			s, err := tokenString(e)
			if err != nil {
				return fmt.Errorf("additional_special_tokens[%d]: %w", i, err)
			}
			items[i] = jinja.NewString(s)
		}
		t.specials["additional_special_tokens"] = jinja.NewList(items)
	}
	return nil
}

// tokenString reads a special token written as a string or as an AddedToken object.
func tokenString(raw json.RawMessage) (string, error) {
	var s string
	if err := json.Unmarshal(raw, &s); err == nil {
		return s, nil
	}
	var obj struct {
		Content *string `json:"content"`
	}
	if err := json.Unmarshal(raw, &obj); err != nil || obj.Content == nil {
		return "", errors.New("neither a string nor an object with content")
	}
	return *obj.Content, nil
}

// pickTemplate reads chat_template: a string, or a list of {name, template} from which
// transformers takes "default" when no other is asked for.
func pickTemplate(raw json.RawMessage) (string, error) {
	var s string
	if err := json.Unmarshal(raw, &s); err == nil {
		return s, nil
	}
	var named []struct{ Name, Template string }
	if err := json.Unmarshal(raw, &named); err != nil {
		return "", errors.New("neither a string nor a list of {name, template}")
	}
	for _, n := range named {
		if n.Name == "default" {
			return n.Template, nil
		}
	}
	return "", errors.New("a list of named templates without a \"default\" one")
}

func (t *Tokenizer) compileTemplate() error {
	if t.template == "" {
		return nil
	}
	tmpl, err := jinja.Compile(t.template)
	if err != nil {
		return fmt.Errorf("chat template: %w", err)
	}
	t.tmpl = tmpl
	return nil
}

// Message is one chat turn as OpenAI's chat API carries it; the raw JSON of the message goes
// to the template so fields this struct does not name (tool_calls, name, reasoning_content…)
// still render.
//
// Key order matters where a template serializes a value (tojson of a tool or of tool-call
// arguments): a map[string]any has none, so its keys go in sorted order; a json.RawMessage (as a
// message, a tool or any value inside them) keeps the order it is written in, as Python's dicts
// do. Pass raw JSON where the order must match the engine's.
type Message = map[string]any

// RenderChatJSON renders messages, raw JSON (one object per message, every key kept in its
// written order), and tools (may be nil) with the chat template, as SGLang does for
// /v1/chat/completions: apply_chat_template with add_generation_prompt (true unless the last
// message is the assistant's and continue_final_message asks otherwise) and kwargs as extra
// template variables (the request's chat_template_kwargs, e.g. enable_thinking for Qwen3, and
// reasoning_effort).
func (t *Tokenizer) RenderChatJSON(messages []json.RawMessage, tools []any, addGenerationPrompt bool, kwargs map[string]any) (string, error) {
	msgs, err := messageList(messages)
	if err != nil {
		return "", err
	}
	return t.render(msgs, tools, addGenerationPrompt, kwargs)
}

// messageList converts chat messages (maps or raw JSON) to the template's list, naming the
// message at fault.
func messageList[M any](messages []M) (jinja.Value, error) {
	msgs := make([]jinja.Value, len(messages))
	for i, m := range messages {
		v, err := toValue(m)
		if err != nil {
			return jinja.Value{}, fmt.Errorf("messages[%d]: %w", i, err)
		}
		msgs[i] = v
	}
	return jinja.NewList(msgs), nil
}

// listValue converts a list element by element.
func listValue[E any](x []E) (jinja.Value, error) {
	items := make([]jinja.Value, len(x))
	for i, e := range x {
		iv, err := toValue(e)
		if err != nil {
			return jinja.Value{}, err
		}
		items[i] = iv
	}
	return jinja.NewList(items), nil
}

func (t *Tokenizer) render(msgs jinja.Value, tools []any, addGenerationPrompt bool, kwargs map[string]any) (string, error) {
	if t.tmpl == nil {
		return "", errors.New("chat template: the tokenizer has none (tokenizer_config.json chat_template or --chat-template)")
	}
	// transformers' apply_chat_template: messages, tools (None when absent), documents,
	// add_generation_prompt, then the special tokens map; template kwargs on top.
	data := make(map[string]jinja.Value, 8+len(t.specials)+len(kwargs))
	for k, v := range t.specials {
		data[k] = v
	}
	data["messages"] = msgs
	data["add_generation_prompt"] = jinja.NewBool(addGenerationPrompt)
	data["documents"] = jinja.None()
	data["tools"] = jinja.None()
	if tools != nil {
		v, err := toValue(tools)
		if err != nil {
			return "", fmt.Errorf("tools: %w", err)
		}
		data["tools"] = v
	}
	for k, kv := range kwargs {
		v, err := toValue(kv)
		if err != nil {
			return "", fmt.Errorf("chat template kwarg %s: %w", k, err)
		}
		data[k] = v
	}
	out, err := t.tmpl.RenderValues(data)
	if err != nil {
		return "", fmt.Errorf("chat template: %w", err)
	}
	return out, nil
}

// toValue converts a Go value (JSON-like, json.RawMessage allowed anywhere) to a template value.
func toValue(v any) (jinja.Value, error) {
	switch x := v.(type) {
	case json.RawMessage:
		return decodeOrdered(x)
	case []byte:
		return decodeOrdered(x)
	case jinja.Value:
		return x, nil
	case nil:
		return jinja.None(), nil
	case bool:
		return jinja.NewBool(x), nil
	case string:
		return jinja.NewString(x), nil
	case int:
		return jinja.NewInt(int64(x)), nil
	case int64:
		return jinja.NewInt(x), nil
	case float64:
		return jinja.NewFloat(x), nil
	case json.Number:
		return jinja.FromGoValue(x), nil
	case []any:
		return listValue(x)
	case []Message:
		return listValue(x)
	case map[string]any:
		keys := make([]string, 0, len(x))
		for k := range x {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		d := jinja.NewDict()
		for _, k := range keys {
			kv, err := toValue(x[k])
			if err != nil {
				return jinja.Value{}, err
			}
			d.AsDict().Set(k, kv)
		}
		return d, nil
	}
	return jinja.Value{}, fmt.Errorf("unsupported value of type %T", v)
}

// decodeOrdered decodes JSON into template values, objects keeping their key order.
func decodeOrdered(raw []byte) (jinja.Value, error) {
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.UseNumber()
	v, err := decodeValue(dec)
	if err != nil {
		return jinja.Value{}, err
	}
	if _, err := dec.Token(); err != io.EOF {
		return jinja.Value{}, errors.New("trailing data after the JSON value")
	}
	return v, nil
}

func decodeValue(dec *json.Decoder) (jinja.Value, error) {
	tok, err := dec.Token()
	if err != nil {
		return jinja.Value{}, err
	}
	switch x := tok.(type) {
	case json.Delim:
		switch x {
		case '{':
			d := jinja.NewDict()
			for dec.More() {
				kt, err := dec.Token()
				if err != nil {
					return jinja.Value{}, err
				}
				k, _ := kt.(string)
				v, err := decodeValue(dec)
				if err != nil {
					return jinja.Value{}, err
				}
				d.AsDict().Set(k, v)
			}
			_, err := dec.Token() // '}'
			return d, err
		case '[':
			var items []jinja.Value
			for dec.More() {
				v, err := decodeValue(dec)
				if err != nil {
					return jinja.Value{}, err
				}
				items = append(items, v)
			}
			_, err := dec.Token() // ']'
			return jinja.NewList(items), err
		}
		return jinja.Value{}, fmt.Errorf("unexpected %v", x)
	case nil:
		return jinja.None(), nil
	case bool:
		return jinja.NewBool(x), nil
	case string:
		return jinja.NewString(x), nil
	case json.Number:
		return jinja.FromGoValue(x), nil
	}
	return jinja.Value{}, fmt.Errorf("unexpected JSON token %v", tok)
}

// String names the tokenizer for logs: its special tokens and whether it has a template.
func (t *Tokenizer) String() string {
	var b strings.Builder
	fmt.Fprintf(&b, "tokenizer(vocab %d, added %d", len(t.bpe.vocab), len(t.added))
	if t.bos != "" {
		fmt.Fprintf(&b, ", bos %s", t.bos)
	}
	if t.eos != "" {
		fmt.Fprintf(&b, ", eos %s", t.eos)
	}
	if t.tmpl != nil {
		b.WriteString(", chat template")
	}
	b.WriteString(")")
	return b.String()
}
