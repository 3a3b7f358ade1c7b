package workloads

import (
	"errors"
	"fmt"
	"io"
	"testing"
)

// BenchmarkMultiTurnRequests measures one request of a ~4,000-token multi-turn workload (8 turns,
// 2,000-token system prompts, 250-token questions and replies) built for 64 concurrent sessions.
func BenchmarkMultiTurnRequests(b *testing.B) {
	for _, bc := range []struct {
		api   API
		track bool
	}{{APIChat, false}, {APICompletions, false}, {APIGenerate, false}, {APIChat, true}} {
		api := bc.api
		b.Run(fmt.Sprintf("api=%s/track-ids=%t", api, bc.track), func(b *testing.B) {
			p := DefaultParams()
			p.API = api
			p.Conversations, p.Turns, p.SystemPromptLen, p.QuestionLen, p.OutputLen = 1<<30, 8, 2000, 250, 250
			p.SharedSystemPrompts = 16
			src, err := NewSource(p)
			if err != nil {
				b.Fatal(err)
			}
			type client struct {
				s     *Session
				reply string
			}
			clients := make([]client, 64)
			tokens, i := 0, 0
			b.ReportAllocs()
			for b.Loop() {
				c := &clients[i%len(clients)]
				for {
					if c.s != nil {
						if turn, ok := c.s.Next(c.reply); ok {
							tokens += turn.InputTokens
							c.reply = ReplyText([]uint32{uint32(i)}, turn.MaxTokens)
							break
						}
					}
					if c.s, err = src.Next(); err != nil && !errors.Is(err, io.EOF) {
						b.Fatal(err)
					}
					if bc.track {
						c.s.TrackPromptIDs()
					}
					c.reply = ""
				}
				i++
			}
			b.ReportMetric(float64(tokens)/float64(i), "tokens/request")
			b.ReportMetric(float64(i)/b.Elapsed().Seconds(), "requests/s")
		})
	}
}

// BenchmarkPromptIDs measures re-tokenizing a ~4,000-token chat body from scratch (what
// Session.TrackPromptIDs spares a simulator).
func BenchmarkPromptIDs(b *testing.B) {
	p := DefaultParams()
	p.Turns, p.SystemPromptLen, p.QuestionLen, p.OutputLen = 8, 2000, 250, 250
	src, err := NewSource(p)
	if err != nil {
		b.Fatal(err)
	}
	s, _ := src.Next()
	var turn Turn
	reply := ""
	for k := 0; k < 5; k++ {
		turn, _ = s.Next(reply)
		reply = ReplyText([]uint32{uint32(k)}, turn.MaxTokens)
	}
	b.ReportAllocs()
	for b.Loop() {
		if _, err := PromptIDs(turn.API, turn.Body); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(turn.InputTokens), "tokens/op")
}
