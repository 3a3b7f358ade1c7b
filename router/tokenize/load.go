package tokenize

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
)

// tokenizerJSON is the part of a Hugging Face tokenizer.json this package reads.
type tokenizerJSON struct {
	AddedTokens   []addedToken    `json:"added_tokens"`
	Normalizer    json.RawMessage `json:"normalizer"`
	PreTokenizer  json.RawMessage `json:"pre_tokenizer"`
	PostProcessor json.RawMessage `json:"post_processor"`
	Model         struct {
		Type                    string            `json:"type"`
		Vocab                   map[string]uint32 `json:"vocab"`
		Merges                  json.RawMessage   `json:"merges"`
		IgnoreMerges            bool              `json:"ignore_merges"`
		ByteFallback            bool              `json:"byte_fallback"`
		ContinuingSubwordPrefix *string           `json:"continuing_subword_prefix"`
		EndOfWordSuffix         *string           `json:"end_of_word_suffix"`
		Dropout                 *float64          `json:"dropout"`
	} `json:"model"`
}

// component is the common shape of normalizers, pre-tokenizers and post-processors.
type component struct {
	Type string `json:"type"`
	// Sequence
	Normalizers   []json.RawMessage `json:"normalizers"`
	Pretokenizers []json.RawMessage `json:"pretokenizers"`
	Processors    []json.RawMessage `json:"processors"`
	// Split
	Pattern  struct{ Regex, String *string } `json:"pattern"`
	Behavior string                          `json:"behavior"`
	Invert   bool                            `json:"invert"`
	// ByteLevel
	AddPrefixSpace bool  `json:"add_prefix_space"`
	UseRegex       *bool `json:"use_regex"`
	// TemplateProcessing
	Single        []json.RawMessage `json:"single"`
	SpecialTokens map[string]struct {
		IDs []uint32 `json:"ids"`
	} `json:"special_tokens"`
	// RobertaProcessing / BertProcessing: [token, id]
	Cls []json.RawMessage `json:"cls"`
	Sep []json.RawMessage `json:"sep"`
}

// Load reads a tokenizer from path: a tokenizer.json file, or a model directory holding
// tokenizer.json and (for the chat template and special tokens) tokenizer_config.json.
// chatTemplate, when not "", is a Jinja template file that replaces the config's template
// (SGLang's --chat-template).
func Load(path, chatTemplate string) (*Tokenizer, error) {
	tokFile, dir := path, filepath.Dir(path)
	if st, err := os.Stat(path); err != nil {
		return nil, fmt.Errorf("tokenizer path: %w", err)
	} else if st.IsDir() {
		tokFile, dir = filepath.Join(path, "tokenizer.json"), path
	}
	raw, err := os.ReadFile(tokFile)
	if err != nil {
		return nil, fmt.Errorf("tokenizer path: %w", err)
	}
	t, err := parseTokenizer(raw)
	if err != nil {
		return nil, fmt.Errorf("tokenizer path %s: %w", tokFile, err)
	}
	cfgFile := filepath.Join(dir, "tokenizer_config.json")
	if cfg, err := os.ReadFile(cfgFile); err == nil {
		if err := t.readConfig(cfg); err != nil {
			return nil, fmt.Errorf("tokenizer path %s: %w", cfgFile, err)
		}
	} else if !errors.Is(err, os.ErrNotExist) {
		return nil, fmt.Errorf("tokenizer path: %w", err)
	}
	if t.template == "" {
		// Newer transformers save the template beside the config.
		if b, err := os.ReadFile(filepath.Join(dir, "chat_template.jinja")); err == nil {
			t.template = string(b)
		}
	}
	if chatTemplate != "" {
		b, err := os.ReadFile(chatTemplate)
		if err != nil {
			return nil, fmt.Errorf("chat template: %w", err)
		}
		t.template = string(b)
		if strings.HasSuffix(chatTemplate, ".json") {
			var c struct {
				ChatTemplate json.RawMessage `json:"chat_template"`
			}
			if err := json.Unmarshal(b, &c); err != nil || c.ChatTemplate == nil {
				return nil, fmt.Errorf("chat template %s: a .json file needs a chat_template field", chatTemplate)
			}
			if t.template, err = pickTemplate(c.ChatTemplate); err != nil {
				return nil, fmt.Errorf("chat template %s: %w", chatTemplate, err)
			}
		}
	}
	if err := t.compileTemplate(); err != nil {
		return nil, err
	}
	return t, nil
}

// parseTokenizer builds the encoder from tokenizer.json's bytes.
func parseTokenizer(raw []byte) (*Tokenizer, error) {
	var tj tokenizerJSON
	if err := json.Unmarshal(raw, &tj); err != nil {
		return nil, err
	}
	m := &tj.Model
	if m.Type != "" && m.Type != "BPE" {
		return nil, fmt.Errorf("model.type %q: only BPE is supported", m.Type)
	}
	if m.ByteFallback {
		return nil, errors.New("model.byte_fallback: only byte-level BPE is supported")
	}
	if (m.ContinuingSubwordPrefix != nil && *m.ContinuingSubwordPrefix != "") ||
		(m.EndOfWordSuffix != nil && *m.EndOfWordSuffix != "") {
		return nil, errors.New("model: continuing_subword_prefix/end_of_word_suffix are not supported")
	}
	if m.Dropout != nil && *m.Dropout != 0 {
		return nil, errors.New("model.dropout: BPE dropout is not supported")
	}
	t := &Tokenizer{}
	b := &t.bpe
	b.ignoreMerges = m.IgnoreMerges
	b.cache = make(map[string][]uint32, 1024)
	b.vocab = make(map[string]uint32, len(m.Vocab))
	for tok, id := range m.Vocab {
		if rawTok, ok := decodeByteLevel(tok); ok {
			b.vocab[rawTok] = id
		}
	}
	for c := 0; c < 256; c++ {
		id, ok := m.Vocab[string(bytesToUnicode[c])]
		if !ok {
			return nil, fmt.Errorf("model.vocab: no token for byte %#02x: not a byte-level BPE", c)
		}
		b.byteID[c] = id
	}
	merges, err := parseMerges(m.Merges)
	if err != nil {
		return nil, err
	}
	b.merges = newPairTable(len(merges))
	for rank, mg := range merges {
		l, okL := m.Vocab[mg[0]]
		r, okR := m.Vocab[mg[1]]
		id, okM := m.Vocab[mg[0]+mg[1]]
		if !okL || !okR || !okM {
			return nil, fmt.Errorf("model.merges[%d] %q %q: token not in the vocabulary", rank, mg[0], mg[1])
		}
		b.merges.put(uint64(l)<<32|uint64(r), uint64(rank)<<32|uint64(id))
	}

	t.added = tj.AddedTokens
	var raw1, norm []addedToken
	for _, a := range tj.AddedTokens {
		if a.Normalized {
			norm = append(norm, a)
		} else {
			raw1 = append(raw1, a)
		}
		t.tokenIDs(a.Content, a.ID)
	}
	t.rawAdded = newAddedMatcher(raw1)
	if len(norm) > 0 {
		t.normAdded = newAddedMatcher(norm)
	}

	if t.nfc, err = parseNormalizer(tj.Normalizer); err != nil {
		return nil, err
	}
	if t.split, err = parsePreTokenizer(tj.PreTokenizer); err != nil {
		return nil, err
	}
	if t.prefix, t.suffix, err = parsePostProcessor(tj.PostProcessor); err != nil {
		return nil, err
	}
	for tok, id := range m.Vocab {
		t.tokenIDs(tok, id)
	}
	return t, nil
}

// tokenIDs records a token string's id for BOS/EOS lookups (added tokens first).
func (t *Tokenizer) tokenIDs(tok string, id uint32) {
	if t.ids == nil {
		t.ids = make(map[string]uint32)
	}
	if _, ok := t.ids[tok]; !ok && strings.HasPrefix(tok, "<") {
		t.ids[tok] = id
	}
}

func parseMerges(raw json.RawMessage) ([][2]string, error) {
	var pairs [][2]string
	if err := json.Unmarshal(raw, &pairs); err == nil {
		return pairs, nil
	}
	var lines []string
	if err := json.Unmarshal(raw, &lines); err != nil {
		return nil, fmt.Errorf("model.merges: neither [[a, b]] nor [\"a b\"]: %w", err)
	}
	pairs = make([][2]string, len(lines))
	for i, l := range lines {
		a, b, ok := strings.Cut(l, " ")
		if !ok {
			return nil, fmt.Errorf("model.merges[%d] %q: no space", i, l)
		}
		pairs[i] = [2]string{a, b}
	}
	return pairs, nil
}

func isNull(raw json.RawMessage) bool {
	return len(bytes.TrimSpace(raw)) == 0 || string(bytes.TrimSpace(raw)) == "null"
}

// parseNormalizer accepts no normalizer, NFC, or a Sequence of those.
func parseNormalizer(raw json.RawMessage) (nfc bool, err error) {
	if isNull(raw) {
		return false, nil
	}
	var c component
	if err := json.Unmarshal(raw, &c); err != nil {
		return false, fmt.Errorf("normalizer: %w", err)
	}
	switch c.Type {
	case "NFC":
		return true, nil
	case "Sequence":
		for _, n := range c.Normalizers {
			sub, err := parseNormalizer(n)
			if err != nil {
				return false, err
			}
			nfc = nfc || sub
		}
		return nfc, nil
	}
	return false, fmt.Errorf("normalizer.type %q: not supported (NFC only)", c.Type)
}

// parsePreTokenizer accepts the shapes byte-level BPE tokenizers use: a Sequence of a Split on a
// known pattern (Isolated) and a ByteLevel without its own regex, or a ByteLevel with the GPT-2
// regex.
func parsePreTokenizer(raw json.RawMessage) (splitter, error) {
	var sp splitter
	found := false
	var walk func(raw json.RawMessage) error
	walk = func(raw json.RawMessage) error {
		var c component
		if err := json.Unmarshal(raw, &c); err != nil {
			return fmt.Errorf("pre_tokenizer: %w", err)
		}
		switch c.Type {
		case "Sequence":
			for _, p := range c.Pretokenizers {
				if err := walk(p); err != nil {
					return err
				}
			}
		case "Split":
			if found {
				return errors.New("pre_tokenizer: more than one Split is not supported")
			}
			if c.Pattern.Regex == nil || c.Behavior != "Isolated" || c.Invert {
				return errors.New("pre_tokenizer: only Split on a Regex with behavior Isolated is supported")
			}
			s, ok := splitterFor(*c.Pattern.Regex)
			if !ok {
				return fmt.Errorf("pre_tokenizer: Split pattern %q is not one this scanner implements (Llama-3, Qwen-2/3, GPT-2)", *c.Pattern.Regex)
			}
			sp, found = s, true
		case "ByteLevel":
			if c.AddPrefixSpace {
				return errors.New("pre_tokenizer: ByteLevel add_prefix_space is not supported")
			}
			if c.UseRegex == nil || *c.UseRegex {
				if found {
					return errors.New("pre_tokenizer: a Split and ByteLevel use_regex together are not supported")
				}
				sp, found = splitter{gpt2: true}, true
			}
		default:
			return fmt.Errorf("pre_tokenizer.type %q: not supported", c.Type)
		}
		return nil
	}
	if isNull(raw) {
		return sp, errors.New("pre_tokenizer: missing (a byte-level BPE needs one)")
	}
	if err := walk(raw); err != nil {
		return sp, err
	}
	if !found {
		return sp, errors.New("pre_tokenizer: no Split or ByteLevel regex found")
	}
	return sp, nil
}

// parsePostProcessor returns the ids added before and after a single sequence when
// add_special_tokens is set: TemplateProcessing's "single", Roberta/Bert's cls … sep, and nothing
// for ByteLevel (it only trims offsets); Sequence concatenates.
func parsePostProcessor(raw json.RawMessage) (prefix, suffix []uint32, err error) {
	if isNull(raw) {
		return nil, nil, nil
	}
	var c component
	if err := json.Unmarshal(raw, &c); err != nil {
		return nil, nil, fmt.Errorf("post_processor: %w", err)
	}
	switch c.Type {
	case "ByteLevel":
		return nil, nil, nil
	case "Sequence":
		for _, p := range c.Processors {
			pre, suf, err := parsePostProcessor(p)
			if err != nil {
				return nil, nil, err
			}
			prefix = append(prefix, pre...)
			suffix = append(suf, suffix...)
		}
		return prefix, suffix, nil
	case "TemplateProcessing":
		seen := false
		for _, piece := range c.Single {
			var p struct {
				SpecialToken *struct{ ID string } `json:"SpecialToken"`
				Sequence     *struct{ ID string } `json:"Sequence"`
			}
			if err := json.Unmarshal(piece, &p); err != nil {
				return nil, nil, fmt.Errorf("post_processor.single: %w", err)
			}
			switch {
			case p.Sequence != nil:
				seen = true
			case p.SpecialToken != nil:
				st, ok := c.SpecialTokens[p.SpecialToken.ID]
				if !ok {
					return nil, nil, fmt.Errorf("post_processor.special_tokens: no %q", p.SpecialToken.ID)
				}
				if seen {
					suffix = append(suffix, st.IDs...)
				} else {
					prefix = append(prefix, st.IDs...)
				}
			}
		}
		return prefix, suffix, nil
	case "RobertaProcessing", "BertProcessing":
		id := func(pair []json.RawMessage, name string) ([]uint32, error) {
			var v uint32
			if len(pair) != 2 || json.Unmarshal(pair[1], &v) != nil {
				return nil, fmt.Errorf("post_processor.%s: want [token, id]", name)
			}
			return []uint32{v}, nil
		}
		if prefix, err = id(c.Cls, "cls"); err != nil {
			return nil, nil, err
		}
		if suffix, err = id(c.Sep, "sep"); err != nil {
			return nil, nil, err
		}
		return prefix, suffix, nil
	}
	return nil, nil, fmt.Errorf("post_processor.type %q: not supported", c.Type)
}
