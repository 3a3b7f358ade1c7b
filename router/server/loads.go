package server

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/pdrouter/pdrouter/router"
)

// Where a worker's engine load comes from (/workers' load_source, the
// pdrouter_worker_load_source metric).
const (
	loadSourceV1     = "v1_loads" // GET /v1/loads?include=core (SGLang ≥ 0.5.5)
	loadSourceGauges = "metrics"  // the sglang gauges of GET /metrics (older SGLang)
	loadSourceNone   = "none"     // neither: the policies route on in-flight counts
)

// loadRedetect is how long a worker that serves no load report waits before it is asked
// again (it may have been upgraded or restarted with --enable-metrics).
const loadRedetect = 30 * time.Second

// loadPoller reads every registered worker's engine load every Interval and reports it to the
// router core (router.ReportLoad), per DP rank under --dp-aware, else summed over the ranks:
// GET /v1/loads?include=core when the worker serves it, else its Prometheus gauges, else
// nothing (one warning; the policies then compare in-flight counts). At most one poll per
// worker is in flight; a poll gives up after Timeout, and a report that does not arrive is
// simply missed: the last one ages out (--load-report-max-age-ms).
type loadPoller struct {
	Router *router.Router
	// Client sends the polls: a legClient of their own (the h1 transport for http:// workers,
	// measured in BenchmarkLoadPoll against net/http's client).
	Client   doer
	Interval time.Duration
	Timeout  time.Duration
	Header   http.Header // sent with every poll (Authorization with --api-key); may be nil
	DPAware  bool
	Log      *slog.Logger
	Metrics  *Metrics
	Now      func() time.Time

	mu      sync.Mutex // protects workers
	workers map[string]*loadState
}

// loadState is what the poller knows of one worker; guarded by loadPoller.mu.
type loadState struct {
	source  string    // one of the loadSource constants; "" until the first poll answered
	retryAt time.Time // source none: when to ask again
	busy    bool      // a poll is in flight
	warned  string    // the last problem warned about ("" none): each is warned once
	lastAt  time.Time // the last report's time
	lastErr string
}

// client is the poller's Client, nil for a nil poller.
func (p *loadPoller) client() doer {
	if p == nil {
		return nil
	}
	return p.Client
}

// Run polls until ctx is done.
func (p *loadPoller) Run(ctx context.Context) {
	t := time.NewTicker(p.Interval)
	defer t.Stop()
	var polls sync.WaitGroup
	defer polls.Wait()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		now := p.Now()
		for _, w := range p.Router.Workers() {
			if w.State == router.WorkerDraining || !p.claim(w.URL, now) {
				continue
			}
			polls.Add(1)
			go func() {
				defer polls.Done()
				p.poll(ctx, w.URL)
			}()
		}
	}
}

// claim marks a poll of url in flight, unless one is or the worker is not due.
func (p *loadPoller) claim(url string, now time.Time) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.workers == nil {
		p.workers = map[string]*loadState{}
	}
	st := p.workers[url]
	if st == nil {
		st = &loadState{}
		p.workers[url] = st
	}
	if st.busy || st.source == loadSourceNone && now.Before(st.retryAt) {
		return false
	}
	st.busy = true
	return true
}

// poll reads url's load once, from the source it has, finding it first, and reports it.
func (p *loadPoller) poll(ctx context.Context, url string) {
	p.mu.Lock()
	var source string
	if st := p.workers[url]; st != nil {
		source = st.source
	}
	p.mu.Unlock()
	var ranks []rankLoad
	var err error
	at := p.Now()
	switch source {
	case loadSourceV1:
		ranks, err = p.fetch(ctx, url, "/v1/loads?include=core", parseV1Loads)
	case loadSourceGauges:
		ranks, err = p.fetch(ctx, url, "/metrics", parseLoadGauges)
	default: // find out: /v1/loads first, then the gauges
		source = loadSourceV1
		if ranks, err = p.fetch(ctx, url, "/v1/loads?include=core", parseV1Loads); err != nil && !errors.Is(err, errNoRanks) && !errors.Is(err, errTimeout) {
			source = loadSourceGauges
			if ranks, err = p.fetch(ctx, url, "/metrics", parseLoadGauges); err != nil && !errors.Is(err, errTimeout) {
				source = loadSourceNone
			}
		}
	}
	if ctx.Err() != nil {
		p.done(url, "", nil, at)
		return
	}
	if err == nil {
		err = p.report(url, ranks, at)
	}
	if p.Metrics != nil {
		result := "ok"
		if err != nil {
			result = "failed"
		}
		p.Metrics.LoadReports.WithLabelValues(result).Inc()
	}
	p.done(url, source, err, at)
}

// errTimeout is a poll that did not answer within Timeout: the source is kept, the report
// missed.
var errTimeout = errors.New("no answer within the poll timeout")

// fetch GETs path of url and parses its answer.
func (p *loadPoller) fetch(ctx context.Context, url, path string, parse func([]byte) ([]rankLoad, error)) ([]rankLoad, error) {
	// Bounded by the exchange's deadline, not a context of its own (a timer and a context a
	// poll otherwise).
	resp, _, err := p.Client.roundTrip(ctx, upstreamRequest{method: http.MethodGet, worker: strings.TrimSuffix(url, "/"),
		path: path, hdr: p.Header, role: "load", deadline: p.Now().Add(p.Timeout)})
	if err != nil {
		if errors.Is(err, context.DeadlineExceeded) {
			return nil, fmt.Errorf("GET %s: %w", path, errTimeout)
		}
		return nil, fmt.Errorf("GET %s: %w", path, err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, maxLoadReport+1))
	switch {
	case errors.Is(err, context.DeadlineExceeded):
		return nil, fmt.Errorf("GET %s: %w", path, errTimeout)
	case err != nil:
		return nil, fmt.Errorf("GET %s: %w", path, err)
	case resp.StatusCode != http.StatusOK:
		return nil, fmt.Errorf("GET %s: status %d", path, resp.StatusCode)
	case len(body) > maxLoadReport:
		return nil, fmt.Errorf("GET %s: answer over %d bytes", path, maxLoadReport)
	}
	ranks, err := parse(body)
	if err != nil {
		return nil, fmt.Errorf("GET %s: %w", path, err)
	}
	return ranks, nil
}

// maxLoadReport bounds one load report's answer (a /metrics page with every histogram of a
// large DP worker stays far below it).
const maxLoadReport = 8 << 20

// report hands url's ranks to the router: each to its url@rank target under --dp-aware,
// otherwise their sum to url.
func (p *loadPoller) report(url string, ranks []rankLoad, at time.Time) error {
	if !p.DPAware {
		sum := ranks[0].load
		for _, r := range ranks[1:] {
			sum = sum.Add(r.load)
		}
		return p.Router.ReportLoad(url, sum, at)
	}
	for _, r := range ranks {
		if err := p.Router.ReportLoad(router.TargetName(url, r.rank), r.load, at); err != nil {
			return err
		}
	}
	return nil
}

// done records how url's poll ended: its source, and a problem (warned about once per
// problem, not once per poll: a worker without reports is polled for years).
func (p *loadPoller) done(url, source string, err error, at time.Time) {
	p.mu.Lock()
	st := p.workers[url]
	if st == nil { // the worker went while its poll ran
		p.mu.Unlock()
		return
	}
	st.busy = false
	if source == "" { // shutting down
		p.mu.Unlock()
		return
	}
	prev := st.source
	st.source = source
	warn := ""
	switch {
	case source == loadSourceNone:
		st.retryAt = at.Add(loadRedetect)
		st.lastErr = err.Error()
		warn = "worker reports no engine load (neither /v1/loads nor sglang gauges): routing to it on in-flight counts"
	case err != nil && !errors.Is(err, errNoRanks):
		st.lastErr = err.Error()
		warn = "worker's engine load report failed: routing on in-flight counts until one arrives"
	default:
		if err == nil {
			st.lastAt = at
		}
		st.lastErr, st.warned = "", ""
	}
	log := warn != "" && st.warned != warn
	if log {
		st.warned = warn
	}
	p.mu.Unlock()
	if p.Metrics != nil && prev != source {
		p.Metrics.loadSource(url, prev, source)
	}
	if log {
		p.Log.Warn(warn, "worker", router.RedactURL(url), "cause", router.RedactIn(err.Error(), url))
	} else if prev != source && source != loadSourceNone {
		p.Log.Info("worker's engine load read", "worker", router.RedactURL(url), "source", source)
	}
}

// status returns url's load source and the age of its last report at now (-1: none), for
// /workers.
func (p *loadPoller) status(url string, now time.Time) (source string, age time.Duration) {
	p.mu.Lock()
	defer p.mu.Unlock()
	st := p.workers[url]
	if st == nil || st.source == "" {
		return "", -1
	}
	if st.lastAt.IsZero() {
		return st.source, -1
	}
	return st.source, now.Sub(st.lastAt)
}

// forget drops what the poller knows of a worker gone for good.
func (p *loadPoller) forget(url string) {
	p.mu.Lock()
	st := p.workers[url]
	delete(p.workers, url)
	p.mu.Unlock()
	if st != nil && p.Metrics != nil {
		p.Metrics.loadSource(url, st.source, "")
	}
}
