//go:build soak

package main

// The acceptance soak of issue 45 (make soak-acceptance; PDROUTER_SOAK_DURATION, default 5m,
// and PDROUTER_SOAK_RATE, default 300 req/s): `router serve` as its own process in front of
// fakeworkers — 3 prefill (one answers 2 % of its requests with 500, one never finishes a KV
// transfer) and 3 decode of 2 DP ranks each (one cuts every stream after 16 tokens and answers
// 2 % with 503) — under open-loop Poisson load from router bench, with this schedule:
//
//	 60 s – 90 s  decode B hangs: it accepts every request and never answers (its health
//	              endpoint still does), restarted as itself at 90 s
//	120 s         decode A is killed; restarted on its port 5 s later
//	150 s – 165 s decode B removed (POST /remove_worker), then added back (POST /add_worker)
//
// and then steady load to the end. It checks, and logs the figures of, each acceptance point:
// every request answered within its timeout (an HTTP status, or a stream that ended); an error
// event only in a stream that had sent tokens (a failure before the first token is a status);
// no breaker opened on the two prefill workers whose only faults are their own rare ones;
// decode A back in rotation within 5 s of its /health answering; decode B at ≥ 50 % of its
// fair share of the 30 s after it was added back; TTFT P99 of the requests sent during the
// hang ≤ 2× that of the steady 20–60 s; the router's goroutines and open fds, sampled every
// second, under a bound stated from its settings and the peak of client requests in flight;
// and its RSS over the last half of the run, flat within ±10 % when the run lasts 30 minutes
// or more. The machine is expected loaded (make soak-acceptance runs it beside
// `stress-ng --cpu 2` when stress-ng is installed).

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/pdrouter/pdrouter/bench"
	"github.com/pdrouter/pdrouter/fakeworker"
	"github.com/pdrouter/pdrouter/internal/testutil"
	"github.com/pdrouter/pdrouter/reports"
	"github.com/pdrouter/pdrouter/router"
	"github.com/pdrouter/pdrouter/sim/engine"
	"github.com/pdrouter/pdrouter/workloads"
)

// The router's settings the bounds are stated from.
const (
	soakMaxWorkerRequests = 48 // --max-worker-requests
	soakWorkers           = 6
)

// Decode B hangs for hangFor from hangFrom after the load began.
const (
	hangFrom = 60 * time.Second
	hangFor  = 30 * time.Second
)

func TestSoakAcceptance(t *testing.T) {
	duration := envDuration(t, "PDROUTER_SOAK_DURATION", 5*time.Minute)
	rate := 300.0
	if v := os.Getenv("PDROUTER_SOAK_RATE"); v != "" {
		r, err := strconv.ParseFloat(v, 64)
		require.NoError(t, err, "PDROUTER_SOAK_RATE")
		rate = r
	}
	require.GreaterOrEqual(t, duration, 4*time.Minute, "the fault schedule needs 4 minutes")
	prof, err := engine.LookupProfile("llama3-8b-h100")
	require.NoError(t, err)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()

	base := fakeworker.Config{Host: "127.0.0.1", Profile: prof, Speedup: 2, BootstrapTimeout: 3 * time.Second, DPSize: 2}
	start := func(mode engine.Role, seed uint64, f fakeworker.Failures, port int) *fakeworker.Worker {
		w, err := startSoakWorker(ctx, base, mode, seed, f, port)
		require.NoError(t, err)
		return w
	}
	prefills := []*fakeworker.Worker{
		start(engine.RolePrefill, 1, fakeworker.Failures{ErrorRate: 0.02}, 0),
		start(engine.RolePrefill, 2, fakeworker.Failures{}, 0),
		start(engine.RolePrefill, 3, fakeworker.Failures{NeverSignalKV: true}, 0),
	}
	decA := start(engine.RoleDecode, 4, fakeworker.Failures{}, 0)
	decB := start(engine.RoleDecode, 5, fakeworker.Failures{}, 0)
	decC := start(engine.RoleDecode, 6, fakeworker.Failures{CutStreamAfter: 16, ErrorRate: 0.02, ErrorStatus: 503}, 0)
	urlA, urlB := decA.URL(), decB.URL()
	portA, portB := portOf(t, urlA), portOf(t, urlB)

	// The router, as its own process: its RSS, fds and goroutines are its own.
	dir := t.TempDir()
	bin := filepath.Join(dir, "router")
	out, err := exec.Command("go", "build", "-o", bin, ".").CombinedOutput()
	require.NoError(t, err, "go build: %s", out)
	port, metricsPort := testutil.FreePort(t, "127.0.0.1"), testutil.FreePort(t, "127.0.0.1")
	args := []string{"serve", "--host", "127.0.0.1", "--port", strconv.Itoa(port), "--prometheus-host", "127.0.0.1",
		"--prometheus-port", strconv.Itoa(metricsPort), "--pd-disaggregation", "--dp-aware", "--seed", "1",
		"--request-timeout-secs", "10", "--max-worker-requests", strconv.Itoa(soakMaxWorkerRequests),
		// The approximate trees' bound, reached in the first minute (16 M characters per role,
		// trimmed on insert): every prompt is new, so with the default bound (1 G characters)
		// the trees, and RSS with them, would grow for hours before it binds
		// (docs/operations.md, "Memory").
		"--max-tree-total-chars", "16000000"}
	for _, p := range prefills {
		args = append(args, "--prefill", p.URL(), strconv.Itoa(p.BootstrapPort()))
	}
	for _, d := range []*fakeworker.Worker{decA, decB, decC} {
		args = append(args, "--decode", d.URL())
	}
	cmd := exec.CommandContext(ctx, bin, args...)
	stderr, err := cmd.StderrPipe()
	require.NoError(t, err)
	cmd.Env = append(os.Environ(), "GOMAXPROCS=2")
	require.NoError(t, cmd.Start())
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	logs := &routerLog{}
	go logs.read(stderr)
	front := fmt.Sprintf("http://127.0.0.1:%d", port)
	metrics := fmt.Sprintf("http://127.0.0.1:%d/metrics", metricsPort)
	require.Eventually(t, func() bool { return healthyWorkers(front) == soakWorkers }, 60*time.Second, 100*time.Millisecond,
		"every worker in rotation before the load")

	// Once a second: the router's goroutines, open fds and RSS.
	var samplesMu sync.Mutex
	var samples []soakSample
	began := time.Now()
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		tick := time.NewTicker(time.Second)
		defer tick.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-tick.C:
			}
			m := scrape(metrics)
			if m == nil {
				continue
			}
			samplesMu.Lock()
			samples = append(samples, soakSample{at: time.Since(began), goroutines: int(m["go_goroutines"]),
				fds: int(m["process_open_fds"]), rss: m["process_resident_memory_bytes"]})
			samplesMu.Unlock()
		}
	}()

	// The fault schedule.
	at := func(d time.Duration) bool {
		select {
		case <-ctx.Done():
			return false
		case <-time.After(time.Until(began.Add(d))):
			return true
		}
	}
	// What the schedule measured, the test's to read once scheduled is closed.
	var (
		backA                   time.Duration
		reAddedBCount, reAddAll [2]float64 // decode B's finished requests, and all decodes', at the re-add and 30 s later
	)
	scheduled := make(chan struct{})
	// restart stops *w and starts a decode worker on its port in its place.
	restart := func(w **fakeworker.Worker, port int, seed uint64, f fakeworker.Failures) bool {
		(*w).Stop()
		_ = (*w).Wait()
		nw, err := startSoakWorker(ctx, base, engine.RoleDecode, seed, f, port)
		if err != nil {
			t.Errorf("restart on port %d: %v", port, err)
			return false
		}
		*w = nw
		return true
	}
	go func() {
		defer close(scheduled)
		if !at(hangFrom) || !restart(&decB, portB, 50, fakeworker.Failures{HangRate: 1}) {
			return
		}
		if !at(hangFrom+hangFor) || !restart(&decB, portB, 51, fakeworker.Failures{}) {
			return
		}
		if !at(120 * time.Second) {
			return
		}
		decA.Stop() // killed: down for 5 s
		_ = decA.Wait()
		if !at(125 * time.Second) {
			return
		}
		nw, err := startSoakWorker(ctx, base, engine.RoleDecode, 52, fakeworker.Failures{}, portA)
		if err != nil {
			t.Errorf("restart decode A: %v", err)
			return
		}
		decA = nw
		healthyAt := time.Since(began) // Start returns once it answers /health
		poll := time.NewTicker(20 * time.Millisecond)
		for i := 0; i < 1000 && soakWorkerState(front, urlA) != string(router.WorkerHealthy); i++ { // 20 s at most
			<-poll.C
		}
		poll.Stop()
		backA = time.Since(began) - healthyAt
		if !at(150 * time.Second) {
			return
		}
		post(t, front+"/remove_worker?url="+urlB)
		if !at(165 * time.Second) {
			return
		}
		post(t, front+"/add_worker?url="+urlB+"&role=decode")
		reAddedBCount[0], reAddAll[0] = finished(decB), finished(decA)+finished(decB)+finished(decC)
		if !at(195 * time.Second) {
			return
		}
		reAddedBCount[1], reAddAll[1] = finished(decB), finished(decA)+finished(decB)+finished(decC)
	}()

	p := workloads.DefaultParams()
	// Prompts for the whole run and more (the load's rate is Poisson's mean): the run ends at
	// its duration, not when they run out.
	p.Workload, p.NumPrompts, p.InputLen, p.OutputLen, p.RangeRatio = workloads.WorkloadRandom, int(1.5*rate*duration.Seconds())+1000, 256, 32, 0.5
	l := workloads.DefaultLoadParams()
	l.Rates, l.Arrival, l.Duration = []float64{rate}, workloads.ArrivalPoisson, duration
	benchOut := filepath.Join(dir, "bench")
	res, err := bench.Run(ctx, bench.Config{URL: front, Workload: p, Load: l, Out: benchOut,
		RequestTimeout: 30 * time.Second, MaxErrorRate: -1})
	require.NoError(t, err)
	<-scheduled // the fault schedule ends by 195 s, inside the shortest run
	lv := res.Levels[0]
	t.Logf("soak: %d requests at %.0f req/s for %s, %d failed %v; TTFT p50 %.0f p99 %.0f, E2E p99 %.0f max %.0f ms",
		lv.Requests, rate, duration, lv.Errors, lv.ErrorsByKind, lv.TTFTMs.P50, lv.TTFTMs.P99, lv.E2EMs.P99, lv.E2EMs.Max)
	_, recs, err := reports.ReadDir(benchOut)
	require.NoError(t, err)

	// Every request answered, within its timeout: a status, or a stream that ended (the
	// router's request timeout is 10 s; the client's is 30 s).
	unanswered := 0
	for _, r := range recs {
		if r.Error != nil && !answered(*r.Error) {
			unanswered++
			if unanswered <= 5 {
				t.Logf("unanswered: %s", *r.Error)
			}
		}
	}
	assert.Zero(t, unanswered, "every request answered")
	byKind := map[string][]string{}
	for _, r := range recs {
		if r.Error != nil {
			k := reports.ErrorKind(*r.Error)
			byKind[k] = append(byKind[k], *r.Error)
		}
	}
	for k, errs := range byKind {
		t.Logf("%d × %s, e.g. %q", len(errs), k, errs[:min(2, len(errs))])
	}
	assert.LessOrEqual(t, lv.E2EMs.Max, 11_000.0, "no request past --request-timeout-secs")

	// Stream errors only where tokens had already been sent.
	early := 0
	for _, r := range recs {
		if r.Error != nil && streamError(*r.Error) && r.OutputTokens == 0 && r.TTFTMs == nil {
			early++
			if early <= 5 {
				t.Logf("error event before any token: %s", *r.Error)
			}
		}
	}
	assert.Zero(t, early, "an error event only after tokens; before them, an HTTP status")

	// No breaker opened on a prefill worker for a peer's failure: the two whose own faults are
	// rare (2 % errors, none) never had theirs open.
	opened := logs.breakersOpened()
	names := map[string]string{prefills[0].URL(): "prefill 0 (2 % errors)", prefills[1].URL(): "prefill 1",
		prefills[2].URL(): "prefill 2 (never sends KV)", urlA: "decode A (killed at 120 s)",
		urlB: "decode B (hangs 60–90 s, re-added at 165 s)", decC.URL(): "decode C (cuts streams, 2 % 503s)"}
	for u, n := range opened {
		t.Logf("breaker opened %d times: %s", n, names[u])
	}
	for _, p := range prefills[:2] {
		assert.Zero(t, opened[p.URL()], "prefill %s's breaker opened", p.URL())
	}

	// The restarted worker back within 5 s of its health endpoint answering.
	t.Logf("decode A back in rotation %.2f s after its /health answered", backA.Seconds())
	assert.Positive(t, backA)
	assert.LessOrEqual(t, backA, 5*time.Second, "restarted worker back in rotation within 5 s")

	// The re-added worker at ≥ 50 % of its fair share within 30 s.
	mine, all := reAddedBCount[1]-reAddedBCount[0], reAddAll[1]-reAddAll[0]
	share := mine / (all / 3)
	t.Logf("decode B, added back: %.0f of the decodes' %.0f finished requests in its first 30 s: %.0f %% of a fair share", mine, all, 100*share)
	assert.GreaterOrEqual(t, share, 0.5, "re-added worker at ≥ 50 %% of its fair share within 30 s")

	// TTFT P99 during the hang ≤ 2× the steady P99.
	steady, during := ttftsSent(recs, 20*time.Second, hangFrom), ttftsSent(recs, hangFrom, hangFrom+hangFor)
	ps, ph := reports.Percentile(steady, 99), reports.Percentile(during, 99)
	t.Logf("TTFT P99: steady (20–60 s, %d requests) %.0f ms, during the hang (%d requests) %.0f ms: %.2f×", len(steady), ps, len(during), ph, ph/ps)
	assert.LessOrEqual(t, ph, 2*ps, "P99 during the hang ≤ 2× the steady P99")

	// Goroutines and fds under the stated bound, from the peak of client requests in flight:
	// fds ≤ I + M×W + 64 (a connection per client in flight or idle, at most M upstream
	// connections per worker, listeners, logs and the runtime's own); goroutines ≤ 3×I + 8×W +
	// 64 (two per client connection — its own and its request's body reader — plus a PD
	// request's prefill leg; health, load polls and KV events per worker; the servers').
	peak := peakInFlight(recs)
	fdBound := peak + soakMaxWorkerRequests*soakWorkers + 64
	grBound := 3*peak + 8*soakWorkers + 64
	samplesMu.Lock()
	ss := slices.Clone(samples)
	samplesMu.Unlock()
	require.NotEmpty(t, ss)
	maxFD, maxGR := 0, 0
	for _, s := range ss {
		maxFD, maxGR = max(maxFD, s.fds), max(maxGR, s.goroutines)
	}
	t.Logf("router: peak %d client requests in flight; open fds max %d (bound %d), goroutines max %d (bound %d)", peak, maxFD, fdBound, maxGR, grBound)
	assert.LessOrEqual(t, maxFD, fdBound, "open fds")
	assert.LessOrEqual(t, maxGR, grBound, "goroutines")

	// RSS over the last half of the run.
	var half []float64
	for _, s := range ss {
		if s.at >= duration/2 && s.at <= duration {
			half = append(half, s.rss)
		}
	}
	if assert.NotEmpty(t, half) {
		lo, hi := slices.Min(half), slices.Max(half)
		mid := (lo + hi) / 2
		t.Logf("router RSS over the last half: %.1f–%.1f MB (±%.1f %%); at 1 min %.1f MB", lo/1e6, hi/1e6, 100*(hi-lo)/2/mid, rssAt(ss, time.Minute)/1e6)
		if duration >= 30*time.Minute {
			assert.LessOrEqual(t, (hi-lo)/2, 0.10*mid, "RSS flat (±10 %) over the last half")
		}
	}
	cancel()
	wg.Wait()
}

// answered reports whether a failed request got an answer: an HTTP status, or an error event
// that ended its stream — not a timeout, a failed connection or a stream cut without one.
func answered(formatted string) bool {
	return strings.HasPrefix(reports.ErrorKind(formatted), "http_") || streamError(formatted)
}

// streamError reports whether a failure came as an error event inside a stream that had
// begun with status 200 (the bench's kind server_error).
func streamError(formatted string) bool {
	return reports.ErrorKind(formatted) == "server_error"
}

// ttftsSent is the TTFTs of the requests sent between from and to after the level began.
func ttftsSent(recs []reports.Record, from, to time.Duration) []float64 {
	var out []float64
	for _, r := range recs {
		at := time.Duration(r.StartMs * float64(time.Millisecond))
		if at >= from && at < to && r.TTFTMs != nil {
			out = append(out, *r.TTFTMs)
		}
	}
	slices.Sort(out)
	return out
}

// peakInFlight is the most requests in flight at once, from the client's records.
func peakInFlight(recs []reports.Record) int {
	type edge struct {
		at    float64
		delta int
	}
	es := make([]edge, 0, 2*len(recs))
	for _, r := range recs {
		es = append(es, edge{r.StartMs, 1}, edge{r.StartMs + r.E2EMs, -1})
	}
	slices.SortFunc(es, func(a, b edge) int {
		if a.at != b.at {
			if a.at < b.at {
				return -1
			}
			return 1
		}
		return a.delta - b.delta
	})
	n, peak := 0, 0
	for _, e := range es {
		n += e.delta
		peak = max(peak, n)
	}
	return peak
}

// soakSample is the router process's state at one moment of the soak.
type soakSample struct {
	at              time.Duration // since the load began
	goroutines, fds int
	rss             float64 // bytes
}

// rssAt is the RSS of the first sample at or after at.
func rssAt(ss []soakSample, at time.Duration) float64 {
	for _, s := range ss {
		if s.at >= at {
			return s.rss
		}
	}
	return 0
}

// envDuration reads a duration from the environment, def when unset.
func envDuration(t *testing.T, name string, def time.Duration) time.Duration {
	v := os.Getenv(name)
	if v == "" {
		return def
	}
	d, err := time.ParseDuration(v)
	require.NoError(t, err, name)
	return d
}

func post(t *testing.T, url string) {
	resp, err := http.Post(url, "", nil)
	if !assert.NoError(t, err, url) {
		return
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	assert.Less(t, resp.StatusCode, 300, "%s: %s", url, body)
}

// workerList is GET /workers: every worker's URL and state.
func workerList(front string) []struct {
	URL   string `json:"url"`
	State string `json:"state"`
} {
	resp, err := http.Get(front + "/workers")
	if err != nil {
		return nil
	}
	defer resp.Body.Close()
	var doc struct {
		Workers []struct {
			URL   string `json:"url"`
			State string `json:"state"`
		} `json:"workers"`
	}
	if json.NewDecoder(resp.Body).Decode(&doc) != nil {
		return nil
	}
	return doc.Workers
}

// healthyWorkers counts the workers in rotation (under --dp-aware /workers lists each rank,
// "url@rank": a worker counts once).
func healthyWorkers(front string) int {
	seen := map[string]bool{}
	for _, w := range workerList(front) {
		if w.State == string(router.WorkerHealthy) {
			base, _, _ := strings.Cut(w.URL, "@")
			seen[base] = true
		}
	}
	return len(seen)
}

// soakWorkerState is url's state in /workers (its first rank's under --dp-aware), "" when absent.
func soakWorkerState(front, url string) string {
	for _, w := range workerList(front) {
		if base, _, _ := strings.Cut(w.URL, "@"); base == url {
			return w.State
		}
	}
	return ""
}

// finished is a fakeworker's count of finished requests (sglang:num_requests_total).
func finished(w *fakeworker.Worker) float64 {
	return scrape(w.URL() + "/metrics")["sglang:num_requests_total"]
}

// scrape reads every metric of a Prometheus text page, the value of its first series (the
// router's and fakeworkers' metrics read here have one); nil when the page does not answer or
// parse.
func scrape(url string) map[string]float64 {
	resp, err := http.Get(url)
	if err != nil {
		return nil
	}
	defer resp.Body.Close()
	parser := expfmt.NewTextParser(model.UTF8Validation)
	families, err := parser.TextToMetricFamilies(resp.Body)
	if err != nil {
		return nil
	}
	m := map[string]float64{}
	for name, f := range families {
		if len(f.GetMetric()) == 0 {
			continue
		}
		switch x := f.GetMetric()[0]; {
		case x.GetGauge() != nil:
			m[name] = x.GetGauge().GetValue()
		case x.GetCounter() != nil:
			m[name] = x.GetCounter().GetValue()
		case x.GetUntyped() != nil:
			m[name] = x.GetUntyped().GetValue()
		}
	}
	return m
}

// routerLog reads the router process's log lines and counts breaker openings per worker.
type routerLog struct {
	mu     sync.Mutex
	opened map[string]int
}

// toBreakerOpen matches the log line of a worker's change of state to breaker_open (the
// server logs each change with worker=URL … to=STATE).
var toBreakerOpen = regexp.MustCompile(`\bworker=(\S+) .*\bto=` + string(router.WorkerBreakerOpen) + `\b`)

func (l *routerLog) read(r io.Reader) {
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		if m := toBreakerOpen.FindStringSubmatch(sc.Text()); m != nil {
			l.mu.Lock()
			if l.opened == nil {
				l.opened = map[string]int{}
			}
			l.opened[strings.Trim(m[1], `"`)]++
			l.mu.Unlock()
		}
	}
}

func (l *routerLog) breakersOpened() map[string]int {
	l.mu.Lock()
	defer l.mu.Unlock()
	out := map[string]int{}
	for k, v := range l.opened {
		out[k] = v
	}
	return out
}
