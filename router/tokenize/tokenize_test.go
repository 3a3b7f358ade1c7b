package tokenize

import (
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"strconv"
	"strings"
	"testing"
)

func pieces(p splitter, s string) []string {
	var out []string
	for i := 0; i < len(s); {
		j := p.next(s, i)
		if j <= i {
			panic("no progress")
		}
		out = append(out, s[i:j])
		i = j
	}
	return out
}

// The pre-tokenizer scanner on hand-checked splits of the Llama-3 and Qwen regexes.
func TestSplitHandChecked(t *testing.T) {
	llama, _ := splitterFor(patLlama3)
	qwen, _ := splitterFor(patQwen2)
	for _, c := range []struct {
		p    splitter
		in   string
		want []string
	}{
		{llama, "Hello world", []string{"Hello", " world"}},
		{llama, "I'M here", []string{"I", "'M", " here"}},
		{llama, "'dog", []string{"'d", "og"}},
		{llama, "12345", []string{"123", "45"}},
		{qwen, "12345", []string{"1", "2", "3", "4", "5"}},
		{llama, "a   b", []string{"a", "  ", " b"}},
		{llama, "a  \n  b", []string{"a", "  \n", " ", " b"}},
		{llama, "x \n\n", []string{"x", " \n\n"}},
		{llama, "end   ", []string{"end", "   "}},
		{llama, " (x) ", []string{" (", "x", ")", " "}},
		{llama, "\thi", []string{"\thi"}},
		{llama, "\nhi", []string{"\n", "hi"}},
		{llama, "!!\n\nx", []string{"!!\n\n", "x"}},
		{llama, "$x", []string{"$x"}},
		{llama, "日本語 テキスト", []string{"日本語", " テキスト"}},
		{llama, "e\u0301t\u00e9", []string{"e", "\u0301t\u00e9"}},
		{llama, "\u3000x", []string{"\u3000x"}},
		{llama, "it\u017Fs '\u017F", []string{"it\u017Fs", " '", "\u017F"}},
		{llama, "'\u017F", []string{"'\u017F"}},
	} {
		if got := pieces(c.p, c.in); !reflect.DeepEqual(got, c.want) {
			t.Errorf("split(%q) = %q, want %q", c.in, got, c.want)
		}
	}
}

func writeModel(t *testing.T, tokJSON, cfgJSON string) string {
	t.Helper()
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "tokenizer.json"), []byte(tokJSON), 0o644); err != nil {
		t.Fatal(err)
	}
	if cfgJSON != "" {
		if err := os.WriteFile(filepath.Join(dir, "tokenizer_config.json"), []byte(cfgJSON), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}

// byteVocab is a vocabulary of the 256 byte tokens (ids 0..255 in byte order) plus extras.
func byteVocab(extra map[string]int) string {
	var b strings.Builder
	b.WriteString("{")
	for c := 0; c < 256; c++ {
		if c > 0 {
			b.WriteString(",")
		}
		b.WriteString(quote(string(bytesToUnicode[c])) + ":" + strconv.Itoa(c))
	}
	for k, v := range extra {
		b.WriteString("," + quote(k) + ":" + strconv.Itoa(v))
	}
	b.WriteString("}")
	return b.String()
}

func quote(s string) string {
	return `"` + strings.ReplaceAll(strings.ReplaceAll(s, `\`, `\\`), `"`, `\"`) + `"`
}

const tinyPre = `{"type":"Sequence","pretokenizers":[{"type":"Split","pattern":{"Regex":` + "\"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\\\r\\\\n\\\\p{L}\\\\p{N}]?\\\\p{L}+|\\\\p{N}{1,3}| ?[^\\\\s\\\\p{L}\\\\p{N}]+[\\\\r\\\\n]*|\\\\s*[\\\\r\\\\n]+|\\\\s+(?!\\\\S)|\\\\s+\"" + `},"behavior":"Isolated","invert":false},{"type":"ByteLevel","add_prefix_space":false,"trim_offsets":true,"use_regex":false}]}`

func tinyTokenizer(post, added string) string {
	vocab := byteVocab(map[string]int{"ab": 256, "abc": 257, "Ġab": 258, "<s>": 259, "<x>": 260})
	return `{"added_tokens":[` + added + `],"normalizer":null,"pre_tokenizer":` + tinyPre + `,"post_processor":` + post +
		`,"model":{"type":"BPE","vocab":` + vocab + `,"merges":["a b","ab c","Ġ ab"]}}`
}

// A hand-made tokenizer: merges by rank, added tokens (lstrip/rstrip), the post-processor.
func TestTinyTokenizer(t *testing.T) {
	dir := writeModel(t, tinyTokenizer(
		`{"type":"TemplateProcessing","single":[{"SpecialToken":{"id":"<s>","type_id":0}},{"Sequence":{"id":"A","type_id":0}}],"special_tokens":{"<s>":{"id":"<s>","ids":[259],"tokens":["<s>"]}}}`,
		`{"id":259,"content":"<s>","special":true},{"id":260,"content":"<x>","lstrip":true,"rstrip":true,"special":true}`),
		`{"bos_token":{"content":"<s>"},"eos_token":"<x>","chat_template":"{{ bos_token }}{% for m in messages %}[{{ m.role }}]{{ m.content }}{% endfor %}{% if add_generation_prompt %}[assistant]{% endif %}"}`)
	tok, err := Load(dir, "")
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		in      string
		special bool
		want    []uint32
	}{
		{"abc", false, []uint32{257}},
		{"abc", true, []uint32{259, 257}},
		{"", true, []uint32{259}},
		{"ab ab", false, []uint32{256, 258}},
		{"abab", false, []uint32{256, 256}},
		{"ab <x>  ab", false, []uint32{256, 260, 256}}, // <x> strips the spaces around it
		{"<s><s>c", false, []uint32{259, 259, 'c'}},
	} {
		if got := tok.Encode(nil, c.in, c.special); !reflect.DeepEqual(got, c.want) {
			t.Errorf("Encode(%q, %v) = %v, want %v", c.in, c.special, got, c.want)
		}
	}
	if s, id, ok := tok.bosToken(); s != "<s>" || id != 259 || !ok {
		t.Errorf("BOS() = %q %d %v", s, id, ok)
	}
	if s, id, ok := tok.eosToken(); s != "<x>" || id != 260 || !ok {
		t.Errorf("EOS() = %q %d %v", s, id, ok)
	}
	got, err := tok.renderChat([]Message{{"role": "user", "content": "hi"}}, nil, true)
	if err != nil || got != "<s>[user]hi[assistant]" {
		t.Errorf("RenderChat = %q, %v", got, err)
	}

	// --chat-template replaces the config's; raise_exception surfaces as an error.
	tf := filepath.Join(t.TempDir(), "t.jinja")
	os.WriteFile(tf, []byte("{% if messages|length > 1 %}{{ raise_exception('one message only') }}{% endif %}{{ messages[0].content }}"), 0o644)
	tok2, err := Load(filepath.Join(dir, "tokenizer.json"), tf)
	if err != nil {
		t.Fatal(err)
	}
	if got, err := tok2.renderChat([]Message{{"role": "user", "content": "x"}}, nil, false); got != "x" || err != nil {
		t.Errorf("custom template: %q, %v", got, err)
	}
	if _, err := tok2.renderChat([]Message{{"content": "x"}, {"content": "y"}}, nil, false); err == nil || !strings.Contains(err.Error(), "one message only") {
		t.Errorf("raise_exception: err = %v", err)
	}
}

func TestLoadErrorsNameTheField(t *testing.T) {
	good := tinyTokenizer("null", "")
	for _, c := range []struct{ json, want string }{
		{strings.Replace(good, `"type":"BPE"`, `"type":"WordPiece"`, 1), "model.type"},
		{strings.Replace(good, `"Isolated"`, `"Removed"`, 1), "pre_tokenizer"},
		{strings.Replace(good, `\\p{N}{1,3}`, `\\p{N}{1,4}`, 1), "Split pattern"},
		{strings.Replace(good, `"normalizer":null`, `"normalizer":{"type":"NFKC"}`, 1), "normalizer.type"},
		{strings.Replace(good, `"post_processor":null`, `"post_processor":{"type":"Mystery"}`, 1), "post_processor.type"},
		{strings.Replace(good, `"ab c"`, `"ab zz"`, 1), "model.merges[1]"},
	} {
		_, err := Load(writeModel(t, c.json, ""), "")
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("want an error naming %s, got %v", c.want, err)
		}
	}
	if _, err := Load(filepath.Join(t.TempDir(), "missing"), ""); err == nil || !strings.Contains(err.Error(), "tokenizer path") {
		t.Errorf("missing path: %v", err)
	}
	tok, err := Load(writeModel(t, good, ""), "")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := tok.renderChat([]Message{{"role": "user", "content": "x"}}, nil, true); err == nil || !strings.Contains(err.Error(), "chat template") {
		t.Errorf("no template: %v", err)
	}
}

// Encode from several goroutines at once (the word cache is shared): same ids as alone.
func TestConcurrentEncode(t *testing.T) {
	tok, err := Load(writeModel(t, tinyTokenizer("null", `{"id":259,"content":"<s>","special":true}`), ""), "")
	if err != nil {
		t.Fatal(err)
	}
	texts := []string{"abc ab abab", "x <s> abc", "  ab\n\nabc  ", "ab ab ab ab", "zzz abcabc"}
	want := make([][]uint32, len(texts))
	for i, s := range texts {
		want[i] = tok.Encode(nil, s, false)
	}
	tok.bpe.resetCache()
	done := make(chan error, 4)
	for g := 0; g < 4; g++ {
		go func() {
			for n := 0; n < 200; n++ {
				i := (n + g) % len(texts)
				if got := tok.Encode(nil, texts[i], false); !reflect.DeepEqual(got, want[i]) {
					done <- fmt.Errorf("Encode(%q) = %v, want %v", texts[i], got, want[i])
					return
				}
			}
			done <- nil
		}()
	}
	for range 4 {
		if err := <-done; err != nil {
			t.Error(err)
		}
	}
}
