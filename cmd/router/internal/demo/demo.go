package demo

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/pdrouter/pdrouter/bench"
	"github.com/pdrouter/pdrouter/reports"
	"github.com/pdrouter/pdrouter/sim"
	"github.com/pdrouter/pdrouter/workloads"
)

// Files and directories Run writes under Config.Out.
const (
	LiveDir           = "live"           // bench results.json and requests.jsonl
	SimDir            = "sim"            // sim results.json and requests.jsonl
	ReportFile        = "report.html"    // the HTML report: live vs sim
	ComparisonFile    = "comparison.txt" // the comparison table printed on stdout
	LiveDecisionsFile = "live-decisions.jsonl"
	SimDecisionsFile  = "sim-decisions.jsonl"
)

// Config is one demo run.
type Config struct {
	// Scenario is what runs; build it with DefaultScenario.
	Scenario Scenario
	// Out is the directory receiving the results; "" creates a fresh one under the system's
	// temporary directory (Outcome.Out names it).
	Out string
	// Stdout receives the comparison table and where the results are; nil discards it.
	Stdout io.Writer
	// Stderr receives progress; nil discards it.
	Stderr io.Writer
	// Version is written into both results' meta.
	Version string
}

// Outcome is what a demo run produced.
type Outcome struct {
	Out       string        // the results directory
	Live, Sim reports.Run   // the two runs, records included
	Rows      []Row         // the comparison, one row per level
	LiveWall  time.Duration // wall time of the live part (cluster start to stop)
	SimWall   time.Duration // wall time of the simulation
	// SameDecisions is how many routing decisions, from the first, the live router and the
	// simulated one agree on (CommonPrefix); Decisions is the live router's count.
	SameDecisions, Decisions int
}

// Run runs the demo: the live system under the bench, then the simulation of the same
// scenario, then the comparison (stdout, Out/comparison.txt) and the HTML report
// (Out/report.html). Both runs write their decision logs beside their results. Cancelling ctx
// stops everything; Run returns only after the live system has stopped.
func Run(ctx context.Context, cfg Config) (*Outcome, error) {
	sc := cfg.Scenario
	if err := sc.Validate(); err != nil {
		return nil, err
	}
	stdout, stderr := orDiscard(cfg.Stdout), orDiscard(cfg.Stderr)
	out := cfg.Out
	if out == "" {
		dir, err := os.MkdirTemp("", "pdrouter-demo-")
		if err != nil {
			return nil, fmt.Errorf("demo: --out: %w", err)
		}
		out = dir
	} else if err := os.MkdirAll(out, 0o755); err != nil {
		return nil, fmt.Errorf("demo: --out: %w", err)
	}
	o := &Outcome{Out: out}

	fmt.Fprintf(stderr, "demo: starting a fakeworker PD cluster: %d prefill + %d decode workers, dp-size %d%s, profile %s, speedup %g\n",
		sc.Prefill, sc.Decode, sc.DPSize, ifSet(sc.DPAttention, " with dp-attention"), sc.Profile, sc.Speedup)
	start := time.Now()
	live, err := runLive(ctx, cfg, out, stderr)
	o.LiveWall = time.Since(start)
	if err != nil {
		return nil, err
	}
	o.Live = live

	fmt.Fprintf(stderr, "demo: simulating the same cluster, router, workload and load (router sim, virtual time)\n")
	start = time.Now()
	simRun, err := runSim(ctx, cfg, out)
	o.SimWall = time.Since(start)
	if err != nil {
		return nil, err
	}
	o.Sim = simRun

	o.Rows = Compare(o.Live.Results, o.Sim.Results)
	var table strings.Builder
	fmt.Fprintf(&table, "live: router serve (%s, --dp-aware) in front of %d prefill + %d decode fakeworkers (dp %d), %s at speedup %g\n",
		sc.Policy, sc.Prefill, sc.Decode, sc.DPSize, sc.Profile, sc.Speedup)
	fmt.Fprintf(&table, "sim:  router sim on the same cluster, router settings, workload (%s) and seed; diff = (sim - live) / live\n\n",
		sc.Workload.Workload)
	if err := RenderComparison(&table, o.Rows); err != nil {
		return nil, err
	}
	table.WriteString("\n" + DistributionLine(o.Live.Records, o.Sim.Records, o.Rows))
	same, total, err := agreement(out)
	if err != nil {
		return nil, err
	}
	o.SameDecisions, o.Decisions = same, total
	table.WriteString("\n" + ParityLine(sc.Load, same, total))
	if _, err := io.WriteString(stdout, table.String()); err != nil {
		return nil, err
	}
	if err := os.WriteFile(filepath.Join(out, ComparisonFile), []byte(table.String()), 0o644); err != nil {
		return nil, fmt.Errorf("demo: --out: %w", err)
	}
	if err := writeHTML(filepath.Join(out, ReportFile), o.Live, o.Sim); err != nil {
		return nil, err
	}
	fmt.Fprintf(stderr, "demo: live part %.1f s, simulation %.2f s\n", o.LiveWall.Seconds(), o.SimWall.Seconds())
	if _, err := fmt.Fprintf(stdout, "\nresults in %s (report: %s)\n", out, filepath.Join(out, ReportFile)); err != nil {
		return nil, err
	}
	return o, nil
}

// runLive starts the live system, benches it and stops it.
func runLive(ctx context.Context, cfg Config, out string, stderr io.Writer) (run reports.Run, err error) {
	sc := cfg.Scenario
	dlog, err := os.Create(filepath.Join(out, LiveDecisionsFile))
	if err != nil {
		return run, fmt.Errorf("demo: --out: %w", err)
	}
	// The router serialises its decision-log writes; the buffer is flushed after it stopped.
	bw := bufio.NewWriterSize(dlog, 1<<16)
	defer func() {
		err = errors.Join(err, bw.Flush(), dlog.Close())
	}()
	l, err := StartLive(ctx, sc, bw)
	if err != nil {
		return run, err
	}
	defer func() {
		fmt.Fprintln(stderr, "demo: stopping the router and the workers")
		if cerr := l.Close(); cerr != nil {
			err = errors.Join(err, cerr)
		}
	}()
	if err := l.Describe(stderr); err != nil {
		return run, err
	}
	dir := filepath.Join(out, LiveDir)
	w := sc.workload()
	fmt.Fprintf(stderr, "demo: router bench --url %s --workload %s --conversations %d --turns %d --question-len %d --output-len %d --range-ratio %g --seed %d --concurrency %s --requests %d --warmup %d%s\n",
		l.URL, w.Workload, w.Conversations, w.Turns, w.QuestionLen, w.OutputLen, w.RangeRatio, w.Seed,
		joinInts(sc.Load.Concurrency), sc.Load.Requests, sc.Load.Warmup, ifSet(sc.Load.FlushCache, " --flush-cache"))
	rt := l.BenchTransport()
	defer CloseIdle(rt)
	res, err := bench.Run(ctx, bench.Config{URL: l.URL, Workload: w, Load: sc.Load,
		Out: dir, Progress: stderr, Version: cfg.Version, Transport: rt})
	if err != nil {
		return run, fmt.Errorf("demo: bench: %w", err)
	}
	recs, err := reports.ReadRecords(filepath.Join(dir, reports.RequestsFile))
	if err != nil {
		return run, fmt.Errorf("demo: bench: %w", err)
	}
	return reports.Run{Name: "live", Results: res, Records: recs}, nil
}

// runSim simulates the scenario and writes its results and decision log.
func runSim(ctx context.Context, cfg Config, out string) (reports.Run, error) {
	if err := ctx.Err(); err != nil {
		return reports.Run{}, err
	}
	scfg := cfg.Scenario.SimConfig(cfg.Version)
	dlog, err := os.Create(filepath.Join(out, SimDecisionsFile))
	if err != nil {
		return reports.Run{}, fmt.Errorf("demo: --out: %w", err)
	}
	defer dlog.Close()
	bw := bufio.NewWriterSize(dlog, 1<<16)
	scfg.DecisionLog = bw
	res, err := sim.Run(scfg)
	if err != nil {
		return reports.Run{}, fmt.Errorf("demo: sim: %w", err)
	}
	if err := bw.Flush(); err != nil {
		return reports.Run{}, fmt.Errorf("demo: --out: %w", err)
	}
	if err := reports.WriteDir(filepath.Join(out, SimDir), res.Results, res.Records); err != nil {
		return reports.Run{}, fmt.Errorf("demo: --out: %w", err)
	}
	return reports.Run{Name: "sim", Results: res.Results, Records: res.Records}, nil
}

// agreement compares the decision logs of both runs in out.
func agreement(out string) (same, total int, err error) {
	read := func(name string) ([]Decision, error) {
		f, err := os.Open(filepath.Join(out, name))
		if err != nil {
			return nil, fmt.Errorf("demo: %w", err)
		}
		defer f.Close()
		return ReadDecisions(f)
	}
	live, err := read(LiveDecisionsFile)
	if err != nil {
		return 0, 0, err
	}
	simulated, err := read(SimDecisionsFile)
	if err != nil {
		return 0, 0, err
	}
	return CommonPrefix(live, simulated), len(live), nil
}

// writeHTML writes the report comparing the live run (A) with the simulation (B).
func writeHTML(path string, live, simulated reports.Run) error {
	f, err := os.Create(path)
	if err != nil {
		return fmt.Errorf("demo: --out: %w", err)
	}
	bw := bufio.NewWriter(f)
	if err := reports.RenderHTML(bw, []reports.Run{live, simulated}, reports.CompareError); err != nil {
		f.Close()
		return fmt.Errorf("demo: report: %w", err)
	}
	if err := bw.Flush(); err != nil {
		f.Close()
		return fmt.Errorf("demo: report: %w", err)
	}
	return f.Close()
}

// ifSet returns s when b holds, else "".
func ifSet(b bool, s string) string {
	if b {
		return s
	}
	return ""
}

func orDiscard(w io.Writer) io.Writer {
	if w == nil {
		return io.Discard
	}
	return w
}

func joinInts(v []int) string {
	s := make([]string, len(v))
	for i, n := range v {
		s[i] = fmt.Sprint(n)
	}
	return strings.Join(s, ",")
}

// expectedAgreement is how many routing decisions, from the first, live and sim must agree
// on: every decision of a first level with one client (warm-up included), where both routers
// see the same requests in the same order with the same loads; none otherwise.
func expectedAgreement(l workloads.LoadParams) int {
	if len(l.Concurrency) == 0 || l.Concurrency[0] != 1 || l.Requests <= 0 {
		return 0
	}
	return l.Warmup + l.Requests
}

// ParityLine says how many routing decisions live and sim agree on, what agreement is
// expected and why the rest may differ, with a verdict.
func ParityLine(l workloads.LoadParams, same, total int) string {
	var b strings.Builder
	fmt.Fprintf(&b, "routing decisions (worker index, DP rank, reason): live and sim agree on the first %d of %d.\n", same, total)
	want := min(expectedAgreement(l), total)
	switch {
	case want == 0:
		b.WriteString("expected: no fixed number (the first level has concurrent clients, whose arrival order is timing).\n")
	case same >= want:
		fmt.Fprintf(&b, "expected: at least the first %d, all of level c1 (one request at a time: both routers see the same\n"+
			"order and loads, so every pick must match) — ok.\n", want)
	default:
		fmt.Fprintf(&b, "expected: at least the first %d, all of level c1 (one request at a time) — NOT MET: serve and sim\n"+
			"decided differently on the same input at decision %d; compare %s and %s there.\n", want, same+1, LiveDecisionsFile, SimDecisionsFile)
	}
	if same < total {
		b.WriteString("the rest may differ: with concurrent clients the live requests reach the router in an order set by\n" +
			"microseconds of timing, and one different pick changes the cache trees and loads every later pick reads.\n")
	}
	return b.String()
}

// DistributionLine compares whole distributions, as make test's fidelity gate does: the
// Kolmogorov-Smirnov distance of live and simulated TTFT and TPOT per level (0: the same
// distribution, 1: disjoint). Without think time TTFT moves in whole decode steps here, so a
// distance of a few tenths can come from a step's edge; the gate itself runs open-loop and
// think-time traffic against a live-vs-live noise floor.
func DistributionLine(live, simulated []reports.Record, rows []Row) string {
	lt, lp := reports.LevelSamples(live)
	st, sp := reports.LevelSamples(simulated)
	var b strings.Builder
	b.WriteString("distributions, Kolmogorov-Smirnov distance live vs sim (0 = same):")
	for i, r := range rows {
		sep := ";"
		if i == 0 {
			sep = ""
		}
		fmt.Fprintf(&b, "%s %s TTFT %.2f, TPOT %.2f", sep, r.Label, reports.KSDistance(lt[r.Label], st[r.Label]), reports.KSDistance(lp[r.Label], sp[r.Label]))
	}
	b.WriteString("\n  (the fidelity gate of make test compares open-loop and think-time traffic against a live noise floor)\n")
	return b.String()
}
