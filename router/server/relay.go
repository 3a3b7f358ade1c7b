package server

import (
	"bytes"
	"fmt"
	"io"
	"net/http"
	"sync"
	"time"

	"github.com/pdrouter/pdrouter/router/wire"
)

// relayBufSize is the read buffer of one relayed stream. One read returns everything the
// upstream connection has buffered (up to this size), so flushing after each read is
// flushing "when the upstream has nothing more buffered" (SPEC §1.4).
const relayBufSize = 16 << 10

var relayBufs = sync.Pool{New: func() any { b := make([]byte, relayBufSize); return &b }}

// readFirst reads the part of decode's reply that the PD path holds before it commits the
// head: for a stream, up to its first complete event with data; otherwise all of it, failing
// past limit bytes. end is nil when it stopped after the first event, io.EOF when the body
// ended, or the error that broke it.
func readFirst(body io.Reader, stream bool, limit int64) (held []byte, end error) {
	bp := relayBufs.Get().(*[]byte)
	defer relayBufs.Put(bp)
	buf := *bp
	var probe wire.Parser
	for {
		n, err := body.Read(buf)
		held = append(held, buf[:n]...)
		if int64(len(held)) > limit && err == nil {
			err = fmt.Errorf("reply exceeds %d bytes (--max-payload-size)", limit)
		}
		first := false
		if n > 0 && stream {
			probe.Feed(buf[:n])
			for ev, ok := probe.Next(); ok; ev, ok = probe.Next() {
				first = first || ev.HasData()
			}
			if probe.Buffered() > maxSSEEvent && err == nil {
				err = errSSEEventTooLarge
			}
		}
		if err != nil {
			return held, err
		}
		if first {
			return held, nil
		}
	}
}

// heldBody is decode's body once its head is committed: the part readFirst held, then the
// rest, or how the held part ended.
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
type streamWriter struct {
	w       http.ResponseWriter
	flusher http.Flusher
	pre     []byte // prefill logprobs to prepend; nil: events are relayed byte for byte
	parser  wire.Parser
	out     []byte
	started time.Time
	// firstText is called once, when the first event carrying text is written (TTFT).
	firstText func(time.Duration)
	sawText   bool
	sawDone   bool // the upstream sent [DONE]: anything after it is not an error
	// eachEvent flushes after every event (Options.FlushEachEvent): the slower policy,
	// kept to measure it against.
	eachEvent bool
	// usage keeps the last data event that reported cached_tokens (SGLang repeats meta_info
	// in every /generate event; OpenAI streams send one usage chunk): read at the end.
	usage []byte
}

func newStreamWriter(w http.ResponseWriter, pre []byte, started time.Time, firstText func(time.Duration)) *streamWriter {
	f, _ := w.(http.Flusher)
	return &streamWriter{w: w, flusher: f, pre: pre, started: started, firstText: firstText, out: make([]byte, 0, 2<<10)}
}

// newStreamWriter returns the stream writer of x's relayed response, observing its TTFT and
// flushing as Options.FlushEachEvent says; pre is as in streamWriter.
func (s *Server) newStreamWriter(x *exchange, pre []byte) *streamWriter {
	path := x.route.String()
	sw := newStreamWriter(x.w, pre, x.start, func(ttft time.Duration) { s.metrics.TTFT.WithLabelValues(path).Observe(ttft.Seconds()) })
	sw.eachEvent = s.flushEach
	return sw
}

// maxSSEEvent bounds one relayed SSE event (the bytes a worker may send without ending an
// event with a blank line): the relay holds an event whole until it ends, so without a bound a
// worker could make it buffer without limit after the headers are sent (SPEC §1.4). SGLang's
// largest events (cumulative /generate text with logprobs) stay far below it.
const maxSSEEvent = 16 << 20

// errSSEEventTooLarge ends a relayed stream whose event exceeds maxSSEEvent.
var errSSEEventTooLarge = fmt.Errorf("worker stream event exceeds %d bytes without ending", maxSSEEvent)

// write feeds one upstream chunk; it writes every complete event.
func (s *streamWriter) write(chunk []byte) error {
	s.parser.Feed(chunk)
	if err := s.drain(); err != nil {
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
	return s.drain()
}

func (s *streamWriter) drain() error {
	s.out = s.out[:0]
	for ev, ok := s.parser.Next(); ok; ev, ok = s.parser.Next() {
		if ev.IsDone() {
			s.sawDone = true
		} else if ev.HasData() && bytes.Contains(ev.Data, []byte(`"cached_tokens"`)) {
			s.usage = append(s.usage[:0], ev.Data...)
		}
		if !s.sawText && ev.HasData() && !ev.IsDone() && hasText(ev.Data) {
			s.sawText = true
			if s.firstText != nil {
				s.firstText(time.Since(s.started))
			}
		}
		s.out = wire.AppendMergedEvent(s.out, s.pre, &ev) // pre == nil: ev.Raw untouched
		if s.eachEvent {
			if _, err := s.w.Write(s.out); err != nil {
				return err
			}
			s.out = s.out[:0]
			s.flush()
		}
	}
	if len(s.out) == 0 {
		return nil
	}
	_, err := s.w.Write(s.out)
	return err
}

func (s *streamWriter) flush() {
	if s.flusher != nil {
		s.flusher.Flush()
	}
}

// hasText reports whether an event's JSON carries non-empty generated text: a chat delta's
// content or reasoning_content, a completion's text, or /generate's text. It looks for the
// keys cheaply; a false positive only moves the TTFT metric by one event.
func hasText(data []byte) bool {
	for _, key := range [][]byte{[]byte(`"content":"`), []byte(`"reasoning_content":"`), []byte(`"text":"`)} {
		if i := bytes.Index(data, key); i >= 0 && i+len(key) < len(data) && data[i+len(key)] != '"' {
			return true
		}
	}
	return false
}
