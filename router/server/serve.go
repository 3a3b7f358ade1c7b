package server

import (
	"context"
	"errors"
	"net"
	"net/http"
	"sync/atomic"
	"time"

	"github.com/pdrouter/pdrouter/router/server/internal/h1"
)

// Serve serves [Server.Handler] on ln until ctx is done: HTTPS when the configuration names a
// certificate (--tls-cert-path; HTTP/2 is offered by ALPN), plain HTTP/1.1 otherwise. When ctx
// is done it first keeps serving for --shutdown-delay-secs with /readiness answering 503 and
// keep-alives off (so a load balancer takes the router out and clients reconnect elsewhere),
// then stops accepting and drains the requests in flight for up to --shutdown-timeout-secs,
// then closes what remains. It returns nil after the drain (timed out or not) and otherwise
// the error that stopped serving. Serve closes ln. Connections beyond --max-connections are
// closed as they are accepted; pdrouter_open_connections counts the others.
func (s *Server) Serve(ctx context.Context, ln net.Listener) error {
	// Idle keep-alive connections close after 75 s (nginx's default), so a client cannot hold
	// thousands open; headers must arrive within 30 s; bodies within --body-read-timeout-secs
	// after that (readBody); at most --max-connections are open at once (capListener).
	ln = s.capConns(h1.RawListener(ln)) // client connections' reads and writes as raw system calls (h1.Raw)
	s.setMemoryLimit()
	defer s.keepMinHeap()()
	var stopping atomic.Bool
	h := s.Handler()
	handler := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/readiness" && stopping.Load() {
			writeJSON(w, http.StatusServiceUnavailable, map[string]any{"status": "shutting down"})
			return
		}
		h.ServeHTTP(w, r)
	})
	srv := &http.Server{Handler: handler, ReadHeaderTimeout: 30 * time.Second, IdleTimeout: 75 * time.Second}
	serve := func() error { return srv.Serve(ln) }
	if s.servingTLS != nil {
		srv.TLSConfig = s.servingTLS.Clone()
		serve = func() error { return srv.ServeTLS(ln, "", "") }
	}
	errc := make(chan error, 1)
	go func() { errc <- serve() }()
	select {
	case err := <-errc:
		return err
	case <-ctx.Done():
	}
	if d := time.Duration(s.cfg.ShutdownDelaySecs) * time.Second; d > 0 {
		s.log.Info("shutting down: /readiness fails, still accepting until the delay ends", "delay_secs", s.cfg.ShutdownDelaySecs)
		stopping.Store(true)
		srv.SetKeepAlivesEnabled(false) // each answer closes its connection: clients reconnect elsewhere
		select {
		case err := <-errc:
			return err
		case <-shutdownDelay(d):
		}
	}
	s.log.Info("shutting down: draining in-flight requests", "timeout_secs", s.cfg.ShutdownTimeoutSecs)
	dctx, cancel := context.WithTimeout(context.Background(), time.Duration(s.cfg.ShutdownTimeoutSecs)*time.Second)
	defer cancel()
	err := srv.Shutdown(dctx)
	<-errc // http.ErrServerClosed once Shutdown began
	if errors.Is(err, context.DeadlineExceeded) {
		s.log.Warn("drain timeout reached; closing remaining connections")
		_ = srv.Close()
		return nil
	}
	return err
}

// shutdownDelay is time.After, replaced by a test to end the delay when it chooses.
var shutdownDelay = time.After

// ServeMetrics serves [Server.MetricsHandler] on ln until ctx is done, then closes it at once.
// It returns nil after ctx is done, otherwise the error that stopped serving. It closes ln.
func (s *Server) ServeMetrics(ctx context.Context, ln net.Listener) error {
	srv := &http.Server{Handler: s.MetricsHandler(), ReadHeaderTimeout: 10 * time.Second}
	stop := context.AfterFunc(ctx, func() { _ = srv.Close() })
	defer stop()
	err := srv.Serve(ln)
	if errors.Is(err, http.ErrServerClosed) && ctx.Err() != nil {
		return nil
	}
	return err
}
