package server

import (
	"context"
	"crypto/tls"
	"errors"
	"net"
	"net/http"
	"sync/atomic"
	"syscall"
	"time"
)

// maxResponseHead bounds a worker's response head (status line and headers): a worker
// streaming headers without end cannot make the router buffer them.
const maxResponseHead = 1 << 20

// newUpstreamClient returns the client of one role's inference legs: net/http's Transport
// with newTransport's pools, response heads bounded at maxResponseHead, tc for https://
// workers (nil: Go's defaults), redirects returned as answers (a worker's 3xx is its answer,
// not a place to resend a prompt to), and connections that keep an early answer readable
// (earlyAnswerConn).
//
// A hand-written HTTP/1.1 transport was measured against it on a production-shaped load
// (BenchmarkUpstreamSSE: 2 ms to the first event, 256 events) and saved nothing within
// noise, so it was removed (issue 26).
func newUpstreamClient(idle time.Duration, tc *tls.Config) clientDoer {
	t := newTransport(idle)
	t.MaxResponseHeaderBytes = maxResponseHead
	t.TLSClientConfig = tc
	dial := t.DialContext
	t.DialContext = func(ctx context.Context, network, addr string) (net.Conn, error) {
		c, err := dial(ctx, network, addr)
		if err != nil {
			return nil, err
		}
		return &earlyAnswerConn{Conn: c}, nil
	}
	return clientDoer{&http.Client{
		Transport:     t,
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
	}}
}

// earlyAnswerConn is an upstream connection whose writes report success once the worker has
// closed it (EPIPE, ECONNRESET). A worker that answers before reading a large body and closes
// (a 413 from a request limit, as SGLang's are) then has its answer read and relayed:
// net/http's Transport returns the write error instead when it sees it first, which on
// loopback it mostly does, and the client would get a 502. A worker that closed without
// answering still fails the request: the read that follows ends with EOF or a reset.
type earlyAnswerConn struct {
	net.Conn
	closedByPeer atomic.Bool // a write failed with EPIPE or ECONNRESET; later writes are dropped
}

func (c *earlyAnswerConn) Write(p []byte) (int, error) {
	if c.closedByPeer.Load() {
		return len(p), nil
	}
	n, err := c.Conn.Write(p)
	if err != nil && (errors.Is(err, syscall.EPIPE) || errors.Is(err, syscall.ECONNRESET)) {
		c.closedByPeer.Store(true)
		return len(p), nil
	}
	return n, err
}
