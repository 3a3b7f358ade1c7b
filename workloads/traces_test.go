package workloads

import (
	"errors"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func writeFile(t *testing.T, name, content string) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), name)
	require.NoError(t, os.WriteFile(path, []byte(content), 0o600))
	return path
}

const mooncakeRows = `{"timestamp": 0, "input_length": 700, "output_length": 5, "hash_ids": [1, 2]}
{"timestamp": 1500, "input_length": 1536, "output_length": 0, "hash_ids": [1, 2, 3]}

{"timestamp": 3000, "input_length": 600, "output_length": 9, "hash_ids": [1, 5]}
{"timestamp": 4000, "input_length": 1100, "output_length": 9, "hash_ids": [7]}
`

func readMooncake(t *testing.T, path string, seed uint64) []MooncakeRequest {
	t.Helper()
	r, err := OpenMooncake(path, seed)
	require.NoError(t, err)
	defer r.Close()
	r.TimeScale = 0.5
	var out []MooncakeRequest
	for {
		q, err := r.Next()
		if errors.Is(err, io.EOF) {
			return out
		}
		require.NoError(t, err)
		out = append(out, q)
	}
}

func TestMooncakeReader(t *testing.T) {
	t.Parallel()
	path := writeFile(t, "trace.jsonl", mooncakeRows)
	qs := readMooncake(t, path, 3)
	require.Len(t, qs, 4)
	assert.Equal(t, []int64{1, 2, 3}, qs[1].HashIDs)
	assert.Equal(t, 750*time.Millisecond, qs[1].Arrival, "timestamp × time scale")
	assert.Equal(t, 1, qs[1].OutputTokens, "output_length 0 becomes 1")
	assert.Equal(t, 4, qs[2].Line, "blank lines count")
	ids := make([][]uint32, len(qs))
	for i, q := range qs {
		ids[i] = q.promptIDs()
		require.Len(t, ids[i], q.InputLength, "row %d has exactly input_length tokens", i)
		require.Equal(t, Tokenize(q.PromptText()), ids[i], "PromptIDs = Tokenize(PromptText)")
	}
	// A partial last block is a prefix of its full block: row 0 (blocks 1, 2[:188]) is a prefix
	// of row 1 (blocks 1, 2, 3).
	assert.Equal(t, ids[0], ids[1][:700])
	assert.True(t, strings.HasPrefix(qs[1].PromptText(), qs[0].PromptText()))
	// Equal ids share exactly their blocks: rows 0 and 2 share block 1 and diverge in block 2 vs 5.
	assert.Equal(t, ids[0][:512], ids[2][:512])
	assert.LessOrEqual(t, commonPrefix(ids[0], ids[2]), 513)
	// input_length beyond the blocks is row-unique text.
	assert.Equal(t, readMooncake(t, path, 3)[3].promptIDs(), ids[3])
	assert.NotEqual(t, readMooncake(t, path, 4)[3].promptIDs(), ids[3], "seed keys the blocks")
}

func TestMooncakeSource(t *testing.T) {
	t.Parallel()
	p := DefaultParams()
	p.Workload, p.API, p.TraceFile, p.TimeScale = WorkloadMooncake, APICompletions, writeFile(t, "m.jsonl", mooncakeRows), 2
	sessions := collect(t, p)
	require.Len(t, sessions, 4)
	assert.Equal(t, 700, sessions[0][0].InputTokens)
	assert.Equal(t, 5, sessions[0][0].MaxTokens)
	src, err := NewSource(p)
	require.NoError(t, err)
	defer src.Close()
	_, err = src.Next()
	require.NoError(t, err)
	s, err := src.Next()
	require.NoError(t, err)
	assert.True(t, s.HasArrival)
	assert.Equal(t, 3*time.Second, s.Arrival)
}

func TestMooncakeErrors(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct{ name, rows, want string }{
		{"bad json", "{\n", "t.jsonl:1"},
		{"missing input_length", `{"timestamp": 1}` + "\n", "t.jsonl:1: need timestamp and input_length"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r, err := OpenMooncake(writeFile(t, "t.jsonl", tc.rows), 1)
			require.NoError(t, err)
			defer r.Close()
			_, err = r.Next()
			require.ErrorContains(t, err, tc.want)
		})
	}
	_, err := OpenMooncake(filepath.Join(t.TempDir(), "missing.jsonl"), 1)
	require.ErrorContains(t, err, "--trace-file")
}

const azureRows = `TIMESTAMP,ContextTokens,GeneratedTokens
2023-11-16 18:15:46.6805900,374,44
2023-11-16 18:15:50.9951690,396,109
2023-11-16 18:15:51.0000000,12,0
`

func TestAzureReader(t *testing.T) {
	t.Parallel()
	r, err := OpenAzure(writeFile(t, "a.csv", azureRows), 9)
	require.NoError(t, err)
	defer r.Close()
	var qs []AzureRequest
	for {
		q, err := r.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		require.NoError(t, err)
		qs = append(qs, q)
	}
	require.Len(t, qs, 3)
	assert.Equal(t, time.Duration(0), qs[0].Arrival)
	assert.Equal(t, 4314579*time.Microsecond, qs[1].Arrival)
	assert.Equal(t, []int{374, 396, 12}, []int{qs[0].ContextTokens, qs[1].ContextTokens, qs[2].ContextTokens})
	assert.Equal(t, []int{44, 109, 1}, []int{qs[0].OutputTokens, qs[1].OutputTokens, qs[2].OutputTokens})
	assert.Equal(t, 3, qs[1].Line)
	for _, q := range qs {
		text := q.PromptText()
		assert.Equal(t, q.ContextTokens, Count(text))
		assert.Equal(t, Tokenize(text), q.promptIDs())
	}
	assert.Zero(t, commonPrefix(qs[0].promptIDs(), qs[1].promptIDs()), "rows share nothing")

	p := DefaultParams()
	p.Workload, p.API, p.TraceFile, p.TimeScale = WorkloadAzure, APICompletions, writeFile(t, "a.csv", azureRows), 0.5
	sessions := collect(t, p)
	require.Len(t, sessions, 3)
	assert.Equal(t, 396, sessions[1][0].InputTokens)
	ta, closer, err := OpenTraceArrivals(p)
	require.NoError(t, err)
	defer closer.Close()
	at, ok := ta.At(1)
	require.True(t, ok)
	assert.Equal(t, 4314579*time.Microsecond/2, at)
	_, ok = ta.At(3)
	assert.False(t, ok)
	require.NoError(t, ta.Err())
}

func TestAzureErrors(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct{ name, rows, want string }{
		{"bad header", "a,b,c\n", "lacks TIMESTAMP"},
		{"bad time", "TIMESTAMP,ContextTokens,GeneratedTokens\nyesterday,1,1\n", "a.csv:2"},
		{"bad tokens", "TIMESTAMP,ContextTokens,GeneratedTokens\n2023-11-16 18:15:46.6805900,x,1\n", "ContextTokens"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r, err := OpenAzure(writeFile(t, "a.csv", tc.rows), 1)
			if err == nil {
				defer r.Close()
				_, err = r.Next()
			}
			require.ErrorContains(t, err, tc.want)
		})
	}
}
