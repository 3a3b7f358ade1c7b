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

	"github.com/pdrouter/pdrouter/router/server/internal/h1"
)

// legClient sends the inference legs (regular, prefill, decode) of one role: http:// workers
// through the h1 transport (one goroutine per request, flushes when the upstream runs dry;
// see package h1), https:// workers and anything else h1 does not serve through net/http
// (newUpstreamClient), which h1 falls back to.
//
// Why both: with net/http on these legs too (commit 8d41769), BenchmarkProxy (the router as
// its own process beside nginx) showed the router using 11-18 % more CPU per request at
// closed64/open1000 and 16-24 % more added TTFT P99 (issue 26).
type legClient struct {
	h1  *h1.Transport
	net clientDoer
}

// newLegClient returns one role's legClient; idle bounds pooled connections' idle time in
// both transports, tc is the TLS settings of https:// workers (nil: Go's defaults).
func newLegClient(idle time.Duration, tc *tls.Config) *legClient {
	n := newUpstreamClient(idle, tc)
	return &legClient{h1: h1.New(idle, h1Fallback{n}), net: n}
}

func (c *legClient) roundTrip(ctx context.Context, r upstreamRequest) (*http.Response, bool, error) {
	return c.h1.Do(ctx, &h1.Request{Method: r.method, URL: r.worker, Path: r.path, Body: r.body, Pieces: r.pieces, Header: r.hdr, Deadline: r.deadline, NoHeader: r.noHeader})
}

// CloseIdleConnections closes both transports' idle connections (Server.Wait).
func (c *legClient) CloseIdleConnections() {
	c.h1.CloseIdleConnections()
	c.net.CloseIdleConnections()
}

// h1Fallback is a clientDoer in the form h1 hands the URLs it does not serve to.
type h1Fallback struct{ c clientDoer }

func (f h1Fallback) Do(ctx context.Context, r *h1.Request) (*http.Response, bool, error) {
	return f.c.roundTrip(ctx, upstreamRequest{method: r.Method, worker: r.URL, body: r.Body, pieces: r.Pieces, hdr: r.Header}) // h1 put r.Deadline in ctx
}

// newUpstreamClient returns the net/http client of one role's inference legs to https://
// workers (legClient): newTransport's pools, response heads bounded as h1 bounds them, tc for
// https:// workers (nil: Go's defaults), redirects returned as answers (a worker's 3xx is its
// answer, not a place to resend a prompt to), and connections that keep an early answer
// readable (earlyAnswerConn).
func newUpstreamClient(idle time.Duration, tc *tls.Config) clientDoer {
	t := newTransport(idle)
	t.MaxResponseHeaderBytes = h1.MaxResponseHead
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
