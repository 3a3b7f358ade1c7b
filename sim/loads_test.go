package sim

import (
	"bytes"
	"cmp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/pdrouter/pdrouter/reports"
	"github.com/pdrouter/pdrouter/router"
	"github.com/pdrouter/pdrouter/sim/engine"
	"github.com/pdrouter/pdrouter/workloads"
)

// loadReportConfig is two regular servers routed by least_load, polled every 100ms; each
// answer takes delay, and reports count for 50ms.
func loadReportConfig(delay time.Duration, dpAware bool) Config {
	cfg := regularConfig()
	cfg.Cluster.Regular = 2
	cfg.Router.Policy = router.PolicyLeastLoad
	cfg.Router.LoadReportMaxAgeMs = 50
	if dpAware {
		cfg.Cluster.DPSize, cfg.Router.DPAware = 2, true
	}
	cfg.Routing.LoadReportInterval, cfg.Routing.LoadReportDelay = 100*time.Millisecond, Delay{Fixed: delay}
	return cfg
}

// routeAt routes one request on replica 0 at virtual time at (ns) and returns its leg; the
// decision is done at once, so loads stay zero.
func routeAt(t *testing.T, x *sim, at int64) router.Leg {
	t.Helper()
	x.clock.now = at
	d, err := x.reps[0].rt.Route(&router.Request{Text: "hello"})
	require.NoError(t, err)
	leg, ok := d.Leg(router.Regular)
	require.True(t, ok)
	d.Done(router.Regular, router.Success)
	return leg
}

// A poll samples the engines when it starts; its report reaches the router delay later,
// stamped with the poll's time, and counts until it is older than --load-report-max-age-ms.
func TestLoadReportArrivesAfterTheDelayAndAgesOut(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name    string
		dpAware bool
	}{
		{"summed over the ranks", false},
		{"per rank (DP-aware)", true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			const delay = 5 * time.Millisecond
			x, err := newSim(loadReportConfig(delay, tc.dpAware))
			require.NoError(t, err)
			require.NotNil(t, x.loads)
			// Server 0 has a prompt queued: its report says so, server 1's says idle.
			sv := x.servers[0]
			sv.eng.Submit(x.t(), engine.Req{Room: 1, Prompt: make([]uint32, 300), MaxNew: 4, Rank: 0})

			start := int64(10 * time.Millisecond)
			x.clock.now = start
			x.pollLoads(0)
			require.Equal(t, 3, x.q.Len(), "both servers' answers and the next poll")

			leg := routeAt(t, x, start+int64(delay)-1)
			assert.Equal(t, router.SignalInFlight, leg.Signal, "no report yet: in-flight counts")
			assert.Equal(t, 0, leg.WorkerIndex, "equal in-flight counts: the first worker")

			for range 2 {
				e := x.q.Pop()
				require.Equal(t, evLoadReport, e.V.kind)
				require.Equal(t, start+int64(delay), e.At, "the answer arrives after the delay")
				x.clock.now = e.At
				x.dispatch(&e.V)
				require.NoError(t, x.err)
			}

			leg = routeAt(t, x, start+int64(delay))
			assert.Equal(t, router.SignalEngineLoad, leg.Signal)
			assert.Equal(t, delay, leg.LoadAge, "stamped with the poll's start")
			want := x.servers[1].url // server 0's report shows its queued prompt
			if tc.dpAware {
				want = router.TargetName(x.servers[0].url, 1) // rank 0's report shows it
			}
			assert.Equal(t, want, leg.Target.Name())

			leg = routeAt(t, x, start+int64(50*time.Millisecond))
			assert.Equal(t, router.SignalEngineLoad, leg.Signal, "50ms old: still fresh")
			leg = routeAt(t, x, start+int64(50*time.Millisecond)+1)
			assert.Equal(t, router.SignalInFlight, leg.Signal, "older than the max age: absent")

			e := x.q.Pop()
			assert.Equal(t, evLoadPoll, e.V.kind)
			assert.Equal(t, start+int64(100*time.Millisecond), e.At, "the replica polls again an interval later")
			assert.Equal(t, LoadStats{Reports: 2}, x.loads.stats)
		})
	}
}

// As serve, a replica does not poll a worker whose previous poll is unanswered, and never a
// dead one.
func TestLoadPollsSkipUnansweredAndDeadWorkers(t *testing.T) {
	t.Parallel()
	x, err := newSim(loadReportConfig(250*time.Millisecond, false))
	require.NoError(t, err)
	x.servers[1].killed = true
	x.pollLoads(0)
	x.clock.now = int64(100 * time.Millisecond)
	x.pollLoads(0)
	assert.Equal(t, LoadStats{Skipped: 1}, x.loads.stats, "server 0's first poll unanswered, server 1 dead")
	var reports int
	for x.q.Len() > 0 {
		if e := x.q.Pop(); e.V.kind == evLoadReport {
			reports++
			assert.Equal(t, int64(250*time.Millisecond), e.At)
		}
	}
	assert.Equal(t, 1, reports)
}

// Off: no interval, or reports never fresh (--load-report-max-age-ms 0, as serve then does
// not poll).
func TestLoadReportsOff(t *testing.T) {
	t.Parallel()
	cfg := loadReportConfig(0, false)
	cfg.Routing.LoadReportInterval = 0
	x, err := newSim(cfg)
	require.NoError(t, err)
	assert.Nil(t, x.loads)
	cfg = loadReportConfig(0, false)
	cfg.Router.LoadReportMaxAgeMs = 0
	x, err = newSim(cfg)
	require.NoError(t, err)
	assert.Nil(t, x.loads)
}

// hotspotConfig is a small hot-spot run on 4 regular servers behind 2 replicas, with load
// reports on (exponential delays, so every draw matters).
func hotspotConfig() Config {
	cfg := regularConfig()
	p := workloads.DefaultParams()
	p.Workload, p.HSRequests, p.HSBurst, p.HSGap, p.HSPrefixLen, p.HSQuestionLen, p.HSColdLen, p.HSOutputLen = workloads.WorkloadHotspot, 240, 40, 20, 1024, 128, 256, 16
	cfg.Workload = p
	cfg.Load.Concurrency, cfg.Load.Rates = nil, []float64{120}
	cfg.Routing.Replicas = 2
	cfg.Routing.LoadReportInterval, cfg.Routing.LoadReportDelay = 20*time.Millisecond, Delay{Kind: "exp", Mean: 3 * time.Millisecond}
	return cfg
}

func TestLoadReportsDeterministic(t *testing.T) {
	t.Parallel()
	a, logA := runLogged(t, hotspotConfig())
	b, logB := runLogged(t, hotspotConfig())
	assert.Equal(t, encode(t, a), encode(t, b), "same seed, same results")
	assert.Equal(t, logA, logB, "same seed, same decisions")
	assert.Equal(t, a.Stats.Loads, b.Stats.Loads)
	assert.NotZero(t, a.Stats.Loads.Reports)
	assert.Contains(t, logA, `"signal":"engine_load"`, "the reports decide some choices")
}

// Every worker over --worker-overload-waiting-requests: the request is shed as serve sheds it
// (503 with Retry-After, reason "overloaded" in the decision log), never retried.
func TestOverloadedRequestsAreShed(t *testing.T) {
	t.Parallel()
	cfg := hotspotConfig()
	cfg.Routing.Replicas = 1
	cfg.Load.Rates = []float64{1000}
	cfg.Router.WorkerOverloadWaitingRequests = 2
	var log bytes.Buffer
	cfg.DecisionLog = &log
	res := mustRun(t, cfg)
	shed := 0
	for _, r := range res.Records {
		if r.Error == nil {
			continue
		}
		require.Equal(t, reports.HTTPErrorKind(503), reports.ErrorKind(*r.Error), *r.Error)
		assert.Contains(t, *r.Error, "overloaded")
		assert.Contains(t, *r.Error, "retry in 1s")
		shed++
	}
	require.NotZero(t, shed, "a burst at 1000 req/s on 4 servers overloads them all")
	assert.Less(t, shed, len(res.Records), "the servers under the bound still take requests")
	assert.Equal(t, shed, res.Stats.Shed)
	assert.Equal(t, time.Duration(shed)*time.Second, res.Stats.ShedRetryAfter, "Retry-After: 1 each")
	assert.Equal(t, res.Stats.Requests-shed, res.Stats.Attempts, "a shed request is not retried")
	assert.Equal(t, shed, strings.Count(log.String(), `"reason":"overloaded"`))
	assert.Equal(t, shed, res.Results.Levels[0].ErrorsByKind[reports.HTTPErrorKind(503)])
}

func TestRoutingValidatesLoadReports(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name string
		r    Routing
		want string // "" valid
	}{
		{"off", Routing{}, ""},
		{"serve's default", Routing{LoadReportInterval: 100 * time.Millisecond, LoadReportDelay: Delay{Fixed: time.Millisecond}}, ""},
		{"negative interval", Routing{LoadReportInterval: -time.Second}, "--load-report-interval"},
		{"below a millisecond", Routing{LoadReportInterval: 100}, "--load-report-interval"},
		{"negative delay", Routing{LoadReportDelay: Delay{Fixed: -1}}, "--load-report-delay"},
		{"unknown distribution", Routing{LoadReportDelay: Delay{Kind: "gauss"}}, "--load-report-delay"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := tc.r.Validate()
			if tc.want == "" {
				assert.NoError(t, err)
				return
			}
			require.Error(t, err)
			assert.Contains(t, err.Error(), tc.want)
		})
	}
}

func TestSweepVariesLoadReports(t *testing.T) {
	t.Parallel()
	vars := []Vary{{Key: "load-report-interval", Values: []string{"0", "10ms", "1s"}},
		{Key: "load_report_delay", Values: []string{"1ms", "exp:50ms"}}}
	pts, err := Grid(regularConfig(), vars)
	require.NoError(t, err)
	require.Len(t, pts, 6)
	assert.Zero(t, pts[0].Config.Routing.LoadReportInterval)
	assert.Equal(t, Delay{Fixed: time.Millisecond}, pts[0].Config.Routing.LoadReportDelay)
	assert.Equal(t, time.Second, pts[5].Config.Routing.LoadReportInterval)
	assert.Equal(t, Delay{Kind: "exp", Mean: 50 * time.Millisecond}, pts[5].Config.Routing.LoadReportDelay)

	pts, err = Grid(regularConfig(), []Vary{{Key: "load_poll_interval_ms", Values: []string{"50"}}})
	require.NoError(t, err)
	assert.Equal(t, 50*time.Millisecond, pts[0].Config.Routing.LoadReportInterval, "serve's key, in ms")

	for _, bad := range []Vary{{Key: "load_report_interval", Values: []string{"100"}}, {Key: "load_poll_interval_ms", Values: []string{"1s"}}} {
		_, err = Grid(regularConfig(), []Vary{bad})
		require.Error(t, err, bad)
		assert.Contains(t, err.Error(), bad.Key)
	}
}

// --max-worker-requests in the simulator, as in serve: at 1000 req/s of hot-spot bursts on 4
// servers, no server holds more than the cap of this router's requests (their spans from their
// arrival at the router to its end), the excess is shed with Retry-After, and
// without the cap the hottest server holds several times as many.
func TestMaxWorkerRequestsCapsEachServer(t *testing.T) {
	t.Parallel()
	peak := func(res *Result) (maxPer int, shed int) {
		type edge struct {
			at    float64
			delta int
		}
		per := map[string][]edge{}
		for _, r := range res.Records {
			if r.Error != nil {
				shed++
				continue
			}
			// The router's span: from the request's arrival (a nanosecond's latency and its
			// jitter after the client sent it) to its end (a nanosecond before the client's).
			w, ns := *r.Targets.Regular, 1e-6
			start := r.StartMs + ns + float64(arrivalJitter(r.ID))*ns
			per[w] = append(per[w], edge{start, 1}, edge{r.StartMs + r.E2EMs - ns, -1})
		}
		for _, es := range per {
			slices.SortFunc(es, func(a, b edge) int { return cmp.Or(cmp.Compare(a.at, b.at), cmp.Compare(a.delta, b.delta)) })
			n := 0
			for _, e := range es {
				n += e.delta
				maxPer = max(maxPer, n)
			}
		}
		return maxPer, shed
	}
	cfg := hotspotConfig()
	cfg.Routing.Replicas = 1
	cfg.Load.Rates = []float64{1000}
	cfg.Cluster.NetLatency = 1 // a nanosecond: the client's span of a request is then about the router's
	free, freeShed := peak(mustRun(t, cfg))
	cfg.Router.MaxWorkerRequests = 4
	capped, shed := peak(mustRun(t, cfg))
	t.Logf("hottest server: %d requests at once without the cap, %d with cap 4 (%d shed)", free, capped, shed)
	assert.Zero(t, freeShed)
	assert.LessOrEqual(t, capped, 4)
	assert.Greater(t, free, 2*capped)
	assert.Positive(t, shed)
}
