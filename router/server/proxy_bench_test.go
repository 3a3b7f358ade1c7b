package server

// Proxy benchmarks (issue 6): the router, as its own process, against a direct-to-worker
// baseline and nginx (proxy_buffering off, upstream keepalive) in one run, with the same
// instant SSE worker and load generator. Each experiment runs once per invocation: run with
// -benchtime 1x (make bench does). nginx must be installed (make bench installs it); a
// missing nginx fails the benchmark. $PDROUTER_BENCH_BIN replaces the router binary built from
// this tree; $PDROUTER_BENCH_BIN_B adds a second one (targets router-b and router-pd-b) for A/B
// comparisons, and $PDROUTER_BENCH_BIN_C a third (router-c, router-pd-c); $PDROUTER_BENCH_ROUND
// turns the order they run in (rotated). perf (linux-perf),
// when it can count raw_syscalls, adds syscalls and context switches per request.

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/pdrouter/pdrouter/internal/testutil"
	"github.com/pdrouter/pdrouter/router/wire"
)

// smallChat is the "small request": chat, ~100-character prompt, 16 output tokens, streamed.
const smallChat = `{"model":"m","stream":true,"max_tokens":16,"messages":[{"role":"user","content":"Summarise the plot of a short story about a lighthouse keeper who finds a map."}]}`

// instantWorker answers every chat request at once: 16 content chunks, a final chunk, [DONE],
// flushing per event like SGLang; a PD prefill leg (bootstrap fields, prefill role) gets a
// small JSON body. held > 0 makes it keep streams open after the first chunk until release.
type instantWorker struct {
	srv     *http.Server
	release chan struct{}
	hold    atomic.Bool
}

func newInstantWorker(tb testing.TB, prefill bool) (*instantWorker, string) {
	tb.Helper()
	w := &instantWorker{release: make(chan struct{})}
	chunks := make([][]byte, 0, 20)
	chunks = append(chunks, []byte(`data: {"id":"x","object":"chat.completion.chunk","choices":[{"index":0,"delta":{"role":"assistant","content":""}}]}`+"\n\n"))
	for i := range 16 {
		chunks = append(chunks, fmt.Appendf(nil, `data: {"id":"x","object":"chat.completion.chunk","choices":[{"index":0,"delta":{"content":" w%d"}}]}`+"\n\n", i))
	}
	chunks = append(chunks, []byte(`data: {"id":"x","object":"chat.completion.chunk","choices":[{"index":0,"delta":{},"finish_reason":"length"}]}`+"\n\n"), []byte("data: [DONE]\n\n"))
	h := http.HandlerFunc(func(rw http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		switch r.URL.Path {
		case "/get_server_info":
			_, _ = io.WriteString(rw, `{"dp_size":1}`)
			return
		case "/v1/loads": // an idle engine's report, as SGLang writes it
			_, _ = io.WriteString(rw, idleLoads)
			return
		}
		if prefill {
			rw.Header().Set("Content-Type", "application/json")
			_, _ = io.WriteString(rw, `{"meta_info":{"prompt_tokens":20,"cached_tokens":0}}`)
			return
		}
		rw.Header().Set("Content-Type", "text/event-stream")
		f := rw.(http.Flusher)
		for i, c := range chunks {
			_, _ = rw.Write(c)
			f.Flush()
			if i == 0 && w.hold.Load() {
				select {
				case <-w.release:
				case <-r.Context().Done():
					return
				}
			}
		}
	})
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		tb.Fatal(err)
	}
	w.srv = &http.Server{Handler: h}
	go func() { _ = w.srv.Serve(ln) }()
	tb.Cleanup(func() { _ = w.srv.Close() })
	return w, "http://" + ln.Addr().String()
}

// idleLoads is SGLang's GET /v1/loads?include=core answer of an idle single-rank engine.
const idleLoads = `{"timestamp":"2026-11-29T00:00:00.000000+00:00","version":"0.5.5","loads":[{"dp_rank":0,"num_running_reqs":0,"num_waiting_reqs":0,"num_waiting_uncached_tokens":0,"num_used_tokens":0,"num_total_tokens":0,"max_total_num_tokens":524288,"max_running_requests":256,"token_usage":0.0,"gen_throughput":0.0,"cache_hit_rate":0.0,"utilization":0.0}]}`

// proc is a proxy under test running as its own process.
type proc struct {
	url     string
	pid     int
	metrics string // the router's /metrics URL; "" for nginx
}

// pids returns the process and its children (nginx's workers under its master).
func (p proc) pids() []int {
	pids := []int{p.pid}
	raw, _ := os.ReadFile(fmt.Sprintf("/proc/%d/task/%d/children", p.pid, p.pid))
	for _, f := range strings.Fields(string(raw)) {
		if c, err := strconv.Atoi(f); err == nil {
			pids = append(pids, c)
		}
	}
	return pids
}

// cpu returns the user+system CPU time so far of the process and its children (from /proc, in
// clock ticks of 10 ms).
func (p proc) cpu(tb testing.TB) time.Duration {
	var ticks int64
	for _, pid := range p.pids() {
		raw, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
		if err != nil {
			tb.Fatal(err)
		}
		f := strings.Fields(string(raw[bytes.LastIndexByte(raw, ')')+2:]))
		ut, _ := strconv.ParseInt(f[11], 10, 64)
		st, _ := strconv.ParseInt(f[12], 10, 64)
		ticks += ut + st
	}
	return time.Duration(ticks) * 10 * time.Millisecond
}

// goStats is what a router's Go runtime did so far, from its /metrics.
type goStats struct {
	objects, bytes float64 // heap allocations (go_memstats_mallocs_total, go_memstats_alloc_bytes_total)
	gcs            float64 // collections (go_gc_duration_seconds_count)
}

// goStats returns the router's goStats; ok is false for nginx.
func (p proc) goStats(tb testing.TB) (st goStats, ok bool) {
	if p.metrics == "" {
		return st, false
	}
	resp, err := http.Get(p.metrics)
	if err != nil {
		tb.Fatal(err)
	}
	defer resp.Body.Close()
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		name, v, _ := strings.Cut(sc.Text(), " ")
		switch name {
		case "go_memstats_mallocs_total":
			st.objects, _ = strconv.ParseFloat(v, 64)
		case "go_memstats_alloc_bytes_total":
			st.bytes, _ = strconv.ParseFloat(v, 64)
		case "go_gc_duration_seconds_count":
			st.gcs, _ = strconv.ParseFloat(v, 64)
		}
	}
	return st, true
}

// perfCounter counts a process's system calls and context switches over a load phase with
// `perf stat -e raw_syscalls:sys_enter,context-switches -p PID`, the same way for nginx and the
// router, all threads included. (The /proc/PID/io counts used before see read and write calls
// only, so nginx's recvfrom and sendfile went uncounted.)
type perfCounter struct {
	cmd *exec.Cmd
	out *bytes.Buffer
}

// perfUsable reports whether perf can count syscalls here (perf installed, tracepoints and
// perf_event_paranoid allowing it); checked once.
var perfUsable = sync.OnceValue(func() bool {
	out, err := exec.Command("perf", "stat", "-x,", "-e", "raw_syscalls:sys_enter", "--", "true").CombinedOutput()
	return err == nil && bytes.Contains(out, []byte("raw_syscalls:sys_enter")) && !bytes.Contains(out, []byte("<not"))
})

// startPerf starts counting p's syscalls and context switches (its children's too); nil when
// perf is not usable.
func startPerf(tb testing.TB, p proc) *perfCounter {
	if !perfUsable() {
		return nil
	}
	var out bytes.Buffer
	var pids []string
	for _, pid := range p.pids() {
		pids = append(pids, strconv.Itoa(pid))
	}
	cmd := exec.Command("perf", "stat", "-x,", "-e", "raw_syscalls:sys_enter,context-switches", "-p", strings.Join(pids, ","))
	cmd.Stderr = &out
	if err := cmd.Start(); err != nil {
		tb.Fatal(err)
	}
	// perf attaches to every thread before counting: give it that long (an idle proxy makes
	// next to no system calls meanwhile).
	time.Sleep(150 * time.Millisecond)
	return &perfCounter{cmd: cmd, out: &out}
}

// stop ends the count and returns it.
func (pc *perfCounter) stop(tb testing.TB) (syscalls, ctxsw float64) {
	_ = pc.cmd.Process.Signal(os.Interrupt)
	_ = pc.cmd.Wait()
	for _, line := range strings.Split(pc.out.String(), "\n") {
		f := strings.Split(line, ",")
		if len(f) < 3 {
			continue
		}
		v, err := strconv.ParseFloat(f[0], 64)
		if err != nil {
			continue
		}
		switch f[2] {
		case "raw_syscalls:sys_enter":
			syscalls = v
		case "context-switches":
			ctxsw = v
		}
	}
	return syscalls, ctxsw
}

// rss returns the process's resident set in bytes.
func (p proc) rss(tb testing.TB) int64 {
	raw, err := os.ReadFile(fmt.Sprintf("/proc/%d/statm", p.pid))
	if err != nil {
		tb.Fatal(err)
	}
	pages, _ := strconv.ParseInt(strings.Fields(string(raw))[1], 10, 64)
	return pages * int64(os.Getpagesize())
}

var (
	buildOnce  sync.Once
	routerBin  string
	buildError error
)

// buildRouter builds the router binary once per test binary (or uses $PDROUTER_BENCH_BIN).
func buildRouter(tb testing.TB) string {
	tb.Helper()
	if bin := os.Getenv("PDROUTER_BENCH_BIN"); bin != "" {
		return bin
	}
	buildOnce.Do(func() {
		dir, err := os.MkdirTemp("", "pdrouter-bench")
		if err != nil {
			buildError = err
			return
		}
		routerBin = filepath.Join(dir, "router")
		cmd := exec.Command("go", "build", "-o", routerBin, "./cmd/router")
		cmd.Dir = "../.."
		if out, err := cmd.CombinedOutput(); err != nil {
			buildError = fmt.Errorf("go build: %v\n%s", err, out)
		}
	})
	if buildError != nil {
		tb.Fatal(buildError)
	}
	return routerBin
}

var listenLine = regexp.MustCompile(`router listening on (http://\S+) \(metrics on (http://\S+)\)`)

// startRouterProcEnv starts bin serve with env added to the environment (GOMAXPROCS=…).
func startRouterProcEnv(tb testing.TB, bin string, env []string, args ...string) proc {
	tb.Helper()
	cmd := exec.Command(bin, append([]string{"serve", "--host", "127.0.0.1", "--port", "0", "--prometheus-host", "127.0.0.1",
		"--prometheus-port", "0", "--log-level", "error", "--seed", "1"}, args...)...)
	cmd.Env = append(os.Environ(), env...)
	stderr, err := cmd.StderrPipe()
	if err != nil {
		tb.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	sc := bufio.NewScanner(stderr)
	for sc.Scan() {
		if m := listenLine.FindStringSubmatch(sc.Text()); m != nil {
			go func() { _, _ = io.Copy(io.Discard, stderr) }()
			return proc{url: m[1], pid: cmd.Process.Pid, metrics: m[2]}
		}
	}
	tb.Fatal("router did not start")
	return proc{}
}

// startNginx runs nginx in the foreground with workers worker processes (master_process off
// with one: a single process), proxying to upstream.
func startNginx(tb testing.TB, upstream string, workers int) proc {
	tb.Helper()
	bin, err := exec.LookPath("nginx")
	if err != nil {
		if _, serr := os.Stat("/usr/sbin/nginx"); serr != nil {
			tb.Fatal("nginx is not installed: `make bench` installs Debian's nginx (apt-get install nginx)")
		}
		bin = "/usr/sbin/nginx"
	}
	dir := tb.TempDir()
	port := testutil.FreePort(tb, "127.0.0.1")
	master := "off"
	if workers > 1 {
		master = "on" // nginx runs several workers only under a master
	}
	conf := fmt.Sprintf(`daemon off; master_process %[4]s; worker_processes %[5]d; pid %[1]s/nginx.pid; error_log stderr error;
events { worker_connections 8192; }
http {
  access_log off;
  client_body_temp_path %[1]s/body; proxy_temp_path %[1]s/proxy; fastcgi_temp_path %[1]s/fcgi;
  uwsgi_temp_path %[1]s/uwsgi; scgi_temp_path %[1]s/scgi;
  upstream worker { server %[2]s; keepalive 512; }
  server {
    listen 127.0.0.1:%[3]d;
    location / {
      proxy_pass http://worker; proxy_http_version 1.1; proxy_set_header Connection "";
      proxy_buffering off; proxy_request_buffering off;
    }
  }
}`, dir, strings.TrimPrefix(upstream, "http://"), port, master, workers)
	path := filepath.Join(dir, "nginx.conf")
	if err := os.WriteFile(path, []byte(conf), 0o644); err != nil {
		tb.Fatal(err)
	}
	cmd := exec.Command(bin, "-c", path, "-p", dir)
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() {
		// The master first (killed, it respawns no worker), then its workers: it cannot stop
		// them itself.
		workers := (proc{pid: cmd.Process.Pid}).pids()[1:]
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
		for _, pid := range workers {
			if p, err := os.FindProcess(pid); err == nil {
				_ = p.Kill()
			}
		}
	})
	url := fmt.Sprintf("http://127.0.0.1:%d", port)
	deadline := time.Now().Add(10 * time.Second)
	for {
		if c, err := net.Dial("tcp", fmt.Sprintf("127.0.0.1:%d", port)); err == nil {
			c.Close()
			return proc{url: url, pid: cmd.Process.Pid}
		}
		if time.Now().After(deadline) {
			tb.Fatal("nginx did not start")
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// loadClient sends small streamed chat requests and times the first content event.
type loadClient struct{ c *http.Client }

func newLoadClient() *loadClient {
	return &loadClient{c: &http.Client{Transport: &http.Transport{MaxIdleConns: 4096, MaxIdleConnsPerHost: 4096,
		IdleConnTimeout: 90 * time.Second, DisableCompression: true}}}
}

// one sends a request and returns its TTFT (first data event carrying content text).
func (l *loadClient) one(url string) (time.Duration, error) {
	start := time.Now()
	resp, err := l.c.Post(url+"/v1/chat/completions", "application/json", strings.NewReader(smallChat))
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return 0, fmt.Errorf("status %d", resp.StatusCode)
	}
	var p wire.Parser
	var ttft time.Duration
	buf := make([]byte, 8<<10)
	for {
		n, err := resp.Body.Read(buf)
		p.Feed(buf[:n])
		for ev, ok := p.Next(); ok; ev, ok = p.Next() {
			if ttft == 0 && ev.HasData() && bytes.Contains(ev.Data, []byte(`"content":" `)) {
				ttft = time.Since(start)
			}
		}
		if err == io.EOF {
			return ttft, nil
		}
		if err != nil {
			return 0, err
		}
	}
}

// result of one load phase.
type result struct {
	ttfts    []time.Duration
	errors   int
	requests int
	elapsed  time.Duration
}

func (r result) pct(q float64) time.Duration {
	if len(r.ttfts) == 0 {
		return 0
	}
	s := slices.Clone(r.ttfts)
	slices.Sort(s)
	return s[min(len(s)-1, int(q*float64(len(s))))]
}

func (r *result) add(d time.Duration, err error, mu *sync.Mutex) {
	mu.Lock()
	defer mu.Unlock()
	r.requests++
	if err != nil {
		r.errors++
		return
	}
	r.ttfts = append(r.ttfts, d)
}

// closed runs conc clients back to back for dur.
func (l *loadClient) closed(url string, conc int, dur time.Duration) result {
	var res result
	var mu sync.Mutex
	var wg sync.WaitGroup
	start := time.Now()
	stop := start.Add(dur)
	for range conc {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for time.Now().Before(stop) {
				d, err := l.one(url)
				res.add(d, err, &mu)
			}
		}()
	}
	wg.Wait()
	res.elapsed = time.Since(start)
	return res
}

// open sends rate requests per second for dur, each on its own goroutine.
func (l *loadClient) open(url string, rate float64, dur time.Duration) result {
	var res result
	var mu sync.Mutex
	var wg sync.WaitGroup
	n := int(rate * dur.Seconds())
	interval := time.Duration(float64(time.Second) / rate)
	start := time.Now()
	for i := range n {
		if wait := time.Until(start.Add(time.Duration(i) * interval)); wait > 0 {
			time.Sleep(wait)
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			d, err := l.one(url)
			res.add(d, err, &mu)
		}()
	}
	wg.Wait()
	res.elapsed = time.Since(start)
	return res
}

type target struct {
	name  string
	procs int // the proxy's worker processes (nginx) or GOMAXPROCS (router); 0 for direct
	url   string
	proc  *proc // nil for the direct baseline
}

// BenchmarkProxy runs, side by side in one go: direct, nginx, router (regular), router (PD)
// and router flushing after every event, each at closed loop 1 and 64 streams and open loop
// 1,000 req/s, and reports TTFT P50/P99, TTFT added versus direct, proxy CPU per request,
// system calls and context switches per request (perf stat, the same way for every proxy;
// left out where perf cannot count), the router's heap allocations per request (its
// go_memstats) and its collections during the phase (gcs: on one core each holds up the
// requests arriving during it, part of the added TTFT tail at the open loop), throughput
// and memory per held stream.
//
// Like is compared with like: each proxy runs at procs=1 (nginx: one worker process; the
// router: GOMAXPROCS=1) and procs=2 (two workers; GOMAXPROCS=2). Select a subset with the
// -bench pattern, e.g. 'BenchmarkProxy/load=closed64/procs=1/target=(nginx|router)$'.
func BenchmarkProxy(b *testing.B) {
	wk, wurl := newInstantWorker(b, false)
	_, purl := newInstantWorker(b, true)
	bin := buildRouter(b)
	regular := []string{"--worker-urls", wurl, "--policy", "round_robin"}
	pdArgs := []string{"--pd-disaggregation", "--prefill", purl, "--decode", wurl, "--policy", "round_robin"}
	// The router builds compared: this tree's (or $PDROUTER_BENCH_BIN) and up to two more.
	builds := []struct{ suffix, bin string }{{"", bin}}
	for _, e := range []struct{ suffix, env string }{{"-b", "PDROUTER_BENCH_BIN_B"}, {"-c", "PDROUTER_BENCH_BIN_C"}} {
		if v := os.Getenv(e.env); v != "" {
			builds = append(builds, struct{ suffix, bin string }{e.suffix, v})
		}
	}
	builds = rotated(b, builds)
	targets := []target{{"direct", 0, wurl, nil}}
	for _, procs := range []int{1, 2} {
		env := []string{fmt.Sprintf("GOMAXPROCS=%d", procs)}
		ng := startNginx(b, wurl, procs)
		targets = append(targets, target{"nginx", procs, ng.url, &ng})
		if procs == 2 {
			// The known trap (SPEC §1.4): flushing after every event instead of when the
			// upstream runs dry.
			fe := startRouterProcEnv(b, bin, env, append(regular, "--flush-each-event")...)
			targets = append(targets, target{"router-flush-each-event", procs, fe.url, &fe})
		}
		for _, bd := range builds {
			rp := startRouterProcEnv(b, bd.bin, env, regular...)
			pd := startRouterProcEnv(b, bd.bin, env, pdArgs...)
			targets = append(targets, target{"router" + bd.suffix, procs, rp.url, &rp}, target{"router-pd" + bd.suffix, procs, pd.url, &pd})
		}
	}
	lc := newLoadClient()
	for _, t := range targets { // warm connections and caches
		lc.closed(t.url, 8, 300*time.Millisecond)
	}
	type phase struct {
		name string
		run  func(url string) result
	}
	phases := []phase{
		{"closed1", func(u string) result { return lc.closed(u, 1, 2*time.Second) }},
		{"closed64", func(u string) result { return lc.closed(u, 64, 3*time.Second) }},
		{"open1000", func(u string) result { return lc.open(u, 1000, 3*time.Second) }},
	}
	base := map[string]result{}
	for _, ph := range phases {
		for _, t := range targets {
			name := fmt.Sprintf("load=%s/procs=%d/target=%s", ph.name, t.procs, t.name)
			if t.procs == 0 {
				name = fmt.Sprintf("load=%s/target=%s", ph.name, t.name)
			}
			b.Run(name, func(b *testing.B) {
				var cpu0 time.Duration
				var go0 goStats
				var perf *perfCounter
				if t.proc != nil {
					perf = startPerf(b, *t.proc)
					cpu0 = t.proc.cpu(b)
					go0, _ = t.proc.goStats(b)
				}
				r := ph.run(t.url)
				if t.name == "direct" {
					base[ph.name] = r
				}
				b.ReportMetric(0, "ns/op")
				b.ReportMetric(float64(r.pct(0.5).Microseconds()), "ttft-p50-µs")
				b.ReportMetric(float64(r.pct(0.99).Microseconds()), "ttft-p99-µs")
				if d, ok := base[ph.name]; ok && t.name != "direct" {
					b.ReportMetric(float64((r.pct(0.5) - d.pct(0.5)).Microseconds()), "added-p50-µs")
					b.ReportMetric(float64((r.pct(0.99) - d.pct(0.99)).Microseconds()), "added-p99-µs")
				}
				b.ReportMetric(float64(r.requests)/r.elapsed.Seconds(), "req/s")
				b.ReportMetric(float64(r.errors), "errors")
				if t.proc != nil && r.requests > 0 {
					n := float64(r.requests)
					b.ReportMetric(float64((t.proc.cpu(b)-cpu0).Microseconds())/n, "cpu-µs/req")
					if st, ok := t.proc.goStats(b); ok {
						b.ReportMetric((st.objects-go0.objects)/n, "allocs/req")
						b.ReportMetric((st.bytes-go0.bytes)/n, "B/req")
						b.ReportMetric(st.gcs-go0.gcs, "gcs")
					}
					if perf != nil {
						sys, cs := perf.stop(b)
						b.ReportMetric(sys/n, "syscalls/req")
						b.ReportMetric(cs/n, "ctxsw/req")
					}
				} else if perf != nil {
					perf.stop(b)
				}
			})
		}
	}
	// Memory per in-flight stream: hold 500 streams open after their first chunk.
	for _, t := range targets[1:3] { // nginx and router at procs=1
		b.Run(fmt.Sprintf("load=held500/procs=%d/target=%s", t.procs, t.name), func(b *testing.B) {
			wk.hold.Store(true)
			wk.release = make(chan struct{})
			before := t.proc.rss(b)
			ctx, cancel := context.WithCancel(context.Background())
			var wg sync.WaitGroup
			var started atomic.Int32
			for range 500 {
				wg.Add(1)
				go func() {
					defer wg.Done()
					req, _ := http.NewRequestWithContext(ctx, http.MethodPost, t.url+"/v1/chat/completions", strings.NewReader(smallChat))
					resp, err := lc.c.Do(req)
					if err != nil {
						return
					}
					defer resp.Body.Close()
					buf := make([]byte, 512)
					if _, err := resp.Body.Read(buf); err == nil {
						started.Add(1)
					}
					_, _ = io.Copy(io.Discard, resp.Body)
				}()
			}
			deadline := time.Now().Add(20 * time.Second)
			for started.Load() < 500 && time.Now().Before(deadline) {
				time.Sleep(10 * time.Millisecond)
			}
			during := t.proc.rss(b)
			close(wk.release)
			wk.hold.Store(false)
			wg.Wait()
			cancel()
			b.ReportMetric(0, "ns/op")
			b.ReportMetric(float64(started.Load()), "streams")
			b.ReportMetric(float64(during-before)/float64(max(1, started.Load())), "B/stream")
		})
	}
}

// rotated returns builds in the order they run in each phase: as given, or turned by
// $PDROUTER_BENCH_ROUND (an integer) places. Targets run one after another, and on a machine
// whose speed drifts within a round the place in the order may show (two copies of one build
// measured first and third differed by 3 % in PD CPU per request over 12 rounds: within noise,
// but the size of what comparisons look for). Rounds 0, 1, 2, … run every build in every place
// equally often.
func rotated[T any](tb testing.TB, builds []T) []T {
	v := os.Getenv("PDROUTER_BENCH_ROUND")
	if v == "" {
		return builds
	}
	n, err := strconv.Atoi(v)
	if err != nil || n < 0 {
		tb.Fatalf("PDROUTER_BENCH_ROUND=%q: want a round number (0, 1, 2, …)", v)
	}
	k := n % len(builds)
	return append(builds[k:len(builds):len(builds)], builds[:k]...)
}

// BenchmarkLoadPolling measures what reading the workers' engine loads costs the router (as
// its own process, GOMAXPROCS=1, 64 instant workers that answer GET /v1/loads): router CPU per
// worker per second while idle, polling at the default interval (500 ms) against polling off, and
// then, side by side, the proxy figures of BenchmarkProxy at closed loop 64 and open loop
// 1,000 req/s for both (round_robin over the 64 workers).
func BenchmarkLoadPolling(b *testing.B) {
	const n = 64
	urls := make([]string, n)
	for i := range urls {
		_, urls[i] = newInstantWorker(b, false)
	}
	bin := buildRouter(b)
	env := []string{"GOMAXPROCS=1"}
	args := append([]string{"--policy", "round_robin", "--worker-urls"}, urls...)
	off := startRouterProcEnv(b, bin, env, append(args, "--load-poll-interval-ms", "0")...)
	on := startRouterProcEnv(b, bin, env, args...) // the default interval (500 ms)
	targets := []target{{"router-64", 1, off.url, &off}, {"router-64-polled", 1, on.url, &on}}
	lc := newLoadClient()
	for _, t := range targets {
		lc.closed(t.url, 8, 300*time.Millisecond)
	}
	idle := 5 * time.Second
	b.Run("load=idle", func(b *testing.B) {
		cpu0 := [2]time.Duration{off.cpu(b), on.cpu(b)}
		time.Sleep(idle) // the measured span: both idle, one polling
		b.ReportMetric(0, "ns/op")
		for i, t := range targets {
			per := float64((t.proc.cpu(b) - cpu0[i]).Microseconds()) / idle.Seconds() / n
			b.ReportMetric(per, "cpu-µs/worker/s-"+t.name)
		}
	})
	for _, ph := range []struct {
		name string
		run  func(url string) result
	}{
		{"closed64", func(u string) result { return lc.closed(u, 64, 3*time.Second) }},
		{"open1000", func(u string) result { return lc.open(u, 1000, 3*time.Second) }},
	} {
		for _, t := range targets {
			b.Run(fmt.Sprintf("load=%s/target=%s", ph.name, t.name), func(b *testing.B) {
				cpu0 := t.proc.cpu(b)
				r := ph.run(t.url)
				b.ReportMetric(0, "ns/op")
				b.ReportMetric(float64(r.pct(0.5).Microseconds()), "ttft-p50-µs")
				b.ReportMetric(float64(r.pct(0.99).Microseconds()), "ttft-p99-µs")
				b.ReportMetric(float64(r.errors), "errors")
				if r.requests > 0 {
					b.ReportMetric(float64((t.proc.cpu(b)-cpu0).Microseconds())/float64(r.requests), "cpu-µs/req")
				}
			})
		}
	}
}
