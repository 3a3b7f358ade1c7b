package server

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"testing/iotest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// scriptedBody returns one chunk per Read and says whether more is already buffered.
type scriptedBody struct {
	chunks  []string
	pending []bool // after chunk i
	i       int
}

func (b *scriptedBody) Read(p []byte) (int, error) {
	if b.i == len(b.chunks) {
		return 0, io.EOF
	}
	n := copy(p, b.chunks[b.i])
	b.i++
	return n, nil
}

func (b *scriptedBody) Pending() bool { return b.pending[b.i-1] }

// flushCounter records what had been written at each flush.
type flushCounter struct {
	*httptest.ResponseRecorder
	flushedAt []string
}

func (f *flushCounter) Flush() { f.flushedAt = append(f.flushedAt, f.Body.String()) }

func TestRelayFlushesWhenTheUpstreamRunsDry(t *testing.T) {
	ev := func(s string) string { return "data: " + s + "\n\n" }
	body := &scriptedBody{
		chunks:  []string{ev("a"), ev("b"), ev("c") + "da", "ta: d\n\n", ev("[DONE]")},
		pending: []bool{true, false, true, false, true},
	}
	rec := &flushCounter{ResponseRecorder: httptest.NewRecorder()}
	s := &Server{}
	sw := newStreamWriter(rec, nil, time.Now())
	require.NoError(t, s.relayStream(context.Background(), &sw, &heldBody{body: body}, &upstreamRequest{worker: "w", role: "regular"}, nil))
	// One flush per dry spell; none at the end (the server writes the rest with the
	// chunked terminator when the handler returns).
	assert.Equal(t, []string{ev("a") + ev("b"), ev("a") + ev("b") + ev("c") + ev("d")}, rec.flushedAt)
	assert.Equal(t, ev("a")+ev("b")+ev("c")+ev("d")+ev("[DONE]"), rec.Body.String())
	// sw went back to its pool with the stream: the [DONE] above is what the client saw.
}

func TestRelayFlushesEveryReadWithoutPending(t *testing.T) {
	// An http.Transport body cannot say what it has buffered: every read is flushed.
	rec := &flushCounter{ResponseRecorder: httptest.NewRecorder()}
	body := io.MultiReader(strings.NewReader("data: a\n\n"), strings.NewReader("data: b\n\n"))
	s := &Server{}
	sw := newStreamWriter(rec, nil, time.Now())
	require.NoError(t, s.relayStream(context.Background(), &sw, &heldBody{body: body}, &upstreamRequest{worker: "w", role: "regular"}, nil))
	assert.Len(t, rec.flushedAt, 2)
}

var _ http.Flusher = (*flushCounter)(nil)

// endlessEvent is a stream that sends one event's data line without ever ending it.
type endlessEvent struct{ sent int }

func (e *endlessEvent) Read(p []byte) (int, error) {
	if e.sent == 0 {
		e.sent += copy(p, "data: {\"text\":\"")
		return e.sent, nil
	}
	for i := range p {
		p[i] = 'a'
	}
	e.sent += len(p)
	return len(p), nil
}

// An event without its blank line is held only up to maxSSEEvent: the relay then ends the
// stream with an error instead of buffering whatever the worker sends (the 64 MiB event that
// once grew the heap to 280 MiB).
func TestRelayBoundsAnUnendedEvent(t *testing.T) {
	rec := &flushCounter{ResponseRecorder: httptest.NewRecorder()}
	s := &Server{}
	body := &endlessEvent{}
	sw := newStreamWriter(rec, nil, time.Now())
	err := s.relayStream(context.Background(), &sw, &heldBody{body: body}, &upstreamRequest{worker: "w", role: "regular"}, nil)
	require.ErrorContains(t, err, errSSEEventTooLarge.Error())
	assert.Less(t, body.sent, maxSSEEvent+relayBufSize+64, "read stops at the bound")
	assert.Contains(t, rec.Body.String(), "stream failed: "+errSSEEventTooLarge.Error(), "the client gets an error event")
	assert.NotContains(t, rec.Body.String(), "aaaa", "nothing of the unended event was relayed")

	// The first-event probe of the PD path stops at the same bound.
	_, _, end := readFirst(&endlessEvent{}, true, 1<<40, make([]byte, relayBufSize))
	require.ErrorIs(t, end, errSSEEventTooLarge)
}

// readFirst holds a first event, or a whole reply longer than its first buffer, in order,
// across reads of any size.
func TestReadFirstHolds(t *testing.T) {
	event := "data: {\"text\":\"a\"}\n\n"
	held, _, end := readFirst(iotest.OneByteReader(strings.NewReader(event+event)), true, 1<<20, make([]byte, relayBufSize))
	require.NoError(t, end)
	assert.Equal(t, event, string(held), "held up to the first event with data")

	long := strings.Repeat("x", 3*relayBufSize+17)
	held, _, end = readFirst(iotest.HalfReader(strings.NewReader(long)), false, 1<<20, make([]byte, relayBufSize))
	require.ErrorIs(t, end, io.EOF)
	assert.Equal(t, long, string(held))

	_, _, end = readFirst(strings.NewReader(long), false, relayBufSize, make([]byte, relayBufSize))
	require.ErrorContains(t, end, "--max-payload-size")
}

// A stream that arrives whole in one read has its first event all the same: the PD hold does
// not wait for prefill's answer then (needsPrefill), as it does for a stream with no event.
func TestReadFirstWholeStream(t *testing.T) {
	event := "data: {\"text\":\"a\"}\n\n"
	held, first, end := readFirst(iotest.DataErrReader(strings.NewReader(event+"data: [DONE]\n\n")), true, 1<<20, make([]byte, relayBufSize))
	require.ErrorIs(t, end, io.EOF)
	assert.True(t, first, "the event came with the body's end")
	assert.Equal(t, event+"data: [DONE]\n\n", string(held))
	assert.False(t, needsPrefill(true, first, false))

	_, first, end = readFirst(iotest.DataErrReader(strings.NewReader(": comment\n\n")), true, 1<<20, make([]byte, relayBufSize))
	require.ErrorIs(t, end, io.EOF)
	assert.False(t, first, "no event with data")
	assert.True(t, needsPrefill(true, first, false))
}
