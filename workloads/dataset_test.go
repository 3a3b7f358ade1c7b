package workloads

import (
	"encoding/json"
	"io"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// drain returns the first turn of every session of p's source.
func drain(t *testing.T, p Params) []Turn {
	t.Helper()
	src, err := NewSource(p)
	require.NoError(t, err)
	defer src.Close()
	var out []Turn
	for {
		s, err := src.Next()
		if err == io.EOF {
			return out
		}
		require.NoError(t, err)
		tr, ok := s.Next("")
		require.True(t, ok)
		_, more := s.Next("reply")
		assert.False(t, more, "dataset sessions are single-turn")
		out = append(out, tr)
	}
}

// A ShareGPT-format array: the first turn is the prompt, the second's token count the output
// length; records of fewer than two turns or under 2 tokens are skipped as bench_serving
// skips them; every usable record is sent once, in a seeded order.
func TestDatasetShareGPT(t *testing.T) {
	t.Parallel()
	path := writeFile(t, "sharegpt.json", `[
  {"id": "a", "conversations": [{"from": "human", "value": "What is a radix tree used for?"},
                                {"from": "gpt", "value": "It stores strings by shared prefixes, so lookups walk one path."}]},
  {"id": "b", "conversations": [{"from": "human", "value": "one turn only"}]},
  {"id": "c", "conversation": [{"role": "user", "content": "Name three prime numbers please."},
                               {"role": "assistant", "content": "Two, three and five."}, {"from": "human", "value": "more"}]},
  {"id": "d", "conversations": [{"from": "human", "value": "x"}, {"from": "gpt", "value": "a reply long enough"}]},
  {"id": "e", "conversations": [{"from": "human", "value": "Why is the sky blue?"}, {"from": "gpt", "value": "Yes"}]}
]`)
	p := DefaultParams()
	p.Workload, p.DatasetPath, p.API, p.Seed = WorkloadShareGPT, path, APICompletions, 3
	turns := drain(t, p)
	require.Len(t, turns, 2, "a and c: b has one turn, d a 1-token prompt, e a 1-token reply")
	byPrompt := map[string]Turn{}
	for _, tr := range turns {
		var body struct {
			Prompt    string `json:"prompt"`
			MaxTokens int    `json:"max_tokens"`
		}
		require.NoError(t, json.Unmarshal(tr.Body, &body))
		byPrompt[body.Prompt] = tr
		assert.Equal(t, Count(body.Prompt), tr.InputTokens, "input tokens are the prompt's")
		assert.Equal(t, body.MaxTokens, tr.MaxTokens)
	}
	a, ok := byPrompt["What is a radix tree used for?"]
	require.True(t, ok, "%v", byPrompt)
	assert.Equal(t, Count("It stores strings by shared prefixes, so lookups walk one path."), a.MaxTokens)
	c, ok := byPrompt["Name three prime numbers please."]
	require.True(t, ok)
	assert.Equal(t, Count("Two, three and five."), c.MaxTokens)

	// --num-prompts caps the records sent; another seed (another level) another order.
	p.NumPrompts = 1
	assert.Len(t, drain(t, p), 1)
	p.NumPrompts = 1000
	orders := map[string]bool{}
	for seed := range uint64(8) {
		p.Seed = seed
		var ids []string
		for _, tr := range drain(t, p) {
			ids = append(ids, tr.Session)
		}
		orders[strings.Join(ids, ",")] = true
	}
	assert.Len(t, orders, 2, "both orders of two records occur over eight seeds")
}

// A custom JSON Lines file: prompts of one's own, output_len or --output-len, in every API
// form; blank lines are fine.
func TestDatasetCustomJSONL(t *testing.T) {
	t.Parallel()
	path := writeFile(t, "prompts.jsonl", `{"prompt": "Summarize the differences between TCP and UDP.", "output_len": 64}

{"prompt": "Write a haiku about routers."}
{"conversations": [{"from": "human", "value": "Translate 'good morning' into French."}, {"from": "gpt", "value": "Bonjour."}]}
`)
	for _, api := range []API{APIChat, APICompletions, APIGenerate} {
		t.Run(string(api), func(t *testing.T) {
			t.Parallel()
			p := DefaultParams()
			p.Workload, p.DatasetPath, p.API, p.OutputLen = WorkloadCustom, path, api, 99
			turns := drain(t, p)
			require.Len(t, turns, 3)
			got := map[string]int{}
			for _, tr := range turns {
				prompt, err := RenderPrompt(api, tr.Body)
				require.NoError(t, err)
				ids, err := PromptIDs(api, tr.Body)
				require.NoError(t, err)
				assert.Len(t, ids, tr.InputTokens, "InputTokens counts the rendered prompt")
				for _, q := range []string{"TCP and UDP", "haiku", "good morning"} {
					if strings.Contains(prompt, q) {
						got[q] = tr.MaxTokens
					}
				}
			}
			assert.Equal(t, map[string]int{"TCP and UDP": 64, "haiku": 99, "good morning": Count("Bonjour.")}, got)
		})
	}
}

// Bad files and flags fail with the flag, the file and the record named.
func TestDatasetErrors(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name, body string
		edit       func(*Params)
		want       string
	}{
		{"empty", "", nil, "the file is empty"},
		{"not json", "prompt,output\n", nil, `not JSON: starts with 'p'`},
		{"bad record", `{"prompt": "fine words here"}` + "\n" + `{"prompt": 7}`, nil, "record 2: json: cannot unmarshal number"},
		{"no prompt", `{"text": "hello there"}`, nil, `record 1: want "prompt" or "conversations"`},
		{"bad output_len", `{"prompt": "hello there", "output_len": 0}`, nil, "record 1: output_len 0 must be ≥ 1"},
		{"nothing usable", `[{"conversations": [{"value": "hi"}]}]`, nil, "holds no usable record"},
		{"custom without file", "", func(p *Params) { p.DatasetPath = "" }, "--workload custom needs --dataset-path"},
		{"wrong workload", `{"prompt": "hello there"}`, func(p *Params) { p.Workload = WorkloadGSP }, "--dataset-path is read by --workload sharegpt or custom, not gsp"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			p := DefaultParams()
			p.Workload, p.DatasetPath = WorkloadCustom, writeFile(t, "d.jsonl", tc.body)
			if tc.edit != nil {
				tc.edit(&p)
			}
			_, err := NewSource(p)
			require.Error(t, err)
			assert.Contains(t, err.Error(), tc.want)
			if p.DatasetPath != "" && p.Workload == WorkloadCustom {
				assert.Contains(t, err.Error(), "--dataset-path "+p.DatasetPath)
			}
		})
	}
	p := DefaultParams()
	p.Workload, p.DatasetPath = WorkloadCustom, filepath.Join(t.TempDir(), "missing.jsonl")
	_, err := NewSource(p)
	assert.ErrorContains(t, err, "--dataset-path: stat ")
}

// The simulator's view of a dataset request (ForSimulator) is the bench's: same token ids,
// same routing text.
func TestDatasetForSimulator(t *testing.T) {
	t.Parallel()
	path := writeFile(t, "p.jsonl", `{"prompt": "Explain how the KV cache speeds up decoding.", "output_len": 32}`)
	p := DefaultParams()
	p.Workload, p.DatasetPath = WorkloadCustom, path
	live := drain(t, p)
	src, err := NewSource(p)
	require.NoError(t, err)
	s, err := src.Next()
	require.NoError(t, err)
	s.ForSimulator()
	sim, ok := s.Next("")
	require.True(t, ok)
	ids, err := PromptIDs(APIChat, live[0].Body)
	require.NoError(t, err)
	assert.Equal(t, ids, sim.PromptIDs)
	assert.Equal(t, live[0].InputTokens, sim.InputTokens)
	assert.Equal(t, 32, sim.MaxTokens)
}
