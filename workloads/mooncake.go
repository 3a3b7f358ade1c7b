package workloads

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"strconv"
	"time"
)

// MooncakeBlockTokens is the block size of Mooncake hash_ids: each id names 512 tokens.
const MooncakeBlockTokens = 512

// MooncakeRequest is one row of a Mooncake trace. Its prompt is the concatenation of one
// generated 512-token block per hash id (the block's text is a function of the id and the seed
// only), truncated to InputLength tokens: equal id prefixes give equal text and token prefixes,
// and a partial last block is a prefix of its full block. If InputLength exceeds
// 512·len(HashIDs), the rest is text unique to the row.
type MooncakeRequest struct {
	Line         int           // 1-based line number in the file
	Arrival      time.Duration // timestamp (ms) × TimeScale
	InputLength  int           // prompt tokens (input_length)
	OutputTokens int           // output_length (at least 1)
	HashIDs      []int64       // 512-token prefix block ids
	seed         uint64
}

// AppendPromptIDs appends the prompt's token ids to dst, without building the text.
func (q MooncakeRequest) AppendPromptIDs(dst []uint32) []uint32 {
	left := q.InputLength
	for _, h := range q.HashIDs {
		if left <= 0 {
			break
		}
		n := min(left, MooncakeBlockTokens)
		dst = newWordStream(q.seed, mix(domBlock, uint64(h))).appendIDs(dst, n)
		left -= n
	}
	if left > 0 {
		dst = newWordStream(q.seed, mix(domTraceExtra, uint64(q.Line))).appendIDs(dst, left)
	}
	return dst
}

// promptIDs returns the prompt's token ids: exactly InputLength of them, equal to
// Tokenize(PromptText()).
func (q MooncakeRequest) promptIDs() []uint32 {
	return q.AppendPromptIDs(make([]uint32, 0, q.InputLength))
}

// PromptText returns the prompt text: exactly InputLength tokens.
func (q MooncakeRequest) PromptText() string {
	b := make([]byte, 0, q.InputLength*5)
	left := q.InputLength
	for _, h := range q.HashIDs {
		if left <= 0 {
			break
		}
		n := min(left, MooncakeBlockTokens)
		b = newWordStream(q.seed, mix(domBlock, uint64(h))).appendText(b, n)
		left -= n
	}
	if left > 0 {
		b = newWordStream(q.seed, mix(domTraceExtra, uint64(q.Line))).appendText(b, left)
	}
	return string(b)
}

// MooncakeReader streams a Mooncake JSONL trace ({"timestamp": ms, "input_length": n,
// "output_length": n, "hash_ids": [...]} per line) one row at a time; it never loads the file.
// Not safe for concurrent use.
type MooncakeReader struct {
	TimeScale float64 // multiplies timestamps; OpenMooncake sets 1
	path      string
	f         *os.File
	sc        *bufio.Scanner
	line      int
	seed      uint64
}

// OpenMooncake opens a Mooncake JSONL trace; seed keys the block texts.
func OpenMooncake(path string, seed uint64) (*MooncakeReader, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("workloads: --trace-file: %w", err)
	}
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 0, 64<<10), 64<<20)
	return &MooncakeReader{TimeScale: 1, path: path, f: f, sc: sc, seed: seed}, nil
}

// Next returns the next row, or io.EOF after the last. Blank lines are skipped; a malformed row
// is an error naming the file and line.
func (r *MooncakeReader) Next() (MooncakeRequest, error) {
	for r.sc.Scan() {
		r.line++
		b := r.sc.Bytes()
		if len(b) == 0 {
			continue
		}
		var row struct {
			Timestamp    *float64 `json:"timestamp"`
			InputLength  *int     `json:"input_length"`
			OutputLength int      `json:"output_length"`
			HashIDs      []int64  `json:"hash_ids"`
		}
		if err := json.Unmarshal(b, &row); err != nil {
			return MooncakeRequest{}, fmt.Errorf("workloads: %s:%d: %w", r.path, r.line, err)
		}
		if row.Timestamp == nil || row.InputLength == nil || *row.InputLength < 1 {
			return MooncakeRequest{}, fmt.Errorf("workloads: %s:%d: need timestamp and input_length ≥ 1",
				r.path, r.line)
		}
		return MooncakeRequest{
			Line:         r.line,
			Arrival:      time.Duration(*row.Timestamp * r.TimeScale * float64(time.Millisecond)),
			InputLength:  *row.InputLength,
			OutputTokens: max(row.OutputLength, 1),
			HashIDs:      row.HashIDs,
			seed:         r.seed,
		}, nil
	}
	if err := r.sc.Err(); err != nil {
		return MooncakeRequest{}, fmt.Errorf("workloads: %s: %w", r.path, err)
	}
	return MooncakeRequest{}, io.EOF
}

// Close closes the file.
func (r *MooncakeReader) Close() error { return r.f.Close() }

// session adapts the reader to a Source: one single-turn session per row.
func (r *MooncakeReader) session(p Params) func() (*Session, error) {
	return func() (*Session, error) {
		q, err := r.Next()
		if err != nil {
			return nil, err
		}
		s := newSession("mooncake-"+strconv.Itoa(q.Line), p.form(), nil, 1,
			singleTurn(q.PromptText(), q.InputLength, q.OutputTokens))
		s.Arrival, s.HasArrival = q.Arrival, true
		return s, nil
	}
}
