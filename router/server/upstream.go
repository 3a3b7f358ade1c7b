package server

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptrace"
	"strings"
	"time"

	"github.com/pdrouter/pdrouter/router"
	"github.com/pdrouter/pdrouter/router/wire"
)

// newTransport returns the shared transport of one upstream role: generous pools, no
// compression (SSE must not be buffered by gzip), and idle connections closed before SGLang's
// keep-alive (5 s) can close them under us (SPEC §1.6).
func newTransport(idle time.Duration) *http.Transport {
	return &http.Transport{
		Proxy:                 nil, // workers are addressed directly; never via HTTP_PROXY
		DialContext:           (&net.Dialer{Timeout: 10 * time.Second, KeepAlive: 30 * time.Second}).DialContext,
		MaxIdleConns:          4096,
		MaxIdleConnsPerHost:   512,
		IdleConnTimeout:       idle,
		DisableCompression:    true,
		ExpectContinueTimeout: 0,
		ForceAttemptHTTP2:     false,
	}
}

// forwardedHeaders are copied from the client's request to workers (SPEC §1.4 step 5), besides
// the configured request-id headers; smg forwards its routing key too (SGLang reads it as the
// request's routing_key).
var forwardedHeaders = []string{"Authorization", "Traceparent", "Tracestate", routingKeyHeader}

// hopHeaders are not relayed from worker responses to clients.
var hopHeaders = map[string]bool{
	"Connection": true, "Keep-Alive": true, "Proxy-Authenticate": true, "Proxy-Authorization": true,
	"Te": true, "Trailer": true, "Transfer-Encoding": true, "Upgrade": true, "Content-Length": true,
	"Content-Encoding": true, "X-Request-Id": true,
}

// upstreamError describes a failed leg: a transport error (Status 0) or a non-2xx answer.
type upstreamError struct {
	Worker string
	Role   string
	Status int    // 0: transport error
	Body   []byte // a bounded prefix of the worker's error body
	Err    error  // transport error
	reused bool   // the request went out on a reused connection
}

func (e *upstreamError) Error() string {
	if e.Status == 0 {
		return fmt.Sprintf("%s worker %s: %s", e.Role, router.RedactURL(e.Worker), redactIn(e.Err.Error(), e.Worker))
	}
	msg := strings.TrimSpace(string(e.Body))
	if msg == "" {
		msg = http.StatusText(e.Status)
	}
	return fmt.Sprintf("%s worker %s answered %d: %s", e.Role, router.RedactURL(e.Worker), e.Status, msg)
}

// clientStatus is the status to answer the client with: the worker's, or 502 for a transport
// error (504 when it was our request timeout).
func (e *upstreamError) clientStatus() int {
	switch {
	case e.Status != 0:
		return e.Status
	case errors.Is(e.Err, context.DeadlineExceeded):
		return http.StatusGatewayTimeout
	}
	return http.StatusBadGateway
}

// upstreamRequest is one request to a worker: what send sends and what its errors name.
type upstreamRequest struct {
	method string
	worker string      // the worker's base URL
	path   string      // appended to worker ("/generate"); "" for the URL itself
	body   []byte      // nil: none; otherwise sent as JSON
	pieces [][]byte    // when not nil, the body instead of body: their concatenation (PD legs, wire.Pieces)
	hdr    http.Header // forwarded client headers; may be nil
	role   string      // names the leg in errors: "prefill", "decode", "regular", "abort", …
	// deadline, when not zero, ends the exchange then (--request-timeout-secs): h1's
	// Request.Deadline, a context deadline on net/http's path.
	deadline time.Time
	// noHeader: the caller reads the answer's status and body, not its header (a prefill
	// leg's answer is never relayed), so h1 builds no header map for it (h1.Request.NoHeader;
	// the response's Header may be nil).
	noHeader bool
}

// clientError is the error answered to the client for a failed attempt that is not retried.
func (e *upstreamError) clientError() *wire.Error {
	status := e.clientStatus()
	typ := wire.TypeUpstream
	if status >= 400 && status < 500 {
		typ = wire.TypeInvalidRequest
	}
	return &wire.Error{Status: status, Type: typ, Message: e.Error()}
}

// doer sends one request upstream and returns the response once its head arrived, and whether
// the request went out on a reused keep-alive connection.
type doer interface {
	roundTrip(ctx context.Context, r upstreamRequest) (*http.Response, bool, error)
}

// upstream returns the doer of the inference legs of one role.
func (s *Server) upstream(role router.Role) doer { return s.clients[role] }

// clientDoer sends through an http.Client (probes, aborts, admin calls).
type clientDoer struct{ *http.Client }

func (c clientDoer) roundTrip(ctx context.Context, r upstreamRequest) (*http.Response, bool, error) {
	var rd io.Reader
	if r.body != nil {
		rd = bytes.NewReader(r.body)
	}
	if r.pieces != nil {
		rd = piecesReader(r.pieces)
	}
	var reused bool
	ctx = httptrace.WithClientTrace(ctx, &httptrace.ClientTrace{
		GotConn: func(info httptrace.GotConnInfo) { reused = info.Reused },
	})
	req, err := http.NewRequestWithContext(ctx, r.method, r.worker+r.path, rd)
	if err != nil {
		return nil, false, err
	}
	if r.pieces != nil { // a reader net/http cannot size or rewind by itself
		req.ContentLength = int64(wire.Pieces(r.pieces).Len())
		pieces := r.pieces // not r: the closure would take it to the heap
		req.GetBody = func() (io.ReadCloser, error) { return io.NopCloser(piecesReader(pieces)), nil }
		if req.ContentLength == 0 {
			req.Body = http.NoBody
		}
	}
	for k, v := range r.hdr {
		req.Header[k] = v
	}
	if r.body != nil || r.pieces != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := c.Client.Do(req)
	return resp, reused, err
}

// piecesReader reads the concatenation of pieces, leaving them as they are.
func piecesReader(pieces [][]byte) io.Reader {
	bufs := append(net.Buffers(nil), pieces...) // its Read consumes the copy
	return &bufs
}

// send sends r and returns the response once its headers arrived. A non-2xx answer is
// returned as an *upstreamError with its body read (bounded) and closed. A reply the router
// holds whole (heldWhole) is charged to b (nil: none) as it is read, until its body is closed.
func send(ctx context.Context, d doer, r *upstreamRequest, b *budget) (*http.Response, *upstreamError) {
	resp, reused, err := d.roundTrip(ctx, *r) // a copy: an interface call's pointer argument would put r on the heap
	if err != nil {
		return nil, &upstreamError{Worker: r.worker, Role: r.role, Err: err, reused: reused}
	}
	if resp.StatusCode < 200 || resp.StatusCode > 299 {
		ue := &upstreamError{Worker: r.worker, Role: r.role, Status: resp.StatusCode, reused: reused}
		ue.Body, _ = io.ReadAll(io.LimitReader(resp.Body, 4<<10))
		resp.Body.Close()
		return nil, ue
	}
	if b != nil && heldWhole(r.role, resp) {
		resp.Body = &budgetedBody{ReadCloser: resp.Body, c: charge{b: b}}
	}
	return resp, nil
}

// heldWhole reports whether the router holds a worker's reply whole before relaying it, so it
// counts against the memory budget: a prefill leg's answer (sendPrefill passes a budget only
// for one it keeps; one it drops is read through, not held), and a decode leg's reply that is
// not an event stream. A regular reply is relayed as it arrives, and a stream event by event.
func heldWhole(role string, resp *http.Response) bool {
	switch role {
	case "prefill":
		return true
	case "decode":
		return !strings.HasPrefix(resp.Header.Get("Content-Type"), "text/event-stream")
	}
	return false
}

// copyResponseHeaders copies a worker's response headers to the client, minus hop-by-hop ones.
func copyResponseHeaders(dst, src http.Header) {
	for k, v := range src {
		if !hopHeaders[k] {
			dst[k] = v
		}
	}
}

// redactIn replaces the worker URL inside a transport error's text (Go's errors quote the URL
// they dialled) with its redacted form.
func redactIn(text, workerURL string) string {
	return router.RedactIn(text, workerURL)
}
