//go:build integration

package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/pdrouter/pdrouter/bench"
	"github.com/pdrouter/pdrouter/fakeworker"
	"github.com/pdrouter/pdrouter/internal/testutil"
	"github.com/pdrouter/pdrouter/router"
	"github.com/pdrouter/pdrouter/router/server"
	"github.com/pdrouter/pdrouter/sim"
	"github.com/pdrouter/pdrouter/sim/engine"
	"github.com/pdrouter/pdrouter/workloads"
)

// TestIntegrationEngineLoadSteersTraffic: 4 regular fakeworkers of 2 DP ranks (llama3-8b-h100
// timings) behind serve (DP-aware, cache_aware, engine loads polled every 100 ms). A client
// behind the router's back queues long requests on worker 0's rank 0, straight at the worker.
// Of the decisions whose engine reports were all taken while that queue showed on the worker's
// own /v1/loads, none goes to the rank; the first of them comes within two poll intervals (the
// interval the router actually kept in this run) of the queue showing; and the decision log
// names the engine signal. The router's own traffic comes from four
// clients, one request after another each: a request routed to the rank just before its report
// showed the queue waits behind it (840 ms beside CPU hogs), and with one client no decision
// was made meanwhile.
func TestIntegrationEngineLoadSteersTraffic(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	const interval = 100 * time.Millisecond
	lc := startLoadCluster(t, ctx, 1, interval)
	ws, front, log := lc.workers, lc.front, lc.log
	hot := router.TargetName(ws[0].URL(), 0)
	testutil.Eventually(t, 10*time.Second, func() bool { return reportsFresh(t, front, 2*len(ws)) },
		"every rank's first load report")

	// The router's own traffic: short requests, each with its own id, the time it was sent
	// kept by id (the decision log names the id).
	var smu sync.Mutex
	sentAt := map[string]time.Time{}
	var next atomic.Int64
	generate := func() error {
		i := next.Add(1)
		id := fmt.Sprintf("own-%d", i)
		body, _ := json.Marshal(map[string]any{"text": fmt.Sprintf("%d: a question of its own, %d", i, i*7919),
			"sampling_params": map[string]any{"max_new_tokens": 4}})
		req, _ := http.NewRequest(http.MethodPost, front+"/generate", bytes.NewReader(body))
		req.Header.Set("X-Request-Id", id)
		smu.Lock()
		sentAt[id] = time.Now()
		smu.Unlock()
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			return err
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			return fmt.Errorf("request %s: status %d", id, resp.StatusCode)
		}
		return nil
	}
	for range 10 { // before: the idle ranks tie, and the rank that will be hot takes its share
		require.NoError(t, generate())
	}

	// Behind the router's back: long requests straight at worker 0's rank 0.
	var direct sync.WaitGroup
	dctx, stopDirect := context.WithCancel(ctx)
	defer stopDirect()
	for range 24 {
		direct.Add(1)
		go func() {
			defer direct.Done()
			body, _ := json.Marshal(map[string]any{"text": string(bytes.Repeat([]byte("behind the router's back "), 1200)),
				"data_parallel_rank": 0, "sampling_params": map[string]any{"max_new_tokens": 600, "ignore_eos": true}})
			req, _ := http.NewRequestWithContext(dctx, http.MethodPost, ws[0].URL()+"/generate", bytes.NewReader(body))
			if resp, err := http.DefaultClient.Do(req); err == nil {
				_, _ = io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
			}
		}()
	}
	defer direct.Wait()
	var queued time.Time // when the worker's own report first showed the queue
	testutil.Eventually(t, 10*time.Second, func() bool {
		at := time.Now()
		if rankWaiting(t, ws[0].URL(), 0) > 0 {
			queued = at
			return true
		}
		return false
	}, "the direct requests queued on worker 0's rank 0")
	deadline := queued.Add(2 * time.Second)
	var clients sync.WaitGroup
	errs := make(chan error, 4)
	for range 4 {
		clients.Go(func() {
			for time.Now().Before(deadline) {
				if err := generate(); err != nil {
					errs <- err
					return
				}
			}
		})
	}
	// Meanwhile, the worker's own view of the queue: the last time it still showed (the direct
	// requests' prefills drain it within a second or two, and a rank that runs them but queues
	// nothing is not the rank this test makes slow).
	lastQueued := queued
	tick := time.NewTicker(10 * time.Millisecond)
	for now := range tick.C {
		if !now.Before(deadline) {
			break
		}
		if rankWaiting(t, ws[0].URL(), 0) == 0 {
			break
		}
		lastQueued = now
	}
	tick.Stop()
	clients.Wait()
	stopDirect()
	close(errs)
	for err := range errs {
		require.NoError(t, err)
	}

	lines := decisionLines(t, log)
	require.Len(t, lines, len(sentAt))
	hotBefore, after, maxAgeBefore := 0, 0, 0.0
	var firstAfter time.Time // the send time of the first decision on reports taken after the queue showed
	for _, line := range lines {
		at, ok := sentAt[line["id"].(string)]
		require.True(t, ok, "decision for an unknown request %v", line["id"])
		reg := line["regular"].(map[string]any)
		target := router.TargetName(reg["worker"].(string), int(reg["rank"].(float64)))
		signal, _ := reg["signal"].(string)
		age, _ := reg["load_age_ms"].(float64)
		if at.Before(queued) {
			if target == hot {
				hotBefore++
			}
			maxAgeBefore = max(maxAgeBefore, age)
			continue
		}
		reportsAt := at.Add(-time.Duration(age * float64(time.Millisecond)))
		if signal != "engine_load" && signal != "cache_match" || !reportsAt.After(queued) || reportsAt.After(lastQueued) {
			continue // decided on reports (possibly) taken before the queue showed, or after it drained
		}
		after++
		if firstAfter.IsZero() || at.Before(firstAfter) {
			firstAfter = at
		}
		assert.NotEqual(t, hot, target, "request %s, decided on reports taken after the queue showed (%s), went to the queued rank", line["id"], signal)
	}
	require.Positive(t, hotBefore, "before the queue, the rank took its share")
	require.False(t, firstAfter.IsZero(), "no decision was made on reports taken after the queue showed")
	// The router's own poll period in this run: the oldest report any decision used before.
	period := time.Duration(max(maxAgeBefore, float64(interval/time.Millisecond)) * float64(time.Millisecond))
	lag := firstAfter.Sub(queued)
	t.Logf("queue showed at the worker for %s; the first decision on later reports came %s after (poll period seen %s); %d decisions before to the rank, %d on reports taken while it showed",
		lastQueued.Sub(queued), lag, period, hotBefore, after)
	assert.LessOrEqual(t, lag, 2*period, "the queued rank lost its traffic within two poll intervals")
}

// reportsFresh reports whether /workers shows a v1_loads report for every one of n workers'
// ranks.
func reportsFresh(t *testing.T, url string, n int) bool {
	resp, err := http.Get(url + "/workers")
	require.NoError(t, err)
	defer resp.Body.Close()
	var list struct {
		Workers []struct {
			URL        string   `json:"url"`
			LoadSource string   `json:"load_source"`
			AgeMs      *float64 `json:"load_report_age_ms"`
		} `json:"workers"`
	}
	require.NoError(t, json.NewDecoder(resp.Body).Decode(&list))
	fresh := 0
	for _, w := range list.Workers {
		if w.LoadSource == "v1_loads" && w.AgeMs != nil {
			fresh++
		}
	}
	return fresh >= n
}

// rankWaiting reads a worker's own /v1/loads and returns rank's num_waiting_reqs.
func rankWaiting(t *testing.T, url string, rank int) int {
	resp, err := http.Get(fmt.Sprintf("%s/v1/loads?include=core&dp_rank=%d", url, rank))
	require.NoError(t, err)
	defer resp.Body.Close()
	var doc struct {
		Loads []struct {
			Waiting int `json:"num_waiting_reqs"`
		} `json:"loads"`
	}
	require.NoError(t, json.NewDecoder(resp.Body).Decode(&doc))
	if len(doc.Loads) == 0 {
		return 0
	}
	return doc.Loads[0].Waiting
}

// TestIntegrationEngineLoadSplitMatchesTheSimulator: the same cluster (4 regular fakeworkers of
// 2 DP ranks, llama3-8b-h100 timings, engine loads every 100 ms) and the same requests (200
// prompts that share nothing, 32 tokens out, 8 clients) with 24 long requests queued around
// the router on worker 0's rank 0 first, live and simulated (router sim --direct-load): each
// worker's share of the routed requests agrees within 5 points, and the queued rank takes
// next to none in either.
func TestIntegrationEngineLoadSplitMatchesTheSimulator(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	const profile = "llama3-8b-h100"
	const interval = 100 * time.Millisecond // live and simulated
	lc := startLoadCluster(t, ctx, 7, interval)
	ws, front, liveLog := lc.workers, lc.front, lc.log

	p := workloads.DefaultParams()
	p.Seed = 7
	p.Conversations, p.Turns, p.SystemPromptLen, p.QuestionLen, p.OutputLen = 200, 1, 0, 64, 32
	l := workloads.DefaultLoadParams()
	l.Concurrency, l.Requests, l.Warmup = []int{8}, 200, 0
	direct := sim.DirectLoad{Requests: 24, PromptTokens: 7500, OutputTokens: 1500}

	// Live.
	var wg sync.WaitGroup
	dctx, stopDirect := context.WithCancel(ctx)
	defer func() { stopDirect(); wg.Wait() }()
	for r := range direct.Requests {
		wg.Add(1)
		go func() {
			defer wg.Done()
			ids := make([]int, direct.PromptTokens)
			for k := range ids {
				ids[k] = 1000 + (r*direct.PromptTokens+k)%30000
			}
			body, _ := json.Marshal(map[string]any{"input_ids": ids, "data_parallel_rank": 0,
				"sampling_params": map[string]any{"max_new_tokens": direct.OutputTokens, "ignore_eos": true}})
			req, _ := http.NewRequestWithContext(dctx, http.MethodPost, ws[0].URL()+"/generate", bytes.NewReader(body))
			if resp, err := http.DefaultClient.Do(req); err == nil {
				_, _ = io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
			}
		}()
	}
	testutil.Eventually(t, 10*time.Second, func() bool { return rankWaiting(t, ws[0].URL(), 0) > 0 }, "the direct requests queued")
	testutil.Eventually(t, 10*time.Second, func() bool { return reportsFresh(t, front, 2*len(ws)) }, "reports after the queue")
	_, err := bench.Run(ctx, bench.Config{URL: front, Workload: p, Load: l, Out: t.TempDir(), RequestTimeout: time.Minute})
	require.NoError(t, err)
	live := shares(t, liveLog.String())

	// Simulated.
	scfg := sim.Config{Cluster: sim.Cluster{Regular: 4, DPSize: 2, Profile: profile}, Router: lc.cfg.Config.RoutingOnly(), Workload: p, Load: l,
		Routing: sim.Routing{LoadReportInterval: interval, LoadReportDelay: sim.Delay{Fixed: sim.DefaultLoadReportDelay}}}
	direct.Worker = sim.WorkerURL(router.Regular, 0)
	scfg.Direct = []sim.DirectLoad{direct}
	var simLog bytes.Buffer
	scfg.DecisionLog = &simLog
	_, err = sim.Run(scfg)
	require.NoError(t, err)
	simulated := shares(t, simLog.String())

	t.Logf("share of routed requests per worker (rank 0 of worker 0 queued): live %v, simulated %v", live, simulated)
	for w := range 4 {
		assert.InDelta(t, live[w], simulated[w], 0.05, "worker %d's share", w)
	}
	assert.Less(t, live[4], 0.03, "the queued rank's share, live")
	assert.Less(t, simulated[4], 0.03, "the queued rank's share, simulated")
}

// shares reads a decision log: each worker index's share of the regular decisions, and (at
// index 4) that of worker 0's rank 0.
func shares(t *testing.T, log string) [5]float64 {
	var n [5]int
	total := 0
	for _, line := range strings.Split(strings.TrimSpace(log), "\n") {
		var d struct {
			Regular *struct {
				Index int `json:"index"`
				Rank  int `json:"rank"`
			} `json:"regular"`
		}
		require.NoError(t, json.Unmarshal([]byte(line), &d))
		if d.Regular == nil {
			continue
		}
		total++
		n[d.Regular.Index]++
		if d.Regular.Index == 0 && d.Regular.Rank == 0 {
			n[4]++
		}
	}
	require.Positive(t, total)
	var out [5]float64
	for i := range n {
		out[i] = float64(n[i]) / float64(total)
	}
	return out
}

// loadCluster is 4 regular fakeworkers of 2 DP ranks (llama3-8b-h100 timings, seed 1) behind
// an in-process serve (DP-aware, defaults otherwise) polling their engine loads.
type loadCluster struct {
	workers []*fakeworker.Worker
	front   string // the router's URL
	log     *syncBuffer
	cfg     server.Config
}

func startLoadCluster(t *testing.T, ctx context.Context, routerSeed int64, interval time.Duration) loadCluster {
	t.Helper()
	prof, err := engine.LookupProfile("llama3-8b-h100")
	require.NoError(t, err)
	cl, err := fakeworker.StartCluster(ctx, fakeworker.ClusterConfig{Regular: 4, Worker: fakeworker.Config{
		Host: "127.0.0.1", Seed: 1, DPSize: 2, Profile: prof}})
	require.NoError(t, err)
	t.Cleanup(func() { cl.Stop(); _ = cl.Wait() })
	lc := loadCluster{workers: cl.Workers(), log: &syncBuffer{}, cfg: server.DefaultConfig()}
	require.Len(t, lc.workers, 4)
	lc.cfg.DPAware, lc.cfg.LoadPollIntervalMs, lc.cfg.Seed = true, int(interval/time.Millisecond), new(routerSeed)
	for _, w := range lc.workers {
		lc.cfg.WorkerURLs = append(lc.cfg.WorkerURLs, w.URL())
	}
	srv, err := server.New(server.Options{Config: lc.cfg, DecisionLog: lc.log})
	require.NoError(t, err)
	sctx, stop := context.WithCancel(ctx)
	require.NoError(t, srv.Start(sctx))
	front := httptest.NewServer(srv.Handler())
	t.Cleanup(func() { front.Close(); stop(); srv.Wait() })
	lc.front = front.URL
	return lc
}
