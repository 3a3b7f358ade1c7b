package tokenize

import "github.com/ardanlabs/jinja"

// Tokenizer encodes text exactly as the Hugging Face tokenizer it was loaded from and renders
// its chat template. Safe for concurrent use.
type Tokenizer struct {
	bpe       bpeModel
	split     splitter
	nfc       bool          // the normalizer is NFC
	rawAdded  *addedMatcher // added tokens matched on the raw text (normalized: false)
	normAdded *addedMatcher // added tokens matched after normalization (normalized: true)
	added     []addedToken
	prefix    []uint32 // post-processor ids before the sequence (add_special_tokens)
	suffix    []uint32 // … and after it
	ids       map[string]uint32

	template string // the chat template's source ("" when there is none)
	tmpl     *jinja.Template
	bos, eos string                 // tokenizer_config.json's bos_token / eos_token ("" when unset)
	specials map[string]jinja.Value // special-token variables the template sees
}

// Encode appends the token ids of text to dst, as the tokenizer's encode(text,
// add_special_tokens=addSpecial) does (special tokens written in the text are matched as
// themselves), and returns dst.
//
// For a chat prompt SGLang renders the template to a string, then encodes it with
// add_special_tokens=False when encode("") yields ids (a tokenizer whose post-processor adds BOS)
// and with the default otherwise (sglang python/sglang/srt/entrypoints/openai/serving_chat.py,
// OpenAIServingChat.__init__ probing _tokenizer_auto_adds_specials, and _apply_jinja_template).
// Both come to Encode(dst, prompt, false): the template already writes the BOS.
func (t *Tokenizer) Encode(dst []uint32, text string, addSpecial bool) []uint32 {
	if addSpecial {
		dst = append(dst, t.prefix...)
	}
	var spanBuf [16]addedSpan
	spans := t.rawAdded.find(spanBuf[:0], text)
	pos := 0
	for _, sp := range spans {
		dst = t.encodeSegment(dst, text[pos:sp.start])
		dst = append(dst, sp.id)
		pos = sp.end
	}
	dst = t.encodeSegment(dst, text[pos:])
	if addSpecial {
		dst = append(dst, t.suffix...)
	}
	return dst
}

// encodeSegment encodes text that holds no raw-matched added token: normalize, match the
// normalized added tokens, pre-tokenize, BPE.
func (t *Tokenizer) encodeSegment(dst []uint32, s string) []uint32 {
	if s == "" {
		return dst
	}
	if t.nfc {
		s = nfc(s)
	}
	if t.normAdded != nil {
		spans := t.normAdded.find(nil, s)
		pos := 0
		for _, sp := range spans {
			dst = t.encodeWords(dst, s[pos:sp.start])
			dst = append(dst, sp.id)
			pos = sp.end
		}
		return t.encodeWords(dst, s[pos:])
	}
	return t.encodeWords(dst, s)
}

// encodeWords pre-tokenizes s and runs BPE over each piece.
func (t *Tokenizer) encodeWords(dst []uint32, s string) []uint32 {
	for i := 0; i < len(s); {
		j := t.split.next(s, i)
		dst = t.bpe.appendWord(dst, s[i:j])
		i = j
	}
	return dst
}
