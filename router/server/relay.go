package server

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"slices"
	"sync"
	"time"

	"github.com/pdrouter/pdrouter/router"
	"github.com/pdrouter/pdrouter/router/wire"
	"github.com/prometheus/client_golang/prometheus"
)

// relayBufSize is the read buffer of one relayed stream: the h1 transport's read buffer, so
// that one read returns everything the upstream connection has buffered, and flushing after
// each read is flushing "when the upstream has nothing more buffered" (SPEC §1.4).
const relayBufSize = 4 << 10

// relayBufs recycles relay buffers (relayBufSize each) from one relayed stream to the next,
// as httputil.ReverseProxy's BufferPool does. Measured (BenchmarkProxy, this build with and
// without it, 8 interleaved rounds, benchstat): router CPU per request −3.6 % geomean over
// the 12 points, beyond noise for PD at GOMAXPROCS=2 (closed loop 1: −4.8 %, p=0.005; open loop
// 1,000 req/s: −4.0 %, p=0.022), the others within it; heap bytes per request −38 % (regular)
// and −27 % (PD). The last pool left in router/server.
var relayBufs = sync.Pool{New: func() any { b := make([]byte, relayBufSize); return &b }}

// readFirst reads the part of decode's reply that the PD path holds before it commits the
// head: for a stream, up to its first complete event with data; otherwise all of it, failing
// past limit bytes. first reports that held has a stream's first complete event with data,
// even when the read that brought it also ended the body (a short stream often arrives whole
// in one read). end is nil when it stopped after the first event, io.EOF when the body ended,
// or the error that broke it.
//
// held is read into buf (emptied) while it fits, then into a buffer of its own.
func readFirst(body io.Reader, stream bool, limit int64, buf []byte) (held []byte, first bool, end error) {
	held = buf[:0]
	var probe wire.Parser
	for {
		if len(held) == cap(held) {
			held = slices.Grow(held, cap(held))
		}
		n, err := body.Read(held[len(held):cap(held)])
		chunk := held[len(held) : len(held)+n]
		held = held[:len(held)+n]
		if int64(len(held)) > limit && err == nil {
			err = fmt.Errorf("reply exceeds %d bytes (--max-payload-size)", limit)
		}
		if n > 0 && stream {
			// Parsed in place (the events are only looked at); what the parser holds of an
			// event not complete yet is copied before it is fed more.
			probe.FeedView(chunk)
			for ev, ok := probe.Next(); ok; ev, ok = probe.Next() {
				if ev.HasData() {
					first = true
					break // the rest is the relay's to parse: no need to look further
				}
			}
			if !first { // reading on
				probe.Retain()
				if probe.Buffered() > maxSSEEvent && err == nil {
					err = errSSEEventTooLarge
				}
			}
		}
		if err != nil {
			return held, first, err
		}
		if first {
			return held, true, nil
		}
	}
}

// heldBody is a stream's body as relayStream reads it: the part readFirst held (a PD decode
// leg's, once its head is committed), then the rest, or how the held part ended; a regular
// stream holds nothing. (A concrete type, not an io.Reader: relayStream's interface calls would
// take it to the heap.)
type heldBody struct {
	held []byte
	end  error // readFirst's end: when not nil, body is not read
	body io.Reader
}

func (h *heldBody) Read(p []byte) (int, error) {
	if len(h.held) > 0 {
		n := copy(p, h.held)
		h.held = h.held[n:]
		return n, nil
	}
	if h.end != nil {
		return 0, h.end
	}
	return h.body.Read(p)
}

// Pending reports whether the next Read returns without waiting: the held part is there; after
// it, the body says.
func (h *heldBody) Pending() bool {
	if len(h.held) > 0 || h.end != nil {
		return true
	}
	pb, ok := h.body.(pendingBody)
	return ok && pb.Pending()
}

// pendingBody is an upstream body that knows whether its next Read would return without
// waiting: the h1 transport's bodies do (they own the connection's read buffer), and heldBody
// does while its held part lasts, then asks the body it holds; net/http's bodies (https://
// workers) cannot say, so each of their reads is flushed.
type pendingBody interface{ Pending() bool }

// streamWriter writes complete SSE events to the client and flushes only when the upstream has
// nothing more buffered (flushing per event doubles CPU under load, SPEC §1.4).
//
// Events are passed through as they came: the parser finds their boundaries in the read
// buffer itself (wire.Parser.FeedView), and the bytes of every complete event of a read go to
// the client in one write, straight from that buffer; only an event split across reads is
// copied. Every event is looked at, none is re-encoded, except with prefill logprobs to merge
// (pre): each data event is then rewritten (wire.AppendMergedEvent). What is looked at, per
// data event: [DONE] (the stream's clean end); an {"error": …} object at its top (a failed
// stream); generated text (two substring searches: TTFT, ITL, TPOT); "cached_tokens" (one
// search: the worker's cache hit, parsed once, from the last event carrying it, when the stream
// ends; that event is copied once per read, not once per event).
type streamWriter struct {
	w       http.ResponseWriter
	flusher http.Flusher
	pre     []byte // prefill logprobs to prepend; nil: events are relayed byte for byte
	parser  wire.Parser
	out     []byte // merged events (pre != nil)
	started time.Time
	sawText bool
	sawDone bool // the upstream sent [DONE]: anything after it is not an error
	// eachEvent flushes after every event (Options.FlushEachEvent): the slower policy,
	// kept to measure it against.
	eachEvent bool
	// usage keeps the last data event that reported cached_tokens (SGLang repeats meta_info
	// in every /generate event; OpenAI streams send one usage chunk): read at the end.
	// usageView is the latest such event of the current read, copied to usage when the read is
	// written (it aliases the read buffer).
	usage, usageView []byte

	// The token stream's timing (router-measured TTFT, ITL and TPOT): the observers are nil
	// when not measured.
	ttft, roleTTFT prometheus.Observer // the first event with text, since started
	itl            prometheus.Observer // the gap before each event with text after the first
	tpotObs        prometheus.Observer // the stream's TPOT, at its end (relayStream)
	firstText      time.Time           // when the first event with text was written
	lastText       time.Time           // when the latest one was
	textEvents     int
	// d, when set, is the request's decision: its first and last tokens are observed for
	// predicted_latency (Decision.ObserveFirstToken, ObserveEnd).
	d *router.Decision
	// errEvent holds the last data event when it was an error object ({"error": …}): a stream
	// that ends so failed, whatever its HTTP status said (SGLang reports a failure after the
	// head as such an event, then [DONE]).
	errEvent []byte
}

// newStreamWriter returns a stream writer to w; pre is as in streamWriter. It is a value: the
// relay's caller keeps it on its own stack (448 B a streamed response otherwise).
func newStreamWriter(w http.ResponseWriter, pre []byte, started time.Time) streamWriter {
	sw := streamWriter{w: w, pre: pre, started: started}
	sw.flusher, _ = w.(http.Flusher)
	return sw
}

// newStreamWriter returns the stream writer of x's relayed response from a worker of role,
// observing its TTFT (by route, and by role) and inter-token gaps and flushing as
// Options.FlushEachEvent says; pre is as in streamWriter.
func (s *Server) newStreamWriter(x *exchange, pre []byte, role router.Role) streamWriter {
	sw := newStreamWriter(x.w, pre, x.start)
	rs := s.metrics.role(role)
	sw.ttft, sw.roleTTFT, sw.itl, sw.tpotObs = s.metrics.routeTTFT(x.route.String()), rs.ttft, rs.itl, rs.tpot
	sw.eachEvent = s.flushEach
	return sw
}

// tpot is the stream's time per output token: the time from its first event with text to its
// last over the gaps between them (one token each at SGLang's default --stream-interval 1);
// ok is false below two such events.
func (s *streamWriter) tpot() (time.Duration, bool) {
	if s.textEvents < 2 {
		return 0, false
	}
	return s.lastText.Sub(s.firstText) / time.Duration(s.textEvents-1), true
}

// errorEvent reports whether an event's data is an error object: {"error": …} at its top.
func errorEvent(data []byte) bool {
	d := bytes.TrimSpace(data)
	if !bytes.HasPrefix(d, []byte("{")) {
		return false
	}
	d = bytes.TrimSpace(d[1:])
	return bytes.HasPrefix(d, []byte(`"error"`))
}

// errorEventStatus reads the HTTP status an error event reports (error.code, or a top-level
// code), 500 when it gives none.
func errorEventStatus(data []byte) int {
	var e struct {
		Error json.RawMessage `json:"error"`
		Code  int             `json:"code"`
	}
	if json.Unmarshal(data, &e) == nil {
		var inner struct {
			Code int `json:"code"`
		}
		if json.Unmarshal(e.Error, &inner) == nil && inner.Code >= 400 && inner.Code < 600 {
			return inner.Code
		}
		if e.Code >= 400 && e.Code < 600 {
			return e.Code
		}
	}
	return http.StatusInternalServerError
}

// maxSSEEvent bounds one relayed SSE event (the bytes a worker may send without ending an
// event with a blank line): the relay holds an event whole until it ends, so without a bound a
// worker could make it buffer without limit after the headers are sent (SPEC §1.4). SGLang's
// largest events (cumulative /generate text with logprobs) stay far below it.
const maxSSEEvent = 16 << 20

// errSSEEventTooLarge ends a relayed stream whose event exceeds maxSSEEvent.
var errSSEEventTooLarge = fmt.Errorf("worker stream event exceeds %d bytes without ending", maxSSEEvent)

// write feeds one upstream chunk; it writes every complete event. chunk is parsed in place, and
// what is left of it (an event not complete yet) is copied before write returns: the caller
// may reuse chunk.
func (s *streamWriter) write(chunk []byte) error {
	s.parser.FeedView(chunk)
	err := s.drain()
	s.parser.Retain()
	if err != nil {
		return err
	}
	if s.parser.Buffered() > maxSSEEvent {
		return errSSEEventTooLarge
	}
	return nil
}

// close ends the upstream stream and writes what remains (an unterminated last event).
func (s *streamWriter) close() error {
	s.parser.Close()
	err := s.drain()
	if s.d != nil && s.sawText {
		s.d.ObserveEnd(s.lastText, s.textEvents)
	}
	return err
}

// drain writes the complete events parsed so far: as they came, in one write (or one per event
// under eachEvent), or merged with pre.
func (s *streamWriter) drain() error {
	s.out = s.out[:0]
	for ev, ok := s.parser.Next(); ok; ev, ok = s.parser.Next() {
		s.observe(&ev)
		switch {
		case s.pre != nil:
			s.out = wire.AppendMergedEvent(s.out, s.pre, &ev)
			if !s.eachEvent {
				continue
			}
			_, err := s.w.Write(s.out)
			s.out = s.out[:0]
			if err != nil {
				return err
			}
		case s.eachEvent:
			if _, err := s.w.Write(ev.Raw); err != nil {
				return err
			}
		default:
			continue
		}
		s.flush()
	}
	if s.usageView != nil { // before the write: the caller may reuse the buffer after it
		s.usage = append(s.usage[:0], s.usageView...)
		s.usageView = nil
	}
	out := s.out
	if s.pre == nil {
		out = s.parser.Emitted() // every event of this read, as it came (empty under eachEvent)
		if s.eachEvent {
			out = nil
		}
	}
	if len(out) == 0 {
		return nil
	}
	_, err := s.w.Write(out)
	return err
}

// observe notes what the stream's end and metrics need from one event (see streamWriter).
func (s *streamWriter) observe(ev *wire.Event) {
	if !ev.HasData() {
		return
	}
	if ev.IsDone() {
		s.sawDone = true
		return
	}
	if bytes.Contains(ev.Data, []byte(`"cached_tokens"`)) {
		if ev.Joined() {
			// Its data lines were joined in the parser's scratch buffer, which the next such
			// event overwrites: copy it now.
			s.usage, s.usageView = append(s.usage[:0], ev.Data...), nil
		} else {
			s.usageView = ev.Data
		}
	}
	if errorEvent(ev.Data) {
		s.errEvent = append(s.errEvent[:0], ev.Data...)
	} else {
		s.errEvent = s.errEvent[:0]
	}
	if hasText(ev.Data) {
		now := time.Now()
		if !s.sawText {
			s.sawText, s.firstText = true, now
			if s.d != nil {
				s.d.ObserveFirstToken(now)
			}
			if s.ttft != nil {
				d := now.Sub(s.started).Seconds()
				s.ttft.Observe(d)
				s.roleTTFT.Observe(d)
			}
		} else if s.itl != nil {
			s.itl.Observe(now.Sub(s.lastText).Seconds())
		}
		s.lastText = now
		s.textEvents++
	}
}

func (s *streamWriter) flush() {
	if s.flusher != nil {
		s.flusher.Flush()
	}
}

// hasText reports whether an event's JSON carries non-empty generated text: a chat delta's
// content or reasoning_content (one search finds both), a completion's text, or /generate's
// text. It looks for the keys cheaply; a false positive only moves the TTFT metric by one event.
func hasText(data []byte) bool {
	for _, key := range [][]byte{[]byte(`content":"`), []byte(`"text":"`)} {
		for d := data; ; {
			i := bytes.Index(d, key)
			if i < 0 || i+len(key) >= len(d) {
				break
			}
			if d[i+len(key)] != '"' {
				return true
			}
			d = d[i+len(key):]
		}
	}
	return false
}
