package demo

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"slices"
	"strings"
	"time"

	"github.com/pdrouter/pdrouter/fakeworker"
	"github.com/pdrouter/pdrouter/router/server"
)

// shutdownTimeout bounds the router's drain when the live system stops.
const shutdownTimeout = 10 * time.Second

// Live is a running live system: a fakeworker cluster and the router in front of it, all on
// 127.0.0.1. Close stops it.
type Live struct {
	// URL is the router's base URL, e.g. http://127.0.0.1:41234.
	URL string
	// Cluster is the fakeworker cluster behind the router.
	Cluster *fakeworker.Cluster
	// ServeArgs are the `router serve` arguments equivalent to this router (for people).
	ServeArgs []string

	srv      *server.Server
	hs       *http.Server
	served   chan error
	cancelBG context.CancelFunc
}

// StartLive starts the scenario's fakeworker cluster (ports from the OS) and the router in
// front of it, as `router serve` runs it: the same router/server package, the scenario's
// policy, --dp-aware and --seed, and, when decisionLog is non-nil, --decision-log lines
// written there. It returns once every worker is registered and the router listens. The
// system stops when ctx is cancelled or Close is called; call Close in every case to wait
// for it.
func StartLive(ctx context.Context, sc Scenario, decisionLog io.Writer) (*Live, error) {
	if err := sc.Validate(); err != nil {
		return nil, err
	}
	wc, err := sc.WorkerConfig()
	if err != nil {
		return nil, err
	}
	cl, err := fakeworker.StartCluster(ctx, fakeworker.ClusterConfig{Prefill: sc.Prefill, Decode: sc.Decode, Worker: wc})
	if err != nil {
		return nil, fmt.Errorf("demo: fakeworker cluster: %w", err)
	}
	l := &Live{Cluster: cl, served: make(chan error, 1)}
	l.ServeArgs = append(cl.ServeArgs(), "--policy", sc.Policy, "--seed", fmt.Sprint(sc.Seed))
	rc := sc.ServeConfig(cl)
	if rc.DPAware && !slices.Contains(l.ServeArgs, "--dp-aware") {
		l.ServeArgs = append(l.ServeArgs, "--dp-aware")
	}
	l.srv, err = server.New(server.Options{Config: rc, LocalIP: "127.0.0.1", DecisionLog: decisionLog})
	if err != nil {
		l.stopCluster()
		return nil, fmt.Errorf("demo: router: %w", err)
	}
	bg, cancel := context.WithCancel(ctx)
	l.cancelBG = cancel
	if err := l.srv.Start(bg); err != nil {
		cancel()
		l.srv.Wait()
		l.stopCluster()
		return nil, fmt.Errorf("demo: router: registering the workers: %w", err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		cancel()
		l.srv.Wait()
		l.stopCluster()
		return nil, fmt.Errorf("demo: router: %w", err)
	}
	l.URL = "http://" + ln.Addr().String()
	l.hs = &http.Server{Handler: l.srv.Handler(), ReadHeaderTimeout: 30 * time.Second}
	go func() { l.served <- l.hs.Serve(ln) }()
	return l, nil
}

// Close stops the router (draining in-flight requests for up to 10 s), then the workers, and
// waits until every goroutine of the live system has stopped. It returns the first error the
// router's listener or a worker reported.
func (l *Live) Close() error {
	ctx, cancel := context.WithTimeout(context.Background(), shutdownTimeout)
	defer cancel()
	err := l.hs.Shutdown(ctx)
	if err != nil {
		_ = l.hs.Close()
	}
	if serr := <-l.served; !errors.Is(serr, http.ErrServerClosed) {
		err = errors.Join(err, serr)
	}
	l.cancelBG()
	l.srv.Wait()
	return errors.Join(err, l.stopCluster())
}

// stopCluster stops the workers and waits for them.
func (l *Live) stopCluster() error {
	l.Cluster.Stop()
	if err := l.Cluster.Wait(); err != nil {
		return fmt.Errorf("demo: fakeworker cluster: %w", err)
	}
	return nil
}

// Describe writes the live system for people: one line per worker, then the equivalent
// `router serve` command line and the router's URL.
func (l *Live) Describe(w io.Writer) error {
	var b strings.Builder
	for _, wk := range l.Cluster.Workers() {
		bp := ""
		if p := wk.BootstrapPort(); p != 0 {
			bp = fmt.Sprintf(" (bootstrap port %d)", p)
		}
		fmt.Fprintf(&b, "  %-7s %s%s, dp_size %d\n", fakeworker.ModeName(wk.Mode()), wk.URL(), bp, wk.Config().DPSize)
	}
	fmt.Fprintf(&b, "  router  %s  = router serve %s\n", l.URL, strings.Join(l.ServeArgs, " "))
	_, err := io.WriteString(w, b.String())
	return err
}

// BenchTransport returns the transport for a bench run against this live system: the bench's
// usual loopback settings (HTTP/1.1, no compression, a large idle pool). --flush-cache between
// levels resets the workers' caches and the router's trees (POST /flush_cache), as the
// simulator does.
func (l *Live) BenchTransport() http.RoundTripper {
	return &http.Transport{
		DialContext:         (&net.Dialer{Timeout: 10 * time.Second, KeepAlive: 30 * time.Second}).DialContext,
		MaxIdleConnsPerHost: 10000,
		IdleConnTimeout:     4 * time.Second, // below the router's own keep-alive, as the bench's
		DisableCompression:  true,
		WriteBufferSize:     64 << 10,
		ReadBufferSize:      64 << 10,
	}
}

// CloseIdle closes the idle connections of a transport from BenchTransport.
func CloseIdle(rt http.RoundTripper) {
	if t, ok := rt.(*http.Transport); ok {
		t.CloseIdleConnections()
	}
}
