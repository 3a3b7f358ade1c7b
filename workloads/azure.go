package workloads

import (
	"encoding/csv"
	"errors"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"
	"time"
)

// azureTimeLayout is the TIMESTAMP format of the Azure 2023 traces (100 ns precision).
const azureTimeLayout = "2006-01-02 15:04:05.999999999"

// AzureRequest is one row of an Azure LLM inference trace. Its prompt is generated text of
// exactly ContextTokens tokens, keyed by the row and the seed (the trace carries no prefix
// information, so prompts share nothing).
type AzureRequest struct {
	Line          int           // 1-based line number in the file (the header is line 1)
	Arrival       time.Duration // TIMESTAMP − the first row's TIMESTAMP, × TimeScale
	ContextTokens int           // prompt tokens
	OutputTokens  int           // GeneratedTokens (at least 1)
	seed          uint64
}

// PromptText returns the prompt text: exactly ContextTokens tokens.
func (q AzureRequest) PromptText() string {
	return genText(q.seed, domAzure, uint64(q.Line), 0, q.ContextTokens)
}

// promptIDs returns Tokenize(PromptText()) without building the text.
func (q AzureRequest) promptIDs() []uint32 {
	return newWordStream(q.seed, mix(domAzure, uint64(q.Line), 0)).appendIDs(nil, q.ContextTokens)
}

// AzureReader streams an Azure 2023 CSV trace (header TIMESTAMP,ContextTokens,GeneratedTokens)
// one row at a time. Not safe for concurrent use.
type AzureReader struct {
	TimeScale float64 // multiplies arrival offsets; OpenAzure sets 1
	path      string
	f         *os.File
	r         *csv.Reader
	cols      [3]int // column of TIMESTAMP, ContextTokens, GeneratedTokens
	first     time.Time
	started   bool
	seed      uint64
}

// OpenAzure opens an Azure trace and reads its header; seed keys the prompt texts.
func OpenAzure(path string, seed uint64) (*AzureReader, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("workloads: --trace-file: %w", err)
	}
	r := csv.NewReader(f)
	r.ReuseRecord = true
	head, err := r.Read()
	if err != nil {
		f.Close()
		return nil, fmt.Errorf("workloads: %s: header: %w", path, err)
	}
	a := &AzureReader{TimeScale: 1, path: path, f: f, r: r, seed: seed, cols: [3]int{-1, -1, -1}}
	for i, h := range head {
		switch strings.TrimSpace(strings.TrimPrefix(h, "\ufeff")) {
		case "TIMESTAMP":
			a.cols[0] = i
		case "ContextTokens":
			a.cols[1] = i
		case "GeneratedTokens":
			a.cols[2] = i
		}
	}
	if a.cols[0] < 0 || a.cols[1] < 0 || a.cols[2] < 0 {
		f.Close()
		return nil, fmt.Errorf("workloads: %s: header %q lacks TIMESTAMP,ContextTokens,GeneratedTokens",
			path, strings.Join(head, ","))
	}
	return a, nil
}

// Next returns the next row, or io.EOF after the last; a malformed row is an error naming the
// file and line.
func (a *AzureReader) Next() (AzureRequest, error) {
	rec, err := a.r.Read()
	if errors.Is(err, io.EOF) {
		return AzureRequest{}, io.EOF
	}
	line, _ := a.r.FieldPos(0)
	bad := func(err error) (AzureRequest, error) {
		return AzureRequest{}, fmt.Errorf("workloads: %s:%d: %w", a.path, line, err)
	}
	if err != nil {
		return bad(err)
	}
	ts, err := time.Parse(azureTimeLayout, strings.TrimSpace(rec[a.cols[0]]))
	if err != nil {
		return bad(err)
	}
	in, err := strconv.Atoi(strings.TrimSpace(rec[a.cols[1]]))
	if err != nil || in < 1 {
		return bad(fmt.Errorf("ContextTokens %q must be an integer ≥ 1", rec[a.cols[1]]))
	}
	out, err := strconv.Atoi(strings.TrimSpace(rec[a.cols[2]]))
	if err != nil || out < 0 {
		return bad(fmt.Errorf("GeneratedTokens %q must be an integer ≥ 0", rec[a.cols[2]]))
	}
	if !a.started {
		a.first, a.started = ts, true
	}
	return AzureRequest{
		Line:          line,
		Arrival:       time.Duration(float64(ts.Sub(a.first)) * a.TimeScale),
		ContextTokens: in,
		OutputTokens:  max(out, 1),
		seed:          a.seed,
	}, nil
}

// Close closes the file.
func (a *AzureReader) Close() error { return a.f.Close() }

// session adapts the reader to a Source: one single-turn session per row.
func (a *AzureReader) session(p Params) func() (*Session, error) {
	return func() (*Session, error) {
		q, err := a.Next()
		if err != nil {
			return nil, err
		}
		s := newSession("azure-"+strconv.Itoa(q.Line), p.form(), nil, 1,
			singleTurn(q.PromptText(), q.ContextTokens, q.OutputTokens))
		s.Arrival, s.HasArrival = q.Arrival, true
		return s, nil
	}
}
