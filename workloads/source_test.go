package workloads

import (
	"encoding/json"
	"errors"
	"io"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// smallParams returns quick parameters for the generator named w.
func smallParams(w string, api API) Params {
	p := DefaultParams()
	p.Workload, p.API, p.Seed = w, api, 42
	p.Conversations, p.Turns, p.SystemPromptLen, p.SharedSystemPrompts, p.QuestionLen = 6, 3, 50, 2, 20
	p.OutputLen, p.RangeRatio, p.ThinkTime = 30, 0.5, 2*time.Second
	p.InputLen, p.NumPrompts = 100, 5
	p.GSPNumGroups, p.GSPPromptsPerGroup, p.GSPSystemPromptLen, p.GSPQuestionLen, p.GSPOutputLen = 4, 3, 64, 16, 8
	p.LSPPrompts, p.LSPSystemPromptLen, p.LSPQuestionLen, p.LSPOutputLen = 4, 300, 10, 5
	p.HSRequests, p.HSHotGroups, p.HSPrefixLen, p.HSQuestionLen, p.HSColdLen, p.HSOutputLen, p.HSBurst, p.HSGap = 12, 2, 80, 12, 40, 6, 4, 2
	return p
}

// collect runs every session of p to the end, replying with ReplyText, and returns the turns.
func collect(t *testing.T, p Params) [][]Turn {
	t.Helper()
	src, err := NewSource(p)
	require.NoError(t, err)
	defer src.Close()
	var out [][]Turn
	for {
		s, err := src.Next()
		if errors.Is(err, io.EOF) {
			return out
		}
		require.NoError(t, err)
		track := len(out)%2 == 0 // half the sessions track their prompt ids
		if track {
			s.TrackPromptIDs()
		}
		var turns []Turn
		reply := ""
		for {
			turn, ok := s.Next(reply)
			if !ok {
				break
			}
			ids, err := PromptIDs(turn.API, turn.Body)
			require.NoError(t, err)
			if track {
				require.Equal(t, ids, turn.PromptIDs, "tracked ids of %s turn %d", turn.Session, turn.Index)
				turn.PromptIDs = nil // so tracked and untracked runs compare equal
			} else {
				require.Nil(t, turn.PromptIDs)
			}
			turns = append(turns, turn)
			reply = ReplyText(ids, turn.MaxTokens)
		}
		require.Len(t, turns, s.Turns())
		out = append(out, turns)
	}
}

var generators = []string{WorkloadMultiTurn, WorkloadGSP, WorkloadLongSystemPrompt, WorkloadRandom, WorkloadHotspot}
var apis = []API{APIChat, APICompletions, APIGenerate}

func TestGeneratorsBodiesAndTokenCounts(t *testing.T) {
	t.Parallel()
	for _, w := range generators {
		for _, api := range apis {
			t.Run("workload="+w+"/api="+string(api), func(t *testing.T) {
				t.Parallel()
				p := smallParams(w, api)
				sessions := collect(t, p)
				require.NotEmpty(t, sessions)
				for _, turns := range sessions {
					for k, turn := range turns {
						text, err := RenderPrompt(api, turn.Body)
						require.NoError(t, err)
						require.Equal(t, Count(text), turn.InputTokens, "InputTokens of %s turn %d", turn.Session, k)
						assert.Equal(t, api.Path(), turn.Path)
						assert.Equal(t, k, turn.Index)
						var body map[string]any
						require.NoError(t, json.Unmarshal(turn.Body, &body))
						assert.Equal(t, true, body["stream"])
						switch api {
						case APIGenerate:
							sp := body["sampling_params"].(map[string]any)
							assert.EqualValues(t, turn.MaxTokens, sp["max_new_tokens"])
							assert.Equal(t, true, sp["ignore_eos"])
						default:
							assert.Equal(t, "default", body["model"])
							assert.EqualValues(t, turn.MaxTokens, body["max_tokens"])
							assert.Equal(t, map[string]any{"include_usage": true}, body["stream_options"])
						}
						if k == 0 {
							assert.Zero(t, turn.ThinkTime)
						} else {
							assert.Equal(t, p.ThinkTime, turn.ThinkTime)
						}
					}
				}
			})
		}
	}
}

// contentTokens returns the token counts of the message contents (chat) of a body.
func contents(t *testing.T, body []byte) []string {
	t.Helper()
	var b struct {
		Messages []struct{ Role, Content string }
	}
	require.NoError(t, json.Unmarshal(body, &b))
	var out []string
	for _, m := range b.Messages {
		out = append(out, m.Content)
	}
	return out
}

func TestExactLengths(t *testing.T) {
	t.Parallel()
	t.Run("workload=multiturn", func(t *testing.T) {
		p := smallParams(WorkloadMultiTurn, APIChat)
		for _, turns := range collect(t, p) {
			last := contents(t, turns[len(turns)-1].Body)
			require.Len(t, last, 1+2*p.Turns-1)
			assert.Equal(t, p.SystemPromptLen, Count(last[0]), "system prompt")
			for i := 1; i < len(last); i += 2 {
				n := Count(last[i])
				assert.True(t, n >= p.QuestionLen/2 && n <= p.QuestionLen, "question of %d tokens", n)
			}
			for k, turn := range turns {
				assert.True(t, turn.MaxTokens >= p.OutputLen/2 && turn.MaxTokens <= p.OutputLen)
				if k+1 < len(turns) {
					reply := contents(t, turns[k+1].Body)[2*k+2]
					assert.Equal(t, turn.MaxTokens, Count(reply), "replies are exactly MaxTokens")
				}
			}
		}
	})
	t.Run("workload=multiturn/range-ratio=1", func(t *testing.T) {
		p := smallParams(WorkloadMultiTurn, APICompletions)
		p.RangeRatio = 1
		for _, turns := range collect(t, p) {
			want := p.SystemPromptLen + 1 + p.QuestionLen
			for _, turn := range turns {
				assert.Equal(t, want, turn.InputTokens, "completions prompt = pieces joined by \\n")
				assert.Equal(t, p.OutputLen, turn.MaxTokens)
				want += 1 + p.OutputLen + 1 + p.QuestionLen
			}
		}
	})
	t.Run("workload=gsp", func(t *testing.T) {
		p := smallParams(WorkloadGSP, APIChat)
		sessions := collect(t, p)
		require.Len(t, sessions, p.GSPNumGroups*p.GSPPromptsPerGroup)
		for _, turns := range sessions {
			c := contents(t, turns[0].Body)
			assert.Equal(t, p.GSPSystemPromptLen, Count(c[0]))
			assert.Equal(t, p.GSPQuestionLen, Count(c[1]))
			assert.Equal(t, p.GSPOutputLen, turns[0].MaxTokens)
		}
	})
	t.Run("workload=long-system-prompt", func(t *testing.T) {
		p := smallParams(WorkloadLongSystemPrompt, APIGenerate)
		sessions := collect(t, p)
		require.Len(t, sessions, p.LSPPrompts)
		for _, turns := range sessions {
			assert.Equal(t, p.LSPSystemPromptLen+1+p.LSPQuestionLen, turns[0].InputTokens)
			assert.Equal(t, p.LSPOutputLen, turns[0].MaxTokens)
		}
	})
	t.Run("workload=random", func(t *testing.T) {
		p := smallParams(WorkloadRandom, APICompletions)
		p.RangeRatio = 1
		sessions := collect(t, p)
		require.Len(t, sessions, p.NumPrompts)
		for _, turns := range sessions {
			assert.Equal(t, p.InputLen, turns[0].InputTokens)
			assert.Equal(t, p.OutputLen, turns[0].MaxTokens)
		}
	})
}

func TestTurnPromptIsPrefixOfNext(t *testing.T) {
	t.Parallel()
	for _, api := range apis {
		t.Run("api="+string(api), func(t *testing.T) {
			for _, turns := range collect(t, smallParams(WorkloadMultiTurn, api)) {
				for k := 0; k+1 < len(turns); k++ {
					a, err := RenderPrompt(api, turns[k].Body)
					require.NoError(t, err)
					b, err := RenderPrompt(api, turns[k+1].Body)
					require.NoError(t, err)
					require.True(t, strings.HasPrefix(b, a) && len(b) > len(a), "turn %d text prefix", k)
					ta, tb := Tokenize(a), Tokenize(b)
					require.Greater(t, len(tb), len(ta))
					require.Equal(t, ta, tb[:len(ta)], "turn %d token prefix", k)
				}
			}
		})
	}
}

// commonPrefix returns the length of the longest common prefix of a and b.
func commonPrefix(a, b []uint32) int {
	n := 0
	for n < len(a) && n < len(b) && a[n] == b[n] {
		n++
	}
	return n
}

func TestGSPGroupsShareOnlyTheirSystemPrompt(t *testing.T) {
	t.Parallel()
	p := smallParams(WorkloadGSP, APICompletions)
	type prompt struct {
		group string
		ids   []uint32
	}
	var ps []prompt
	for _, turns := range collect(t, p) {
		ids, err := PromptIDs(APICompletions, turns[0].Body)
		require.NoError(t, err)
		group := strings.Split(turns[0].Session, "-")[1]
		ps = append(ps, prompt{group, ids})
	}
	sys := p.GSPSystemPromptLen
	for i := range ps {
		for j := i + 1; j < len(ps); j++ {
			n := commonPrefix(ps[i].ids, ps[j].ids)
			if ps[i].group == ps[j].group {
				// the system prompt, the "\n", and at most a chance first-token match of questions
				assert.GreaterOrEqual(t, n, sys+1)
				assert.LessOrEqual(t, n, sys+2)
			} else {
				assert.LessOrEqual(t, n, 1, "groups %s and %s share %d tokens", ps[i].group, ps[j].group, n)
			}
		}
	}
	// shuffled by default, grouped with --gsp-ordered
	ids := func(p Params) []string {
		var order []string
		for _, turns := range collect(t, p) {
			order = append(order, turns[0].Session)
		}
		return order
	}
	shuffled := ids(p)
	p.GSPOrdered = true
	ordered := ids(p)
	assert.Equal(t, []string{"gsp-0-0", "gsp-0-1", "gsp-0-2", "gsp-1-0"}, ordered[:4])
	assert.NotEqual(t, ordered, shuffled)
	assert.ElementsMatch(t, ordered, shuffled)
}

func TestDeterminism(t *testing.T) {
	t.Parallel()
	for _, w := range generators {
		t.Run("workload="+w, func(t *testing.T) {
			p := smallParams(w, APIChat)
			a, b := collect(t, p), collect(t, p)
			assert.Equal(t, a, b, "same seed, same bodies")
			p.Seed++
			c := collect(t, p)
			require.Equal(t, len(a), len(c))
			assert.NotEqual(t, a[0][0].Body, c[0][0].Body, "another seed changes the text")
		})
	}
}

func TestSharedSystemPromptsAreShared(t *testing.T) {
	t.Parallel()
	p := smallParams(WorkloadLongSystemPrompt, APIChat)
	src, err := NewSource(p)
	require.NoError(t, err)
	s1, err := src.Next()
	require.NoError(t, err)
	s2, err := src.Next()
	require.NoError(t, err)
	require.Same(t, s1.sys, s2.sys, "one immutable system prompt per group")
}

func TestTrackPromptIDsAfterNextPanics(t *testing.T) {
	t.Parallel()
	src, err := NewSource(smallParams(WorkloadMultiTurn, APIChat))
	require.NoError(t, err)
	s, err := src.Next()
	require.NoError(t, err)
	_, ok := s.Next("")
	require.True(t, ok)
	assert.Panics(t, s.TrackPromptIDs)
}
