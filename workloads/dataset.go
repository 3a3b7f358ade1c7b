package workloads

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"strconv"
	"sync"
	"time"
)

// WorkloadCustom names the workload of a file of your own prompts (--workload custom
// --dataset-path FILE); --workload sharegpt --dataset-path FILE reads ShareGPT conversations.
const WorkloadCustom = "custom"

// DatasetSchema documents what --dataset-path reads, for --help and docs/bench.md.
const DatasetSchema = `--dataset-path FILE holds one record per prompt, either as a JSON array (ShareGPT's
ShareGPT_V3_unfiltered_cleaned_split.json) or as JSON Lines (one object per line):
  {"prompt": "Explain KV caches.", "output_len": 128}
      a prompt of your own; output_len (max_tokens) defaults to --output-len
  {"conversations": [{"from": "human", "value": "…"}, {"from": "gpt", "value": "…"}]}
      ShareGPT: the first turn is the prompt, the second's length in tokens the output
      length ("conversation" and "content" are accepted as in sglang bench_serving)
Each record is one single-turn request; records whose prompt or output is under 2 tokens
are skipped, as bench_serving skips them. Each level sends --num-prompts records (all, if
the file holds fewer) in an order shuffled from the level's seed.`

// datasetRow is one request of a dataset file.
type datasetRow struct {
	prompt string
	tokens int // Count(prompt)
	output int // max_tokens
}

// datasetRecord is one record of a dataset file in either form (DatasetSchema).
type datasetRecord struct {
	Prompt        *string       `json:"prompt"`
	OutputLen     *int          `json:"output_len"`
	Conversations []datasetTurn `json:"conversations"`
	Conversation  []datasetTurn `json:"conversation"`
}

type datasetTurn struct {
	Value   *string `json:"value"`
	Content *string `json:"content"`
}

func (t datasetTurn) text() string {
	switch {
	case t.Value != nil:
		return *t.Value
	case t.Content != nil:
		return *t.Content
	}
	return ""
}

// datasetMinTokens is bench_serving's floor on prompt and output lengths (sglang
// python/sglang/benchmark/datasets/sharegpt.py, sample_sharegpt_requests: "Prune too short
// sequences", prompt_len < 2 or output_len < 2).
const datasetMinTokens = 2

// readDataset reads every usable record of path (DatasetSchema); output is the output length
// of prompt records without output_len. Errors name the flag, the file and the record.
func readDataset(path string, output int) ([]datasetRow, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("workloads: --dataset-path: %w", err)
	}
	defer f.Close()
	br := bufio.NewReaderSize(f, 1<<20)
	dec := json.NewDecoder(br)
	first, err := firstByte(br)
	if err != nil {
		return nil, fmt.Errorf("workloads: --dataset-path %s: %w", path, err)
	}
	if first == '[' {
		if _, err := dec.Token(); err != nil {
			return nil, fmt.Errorf("workloads: --dataset-path %s: %w", path, err)
		}
	}
	var rows []datasetRow
	for n := 1; ; n++ {
		if first == '[' && !dec.More() {
			break
		}
		var rec datasetRecord
		if err := dec.Decode(&rec); err != nil {
			if err == io.EOF && first != '[' {
				break
			}
			return nil, fmt.Errorf("workloads: --dataset-path %s: record %d: %w", path, n, err)
		}
		row, ok, err := rec.row(output)
		if err != nil {
			return nil, fmt.Errorf("workloads: --dataset-path %s: record %d: %w", path, n, err)
		}
		if ok {
			rows = append(rows, row)
		}
	}
	if len(rows) == 0 {
		return nil, fmt.Errorf("workloads: --dataset-path %s holds no usable record (a prompt of ≥ %d tokens with an output of ≥ %d)",
			path, datasetMinTokens, datasetMinTokens)
	}
	return rows, nil
}

// firstByte returns the first byte of r that is not JSON whitespace, without consuming it.
func firstByte(r *bufio.Reader) (byte, error) {
	for {
		b, err := r.ReadByte()
		if err != nil {
			if err == io.EOF {
				return 0, errors.New("the file is empty")
			}
			return 0, err
		}
		switch b {
		case ' ', '\t', '\r', '\n':
			continue
		case '[', '{':
			return b, r.UnreadByte()
		}
		return 0, fmt.Errorf("not JSON: starts with %q (want a JSON array or JSON Lines of objects)", b)
	}
}

// row turns a record into a request; ok is false for a record bench_serving would skip.
func (rec *datasetRecord) row(output int) (datasetRow, bool, error) {
	turns := rec.Conversations
	if turns == nil {
		turns = rec.Conversation
	}
	var r datasetRow
	switch {
	case rec.Prompt != nil:
		r.prompt, r.output = *rec.Prompt, output
	case len(turns) >= 2:
		r.prompt, r.output = turns[0].text(), Count(turns[1].text())
	case turns != nil:
		return r, false, nil // fewer than two turns: skipped, as bench_serving does
	default:
		return r, false, errors.New(`want "prompt" or "conversations"`)
	}
	if rec.OutputLen != nil {
		if *rec.OutputLen < 1 {
			return r, false, fmt.Errorf("output_len %d must be ≥ 1", *rec.OutputLen)
		}
		r.output = *rec.OutputLen
	}
	r.tokens = Count(r.prompt)
	return r, r.tokens >= datasetMinTokens && r.output >= datasetMinTokens, nil
}

// datasetCache keeps the last file read, so the levels of a run (each a NewSource) parse a
// large file (ShareGPT's is 640 MB) once. Keyed by path, size and modification time.
var datasetCache struct {
	mu     sync.Mutex // protects the fields below
	path   string
	size   int64
	mod    time.Time
	output int
	rows   []datasetRow // read-only once stored
}

// datasetRows returns the rows of path, read once per file version.
func datasetRows(path string, output int) ([]datasetRow, error) {
	st, err := os.Stat(path)
	if err != nil {
		return nil, fmt.Errorf("workloads: --dataset-path: %w", err)
	}
	c := &datasetCache
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.rows != nil && c.path == path && c.size == st.Size() && c.mod.Equal(st.ModTime()) && c.output == output {
		return c.rows, nil
	}
	rows, err := readDataset(path, output)
	if err != nil {
		return nil, err
	}
	c.path, c.size, c.mod, c.output, c.rows = path, st.Size(), st.ModTime(), output, rows
	return rows, nil
}

// datasetDomain keys the shuffle of a dataset's records (beside vocab.go's domains).
const datasetDomain = 0xda7a5e7

// newDataset: the records of --dataset-path as single-turn sessions, in an order shuffled
// from p.Seed (so every level of a run draws its own), at most --num-prompts of them.
func newDataset(p Params) (Source, error) {
	rows, err := datasetRows(p.DatasetPath, p.OutputLen)
	if err != nil {
		return nil, err
	}
	perm := rand.New(rand.NewPCG(p.Seed, mix(datasetDomain))).Perm(len(rows))
	n := min(len(rows), p.NumPrompts)
	return &genSource{n: n, make: func(i int) *Session {
		r := rows[perm[i]]
		return newSession(p.Workload+"-"+strconv.Itoa(perm[i]), p.form(), nil, 1, singleTurn(r.prompt, r.tokens, r.output))
	}}, nil
}
