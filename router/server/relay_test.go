package server

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
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
	sw := newStreamWriter(rec, nil, time.Now(), nil)
	require.NoError(t, s.relayStream(context.Background(), rec, body, sw, nil, nil, "w", "regular"))
	// One flush per dry spell; none at the end (the server writes the rest with the
	// chunked terminator when the handler returns).
	assert.Equal(t, []string{ev("a") + ev("b"), ev("a") + ev("b") + ev("c") + ev("d")}, rec.flushedAt)
	assert.Equal(t, ev("a")+ev("b")+ev("c")+ev("d")+ev("[DONE]"), rec.Body.String())
	assert.True(t, sw.sawDone)
}

func TestRelayFlushesEveryReadWithoutPending(t *testing.T) {
	// An http.Transport body cannot say what it has buffered: every read is flushed.
	rec := &flushCounter{ResponseRecorder: httptest.NewRecorder()}
	body := io.MultiReader(strings.NewReader("data: a\n\n"), strings.NewReader("data: b\n\n"))
	s := &Server{}
	require.NoError(t, s.relayStream(context.Background(), rec, body, newStreamWriter(rec, nil, time.Now(), nil), nil, nil, "w", "regular"))
	assert.Len(t, rec.flushedAt, 2)
}

var _ http.Flusher = (*flushCounter)(nil)
