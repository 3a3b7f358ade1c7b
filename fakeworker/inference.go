package fakeworker

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/pdrouter/pdrouter/router/wire"
	"github.com/pdrouter/pdrouter/sim/engine"
	"github.com/pdrouter/pdrouter/workloads"
)

// maxBody is the largest inference body accepted (SGLang has no small limit either).
const maxBody = 64 << 20

// abortByRequest is the Abort reason /abort_request gives; such rooms end with finish_reason
// "abort" (200), not an error.
const abortByRequest = "abort_request"

// inflight is one inference request being served.
type inflight struct {
	w      *Worker
	route  wire.Route
	stream bool
	p      params
	rid    string
	room   uint64
	prompt []uint32
	rd     render
	s      *sub
	start  time.Time

	regCancel  context.CancelFunc // decode: stops the bootstrap registration
	registered bool
}

// serveInference handles POST /generate, /v1/chat/completions and /v1/completions.
func (w *Worker) serveInference(route wire.Route) http.HandlerFunc {
	return func(rw http.ResponseWriter, r *http.Request) {
		start := time.Now()
		if r.Method != http.MethodPost {
			writeError(rw, http.StatusMethodNotAllowed, "fakeworker: "+route.String()+" takes POST")
			return
		}
		f := w.cfg.Failures
		if n := w.requests.Add(1); f.CrashAfter > 0 && n > int64(f.CrashAfter) {
			w.crash(fmt.Sprintf("--crash-after %d: request %d", f.CrashAfter, n))
			panic(http.ErrAbortHandler)
		}
		raw, err := readBody(rw, r, maxBody)
		if err != nil {
			var mb *http.MaxBytesError
			if errors.As(err, &mb) {
				writeError(rw, http.StatusRequestEntityTooLarge, fmt.Sprintf("fakeworker: request body exceeds %d bytes", mb.Limit))
				return
			}
			writeError(rw, http.StatusBadRequest, "fakeworker: reading the request body: "+err.Error())
			return
		}
		if w.draw(f.ErrorRate) {
			w.metrics.injected.WithLabelValues("error").Inc()
			writeError(rw, f.ErrorStatus, fmt.Sprintf("fakeworker: injected error (--error-rate %g, --error-status %d)", f.ErrorRate, f.ErrorStatus))
			return
		}
		if w.draw(f.HangRate) {
			w.metrics.injected.WithLabelValues("hang").Inc()
			select {
			case <-r.Context().Done():
			case <-w.stopping:
			}
			return
		}
		b, err := wire.Parse(route, raw)
		if err != nil {
			var we *wire.Error
			if errors.As(err, &we) {
				writeJSON(rw, we.Status, we.Body())
				return
			}
			writeError(rw, http.StatusBadRequest, err.Error())
			return
		}
		p, werr := parseParams(b, w.cfg.Mode, w.cfg.DPSize, r.Header.Get("X-Data-Parallel-Rank"))
		if werr != nil {
			writeJSON(rw, werr.Status, werr.Body())
			return
		}
		ids, err := w.promptIDs(route, raw)
		if err != nil {
			writeError(rw, http.StatusBadRequest, err.Error())
			return
		}
		if len(ids) == 0 {
			writeError(rw, http.StatusBadRequest, "fakeworker: the prompt is empty")
			return
		}
		// SGLang refuses, with 400, a request whose prompt and output do not fit the model's
		// context (python/sglang/srt/managers/tokenizer_manager.py); here the context is the
		// rank's KV capacity. Checked before anything is sized by max_tokens.
		if ctxLen := w.maxTotalTokens(); ctxLen > 0 && (p.maxNew > ctxLen || len(ids)+p.maxNew > ctxLen) {
			writeError(rw, http.StatusBadRequest, fmt.Sprintf("Requested token count exceeds the model's maximum context length of %d tokens. "+
				"You requested a total of %d tokens: %d tokens from the input messages and %d tokens for the completion.",
				ctxLen, len(ids)+p.maxNew, len(ids), p.maxNew))
			return
		}
		in := &inflight{w: w, route: route, p: p, prompt: ids, start: start, s: newSub()}
		in.setup(b)
		w.track(in.rid, in.room)
		defer w.untrack(in.rid, in.room)
		var output []uint32
		if w.cfg.Mode == engine.RoleUnified {
			output = w.replyIDs(in.rd.text)
		}
		req := engine.Req{Room: in.room, Rank: p.rank, Prompt: ids, MaxNew: p.maxNew, Output: output}
		if !w.loop.do(r.Context(), func(l *loop, now time.Time) { l.submit(in.s, req, now) }) {
			writeError(rw, http.StatusServiceUnavailable, "fakeworker: worker is stopping")
			return
		}
		defer in.stopRegistration()
		switch {
		case w.cfg.Mode == engine.RolePrefill:
			in.servePrefill(rw, r)
		case b.Stream:
			in.serveStream(rw, r)
		default:
			in.serveJSON(rw, r)
		}
	}
}

// setup fills the request's ids and renderer.
func (in *inflight) setup(b *wire.Body) {
	w := in.w
	if b.HasRID {
		in.rid = b.RID
	} else {
		in.rid = b.Route.RIDPrefix() + strconv.FormatUint(w.cfg.Seed, 36) + "-" + strconv.FormatUint(w.ridSeq.Add(1), 10)
	}
	if in.p.hasRoom {
		in.room = in.p.room
	} else {
		in.room = w.nextRoom.Add(1)
	}
	n := in.p.maxNew
	if w.cfg.Mode == engine.RolePrefill {
		n = 1 // the prefill leg produces the first token only
	}
	model := b.Model
	if model == "" {
		model = w.cfg.ModelPath
	}
	in.stream = b.Stream
	rd := &in.rd
	rd.route = b.Route
	rd.id = appendString(nil, in.rid)
	rd.model = appendString(nil, model)
	rd.created = in.start.Unix()
	rd.text = workloads.ReplyText(in.prompt, n)
	rd.ends = tokenEnds(rd.text, make([]int, 0, n))
	rd.prompt = in.prompt
	rd.logprobs = b.Logprobs
	rd.noInputLP = w.cfg.Mode == engine.RoleDecode
	rd.includeUsage = in.p.includeUsage
	rd.withMeta = w.cfg.Mode == engine.RolePrefill
}

// abort asks the engine to end the room (best effort: the loop may have stopped).
func (in *inflight) abort(why string) {
	room := in.room
	in.w.loop.do(context.Background(), func(l *loop, now time.Time) {
		if rs, ok := l.subs[room]; ok && rs.leg == in.s {
			l.srv.Abort(now, room, why)
		}
	})
}

// maybeRegister starts the decode side's bootstrap registration once the engine preallocated
// the room's KV.
func (in *inflight) maybeRegister(st *subState) {
	if in.registered || !st.prealloc || st.done || in.w.cfg.Mode != engine.RoleDecode {
		return
	}
	in.registered = true
	ctx, cancel := context.WithCancel(context.Background())
	in.regCancel = cancel
	cached := st.decodeCached // st belongs to the caller: read it here, not in the goroutine
	in.w.bg.Add(1)
	go func() {
		defer in.w.bg.Done()
		in.w.register(ctx, in.room, in.p.bsAddr, in.s, cached)
	}()
}

func (in *inflight) stopRegistration() {
	if in.regCancel != nil {
		in.regCancel()
	}
}

// failure turns a failed room into an HTTP status and a message naming the room (and, on a
// decode worker, the prefill's bootstrap server).
func (in *inflight) failure(st *subState) (int, string) {
	status := st.status
	if status == 0 {
		status = http.StatusInternalServerError
	}
	switch in.w.cfg.Mode {
	case engine.RoleDecode:
		return status, fmt.Sprintf("fakeworker: decode %s room %d with prefill bootstrap server %s failed: %s", in.w.URL(), in.room, in.p.bsAddr, st.failed)
	case engine.RolePrefill:
		return status, fmt.Sprintf("fakeworker: prefill %s room %d failed: %s", in.w.URL(), in.room, st.failed)
	}
	return status, fmt.Sprintf("fakeworker: %s request %s failed: %s", in.w.URL(), in.rid, st.failed)
}

func aborted(st *subState) bool {
	return st.failed != "" && strings.Contains(st.failed, "aborted: "+abortByRequest)
}

// wait blocks until the sub changes; false when the client went away (the room is aborted).
func (in *inflight) wait(r *http.Request) bool {
	select {
	case <-in.s.notify:
		return true
	case <-r.Context().Done():
		in.abort("client disconnected")
		return false
	case <-in.w.loop.stopped:
		// The loop is gone: nothing more will be delivered (a no-op if the room already ended).
		in.s.fail(http.StatusServiceUnavailable, "fakeworker: worker stopped")
		return true
	}
}

// serveJSON answers a non-streaming request when its room finishes.
func (in *inflight) serveJSON(rw http.ResponseWriter, r *http.Request) {
	var st subState
	for {
		if !in.wait(r) {
			return
		}
		st = in.s.snapshot()
		in.maybeRegister(&st)
		if st.done {
			break
		}
	}
	buf := in.w.getBuf()
	defer in.w.putBuf(buf)
	switch {
	case aborted(&st):
		*buf = in.rd.appendJSON(*buf, st.tokens, usage{prompt: len(in.prompt), completion: st.tokens}, finishAbort, st.failed)
	case st.failed != "":
		status, msg := in.failure(&st)
		writeError(rw, status, msg)
		return
	default:
		u := in.usage(&st)
		*buf = in.rd.appendJSON(*buf, u.completion, u, finishLength, "")
		in.w.metrics.observe(in.start, st.firstToken, time.Now(), u, st.rank)
	}
	writeJSON(rw, http.StatusOK, *buf)
}

func (in *inflight) usage(st *subState) usage {
	return usage{prompt: st.usage.PromptTokens, completion: st.usage.CompletionTokens, cached: st.usage.CachedTokens}
}

// serveStream streams a regular or decode request: headers at once (as SGLang does), then one
// event per token as soon as it exists; tokens that became available together share one flush.
func (in *inflight) serveStream(rw http.ResponseWriter, r *http.Request) {
	h := rw.Header()
	h.Set("Content-Type", "text/event-stream")
	h.Set("Cache-Control", "no-cache")
	rw.WriteHeader(http.StatusOK)
	rc := http.NewResponseController(rw)
	rc.Flush()
	buf := in.w.getBuf()
	defer in.w.putBuf(buf)
	cut := in.w.cfg.Failures.CutStreamAfter
	if cut >= in.p.maxNew {
		cut = 0
	}
	sent := 0
	for {
		if !in.wait(r) {
			return
		}
		st := in.s.snapshot()
		in.maybeRegister(&st)
		to := st.tokens
		if cut > 0 && to > cut {
			to = cut
		}
		b := (*buf)[:0]
		finished := st.done && st.failed == "" && to == st.tokens
		var u usage
		if finished {
			u = in.usage(&st)
		}
		if to > sent {
			var fin *usage
			if finished && in.route == wire.Generate {
				fin = &u
			}
			b = in.rd.appendTokenEvents(b, sent, to, len(in.prompt), fin)
			sent = to
		}
		cutNow := cut > 0 && sent == cut
		switch {
		case cutNow:
		case finished:
			b = in.rd.appendStreamEnd(b, sent, u, finishLength, "", in.route == wire.Generate && sent > 0)
			in.w.metrics.observe(in.start, st.firstToken, time.Now(), u, st.rank)
		case aborted(&st):
			b = in.rd.appendStreamEnd(b, sent, usage{prompt: len(in.prompt), completion: sent}, finishAbort, st.failed, false)
		case st.done:
			status, msg := in.failure(&st)
			b = appendStreamError(b, status, msg)
		}
		*buf = b
		if len(b) > 0 {
			if _, err := rw.Write(b); err != nil {
				in.abort("client disconnected")
				return
			}
			rc.Flush()
		}
		if cutNow {
			in.w.metrics.injected.WithLabelValues("cut_stream").Inc()
			in.abort("stream cut (--cut-stream-after)")
			panic(http.ErrAbortHandler)
		}
		if st.done {
			return
		}
	}
}

// servePrefill answers the prefill leg once its prefill and KV transfer are done: a JSON body
// with meta_info, or for stream:true that object as one SSE event then [DONE].
func (in *inflight) servePrefill(rw http.ResponseWriter, r *http.Request) {
	var st subState
	for {
		if !in.wait(r) {
			return
		}
		st = in.s.snapshot()
		if st.transferred || st.done {
			break
		}
	}
	if !st.transferred {
		if aborted(&st) {
			buf := in.rd.appendJSON(nil, 0, usage{prompt: len(in.prompt)}, finishAbort, st.failed)
			writeJSON(rw, http.StatusOK, buf)
			return
		}
		status, msg := in.failure(&st)
		writeError(rw, status, msg)
		return
	}
	u := usage{prompt: len(in.prompt), completion: 1, cached: st.cached}
	buf := in.w.getBuf()
	defer in.w.putBuf(buf)
	b := (*buf)[:0]
	if in.stream {
		b = beginEvent(b)
		b = in.rd.appendJSON(b, 1, u, finishLength, "")
		b = endEvent(b)
		b = append(b, wire.Done...)
		rw.Header().Set("Content-Type", "text/event-stream")
		rw.Header().Set("Cache-Control", "no-cache")
		rw.WriteHeader(http.StatusOK)
		rw.Write(b)
	} else {
		b = in.rd.appendJSON(b, 1, u, finishLength, "")
		writeJSON(rw, http.StatusOK, b)
	}
	*buf = b
	in.w.metrics.observe(in.start, st.firstToken, time.Now(), u, st.rank)
}
