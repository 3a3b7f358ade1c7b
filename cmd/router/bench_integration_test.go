//go:build integration

package main

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/pdrouter/pdrouter/bench"
	"github.com/pdrouter/pdrouter/fakeworker"
	"github.com/pdrouter/pdrouter/reports"
	"github.com/pdrouter/pdrouter/sim/engine"
	"github.com/pdrouter/pdrouter/workloads"
)

// startConstantWorker starts a regular fakeworker with --profile constant --ttft ttft --itl itl.
func startConstantWorker(t *testing.T, ttft, itl time.Duration) string {
	t.Helper()
	prof, err := fakeworker.ResolveProfile("constant", ttft, itl)
	require.NoError(t, err)
	ctx, cancel := context.WithCancel(context.Background())
	w, err := fakeworker.Start(ctx, fakeworker.Config{Mode: engine.RoleUnified, Profile: prof})
	require.NoError(t, err)
	t.Cleanup(func() { cancel(); _ = w.Wait() })
	return w.URL()
}

// randomBench is a random workload of 16-token prompts and out-token replies.
func randomBench(url string, out int) bench.Config {
	p := workloads.DefaultParams()
	p.Workload, p.NumPrompts, p.InputLen, p.OutputLen = workloads.WorkloadRandom, 100000, 16, out
	return bench.Config{URL: url, Workload: p, Load: workloads.DefaultLoadParams(), RequestTimeout: 30 * time.Second}
}

// Issue 7: against `router fakeworker --profile constant --ttft 100ms --itl 20ms`, the bench's
// TTFT P50 within ±3 ms of the truth and TPOT P50 within ±1 ms at concurrency 1, 16 and 64. The
// truth is measured in the same run, not taken as the configured 100 ms: the fakeworker's timers
// fire late on a busy machine (a clean-clone make test saw 103.4 ms at c64), so a minimal client
// (refTTFT) measures its time to first event at the same concurrency right after the bench, and
// the worker itself must never answer early. Each client first sends one unrecorded request,
// which opens its connection, and so does each of the reference client's.
// Not parallel: the other tests here load the CPU.
func TestIntegrationBenchAccuracyFakeworker(t *testing.T) {
	url := startConstantWorker(t, 100*time.Millisecond, 20*time.Millisecond)
	for _, tc := range []struct{ clients, requests int }{{1, 10}, {16, 64}, {64, 192}} {
		cfg := randomBench(url, 8)
		cfg.Workload.API = workloads.APIGenerate
		cfg.Load.Concurrency = []int{tc.clients}
		cfg.Load.Requests, cfg.Load.Warmup = tc.requests, tc.clients
		res, err := bench.Run(context.Background(), cfg)
		require.NoError(t, err)
		l := res.Levels[0]
		require.Zero(t, l.Errors, l.ErrorsByKind)
		ref, refTPOT := refTTFT(t, url, tc.clients, tc.requests)
		t.Logf("fakeworker c%d: TTFT p50 %.2f ms (reference client %.2f), TPOT p50 %.3f ms (reference client %.3f)",
			tc.clients, l.TTFTMs.P50, ref, l.TPOTMs.P50, refTPOT)
		assert.InDelta(t, ref, l.TTFTMs.P50, 3, "c%d TTFT P50 against the reference client's", tc.clients)
		assert.GreaterOrEqual(t, ref, 99.0, "c%d: the worker answered before its TTFT", tc.clients)
		assert.InDelta(t, refTPOT, l.TPOTMs.P50, 1, "c%d TPOT P50 against the reference client's", tc.clients)
	}
}

// refTTFT sends n streamed /generate requests from clients goroutines and returns the P50 of
// the time from sending each to its first SSE event and the P50 of its time per output token
// ((last event − first event)/(events − 1)), in ms: a reference with no bench machinery. Each
// client keeps its connection, opened by one unrecorded request first, as the bench's do.
func refTTFT(t *testing.T, url string, clients, n int) (ttft, tpot float64) {
	t.Helper()
	body := `{"text":"a prompt of sixteen tokens or so for the reference client to send","stream":true,"sampling_params":{"max_new_tokens":8,"ignore_eos":true}}`
	ms := make([]float64, n)
	tpots := make([]float64, n)
	tr := &http.Transport{MaxIdleConnsPerHost: clients}
	defer tr.CloseIdleConnections()
	hc := &http.Client{Transport: tr}
	// send sends one request and returns its time to first event and time per output token.
	send := func() (ttft, tpot float64, err error) {
		start := time.Now()
		resp, err := hc.Post(url+"/generate", "application/json", strings.NewReader(body))
		if err != nil {
			return 0, 0, err
		}
		defer resp.Body.Close()
		br := bufio.NewReader(resp.Body)
		line, err := br.ReadString('\n')
		first := time.Now()
		if err == nil && !strings.HasPrefix(line, "data:") {
			err = fmt.Errorf("first line %q is not an SSE event", line)
		}
		last, events := first, 1
		for err == nil {
			if line, err = br.ReadString('\n'); err == nil && strings.HasPrefix(line, "data:") && !strings.HasPrefix(line, "data: [DONE]") {
				last, events = time.Now(), events+1
			}
		}
		if err == io.EOF {
			err = nil
		}
		if events > 1 {
			tpot = float64(last.Sub(first).Microseconds()) / 1000 / float64(events-1)
		}
		return float64(first.Sub(start).Microseconds()) / 1000, tpot, err
	}
	var wg sync.WaitGroup
	errs := make(chan error, clients)
	next := make(chan int, n)
	for i := range n {
		next <- i
	}
	close(next)
	for range clients {
		wg.Go(func() {
			if _, _, err := send(); err != nil { // opens this client's connection
				errs <- err
				return
			}
			for i := range next {
				var err error
				if ms[i], tpots[i], err = send(); err != nil {
					errs <- err
					return
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		require.NoError(t, err)
	}
	slices.Sort(ms)
	slices.Sort(tpots)
	return ms[(n-1)/2], tpots[(n-1)/2]
}

// Issue 7: open loop against the fakeworker achieves the requested rate within ±2 % (the issue
// asked for 30 s; 10 s at 20 req/s, 200 requests, tells the same within the suite's budget).
func TestIntegrationBenchOpenLoopRateFakeworker(t *testing.T) {
	t.Parallel()
	url := startConstantWorker(t, 20*time.Millisecond, 5*time.Millisecond)
	cfg := randomBench(url, 4)
	cfg.Load.Rates = []float64{20}
	cfg.Load.Arrival = workloads.ArrivalConstant
	cfg.Load.Duration = 10 * time.Second
	res, err := bench.Run(context.Background(), cfg)
	require.NoError(t, err)
	l := res.Levels[0]
	require.Zero(t, l.Errors, l.ErrorsByKind)
	t.Logf("fakeworker r20: %d requests in %.3f s = %.3f req/s", l.Requests, l.DurationS, l.Throughput.ReqS)
	assert.InEpsilon(t, 20, l.Throughput.ReqS, 0.02)
}

// Issue 7: against `router serve` + a fakeworker PD cluster, a concurrency sweep 1…64
// completes with every level in the report, and --compare of two runs (DP-aware off, on)
// prints the improvement column.
func TestIntegrationBenchSweepThroughServePD(t *testing.T) {
	t.Parallel()
	prof, err := fakeworker.ResolveProfile("constant", 20*time.Millisecond, 2*time.Millisecond)
	require.NoError(t, err)
	ctx, cancel := context.WithCancel(context.Background())
	cl, err := fakeworker.StartCluster(ctx, fakeworker.ClusterConfig{Prefill: 1, Decode: 1,
		Worker: fakeworker.Config{DPSize: 2, Profile: prof}})
	require.NoError(t, err)
	t.Cleanup(func() { cancel(); _ = cl.Wait() })
	var pd []string
	for _, a := range cl.ServeArgs() {
		if a != "--dp-aware" {
			pd = append(pd, a)
		}
	}
	dir := t.TempDir()
	levels := []string{"c1", "c2", "c4", "c8", "c16", "c32", "c64"}
	for _, run := range []struct {
		name  string
		extra []string
	}{{"off", nil}, {"on", []string{"--dp-aware"}}} {
		url, _, _ := startServe(t, append(append([]string(nil), pd...), run.extra...)...)
		out, err := runCmd(t, "bench", "--url", url, "--workload", "random", "--num-prompts", "100000",
			"--input-len", "64", "--output-len", "4", "--concurrency", "1,2,4,8,16,32,64",
			"--requests", "64", "--out", filepath.Join(dir, run.name), "--quiet")
		require.NoError(t, err, out)
		for _, l := range levels {
			assert.Regexp(t, `(?m)^`+l+`\s+64\s+0\s`, out, "%s: level %s, 64 requests, no errors", run.name, l)
		}
	}
	out, err := runCmd(t, "report", "--compare", filepath.Join(dir, "off"), filepath.Join(dir, "on"))
	require.NoError(t, err)
	t.Log("\n" + out)
	assert.Contains(t, out, "impr")
	for _, l := range levels {
		assert.Regexp(t, `(?m)^`+l+`\s+\S+\s+\S+\s+[+-]?\d+\.\d%`, out, "level %s with its improvement", l)
	}
}

// runCmd runs the router command line args in-process and returns its stdout.
func runCmd(t *testing.T, args ...string) (string, error) {
	t.Helper()
	cmd := newRootCmd()
	var out, errOut strings.Builder
	cmd.SetOut(&out)
	cmd.SetErr(&errOut)
	cmd.SetArgs(args)
	err := cmd.Execute()
	if err != nil {
		err = fmt.Errorf("%w (stderr: %s)", err, errOut.String())
	}
	return out.String(), err
}

// Against a live fakeworker, `router bench` without --model names the model the worker's
// /v1/models lists (recorded in results.json), and --workload sharegpt --dataset-path sends
// the file's conversations: one request per usable record, the reply's length as max_tokens.
func TestIntegrationBenchModelAndDatasetFakeworker(t *testing.T) {
	t.Parallel()
	prof, err := fakeworker.ResolveProfile("constant", 5*time.Millisecond, time.Millisecond)
	require.NoError(t, err)
	ctx, cancel := context.WithCancel(context.Background())
	w, err := fakeworker.Start(ctx, fakeworker.Config{Mode: engine.RoleUnified, Profile: prof,
		ModelPath: "meta-llama/Llama-3.1-8B-Instruct"})
	require.NoError(t, err)
	t.Cleanup(func() { cancel(); _ = w.Wait() })

	dir := t.TempDir()
	data := filepath.Join(dir, "sharegpt.json")
	require.NoError(t, os.WriteFile(data, []byte(`[
 {"id": "1", "conversations": [{"from": "human", "value": "What does a router in front of SGLang do?"},
   {"from": "gpt", "value": "It spreads requests over workers and keeps prefixes where their cache is."}]},
 {"id": "2", "conversations": [{"from": "human", "value": "Name a prime number."}, {"from": "gpt", "value": "Seven is prime."}]},
 {"id": "3", "conversations": [{"from": "human", "value": "only one turn"}]}
]`), 0o644))
	out := filepath.Join(dir, "run")
	stdout, stderr, err := runWithStderr(t, "bench", "--url", w.URL(), "--workload", "sharegpt", "--dataset-path", data,
		"--concurrency", "2", "--out", out)
	require.NoError(t, err, stderr)
	assert.Contains(t, stderr, "model meta-llama/Llama-3.1-8B-Instruct (from the target's /v1/models)")
	assert.Regexp(t, `(?m)^c2\s+2\s+0\s`, stdout, "two usable records, no errors")
	res, recs, err := reports.ReadDir(out)
	require.NoError(t, err)
	assert.JSONEq(t, `"meta-llama/Llama-3.1-8B-Instruct"`, string(res.Meta.Workload.Params["model"]))
	var outs []int
	for _, r := range recs {
		outs = append(outs, r.OutputTokens)
	}
	assert.ElementsMatch(t, []int{workloads.Count("It spreads requests over workers and keeps prefixes where their cache is."),
		workloads.Count("Seven is prime.")}, outs, "ignore_eos: each reply as long as the dataset's")
}
