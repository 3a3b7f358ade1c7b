package server

import (
	"bytes"
	"errors"
	"io"
	"net/http"
	"time"

	"github.com/pdrouter/pdrouter/router/wire"
)

// relayChunk is one read from an upstream body.
type relayChunk struct {
	data []byte
	err  error // io.EOF at a clean end
}

// relayBufferChunks × relayChunkSize bound what the relay holds per stream: a slow client
// makes the reader block, which pushes back on the worker through TCP (no unbounded buffering).
const (
	relayBufferChunks = 8
	relayChunkSize    = 32 << 10
)

// startReader reads body into a bounded channel until EOF, an error or done is closed. The
// channel is closed after the last chunk.
func startReader(body io.Reader, done <-chan struct{}) <-chan relayChunk {
	ch := make(chan relayChunk, relayBufferChunks)
	go func() {
		defer close(ch)
		for {
			buf := make([]byte, relayChunkSize)
			n, err := body.Read(buf)
			if n > 0 {
				select {
				case ch <- relayChunk{data: buf[:n]}:
				case <-done:
					return
				}
			}
			if err != nil {
				select {
				case ch <- relayChunk{err: err}:
				case <-done:
				}
				return
			}
		}
	}()
	return ch
}

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
	sawDone   bool
}

func newStreamWriter(w http.ResponseWriter, pre []byte, started time.Time, firstText func(time.Duration)) *streamWriter {
	f, _ := w.(http.Flusher)
	return &streamWriter{w: w, flusher: f, pre: pre, started: started, firstText: firstText}
}

// write feeds one upstream chunk; it writes every complete event.
func (s *streamWriter) write(chunk []byte) error {
	s.parser.Feed(chunk)
	return s.drain()
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
		} else if !s.sawText && ev.HasData() && hasText(ev.Data) {
			s.sawText = true
			if s.firstText != nil {
				s.firstText(time.Since(s.started))
			}
		}
		s.out = wire.AppendMergedEvent(s.out, s.pre, &ev) // pre == nil: ev.Raw untouched
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

// errStreamCut reports that the upstream stream ended without [DONE].
var errStreamCut = errors.New("stream ended before [DONE]")
