package tokenize

import (
	"fmt"
	"math/rand"
	"strings"
	"testing"
)

// benchConversation builds a deterministic multi-turn chat of about `tokens` tokens: prose,
// code and numbers over a vocabulary of a few hundred words, as a long agentic conversation has.
func benchConversation(tok *Tokenizer, tokens int) []Message {
	words := strings.Fields(`the a of to and in is it that for on with as was be by this are or from at an not have
		but they which one you all were we when there can more if no out so said what up its about into than them
		only other new some could time these two may then do first any my now such like our over man me even most
		made after also did many before must through back years where much your way well down should because each
		just those people how too little state good very make world still own see men work long get here between
		both life being under never day same another know while last might us great old year off come since against
		go came right used take three function return value error request token cache prefix router worker decode
		prefill latency throughput batch kernel memory tensor layer model server client stream event index hash`)
	code := []string{
		"```go\nfunc (s *Server) handle(w http.ResponseWriter, r *http.Request) {\n\tif err := s.route(r.Context(), r); err != nil {\n\t\thttp.Error(w, err.Error(), 500)\n\t}\n}\n```",
		"```python\ndef merge(a, b):\n    return {**a, **b}  # keys of b win\n```",
		"Numbers: 3.14159, 2718281828, 1,000,000 and 0x7fffffff; dates 2024-06-01T12:00:00Z.",
		"```json\n{\"model\": \"qwen3\", \"messages\": [{\"role\": \"user\", \"content\": \"hi\"}], \"max_tokens\": 128}\n```",
	}
	rng := rand.New(rand.NewSource(8))
	var msgs []Message
	msgs = append(msgs, Message{"role": "system", "content": "You are a careful assistant that explains systems code."})
	total := 0
	for turn := 0; total < tokens; turn++ {
		var b strings.Builder
		for s := 0; s < 12; s++ {
			n := 8 + rng.Intn(14)
			for w := 0; w < n; w++ {
				word := words[rng.Intn(len(words))]
				if w == 0 {
					word = strings.ToUpper(word[:1]) + word[1:]
				}
				if w > 0 {
					b.WriteByte(' ')
				}
				b.WriteString(word)
			}
			b.WriteString(". ")
			if rng.Intn(4) == 0 {
				b.WriteString("\n\n" + code[rng.Intn(len(code))] + "\n\n")
			}
		}
		role := "user"
		if turn%2 == 1 {
			role = "assistant"
		}
		msgs = append(msgs, Message{"role": role, "content": b.String()})
		s, _ := tok.renderChat(msgs, nil, true)
		total = len(tok.Encode(nil, s, false))
	}
	return msgs
}

// BenchmarkTokenize: render an ~8k-token chat prompt with the model's template and encode it, as
// the router does for each /v1/chat/completions request (issue 27: ≤ 2 ms). "warm" is the steady
// state of a server (the word cache holds the conversation's words, as it does after earlier
// turns of the same conversation or any text in the same language); "cold" empties the word cache
// before each iteration (every word goes through BPE merges).
func BenchmarkTokenize(b *testing.B) {
	ms := loadModels(b)
	for _, model := range []string{"qwen3", "llama3"} {
		tok := ms.toks[model]
		msgs := benchConversation(tok, 8000)
		s, err := tok.renderChat(msgs, nil, true)
		if err != nil {
			b.Fatal(err)
		}
		n := len(tok.Encode(nil, s, false))
		for _, mode := range []string{"warm", "cold"} {
			b.Run(fmt.Sprintf("%s/%s/%dtokens", model, mode, n), func(b *testing.B) {
				ids := make([]uint32, 0, n+16)
				b.SetBytes(int64(len(s)))
				b.ReportAllocs()
				for b.Loop() {
					if mode == "cold" {
						tok.bpe.resetCache()
					}
					p, err := tok.renderChat(msgs, nil, true)
					if err != nil {
						b.Fatal(err)
					}
					ids = tok.Encode(ids[:0], p, false)
				}
				if len(ids) != n {
					b.Fatalf("%d tokens, want %d", len(ids), n)
				}
			})
		}
	}
}

// BenchmarkEncodeUnseenWords: the worst case for the word cache, ~8k tokens of random
// letter strings (no word repeats), cache emptied each iteration.
func BenchmarkEncodeUnseenWords(b *testing.B) {
	ms := loadModels(b)
	rng := rand.New(rand.NewSource(3))
	var sb strings.Builder
	for sb.Len() < 16000 {
		n := 3 + rng.Intn(8)
		sb.WriteByte(' ')
		for range n {
			sb.WriteByte(byte('a' + rng.Intn(26)))
		}
	}
	s := sb.String()
	for _, model := range []string{"qwen3", "llama3"} {
		tok := ms.toks[model]
		n := len(tok.Encode(nil, s, false))
		b.Run(fmt.Sprintf("%s/%dtokens", model, n), func(b *testing.B) {
			ids := make([]uint32, 0, n)
			b.ReportAllocs()
			for b.Loop() {
				tok.bpe.resetCache()
				ids = tok.Encode(ids[:0], s, false)
			}
		})
	}
}
