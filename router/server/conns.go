package server

import (
	"errors"
	"log/slog"
	"net"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// Backoff of the accept loop after a failed accept that may pass (out of file descriptors,
// out of buffers): it doubles from acceptBackoffMin to acceptBackoffMax, so a full descriptor
// table costs a few wake-ups a second instead of a spinning core.
const (
	acceptBackoffMin = 5 * time.Millisecond
	acceptBackoffMax = time.Second
)

// capListener caps the client connections open at once (--max-connections): a connection
// accepted over the cap is closed at once, before anything is read from it, so a crowd of idle
// connections neither exhausts the descriptors the router needs for its workers nor queues in
// the kernel's backlog ahead of real clients — and a fresh connection is served as soon as one
// under the cap closes. It backs off when accept fails for want of descriptors or buffers.
// Safe for concurrent use.
type capListener struct {
	net.Listener
	max      int64 // ≤ 0: no cap
	open     *atomic.Int64
	rejected prometheus.Counter
	log      *slog.Logger
	sleep    func(time.Duration) // time.Sleep; injected by tests
}

// Accept returns the next connection under the cap.
func (l *capListener) Accept() (net.Conn, error) {
	var delay time.Duration
	for {
		c, err := l.Listener.Accept()
		if err != nil {
			if !acceptMayPass(err) {
				return nil, err
			}
			if delay == 0 {
				delay = acceptBackoffMin
				l.log.Warn("accept failed; backing off", "err", err)
			} else {
				delay = min(2*delay, acceptBackoffMax)
			}
			l.sleep(delay)
			continue
		}
		delay = 0
		if l.max > 0 && l.open.Add(1) > l.max {
			l.open.Add(-1)
			_ = c.Close()
			l.rejected.Inc()
			continue
		}
		if l.max <= 0 {
			l.open.Add(1)
		}
		return &countedConn{Conn: c, open: l.open}, nil
	}
}

// acceptMayPass reports whether a failed accept may succeed later: out of descriptors (the
// process's or the system's), of buffers or of memory, or a connection aborted before accept.
func acceptMayPass(err error) bool {
	for _, e := range []error{syscall.EMFILE, syscall.ENFILE, syscall.ENOBUFS, syscall.ENOMEM, syscall.ECONNABORTED} {
		if errors.Is(err, e) {
			return true
		}
	}
	return false
}

// countedConn is a connection under the cap; closing it frees its place (once).
type countedConn struct {
	net.Conn
	open *atomic.Int64
	once sync.Once
}

func (c *countedConn) Close() error {
	c.once.Do(func() { c.open.Add(-1) })
	return c.Conn.Close()
}

// CloseWrite half-closes the connection, as a server does before closing one whose client may
// still be sending (an answer before the whole body): then its unread bytes do not reset the
// answer away. net/http's server looks for this method.
func (c *countedConn) CloseWrite() error {
	if cw, ok := c.Conn.(interface{ CloseWrite() error }); ok {
		return cw.CloseWrite()
	}
	return nil
}

// limitsMetrics are the gauges and counters of serve's limits: open client connections, those
// closed over the cap, and the memory budget for bodies.
type limitsMetrics struct {
	open     atomic.Int64 // client connections open on the listeners Serve wraps
	rejected prometheus.Counter
}

// newLimitsMetrics registers the limits' metrics on reg: pdrouter_open_connections,
// pdrouter_connections_rejected_total, pdrouter_body_budget_bytes and
// pdrouter_body_budget_in_use_bytes.
func newLimitsMetrics(reg prometheus.Registerer, b *budget) *limitsMetrics {
	m := &limitsMetrics{rejected: prometheus.NewCounter(prometheus.CounterOpts{
		Name: "pdrouter_connections_rejected_total", Help: "Client connections closed on accept because --max-connections were open."})}
	reg.MustRegister(m.rejected,
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name: "pdrouter_open_connections", Help: "Client connections open (accepted and not yet closed)."},
			func() float64 { return float64(m.open.Load()) }),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name: "pdrouter_body_budget_bytes", Help: "The memory budget for request bodies and held replies in flight (--body-memory-budget)."},
			func() float64 { return float64(b.limit) }),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name: "pdrouter_body_budget_in_use_bytes", Help: "Bytes of request bodies and held replies in flight, counted against --body-memory-budget."},
			func() float64 { return float64(b.used.Load()) }),
	)
	return m
}

// capConns wraps ln in the connection cap.
func (s *Server) capConns(ln net.Listener) net.Listener {
	return &capListener{Listener: ln, max: int64(s.maxConns), open: &s.limits.open,
		rejected: s.limits.rejected, log: s.log, sleep: time.Sleep}
}
