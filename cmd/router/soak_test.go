//go:build soak

package main

// The fault soak (make test-soak, about a minute and a half): a PD cluster of fakeworkers with
// injected faults — 500s and 503s, hung requests, a prefill that never finishes its KV
// transfer, a decode worker that hangs on every request (its prefill legs end in bootstrap
// timeouts, which must be charged to it: no prefill breaker may open for them), cut streams, a
// decode worker that crashes and is restarted on its port, and a
// prefill worker in a network namespace of the test's own whose link goes down for 20 s, so
// its packets are dropped rather than refused — behind
// the real router (in-process), under open-loop Poisson load from router bench. Every request
// must get exactly one answer within its timeout, /get_loads must come back to zero, and the
// goroutines to their level before the load.

import (
	"context"
	"fmt"
	"log/slog"
	"maps"
	"net/http"
	"net/http/httptest"
	neturl "net/url"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"runtime/debug"
	"runtime/pprof"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/pdrouter/pdrouter/bench"
	"github.com/pdrouter/pdrouter/fakeworker"
	"github.com/pdrouter/pdrouter/reports"
	"github.com/pdrouter/pdrouter/router"
	"github.com/pdrouter/pdrouter/router/server"
	"github.com/pdrouter/pdrouter/sim/engine"
	"github.com/pdrouter/pdrouter/workloads"
)

func TestSoakFaultsUnderLoad(t *testing.T) {
	prof, err := engine.LookupProfile("llama3-8b-h100")
	require.NoError(t, err)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	base := fakeworker.Config{Host: "127.0.0.1", Profile: prof, Speedup: 2, BootstrapTimeout: 3 * time.Second}
	start := func(mode engine.Role, seed uint64, f fakeworker.Failures, port int) *fakeworker.Worker {
		w, err := startSoakWorker(ctx, base, mode, seed, f, port)
		require.NoError(t, err)
		return w
	}
	prefills := []*fakeworker.Worker{
		start(engine.RolePrefill, 1, fakeworker.Failures{ErrorRate: 0.05}, 0),
		start(engine.RolePrefill, 2, fakeworker.Failures{HangRate: 0.02}, 0),
		start(engine.RolePrefill, 3, fakeworker.Failures{NeverSignalKV: true}, 0),
	}
	decodes := []*fakeworker.Worker{
		start(engine.RoleDecode, 4, fakeworker.Failures{ErrorRate: 0.05, ErrorStatus: 503}, 0),
		start(engine.RoleDecode, 5, fakeworker.Failures{CrashAfter: 150}, 0),
		start(engine.RoleDecode, 6, fakeworker.Failures{CutStreamAfter: 20}, 0),
		// Accepts every request and never answers nor registers the room with its prefill: each
		// prefill leg paired with it times out in its bootstrap queue.
		start(engine.RoleDecode, 7, fakeworker.Failures{HangRate: 1}, 0),
	}
	hungDecode := decodes[3]
	// A prefill worker partitioned by dropped packets: its own process in a network namespace
	// the test makes (veth pair, 10.213.N.0/30), whose link the test takes down and up.
	part := startPartitionable(t, ctx)

	// The crashing decode worker comes back on its port a moment after it dies, every time.
	crashPort := portOf(t, decodes[1].URL())
	var restarts int
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		w := decodes[1]
		for ctx.Err() == nil {
			_ = w.Wait()
			if ctx.Err() != nil {
				return
			}
			select {
			case <-ctx.Done():
				return
			case <-time.After(2 * time.Second): // a quick restart
			}
			nw, err := startSoakWorker(ctx, base, engine.RoleDecode, uint64(50+restarts), fakeworker.Failures{CrashAfter: 150}, crashPort)
			if err != nil {
				t.Errorf("restart: %v", err)
				return
			}
			restarts++
			w = nw
		}
	}()

	rc := server.DefaultConfig()
	rc.PDDisaggregation = true
	rc.RequestTimeoutSecs = 10
	rc.HealthCheckIntervalSecs, rc.HealthCheckTimeoutSecs = 1, 1
	rc.CBTimeoutDurationSecs = 2
	for _, p := range prefills {
		port := p.BootstrapPort()
		rc.Prefill = append(rc.Prefill, router.PrefillWorker{URL: p.URL(), BootstrapPort: &port})
	}
	partPort := part.bootstrap
	rc.Prefill = append(rc.Prefill, router.PrefillWorker{URL: part.url, BootstrapPort: &partPort})
	for _, d := range decodes {
		rc.Decode = append(rc.Decode, d.URL())
	}
	rc.Seed = new(int64(1))
	breakers := &breakerLog{}
	srv, err := server.New(server.Options{Config: rc, Logger: slog.New(breakers)})
	require.NoError(t, err)
	sctx, stopRouter := context.WithCancel(ctx)
	require.NoError(t, srv.Start(sctx))
	front := httptest.NewServer(srv.Handler())
	defer front.Close()
	defer func() { stopRouter(); srv.Wait() }()
	baseGoroutines := runtime.NumGoroutine()
	baseHeap, baseRSS := settledHeap(), procRSS(t)

	p := workloads.DefaultParams()
	p.Workload, p.NumPrompts, p.InputLen, p.OutputLen, p.RangeRatio = workloads.WorkloadRandom, 100000, 256, 32, 0.5
	l := workloads.DefaultLoadParams()
	l.Rates, l.Arrival, l.Duration = []float64{40}, workloads.ArrivalPoisson, 60*time.Second
	began := time.Now()
	// 20 s into the load the partitioned worker's link goes down for 20 s.
	var partMu sync.Mutex
	var partSeen []router.WorkerState
	wg.Add(1)
	go func() {
		defer wg.Done()
		state := func() router.WorkerState {
			for _, w := range srv.Router().Workers() {
				if w.URL == part.url {
					return w.State
				}
			}
			return ""
		}
		for _, step := range []struct {
			after time.Duration
			up    bool
		}{{20 * time.Second, false}, {40 * time.Second, true}} {
			select {
			case <-ctx.Done():
				return
			case <-time.After(time.Until(began.Add(step.after))):
			}
			st := state()
			partMu.Lock()
			partSeen = append(partSeen, st)
			partMu.Unlock()
			part.link(t, step.up)
		}
		select {
		case <-ctx.Done():
		case <-time.After(time.Until(began.Add(58 * time.Second))):
			st := state()
			partMu.Lock()
			partSeen = append(partSeen, st)
			partMu.Unlock()
		}
	}()
	out := t.TempDir()
	res, err := bench.Run(ctx, bench.Config{URL: front.URL, Workload: p, Load: l, Out: out,
		RequestTimeout: 30 * time.Second, MaxErrorRate: -1})
	require.NoError(t, err)
	lv := res.Levels[0]
	t.Logf("soak: %d requests in %.0f s, %d failed %v; E2E p50 %.0f p99 %.0f max %.0f ms; decode worker restarts %d",
		lv.Requests, time.Since(began).Seconds(), lv.Errors, lv.ErrorsByKind, lv.E2EMs.P50, lv.E2EMs.P99, lv.E2EMs.Max, restarts)

	assert.Greater(t, lv.Requests, 1500, "the load ran")
	assert.Less(t, float64(lv.Errors)/float64(lv.Requests), 0.5, "retries and breakers keep most requests succeeding")
	assert.LessOrEqual(t, lv.E2EMs.Max, 11_000.0, "no request waits past --request-timeout-secs")
	assert.GreaterOrEqual(t, restarts, 1, "the crashing decode worker crashed and came back")
	partMu.Lock()
	seen := slices.Clone(partSeen)
	partMu.Unlock()
	t.Logf("partitioned prefill worker: state before the cut, before the repair, at the end: %v; it served %d requests", seen, part.served(t))
	if assert.Len(t, seen, 3) {
		assert.Equal(t, router.WorkerHealthy, seen[0], "before the cut")
		assert.NotEqual(t, router.WorkerHealthy, seen[1], "20 s without packets: out of rotation")
		assert.Equal(t, router.WorkerHealthy, seen[2], "back in rotation after the repair")
	}

	// The hanging decode worker's bootstrap timeouts were charged to it, never to the prefill
	// workers paired with it: the prefill workers whose own faults are rare (5 % errors, 2 %
	// hangs) never had their breaker open. (The one that never finishes a KV transfer and the
	// partitioned one fail on their own account.)
	opened := breakers.opened()
	names := map[string]string{part.url: "prefill partitioned"}
	for i, p := range prefills {
		names[p.URL()] = fmt.Sprintf("prefill %d %+v", i, p.Config().Failures)
	}
	for i, d := range decodes {
		names[d.URL()] = fmt.Sprintf("decode %d %+v", i, d.Config().Failures)
	}
	for u, n := range opened {
		t.Logf("breaker opened %d times: %s", n, names[u])
	}
	logErrorCauses(t, out)
	assert.Positive(t, opened[hungDecode.URL()], "the hanging decode worker's breaker opened")
	for _, p := range prefills[:2] {
		assert.Zero(t, opened[p.URL()], "prefill %s's breaker opened", p.URL())
	}

	// Every load back to zero, and the goroutines to their level before the load.
	require.Eventually(t, func() bool {
		for _, tg := range srv.Router().Targets() {
			if tg.Load != 0 {
				return false
			}
		}
		return true
	}, 20*time.Second, 50*time.Millisecond, "/get_loads back to zero")
	// Idle keep-alive connections hold three goroutines each until they expire: the decode
	// workers' bootstrap client keeps them 30 s, so the count settles after that.
	if !assert.Eventually(t, func() bool { return runtime.NumGoroutine() <= baseGoroutines+8 },
		45*time.Second, 100*time.Millisecond, "goroutines back to their level (%d before the load)", baseGoroutines) {
		var b strings.Builder
		_ = pprof.Lookup("goroutine").WriteTo(&b, 1)
		t.Logf("goroutines:\n%s", b.String())
	}
	// The heap back near its level before the load (the router, the workers and the bench
	// share this process): what stays is the router's prefix trees and the workers' KV caches,
	// a few MB; a leaked request would hold its bodies and stream buffers, and 2,000 of them
	// tens of MB.
	heap, rss := settledHeap(), procRSS(t)
	t.Logf("heap in use %.1f MB before the load, %.1f MB after; RSS %.1f MB before, %.1f MB after",
		float64(baseHeap)/1e6, float64(heap)/1e6, float64(baseRSS)/1e6, float64(rss)/1e6)
	assert.Less(t, heap, baseHeap+48<<20, "heap back near its level before the load")
	kinds := slices.Collect(func(yield func(string) bool) {
		for k := range lv.ErrorsByKind {
			if !yield(k) {
				return
			}
		}
	})
	t.Logf("error kinds: %v; goroutines before %d, after %d", kinds, baseGoroutines, runtime.NumGoroutine())
	cancel()
	wg.Wait()
}

// logErrorCauses logs the failed requests' errors, grouped with their numbers blanked.
func logErrorCauses(t *testing.T, dir string) {
	_, recs, err := reports.ReadDir(dir)
	if err != nil {
		t.Logf("reading the records: %v", err)
		return
	}
	digits := regexp.MustCompile(`[0-9]+`)
	causes := map[string]int{}
	for _, r := range recs {
		if r.Error != nil {
			msg := digits.ReplaceAllString(*r.Error, "N")
			causes[msg[:min(len(msg), 200)]]++
		}
	}
	for c, n := range causes {
		t.Logf("%5d × %s", n, c)
	}
}

// breakerLog is the router's log handler: it counts the transitions to breaker_open per worker
// (the server logs each state change with "worker" and "to").
type breakerLog struct {
	mu    sync.Mutex
	count map[string]int
}

func (b *breakerLog) Enabled(context.Context, slog.Level) bool { return true }
func (b *breakerLog) WithAttrs([]slog.Attr) slog.Handler       { return b }
func (b *breakerLog) WithGroup(string) slog.Handler            { return b }

func (b *breakerLog) Handle(_ context.Context, r slog.Record) error {
	var worker, to string
	r.Attrs(func(a slog.Attr) bool {
		switch a.Key {
		case "worker":
			worker = a.Value.String()
		case "to":
			to = a.Value.String()
		}
		return true
	})
	if to == string(router.WorkerBreakerOpen) {
		b.mu.Lock()
		if b.count == nil {
			b.count = map[string]int{}
		}
		b.count[worker]++
		b.mu.Unlock()
	}
	return nil
}

func (b *breakerLog) opened() map[string]int {
	b.mu.Lock()
	defer b.mu.Unlock()
	return maps.Clone(b.count)
}

func portOf(t *testing.T, raw string) int {
	t.Helper()
	u, err := neturl.Parse(raw)
	require.NoError(t, err)
	port, err := strconv.Atoi(u.Port())
	require.NoError(t, err)
	return port
}

// partitioned is a prefill fakeworker in its own network namespace, reached over a veth pair.
type partitioned struct {
	ns, hostIf, nsIf string
	url              string
	bootstrap        int
}

// startPartitionable makes the namespace and starts `router fakeworker --mode prefill` in it
// (a process of its own: a namespace belongs to a process). The test fails, never skips,
// without `ip netns` (root).
func startPartitionable(t *testing.T, ctx context.Context) *partitioned {
	t.Helper()
	n := os.Getpid() % 200
	p := &partitioned{ns: fmt.Sprintf("pdsoak%d", os.Getpid()), hostIf: fmt.Sprintf("pdh%d", n), nsIf: fmt.Sprintf("pdn%d", n)}
	hostIP, nsIP := fmt.Sprintf("10.213.%d.1", n), fmt.Sprintf("10.213.%d.2", n)
	run := func(args ...string) {
		out, err := exec.Command("ip", args...).CombinedOutput()
		require.NoError(t, err, "ip %v: %s", args, out)
	}
	run("netns", "add", p.ns)
	t.Cleanup(func() { _ = exec.Command("ip", "netns", "del", p.ns).Run() })
	run("link", "add", p.hostIf, "type", "veth", "peer", "name", p.nsIf)
	t.Cleanup(func() { _ = exec.Command("ip", "link", "del", p.hostIf).Run() })
	run("link", "set", p.nsIf, "netns", p.ns)
	run("addr", "add", hostIP+"/30", "dev", p.hostIf)
	run("link", "set", p.hostIf, "up")
	run("netns", "exec", p.ns, "ip", "addr", "add", nsIP+"/30", "dev", p.nsIf)
	run("netns", "exec", p.ns, "ip", "link", "set", p.nsIf, "up")
	run("netns", "exec", p.ns, "ip", "link", "set", "lo", "up")

	bin := filepath.Join(t.TempDir(), "router")
	build := exec.Command("go", "build", "-o", bin, ".")
	out, err := build.CombinedOutput()
	require.NoError(t, err, "go build: %s", out)
	p.bootstrap = 30001
	cmd := exec.CommandContext(ctx, "ip", "netns", "exec", p.ns, bin, "fakeworker", "--mode", "prefill",
		"--host", nsIP, "--port", "30000", "--bootstrap-port", strconv.Itoa(p.bootstrap),
		"--profile", "llama3-8b-h100", "--speedup", "2", "--bootstrap-timeout", "3s", "--log-level", "error")
	require.NoError(t, cmd.Start())
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	p.url = "http://" + nsIP + ":30000"
	require.Eventually(t, func() bool {
		resp, err := http.Get(p.url + "/health")
		if err != nil {
			return false
		}
		resp.Body.Close()
		return resp.StatusCode == http.StatusOK
	}, 30*time.Second, 50*time.Millisecond, "the partitioned worker did not start")
	return p
}

// link takes the namespace's end of the veth pair down (packets to the worker are dropped:
// no RST, no ICMP) or up again.
func (p *partitioned) link(t *testing.T, up bool) {
	state := "down"
	if up {
		state = "up"
	}
	if out, err := exec.Command("ip", "netns", "exec", p.ns, "ip", "link", "set", p.nsIf, state).CombinedOutput(); err != nil {
		t.Errorf("ip link set %s %s: %v: %s", p.nsIf, state, err, out)
	}
}

// served reads the worker's finished-request counter (-1: it does not answer).
func (p *partitioned) served(t *testing.T) int {
	m := scrape(p.url + "/metrics")
	if m == nil {
		return -1
	}
	return int(m["sglang:num_requests_total"])
}

// startSoakWorker starts a fakeworker configured as base, with the role, seed, faults and
// port given (0: any).
func startSoakWorker(ctx context.Context, base fakeworker.Config, mode engine.Role, seed uint64, f fakeworker.Failures, port int) (*fakeworker.Worker, error) {
	c := base
	c.Mode, c.Seed, c.Failures, c.Port = mode, seed, f, port
	return fakeworker.Start(ctx, c)
}

// settledHeap is the heap in use after a full collection, in bytes.
func settledHeap() uint64 {
	runtime.GC()
	debug.FreeOSMemory()
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	return m.HeapInuse
}

// procRSS is this process's resident set size (VmRSS) in bytes.
func procRSS(t *testing.T) uint64 {
	b, err := os.ReadFile("/proc/self/status")
	require.NoError(t, err)
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, "VmRSS:"); ok {
			kb, err := strconv.ParseUint(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 10, 64)
			require.NoError(t, err)
			return kb << 10
		}
	}
	t.Fatal("no VmRSS in /proc/self/status")
	return 0
}
