package bench

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/pdrouter/pdrouter/reports"
	"github.com/pdrouter/pdrouter/router/wire"
)

// Header names the transport reads.
const (
	headerSeq    = "X-Vegeta-Seq"    // set by vegeta on every request
	headerAttack = "X-Vegeta-Attack" // set by vegeta when the attack has a name
	headerID     = "X-Request-Id"    // set by our Targeters: the record's id
)

// maxErrorBody is how much of a non-2xx body is kept as the error message.
const maxErrorBody = 512

// timing is the RoundTripper of every Attacker: it starts each request's clock when it sends
// the request and wraps the response body to timestamp SSE events. Safe for concurrent use.
type timing struct {
	base    http.RoundTripper
	ctx     context.Context // cancels every request of the run
	timeout time.Duration   // bounds each request, stream included
	now     func() time.Time

	mu       sync.Mutex          // protects issued, inflight
	issued   map[string]*request // by X-Request-Id: handed to vegeta, not yet sent
	inflight map[string]*request // by attack name + "/" + X-Vegeta-Seq: sent, Result not yet joined
}

func newTiming(ctx context.Context, base http.RoundTripper, timeout time.Duration) *timing {
	return &timing{base: base, ctx: ctx, timeout: timeout, now: time.Now,
		issued: map[string]*request{}, inflight: map[string]*request{}}
}

func seqKey(attack, seq string) string { return attack + "/" + seq }

// issue registers r before its Target goes to vegeta.
func (t *timing) issue(r *request) {
	t.mu.Lock()
	t.issued[r.id] = r
	t.mu.Unlock()
}

// join returns (and forgets) the request vegeta's Result seq of attack belongs to, or nil.
func (t *timing) join(attack string, seq uint64) *request {
	k := seqKey(attack, strconv.FormatUint(seq, 10))
	t.mu.Lock()
	r := t.inflight[k]
	delete(t.inflight, k)
	t.mu.Unlock()
	return r
}

// RoundTrip implements http.RoundTripper.
func (t *timing) RoundTrip(req *http.Request) (*http.Response, error) {
	id := req.Header.Get(headerID)
	t.mu.Lock()
	r := t.issued[id]
	delete(t.issued, id)
	if r != nil {
		t.inflight[seqKey(req.Header.Get(headerAttack), req.Header.Get(headerSeq))] = r
	}
	t.mu.Unlock()
	if r == nil { // not ours (e.g. a redirect): pass through untimed
		return t.base.RoundTrip(req)
	}
	// The request's context is ours: vegeta's requests carry none, and the run's cancellation
	// and the per-request timeout must reach the stream.
	ctx, cancel := context.WithTimeout(t.ctx, t.timeout)
	r.start = t.now()
	resp, err := t.base.RoundTrip(req.WithContext(ctx))
	if err != nil {
		kind, msg := classify(ctx, err, reports.ErrKindConnection), err.Error()
		if kind == reports.ErrKindTimeout {
			msg = fmt.Sprintf("no response within %v", t.timeout)
		}
		r.fail(t.now(), kind, msg)
		cancel()
		return nil, err
	}
	if resp.StatusCode < 200 || resp.StatusCode > 299 {
		resp.Body = &errorBody{rc: resp.Body, r: r, status: resp.StatusCode, now: t.now, cancel: cancel}
		return resp, nil
	}
	resp.Body = &sseBody{rc: resp.Body, r: r, now: t.now, ctx: ctx, cancel: cancel, timeout: t.timeout}
	return resp, nil
}

// classify returns the error kind of a transport error: timeout or canceled when the
// request's context ended, else def.
func classify(ctx context.Context, err error, def string) string {
	var ne net.Error
	switch {
	case errors.Is(ctx.Err(), context.DeadlineExceeded):
		return reports.ErrKindTimeout
	case ctx.Err() != nil, errors.Is(err, context.Canceled):
		return reports.ErrKindCanceled
	case errors.Is(err, context.DeadlineExceeded), errors.As(err, &ne) && ne.Timeout():
		return reports.ErrKindTimeout
	}
	return def
}

// errorBody keeps the start of a non-2xx body as the request's error message.
type errorBody struct {
	rc     io.ReadCloser
	r      *request
	status int
	now    func() time.Time
	cancel context.CancelFunc
	msg    []byte
	closed bool
}

func (b *errorBody) Read(p []byte) (int, error) {
	n, err := b.rc.Read(p)
	if room := maxErrorBody - len(b.msg); room > 0 {
		b.msg = append(b.msg, p[:min(n, room)]...)
	}
	if err != nil {
		b.finish()
	}
	return n, err
}

func (b *errorBody) Close() error {
	b.finish()
	err := b.rc.Close()
	b.cancel()
	return err
}

func (b *errorBody) finish() {
	if b.closed {
		return
	}
	b.closed = true
	b.r.fail(b.now(), reports.HTTPErrorKind(b.status), errorMessage(b.msg, b.status))
}

// errorMessage extracts the message of an OpenAI-style error body, else the body's first line.
func errorMessage(body []byte, status int) string {
	if m := jsonErrorMessage(body); m != "" {
		return m
	}
	s := strings.TrimSpace(string(body))
	if i := strings.IndexByte(s, '\n'); i >= 0 {
		s = s[:i]
	}
	if s == "" {
		s = http.StatusText(status)
	}
	return s
}

// sseBody timestamps the SSE events of a 2xx body as the reads that deliver them return.
type sseBody struct {
	rc      io.ReadCloser
	r       *request
	now     func() time.Time
	ctx     context.Context
	cancel  context.CancelFunc
	timeout time.Duration
	parser  wire.Parser
	ended   bool
}

func (b *sseBody) Read(p []byte) (int, error) {
	n, err := b.rc.Read(p)
	if b.ended {
		return n, err
	}
	at := b.now()
	if n > 0 {
		b.parser.Feed(p[:n])
		b.drain(at)
	}
	if err != nil {
		if err == io.EOF {
			b.parser.Close()
			b.drain(at)
		}
		b.end(at, err)
	}
	return n, err
}

func (b *sseBody) drain(at time.Time) {
	for !b.ended {
		ev, ok := b.parser.Next()
		if !ok {
			return
		}
		if !ev.HasData() {
			continue
		}
		if b.r.event(at, ev.Data) {
			b.ended = true // [DONE] or an error event: the outcome is known
		}
	}
}

// end settles a stream that stopped (err != nil) before [DONE].
func (b *sseBody) end(at time.Time, err error) {
	if b.ended {
		return
	}
	b.ended = true
	r := b.r
	what := "stream ended before [DONE]"
	if r.events == 0 {
		what = "no SSE event before the stream ended"
	}
	msg := fmt.Sprintf("%s after %d events", what, r.events)
	if err != io.EOF {
		msg += ": " + err.Error()
	}
	kind := classify(b.ctx, err, reports.ErrKindStreamCut)
	switch {
	case kind == reports.ErrKindTimeout:
		msg = fmt.Sprintf("no [DONE] within %v (%d events)", b.timeout, r.events)
	case r.events == 0 && err == io.EOF:
		kind = reports.ErrKindBadReply
	}
	r.fail(at, kind, msg)
}

func (b *sseBody) Close() error {
	if !b.ended {
		b.end(b.now(), errors.New("body closed early"))
	}
	err := b.rc.Close()
	b.cancel()
	return err
}

// idleConnTimeout closes our idle connections before the server does: SGLang's uvicorn (and
// fakeworker) drop keep-alive connections idle for 5 s, and a request sent on a connection the
// server is closing at that instant fails with "connection reset by peer".
const idleConnTimeout = 4 * time.Second

// newBaseTransport is the default base transport: HTTP/1.1 (one connection per stream, as
// SGLang serves), no compression, an idle pool large enough for any concurrency.
func newBaseTransport() *http.Transport {
	return &http.Transport{
		Proxy:               http.ProxyFromEnvironment,
		DialContext:         (&net.Dialer{Timeout: 10 * time.Second, KeepAlive: 30 * time.Second}).DialContext,
		MaxIdleConns:        0,
		MaxIdleConnsPerHost: 10000,
		IdleConnTimeout:     idleConnTimeout,
		DisableCompression:  true,
		ForceAttemptHTTP2:   false,
		TLSHandshakeTimeout: 10 * time.Second,
		WriteBufferSize:     64 << 10,
		ReadBufferSize:      64 << 10,
	}
}
