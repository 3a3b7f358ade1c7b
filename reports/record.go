package reports

import (
	"encoding/json"
	"fmt"
	"math"
	"strings"
)

// Record is one request of a run: one line of requests.jsonl (SPEC §6). Times are milliseconds.
// Nullable fields are pointers and serialise as null; with Go 1.26 a producer writes new(v) to
// set one. An empty ITLMs is stored as nil and written as [].
type Record struct {
	// Level is the label of the level the request belongs to (see ConcurrencyLabel).
	Level string `json:"level"`
	// ID identifies the request within the run (the bench uses the request's rid).
	ID string `json:"id"`
	// StartMs is when the request was sent, in ms since the level began.
	StartMs float64 `json:"start_ms"`
	// QueueMs is the client-side queueing delay in open loop: send time minus the scheduled
	// arrival time. Nil in closed loop.
	QueueMs *float64 `json:"queue_ms"`
	// TTFTMs is the time from send to the first event carrying text. Nil when none arrived.
	TTFTMs *float64 `json:"ttft_ms"`
	// TPOTMs is (E2EMs − TTFTMs) / (OutputTokens − 1); nil when OutputTokens < 2 or on error.
	// Use TPOT to compute it.
	TPOTMs *float64 `json:"tpot_ms"`
	// E2EMs is the time from send to the last event ([DONE]), or to the failure on error.
	E2EMs float64 `json:"e2e_ms"`
	// ITLMs holds the gaps between consecutive text events (one per event after the first).
	ITLMs []float64 `json:"itl_ms"`
	// InputTokens is the prompt length in tokens (usage.prompt_tokens, or the shared tokenizer).
	InputTokens int `json:"input_tokens"`
	// OutputTokens is the completion length in tokens (usage.completion_tokens).
	OutputTokens int `json:"output_tokens"`
	// CachedTokens is the prompt tokens served from the prefix cache, as the server reports
	// them (0 when unknown).
	CachedTokens int `json:"cached_tokens"`
	// Targets names the workers that served the request, when known.
	Targets Targets `json:"targets"`
	// Error is nil on success; otherwise "kind: message" (see FormatError), where kind is what
	// errors_by_kind counts.
	Error *string `json:"error"`
}

// Targets names the workers (URLs, e.g. "http://sim-prefill-0:30000") that served a request:
// Prefill and Decode in PD mode, Regular in regular mode. Nil when unknown or not applicable.
type Targets struct {
	Prefill *string `json:"prefill"`
	Decode  *string `json:"decode"`
	Regular *string `json:"regular"`
}

// Failed reports whether the request ended in an error.
func (r *Record) Failed() bool { return r.Error != nil }

// MarshalJSON writes the record with an empty ITL list as [] rather than null.
func (r Record) MarshalJSON() ([]byte, error) {
	type plain Record // drops the method, keeps the field order and tags
	p := plain(r)
	if p.ITLMs == nil {
		p.ITLMs = []float64{}
	}
	return json.Marshal(p)
}

// normalize gives decoded records their canonical in-memory form (empty ITL list = nil).
func (r *Record) normalize() {
	if len(r.ITLMs) == 0 {
		r.ITLMs = nil
	}
}

// Validate checks what JSON and aggregation need: a level label of SPEC §6, an id, finite
// non-negative times and non-negative token counts. It does not check relations between times.
func (r *Record) Validate() error {
	if err := checkLabel(r.Level); err != nil {
		return fmt.Errorf("reports: record %q: %w", r.ID, err)
	}
	if r.ID == "" {
		return fmt.Errorf("reports: record in level %q has an empty id", r.Level)
	}
	bad := func(field string, v float64) error {
		return fmt.Errorf("reports: record %q: %s = %v, want a finite number ≥ 0", r.ID, field, v)
	}
	for _, f := range []struct {
		name string
		v    *float64
	}{{"start_ms", &r.StartMs}, {"queue_ms", r.QueueMs}, {"ttft_ms", r.TTFTMs},
		{"tpot_ms", r.TPOTMs}, {"e2e_ms", &r.E2EMs}} {
		if f.v != nil && !finiteNonNeg(*f.v) {
			return bad(f.name, *f.v)
		}
	}
	for i, v := range r.ITLMs {
		if !finiteNonNeg(v) {
			return bad(fmt.Sprintf("itl_ms[%d]", i), v)
		}
	}
	if r.InputTokens < 0 || r.OutputTokens < 0 || r.CachedTokens < 0 {
		return fmt.Errorf("reports: record %q: negative token count (input %d, output %d, cached %d)",
			r.ID, r.InputTokens, r.OutputTokens, r.CachedTokens)
	}
	return nil
}

func finiteNonNeg(v float64) bool { return v >= 0 && !math.IsInf(v, 1) }

// TPOT returns the time per output token excluding the first, (e2eMs − ttftMs) /
// (outputTokens − 1) in ms, as sglang bench_serving defines it; nil when outputTokens < 2.
// A negative difference (clock skew) gives 0.
func TPOT(ttftMs, e2eMs float64, outputTokens int) *float64 {
	if outputTokens < 2 {
		return nil
	}
	v := max(e2eMs-ttftMs, 0) / float64(outputTokens-1)
	return &v
}

// Error kinds producers use in Record.Error. Other kinds are allowed; these keep bench and sim
// reports comparable. HTTP failures use HTTPErrorKind.
const (
	ErrKindTimeout    = "timeout"    // the request exceeded its deadline
	ErrKindConnection = "connection" // dial, reset or another transport failure
	ErrKindStreamCut  = "stream_cut" // the SSE stream ended before [DONE]
	ErrKindCanceled   = "canceled"   // the run was stopped
	ErrKindBadReply   = "bad_reply"  // an unparsable body or event
)

const (
	errKindUnknown = "unknown" // the kind of an error with nothing before its ':'
	errKindSep     = ": "      // between kind and message
)

// HTTPErrorKind returns the error kind of an HTTP status, e.g. "http_503".
func HTTPErrorKind(status int) string { return fmt.Sprintf("http_%d", status) }

// FormatError builds a Record.Error value "kind: message" (or just kind when message is empty).
// The kind should not contain ':'.
func FormatError(kind, message string) *string {
	s := kind
	if message != "" {
		s += errKindSep + message
	}
	return &s
}

// ErrorKind returns the kind of a Record.Error value: the text before the first ':', trimmed;
// "unknown" if that is empty.
func ErrorKind(err string) string {
	kind, _, _ := strings.Cut(err, ":")
	kind = strings.TrimSpace(kind)
	if kind == "" {
		return errKindUnknown
	}
	return kind
}
