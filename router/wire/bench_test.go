package wire

import (
	"math/rand/v2"
	"strconv"
	"strings"
	"testing"
)

// chatBody returns a chat body whose user prompt has promptChars characters.
func chatBody(promptChars int) []byte {
	var sb strings.Builder
	words := []string{"the", "quick", "brown", "fox", "jumps", "over", "lazy", "dog", "é", "\\n"}
	r := rand.New(rand.NewPCG(1, 1))
	for sb.Len() < promptChars {
		sb.WriteString(words[r.IntN(len(words))])
		sb.WriteByte(' ')
	}
	return []byte(`{"model":"llama3-8b","messages":[{"role":"system","content":"You are a helpful assistant."},` +
		`{"role":"user","content":"` + sb.String()[:promptChars] + `"}],"stream":true,"max_tokens":256,` +
		`"temperature":0.7,"stream_options":{"include_usage":true}}`)
}

func BenchmarkParsePD(b *testing.B) {
	for _, n := range []int{100, 8000} {
		raw := chatBody(n)
		b.Run("route=chat/prompt_chars="+strconv.Itoa(n), func(b *testing.B) {
			g := NewIDGen(rand.New(rand.NewPCG(1, 2)), "10.0.0.9")
			o := PDOptions{Host: "10.0.0.1", Port: ip(8998), PrefillRank: ip(1), DecodeRank: ip(2)}
			b.ReportAllocs()
			b.SetBytes(int64(len(raw)))
			for b.Loop() {
				body, err := Parse(Chat, raw)
				if err != nil {
					b.Fatal(err)
				}
				_ = body.PD(g, o)
			}
		})
	}
}

func BenchmarkParse(b *testing.B) {
	raw := chatBody(8000)
	b.ReportAllocs()
	b.SetBytes(int64(len(raw)))
	for b.Loop() {
		if _, err := Parse(Chat, raw); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkSSE(b *testing.B) {
	var sb strings.Builder
	for i := range 100 {
		sb.WriteString(`data: {"id":"chatcmpl-1","object":"chat.completion.chunk","choices":[{"index":0,"delta":{"content":"tok` +
			strconv.Itoa(i) + `"},"finish_reason":null}]}` + "\n\n")
	}
	sb.WriteString("data: [DONE]\n\n")
	stream := []byte(sb.String())
	for _, chunk := range []int{len(stream), 512, 64} {
		b.Run("events=100/chunk="+strconv.Itoa(chunk), func(b *testing.B) {
			b.ReportAllocs()
			b.SetBytes(int64(len(stream)))
			var p Parser
			events := 0
			for b.Loop() {
				p = Parser{buf: p.buf[:0]}
				for rest := stream; len(rest) > 0; {
					n := min(chunk, len(rest))
					p.Feed(rest[:n])
					rest = rest[n:]
					for _, ok := p.Next(); ok; _, ok = p.Next() {
						events++
					}
				}
			}
			b.ReportMetric(float64(events)/b.Elapsed().Seconds(), "events/s")
		})
	}
}

func BenchmarkLogprobMerger(b *testing.B) {
	var sb strings.Builder
	for range 100 {
		sb.WriteString(`data: {"text":"abc","meta_info":{"input_token_logprobs":[[-0.5,3,null]],"completion_tokens":1}}` + "\n\n")
	}
	sb.WriteString("data: [DONE]\n\n")
	stream := []byte(sb.String())
	pre := []byte(`[[-0.1,1,null],[-0.2,2,null]]`)
	b.Run("events=100", func(b *testing.B) {
		b.ReportAllocs()
		var out []byte
		for b.Loop() {
			m := newLogprobMerger(pre)
			out = m.Close(m.Write(out[:0], stream))
		}
	})
}
