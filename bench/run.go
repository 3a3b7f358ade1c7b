package bench

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	vegeta "github.com/tsenart/vegeta/v12/lib"

	"github.com/pdrouter/pdrouter/reports"
	"github.com/pdrouter/pdrouter/workloads"
)

// errStop is what our Targeters return to end an attack (vegeta then stops its pacer and
// reports one Result carrying this error, which is not a request).
var errStop = errors.New("bench: level done")

// Run runs every level of cfg in order (SPEC §5) and returns the results. With cfg.Out it
// streams requests.jsonl there and rewrites results.json after each level. Request failures
// are counted in the results, never returned; Run returns an error for a bad Config, an
// unreadable workload, a failed --flush-cache, an output write error or a cancelled ctx
// (with the levels completed so far).
func Run(ctx context.Context, cfg Config) (*reports.Results, error) {
	u, err := cfg.validate()
	if err != nil {
		return nil, err
	}
	if cfg.RequestTimeout == 0 {
		cfg.RequestTimeout = DefaultRequestTimeout
	}
	if cfg.FollowUpWorkers == 0 {
		cfg.FollowUpWorkers = DefaultFollowUpWorkers
	}
	base := cfg.Transport
	if base == nil {
		t := newBaseTransport()
		defer t.CloseIdleConnections()
		base = t
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	if cfg.Transport == nil { // a test's own transport needs no listener
		if err := reachable(ctx, u); err != nil {
			return nil, err
		}
	}

	if cfg.DiscoverModel && cfg.Workload.API != workloads.APIGenerate {
		m, err := discoverModel(ctx, &http.Client{Transport: base}, strings.TrimRight(u.String(), "/"), cfg.Header)
		switch {
		case err == nil:
			cfg.Workload.Model = m
			if cfg.Progress != nil {
				fmt.Fprintf(cfg.Progress, "model %s (from the target's /v1/models)\n", m)
			}
		case cfg.Progress != nil:
			var uerr *url.Error
			if errors.As(err, &uerr) {
				// The requests will fail the same way and say why, once.
				err = errors.New("no answer")
			}
			fmt.Fprintf(cfg.Progress, "model %s: %v (pass --model)\n", cfg.Workload.Model, err)
		}
	}

	wl, err := reports.NewWorkload(cfg.Workload.Workload, cfg.Workload.Summary())
	if err != nil {
		return nil, err
	}
	replay, err := json.Marshal(workloads.Replay{Workload: cfg.Workload, Load: cfg.Load})
	if err != nil {
		return nil, err
	}
	target := cfg.URL
	started := time.Now().UTC().Truncate(time.Second)
	res := &reports.Results{Schema: reports.SchemaVersion, Meta: reports.Meta{
		Tool: reports.ToolBench, Version: cfg.Version, Seed: int64(cfg.Workload.Seed),
		Workload: wl, Target: &target, Started: &started, Label: cfg.Label, Command: cfg.Command, Replay: replay,
	}}

	r := &runner{cfg: cfg, base: strings.TrimRight(u.String(), "/"), ctx: ctx}
	r.tr = newTiming(ctx, base, cfg.RequestTimeout)
	r.client = &http.Client{Transport: r.tr}
	r.flushClient = &http.Client{Transport: base, Timeout: 30 * time.Second}
	r.header = http.Header{"Content-Type": {"application/json"}, "Accept": {"text/event-stream"}}
	for k, vs := range cfg.Header {
		r.header[http.CanonicalHeaderKey(k)] = append([]string(nil), vs...)
	}
	if cfg.Out != "" {
		if err := os.MkdirAll(cfg.Out, 0o755); err != nil {
			return nil, fmt.Errorf("bench: --out: %w", err)
		}
		f, err := os.Create(filepath.Join(cfg.Out, reports.RequestsFile))
		if err != nil {
			return nil, fmt.Errorf("bench: --out: %w", err)
		}
		defer f.Close()
		r.rw = reports.NewRecordWriter(f)
	}

	stopScrape := func() error { return nil }
	if len(cfg.ScrapeMetrics) > 0 {
		if cfg.Out == "" {
			return nil, fmt.Errorf("bench: --scrape-metrics needs --out (the samples go to DIR/%s)", MetricsFile)
		}
		interval := cfg.ScrapeInterval
		if interval <= 0 {
			interval = DefaultScrapeInterval
		}
		sc, err := startScraper(ctx, cfg.ScrapeMetrics, cfg.Out, interval, r.flushClient)
		if err != nil {
			return nil, err
		}
		defer func() { _ = sc.stop() }() // early returns; the normal end below reports a failed flush
		stopScrape = sc.stop
	}

	res.Meta.Router = r.describe("/get_router_config")
	res.Meta.ServerInfo = r.describe("/get_server_info")
	r.recordWorkers(res)

	for i, lv := range cfg.Load.Levels(cfg.Workload.IsTrace()) {
		if i > 0 && cfg.Load.FlushCache {
			if err := r.flush(); err != nil {
				return res, err
			}
		}
		level, err := r.level(i, lv)
		if err != nil {
			return res, err
		}
		res.Levels = append(res.Levels, level)
		if cfg.Out != "" {
			if err := reports.WriteResults(cfg.Out, res); err != nil {
				return res, err
			}
		}
		if err := ctx.Err(); err != nil {
			return res, fmt.Errorf("bench: stopped after level %s: %w", level.Label, err)
		}
	}
	if err := stopScrape(); err != nil {
		return res, err
	}
	return res, checkErrorRate(res, cfg.MaxErrorRate, r.examples)
}

// runner holds what every level of a run shares.
type runner struct {
	cfg         Config
	base        string // URL without a trailing slash
	ctx         context.Context
	tr          *timing
	client      *http.Client // through the timing transport; vegeta copies it
	flushClient *http.Client
	header      http.Header // sent with every request, plus X-Request-Id
	rw          *reports.RecordWriter
	examples    map[string]map[string]string // level label → error kind → first message
}

// levelInfo maps a workloads level to the reports level it produces.
func levelInfo(lv workloads.Level) reports.LevelInfo {
	switch {
	case lv.Concurrency > 0:
		return reports.ClosedLoop(lv.Concurrency)
	case lv.Arrival == workloads.ArrivalTrace:
		return reports.Trace()
	case lv.Arrival == workloads.ArrivalBurst || math.IsInf(lv.Rate, 1):
		return reports.Burst()
	}
	return reports.OpenLoop(lv.Rate, lv.Arrival)
}

// level runs level number i: its first Load.Warmup requests unrecorded, then the measured ones.
func (r *runner) level(i int, lv workloads.Level) (reports.Level, error) {
	info := levelInfo(lv)
	load := r.cfg.Load
	src, err := workloads.NewSource(r.cfg.Load.LevelParams(r.cfg.Workload, i))
	if err != nil {
		return reports.Level{}, err
	}
	defer src.Close()
	limit := 0
	if load.Requests > 0 {
		limit = load.Warmup + load.Requests
	}
	l := r.newLevel(info.Label, src, load.Warmup, limit, load.Duration)
	total := expectedRequests(r.cfg.Workload)
	if load.Requests > 0 && (total == 0 || load.Requests < total) {
		total = load.Requests
	}
	prog := startProgress(r.cfg.Progress, r.cfg.ProgressTTY, info.Label, total, l.counts, l.p50TTFT)
	switch {
	case lv.Concurrency > 0:
		l.closed(lv.Concurrency)
	case lv.Arrival == workloads.ArrivalTrace:
		arr, closer, err := workloads.OpenTraceArrivals(r.cfg.Workload)
		if err != nil {
			prog.stop()
			return reports.Level{}, err
		}
		l.open(Pacer{Arrivals: arr}, true)
		closer.Close()
		if err := arr.Err(); err != nil {
			l.fatal(err)
		}
	default:
		// The simulator seeds level i's arrivals the same way, so both see the same offsets.
		l.open(Pacer{Arrivals: lv.Arrivals(load, r.cfg.Workload.Seed+uint64(i), 0), Nominal: lv.Rate}, false)
	}
	prog.stop()
	if err := l.err(); err != nil {
		return reports.Level{}, err
	}
	info.Duration = l.duration()
	info.SLO = r.cfg.SLO
	info.CacheUnknown = !l.anyCached
	agg, err := reports.Aggregate(info, l.records)
	if err != nil {
		return agg, err
	}
	if r.examples == nil {
		r.examples = map[string]map[string]string{}
	}
	r.examples[info.Label] = l.examples
	if checkErrorRate(&reports.Results{Levels: []reports.Level{agg}}, r.cfg.MaxErrorRate, nil) == nil {
		// Errors within the allowed rate: one example per kind here, since Run's error, which
		// would carry them, does not come.
		l.writeExamples(r.cfg.Progress)
	}
	return agg, nil
}

// describe GETs path from the target and returns its JSON object answer, or nil when the
// target does not answer one within a few seconds: a router serve answers /get_router_config
// (its settings) and /get_server_info (its first worker's), an SGLang worker only the second.
// What it returns is recorded in results.json so report --compare can name what differs.
func (r *runner) describe(path string) json.RawMessage {
	ctx, cancel := context.WithTimeout(r.ctx, describeTimeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, r.base+path, nil)
	if err != nil {
		return nil
	}
	for k, vs := range r.cfg.Header {
		req.Header[http.CanonicalHeaderKey(k)] = vs
	}
	resp, err := r.flushClient.Do(req)
	if err != nil {
		return nil
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, maxDescribeBody))
	if err != nil || resp.StatusCode != http.StatusOK {
		return nil
	}
	var buf bytes.Buffer
	if json.Compact(&buf, body) != nil || buf.Len() == 0 || buf.Bytes()[0] != '{' {
		return nil
	}
	return buf.Bytes()
}

const (
	describeTimeout = 2 * time.Second
	maxDescribeBody = 1 << 20
)

// flush asks the target to drop its caches (POST /flush_cache).
func (r *runner) flush() error {
	req, err := http.NewRequestWithContext(r.ctx, http.MethodPost, r.base+"/flush_cache", nil)
	if err != nil {
		return fmt.Errorf("bench: --flush-cache: %w", err)
	}
	for k, vs := range r.cfg.Header {
		req.Header[http.CanonicalHeaderKey(k)] = vs
	}
	resp, err := r.flushClient.Do(req)
	if err != nil {
		return fmt.Errorf("bench: --flush-cache: %w", err)
	}
	body, _ := io.ReadAll(io.LimitReader(resp.Body, maxErrorBody))
	resp.Body.Close()
	if resp.StatusCode < 200 || resp.StatusCode > 299 {
		return fmt.Errorf("bench: --flush-cache: POST %s/flush_cache answered %s: %s",
			r.base, resp.Status, errorMessage(body, resp.StatusCode))
	}
	return nil
}

// writeExamples writes one example message per error kind (results.json has only counts).
func (l *levelRun) writeExamples(w io.Writer) {
	if w == nil {
		return
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	kinds := make([]string, 0, len(l.examples))
	for k := range l.examples {
		kinds = append(kinds, k)
	}
	slices.Sort(kinds)
	for _, k := range kinds {
		fmt.Fprintf(w, "%s: e.g. %s\n", l.label, l.examples[k])
	}
}

// levelRun is one level (or warm-up) in progress.
type levelRun struct {
	r      *runner
	label  string
	src    workloads.Source
	warmup int // the first warmup requests are not recorded
	limit  int // requests to send, warm-up included; 0 = no bound
	end    time.Time
	start  time.Time

	mu          sync.Mutex // protects the fields below
	sent        int
	recBegin    time.Time // when the first recorded request was issued
	settled     int
	warmSettled int // warm-up requests settled
	errs        int
	records     []reports.Record
	lastEnd     time.Time
	anyCached   bool
	fatalErr    error
	examples    map[string]string // first error message per kind
}

func (r *runner) newLevel(label string, src workloads.Source, warmup, limit int, d time.Duration) *levelRun {
	l := &levelRun{r: r, label: label, src: src, warmup: warmup, limit: limit, start: time.Now()}
	if d > 0 {
		l.end = l.start.Add(d)
	}
	return l
}

func (l *levelRun) counts() levelCounts {
	l.mu.Lock()
	defer l.mu.Unlock()
	return levelCounts{warm: l.warmSettled, warmTotal: l.warmup, done: l.settled, errs: l.errs}
}

// p50TTFT returns the median TTFT of the level's successful requests so far (the heartbeat's).
func (l *levelRun) p50TTFT() (float64, bool) {
	l.mu.Lock()
	v := make([]float64, 0, len(l.records))
	for i := range l.records {
		if r := &l.records[i]; r.Error == nil && r.TTFTMs != nil {
			v = append(v, *r.TTFTMs)
		}
	}
	l.mu.Unlock()
	if len(v) == 0 {
		return 0, false
	}
	slices.Sort(v)
	if n := len(v); n%2 == 0 {
		return (v[n/2-1] + v[n/2]) / 2, true
	}
	return v[len(v)/2], true
}

func (l *levelRun) fatal(err error) {
	l.mu.Lock()
	if l.fatalErr == nil {
		l.fatalErr = err
	}
	l.mu.Unlock()
}

func (l *levelRun) err() error {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.fatalErr != nil {
		return l.fatalErr
	}
	return nil
}

func (l *levelRun) duration() time.Duration {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.lastEnd.IsZero() || l.recBegin.IsZero() {
		return 0
	}
	return max(l.lastEnd.Sub(l.recBegin), 0)
}

// expired reports whether the level's --duration has passed.
func (l *levelRun) expired() bool { return !l.end.IsZero() && !time.Now().Before(l.end) }

// newRequest takes one request from the level's budget (nil when spent, past the deadline or
// cancelled).
func (l *levelRun) newRequest(turn workloads.Turn, sched time.Time) *request {
	if l.r.ctx.Err() != nil || l.expired() {
		return nil
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.limit > 0 && l.sent >= l.limit {
		return nil
	}
	n := l.sent
	l.sent++
	recorded := n >= l.warmup
	if recorded && l.recBegin.IsZero() {
		l.recBegin = time.Now()
	}
	return &request{id: l.label + "-" + strconv.Itoa(n), turn: turn, sched: sched, recorded: recorded}
}

// fill makes r vegeta's next target.
func (l *levelRun) fill(t *vegeta.Target, r *request) {
	h := make(http.Header, len(l.r.header)+1)
	for k, v := range l.r.header {
		h[k] = v
	}
	h[headerID] = []string{r.id}
	*t = vegeta.Target{Method: http.MethodPost, URL: l.r.base + r.turn.Path, Body: r.turn.Body, Header: h}
	l.r.tr.issue(r)
}

// drain settles the results of one attack.
func (l *levelRun) drain(name string, results <-chan *vegeta.Result, next func(*request)) {
	for res := range results {
		req := l.r.tr.join(name, res.Seq)
		if req == nil {
			if res.Error != errStop.Error() {
				// Not a request of ours (vegeta could not build it): nothing to settle.
				l.fatal(fmt.Errorf("bench: level %s: %s", l.label, res.Error))
			}
			continue
		}
		l.settle(req, res)
		next(req)
	}
}

// settle records a finished request.
func (l *levelRun) settle(req *request, res *vegeta.Result) {
	if req.errKind == "" && !req.finished && res.Error != "" {
		req.fail(time.Now(), reports.ErrKindConnection, res.Error)
	}
	if !req.recorded {
		l.mu.Lock()
		l.warmSettled++
		l.mu.Unlock()
		return
	}
	now := time.Now()
	l.mu.Lock()
	recBegin := l.recBegin
	l.mu.Unlock()
	rec := req.record(l.label, recBegin)
	if l.r.rw != nil {
		if err := l.r.rw.Write(&rec); err != nil {
			l.fatal(fmt.Errorf("bench: --out: %w", err))
		}
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	l.settled++
	if rec.Error != nil {
		l.errs++
		if l.examples == nil {
			l.examples = map[string]string{}
		}
		if k := reports.ErrorKind(*rec.Error); l.examples[k] == "" {
			l.examples[k] = *rec.Error
		}
	} else if req.hasCached {
		l.anyCached = true
	}
	if now.After(l.lastEnd) {
		l.lastEnd = now
	}
	l.records = append(l.records, rec)
}

// closed runs the level closed loop with n clients (SPEC §5).
func (l *levelRun) closed(n int) {
	ready := make(chan *request)
	clientsDone := make(chan struct{})
	var wg sync.WaitGroup
	for range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			l.client(ready)
		}()
	}
	go func() {
		wg.Wait()
		close(clientsDone)
	}()
	targeter := func(t *vegeta.Target) error {
		select {
		case req := <-ready:
			l.fill(t, req)
			return nil
		case <-clientsDone:
			return errStop
		}
	}
	name := l.label + "/closed"
	atk := vegeta.NewAttacker(vegeta.Client(l.r.client), vegeta.Workers(uint64(n)),
		vegeta.MaxWorkers(uint64(n)), vegeta.MaxBody(0))
	l.drain(name, atk.Attack(targeter, vegeta.ConstantPacer{}, 0, name), func(req *request) { close(req.done) })
	<-clientsDone
}

// client is one closed-loop client: one conversation at a time, turns in order, the actual
// reply appended, think time keeping the slot.
func (l *levelRun) client(ready chan<- *request) {
	ctx := l.r.ctx
	for {
		sess, err := l.src.Next()
		if err != nil {
			if err != io.EOF {
				l.fatal(err)
			}
			return
		}
		reply := ""
		for {
			turn, ok := sess.Next(reply)
			if !ok {
				break
			}
			if !l.wait(turn.ThinkTime) {
				return
			}
			req := l.newRequest(turn, time.Time{})
			if req == nil {
				return
			}
			req.done = make(chan struct{})
			select {
			case ready <- req:
			case <-ctx.Done():
				return
			}
			<-req.done
			if req.failed() {
				break // a failed turn ends its conversation
			}
			reply = req.reply.String()
		}
	}
}

// wait sleeps d (think time), cut short by the level's deadline or cancellation; it reports
// whether the level is still on.
func (l *levelRun) wait(d time.Duration) bool {
	if d > 0 {
		if !l.end.IsZero() {
			d = min(d, time.Until(l.end))
		}
		t := time.NewTimer(d)
		select {
		case <-t.C:
		case <-l.r.ctx.Done():
			t.Stop()
		}
	}
	return l.r.ctx.Err() == nil && !l.expired()
}

// open runs the level open loop: pacer schedules conversation starts; later turns follow their
// own replies through a second attacker.
func (l *levelRun) open(pacer Pacer, trace bool) {
	o := &openLoop{l: l, followups: make(chan *request), followDone: make(chan struct{})}
	var idx atomic.Int64
	targeter := func(t *vegeta.Target) error {
		k := int(idx.Add(1) - 1)
		at, ok := pacer.Arrivals.At(k)
		if !ok || l.r.ctx.Err() != nil {
			return errStop
		}
		sess, err := l.src.Next()
		if err != nil {
			if err != io.EOF {
				l.fatal(err)
			}
			return errStop
		}
		if trace && sess.HasArrival {
			at = sess.Arrival
		}
		turn, ok := sess.Next("")
		if !ok {
			return errStop
		}
		req := l.newRequest(turn, l.start.Add(at))
		if req == nil {
			return errStop
		}
		req.sess = sess
		o.sessionStarted()
		l.fill(t, req)
		return nil
	}
	name := l.label + "/arrivals"
	atk := vegeta.NewAttacker(vegeta.Client(l.r.client), vegeta.MaxBody(0))
	l.start = time.Now()
	if !l.end.IsZero() {
		l.end = l.start.Add(l.r.cfg.Load.Duration)
	}
	l.drain(name, atk.Attack(targeter, pacer, 0, name), o.next)
	o.arrivalsFinished()
	o.wg.Wait()
}

// openLoop tracks an open-loop level's conversations.
type openLoop struct {
	l          *levelRun
	followups  chan *request // later turns, ready to send
	followDone chan struct{} // closed when no conversation can send again
	startOnce  sync.Once
	doneOnce   sync.Once
	wg         sync.WaitGroup // the follow-up attacker and pending turns

	mu           sync.Mutex // protects sessions, arrivalsDone
	sessions     int        // conversations not yet ended
	arrivalsDone bool
}

func (o *openLoop) sessionStarted() {
	o.mu.Lock()
	o.sessions++
	o.mu.Unlock()
}

func (o *openLoop) sessionEnded() {
	o.mu.Lock()
	o.sessions--
	o.checkDone()
	o.mu.Unlock()
}

func (o *openLoop) arrivalsFinished() {
	o.mu.Lock()
	o.arrivalsDone = true
	o.checkDone()
	o.mu.Unlock()
}

func (o *openLoop) checkDone() { // o.mu held
	if o.arrivalsDone && o.sessions == 0 {
		o.doneOnce.Do(func() { close(o.followDone) })
	}
}

// next continues req's conversation after req settled: its next turn is due after the think
// time; a failed turn or the last one ends the conversation.
func (o *openLoop) next(req *request) {
	l := o.l
	if req.failed() {
		o.sessionEnded()
		return
	}
	turn, ok := req.sess.Next(req.reply.String())
	if !ok {
		o.sessionEnded()
		return
	}
	o.startOnce.Do(o.startFollowUps)
	due := time.Now().Add(turn.ThinkTime)
	o.wg.Add(1)
	go func() {
		defer o.wg.Done()
		if !l.wait(turn.ThinkTime) {
			o.sessionEnded()
			return
		}
		nr := l.newRequest(turn, due)
		if nr == nil {
			o.sessionEnded()
			return
		}
		nr.sess = req.sess
		select {
		case o.followups <- nr:
		case <-l.r.ctx.Done():
			o.sessionEnded()
		}
	}()
}

// startFollowUps starts the attacker that sends later turns as they become ready.
func (o *openLoop) startFollowUps() {
	l := o.l
	targeter := func(t *vegeta.Target) error {
		select {
		case req := <-o.followups:
			l.fill(t, req)
			return nil
		case <-o.followDone:
			return errStop
		}
	}
	k := uint64(l.r.cfg.FollowUpWorkers)
	name := l.label + "/followups"
	atk := vegeta.NewAttacker(vegeta.Client(l.r.client), vegeta.Workers(k), vegeta.MaxWorkers(k), vegeta.MaxBody(0))
	results := atk.Attack(targeter, vegeta.ConstantPacer{}, 0, name)
	o.wg.Add(1)
	go func() {
		defer o.wg.Done()
		l.drain(name, results, o.next)
	}()
}
