package workloads

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/pdrouter/pdrouter/router/wire"
)

// scratchBody renders a request body from scratch with encoding/json, from the conversation's
// pieces: what the incremental Session must produce byte for byte.
func scratchBody(t *testing.T, api API, model string, pieces []piece, maxTokens int) []byte {
	t.Helper()
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	type msg struct {
		Role    string `json:"role"`
		Content string `json:"content"`
	}
	type streamOptions struct {
		IncludeUsage bool `json:"include_usage"`
	}
	switch api {
	case APIChat:
		msgs := make([]msg, len(pieces))
		for i, p := range pieces {
			msgs[i] = msg{p.role, p.text}
		}
		require.NoError(t, enc.Encode(struct {
			Model         string        `json:"model"`
			Messages      []msg         `json:"messages"`
			MaxTokens     int           `json:"max_tokens"`
			IgnoreEOS     bool          `json:"ignore_eos"`
			Stream        bool          `json:"stream"`
			StreamOptions streamOptions `json:"stream_options"`
		}{model, msgs, maxTokens, true, true, streamOptions{true}}))
	case APICompletions:
		require.NoError(t, enc.Encode(struct {
			Model         string        `json:"model"`
			Prompt        string        `json:"prompt"`
			MaxTokens     int           `json:"max_tokens"`
			IgnoreEOS     bool          `json:"ignore_eos"`
			Stream        bool          `json:"stream"`
			StreamOptions streamOptions `json:"stream_options"`
		}{model, joinPieces(pieces), maxTokens, true, true, streamOptions{true}}))
	default:
		type sampling struct {
			MaxNewTokens int  `json:"max_new_tokens"`
			IgnoreEOS    bool `json:"ignore_eos"`
		}
		require.NoError(t, enc.Encode(struct {
			Text           string   `json:"text"`
			SamplingParams sampling `json:"sampling_params"`
			Stream         bool     `json:"stream"`
		}{joinPieces(pieces), sampling{maxTokens, true}, true}))
	}
	return bytes.TrimSuffix(b.Bytes(), []byte("\n"))
}

type piece struct{ role, text string }

func joinPieces(ps []piece) string {
	texts := make([]string, len(ps))
	for i, p := range ps {
		texts[i] = p.text
	}
	return strings.Join(texts, "\n")
}

// The incremental session — history kept rendered, token ids and routing text appended piece
// by piece — gives, for every turn of a 10-turn conversation and each request form, the body a
// from-scratch render gives (the bytes bench sends), the token ids a from-scratch tokenization
// of that body gives, and the routing text and model wire.Parse finds in it; the simulator's
// form of the session (ForSimulator: no bodies) gives the same ids, text and model.
func TestIncrementalSessionMatchesFromScratch(t *testing.T) {
	t.Parallel()
	for _, api := range []API{APIChat, APICompletions, APIGenerate} {
		t.Run(string(api), func(t *testing.T) {
			t.Parallel()
			p := DefaultParams()
			p.API, p.Conversations, p.Turns, p.QuestionLen, p.OutputLen = api, 1, 10, 40, 24
			sessions := func() *Session {
				src, err := NewSource(p)
				require.NoError(t, err)
				defer src.Close()
				s, err := src.Next()
				require.NoError(t, err)
				return s
			}
			bench, simulator := sessions(), sessions()
			bench.TrackPromptIDs()
			simulator.ForSimulator()
			route, ok := wire.RouteFromPath(api.Path())
			require.True(t, ok)
			var pieces []piece
			var kept, seen [][]uint32
			reply := ""
			for k := range 10 {
				bt, ok := bench.Next(reply)
				require.True(t, ok)
				st, ok := simulator.Next(reply)
				require.True(t, ok)

				// The conversation so far, from the bench body's own parse: the previous
				// pieces, then (after turn 0) the reply, then the new question.
				got := parsePieces(t, api, bt.Body)
				if k == 0 {
					pieces = got
				} else {
					require.Greater(t, len(got), len(pieces)+1, "turn %d", k)
					require.Equal(t, pieces, got[:len(pieces)], "turn %d keeps the history", k)
					tail := got[len(pieces):]
					assert.Equal(t, reply, tail[0].text, "turn %d appends the reply", k)
					pieces = got
				}
				assert.Equal(t, string(scratchBody(t, api, p.Model, pieces, bt.MaxTokens)), string(bt.Body), "turn %d body", k)
				ids, err := PromptIDs(api, bt.Body)
				require.NoError(t, err)
				assert.Equal(t, ids, bt.PromptIDs, "turn %d ids (bench)", k)
				assert.Equal(t, ids, st.PromptIDs, "turn %d ids (simulator)", k)
				parsed, err := wire.Parse(route, bt.Body)
				require.NoError(t, err)
				assert.Equal(t, parsed.Text, st.RouteText, "turn %d routing text", k)
				assert.Equal(t, utf8.RuneCountInString(st.RouteText), st.RouteRunes, "turn %d routing text runes", k)
				assert.Equal(t, parsed.Model, st.Model, "turn %d model", k)
				assert.Nil(t, st.Body, "the simulator's turns carry no body")
				assert.Equal(t, bt.InputTokens, st.InputTokens)
				reply = ReplyText(st.PromptIDs, st.MaxTokens)
				kept = append(kept, ids)
				seen = append(seen, bt.PromptIDs, st.PromptIDs)
			}
			// Turns alias the session's ids: ten turns later, every turn still holds its own.
			for k, ids := range kept {
				assert.Equal(t, ids, seen[2*k], "turn %d ids (bench) after the conversation", k)
				assert.Equal(t, ids, seen[2*k+1], "turn %d ids (simulator) after the conversation", k)
			}
		})
	}
}

// parsePieces decodes a body's conversation: chat messages, or the prompt's "\n"-separated
// pieces (completions and generate keep no roles).
func parsePieces(t *testing.T, api API, body []byte) []piece {
	t.Helper()
	var v struct {
		Messages []struct{ Role, Content string } `json:"messages"`
		Prompt   string                           `json:"prompt"`
		Text     string                           `json:"text"`
	}
	require.NoError(t, json.Unmarshal(body, &v))
	var out []piece
	switch api {
	case APIChat:
		for _, m := range v.Messages {
			out = append(out, piece{m.Role, m.Content})
		}
	case APICompletions:
		for _, s := range strings.Split(v.Prompt, "\n") {
			out = append(out, piece{"", s})
		}
	default:
		for _, s := range strings.Split(v.Text, "\n") {
			out = append(out, piece{"", s})
		}
	}
	return out
}

// AppendReply generates a reply's token ids with its text: they are the text's tokenization,
// appended after what the buffers held.
func TestReplyIDsAreItsTokens(t *testing.T) {
	t.Parallel()
	for _, n := range []int{0, 1, 7, 256} {
		text, ids := AppendReply([]byte("x"), []uint32{9}, []uint32{1, 2, 3, uint32(n)}, n)
		assert.Equal(t, "x"+ReplyText([]uint32{1, 2, 3, uint32(n)}, n), string(text))
		if n > 0 {
			assert.Equal(t, Tokenize(string(text[1:])), ids[1:], "n=%d", n)
		}
		assert.Len(t, ids, n+1)
		assert.Equal(t, uint32(9), ids[0])
	}
}
