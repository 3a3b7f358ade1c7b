package bench

import (
	"encoding/json"
	"strconv"
	"strings"
	"time"

	"github.com/pdrouter/pdrouter/reports"
	"github.com/pdrouter/pdrouter/router/wire"
	"github.com/pdrouter/pdrouter/workloads"
)

// request is one HTTP request of a level and its measurement. The Targeter creates it; the
// transport and body (on one vegeta worker goroutine) fill the measurement; the goroutine that
// reads vegeta's Result settles it. The Result's channel send orders those steps, so no lock.
type request struct {
	id       string // X-Request-Id: the level's label and issue number, unique in the run
	recorded bool   // false for the level's warm-up requests
	turn     workloads.Turn
	sess     *workloads.Session // open loop: the conversation, for its next turn
	sched    time.Time          // when it was due (open loop); zero in closed loop
	done     chan struct{}      // closed loop: closed when settled

	start     time.Time // sent (the transport's clock)
	firstText time.Time // first event carrying text; zero if none
	lastText  time.Time
	lastEvent time.Time
	events    int
	itl       []float64
	reply     strings.Builder // the reply text (generate: the latest cumulative text)
	out       int             // completion tokens reported
	in        int             // prompt tokens reported
	cached    int             // cached prompt tokens reported
	hasCached bool
	hasUsage  bool
	finished  bool // [DONE] seen
	errKind   string
	errMsg    string
	errAt     time.Time
}

// fail records the request's first failure.
func (r *request) fail(at time.Time, kind, msg string) {
	if r.errKind != "" || r.finished {
		return
	}
	r.errKind, r.errMsg, r.errAt = kind, msg, at
}

func (r *request) failed() bool { return r.errKind != "" || !r.finished }

// chunk is the union of the streamed objects of the three APIs; fields absent from one API
// stay zero.
type chunk struct {
	Choices []struct {
		Delta struct {
			Content          string `json:"content"`
			ReasoningContent string `json:"reasoning_content"`
			Reasoning        string `json:"reasoning"`
		} `json:"delta"`
		Text string `json:"text"`
	} `json:"choices"`
	Usage *struct {
		PromptTokens        int `json:"prompt_tokens"`
		CompletionTokens    int `json:"completion_tokens"`
		PromptTokensDetails *struct {
			CachedTokens *int `json:"cached_tokens"`
		} `json:"prompt_tokens_details"`
	} `json:"usage"`
	Text     *string `json:"text"` // generate: cumulative
	MetaInfo *struct {
		PromptTokens     int  `json:"prompt_tokens"`
		CompletionTokens int  `json:"completion_tokens"`
		CachedTokens     *int `json:"cached_tokens"`
	} `json:"meta_info"`
	Error json.RawMessage `json:"error"`
}

// event handles one SSE data payload received at at; it reports whether the outcome is known
// ([DONE] or an error).
func (r *request) event(at time.Time, data []byte) bool {
	r.events++
	r.lastEvent = at
	if wire.IsDone(data) {
		r.finished = true
		return true
	}
	var c chunk
	if err := json.Unmarshal(data, &c); err != nil {
		r.fail(at, reports.ErrKindBadReply, "unparsable SSE event: "+truncate(string(data), 120))
		return true
	}
	if len(c.Error) > 0 && string(c.Error) != "null" {
		msg := jsonErrorMessage(data)
		if msg == "" {
			msg = truncate(string(c.Error), 200)
		}
		r.fail(at, "server_error", msg)
		return true
	}
	var text string
	switch r.turn.API {
	case workloads.APIGenerate:
		if c.Text != nil {
			prev := r.reply.String()
			if strings.HasPrefix(*c.Text, prev) {
				text = (*c.Text)[len(prev):]
			} else { // incremental streaming: each event carries only new text
				text = *c.Text
			}
			r.reply.WriteString(text)
		}
		if m := c.MetaInfo; m != nil {
			r.hasUsage = true
			r.in, r.out = m.PromptTokens, m.CompletionTokens
			if m.CachedTokens != nil {
				r.hasCached, r.cached = true, *m.CachedTokens
			}
		}
	default:
		for i := range c.Choices {
			ch := &c.Choices[i]
			t := ch.Delta.ReasoningContent + ch.Delta.Reasoning + ch.Delta.Content + ch.Text
			text += t
		}
		r.reply.WriteString(text)
		if u := c.Usage; u != nil {
			r.hasUsage = true
			r.in, r.out = u.PromptTokens, u.CompletionTokens
			if d := u.PromptTokensDetails; d != nil && d.CachedTokens != nil {
				r.hasCached, r.cached = true, *d.CachedTokens
			}
		}
	}
	if text != "" {
		if r.firstText.IsZero() {
			r.firstText = at
		} else {
			r.itl = append(r.itl, ms(at.Sub(r.lastText)))
		}
		r.lastText = at
	}
	return false
}

// record builds the request's line of requests.jsonl; levelStart is when the level's first
// recorded request was issued. The id is "session/turn" as the simulator writes it.
func (r *request) record(label string, levelStart time.Time) reports.Record {
	rec := reports.Record{Level: label, ID: r.turn.Session + "/" + strconv.Itoa(r.turn.Index),
		InputTokens: r.turn.InputTokens}
	if !r.start.IsZero() {
		rec.StartMs = max(ms(r.start.Sub(levelStart)), 0)
	}
	if !r.sched.IsZero() && !r.start.IsZero() {
		rec.QueueMs = new(max(ms(r.start.Sub(r.sched)), 0))
	}
	if !r.firstText.IsZero() {
		rec.TTFTMs = new(ms(r.firstText.Sub(r.start)))
	}
	if r.hasUsage {
		if r.in > 0 {
			rec.InputTokens = r.in
		}
		rec.OutputTokens = r.out
		rec.CachedTokens = r.cached
	} else {
		rec.OutputTokens = workloads.Count(r.reply.String())
	}
	rec.ITLMs = r.itl
	if r.failed() {
		kind, msg := r.errKind, r.errMsg
		end := r.errAt
		if kind == "" { // settled without an outcome: should not happen, but never hide it
			kind, msg, end = reports.ErrKindStreamCut, "no outcome", r.lastEvent
		}
		if !r.start.IsZero() && !end.IsZero() {
			rec.E2EMs = max(ms(end.Sub(r.start)), 0)
		}
		rec.Error = reports.FormatError(kind, msg)
		return rec
	}
	rec.E2EMs = ms(r.lastEvent.Sub(r.start))
	if rec.TTFTMs != nil {
		rec.TPOTMs = reports.TPOT(*rec.TTFTMs, rec.E2EMs, rec.OutputTokens)
	}
	return rec
}

// ms converts a duration to float milliseconds.
func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "…"
}

// jsonErrorMessage returns error.message (or a string error) of an OpenAI-style error body,
// or "".
func jsonErrorMessage(body []byte) string {
	var e struct {
		Error   json.RawMessage `json:"error"`
		Message string          `json:"message"`
		Detail  string          `json:"detail"`
	}
	if json.Unmarshal(body, &e) != nil {
		return ""
	}
	var obj struct {
		Message string `json:"message"`
	}
	var s string
	switch {
	case json.Unmarshal(e.Error, &obj) == nil && obj.Message != "":
		return obj.Message
	case json.Unmarshal(e.Error, &s) == nil && s != "":
		return s
	case e.Message != "":
		return e.Message
	}
	return e.Detail
}
