package main

import (
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/pdrouter/pdrouter/fakeworker"
	"github.com/pdrouter/pdrouter/reports"
	"github.com/pdrouter/pdrouter/sim"
	"github.com/pdrouter/pdrouter/sim/engine"
	"github.com/pdrouter/pdrouter/workloads"
	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
)

const calibrateLong = `calibrate fits the engine model to a real deployment: it replays each router bench run
(RUN_DIR: results.json with the run's workload and load, requests.jsonl with every request's
tokens) in the simulator, on the cluster the flags describe (--prefill, --decode, --dp-size,
--dp-attention or --cluster FILE, and the router settings the runs used: --config or flags), and
moves the free coefficients of --base-profile until the simulated TTFT, TPOT and ITL percentiles
match the measured ones (Nelder-Mead from the base, deterministic, gonum/optimize; runs simulated
in parallel on all cores). The free coefficients: prefill linear-layer cost (a1) and prefill
attention cost (a2) apart, decode memory traffic (m0, m2) and decode compute (c1, c2) apart,
the fixed costs per prefill and per decode step, and the PD overhead per request.

What the servers report is taken as given, not fitted: router bench records each worker's
/get_server_info, and calibrate sets the simulated servers' max_total_num_tokens (KV capacity;
also the written profile's max_total_tokens), chunked_prefill_size, max_running_requests,
page_size and cuda_graph_max_bs from it (per role in PD), and --dp-size and --dp-attention from
its dp_size and enable_dp_attention unless given. Engine-argument flags given explicitly win.

One level is held out by default (--holdout highest: the level with the most requests in
flight, measured throughput × mean latency): the fit uses the others, then predicts it and
prints its error per figure. --holdout none fits every level; --holdout N (the level's number in
the printed list), LABEL or RUN/LABEL holds out another. A warning names the levels when the
fitted levels' rms log error passes 0.10 (the engine model cannot express the deployment) and
the held-out level when its error passes 0.15. The written profile records the fitted range
(prompt lengths, requests in flight per decode rank, residual) under fit:, so router sim can
say when a prediction is an extrapolation.

Bench each run with cold caches and its own conversations (--seed N differing per run, or a
restart): the simulator replays every run from cold caches, and a run that finds its prompts
cached by an earlier one with the same seed measures replay, not the hardware. Vary the load
(levels from light to busy) so that queueing separates per-token costs from fixed ones.

It prints measured, base and fitted figures per level with the error, and writes the fitted
profile to --out as a profile file: give it to sim, sim sweep or fakeworker as --profile FILE.
Check it on a run it did not see (another load level, another workload) before trusting it:
router sim --profile FILE with that run's flags, beside the bench.`

const calibrateExample = `  router bench --url http://ROUTER:30000 --seed 1 --concurrency 1 --requests 500 --out runs/c1
  router bench --url http://ROUTER:30000 --seed 2 --concurrency 8 --requests 500 --out runs/c8
  router bench --url http://ROUTER:30000 --seed 3 --concurrency 32 --requests 500 --out runs/c32
  router sim calibrate runs/c1 runs/c8 runs/c32 --prefill 2 --decode 2 --dp-size 1 \
    --base-profile llama3-8b-h100 --out my-cluster.yaml`

// calibrateRejects are sim flags with no meaning for calibrate (the runs bring their
// workload and load); giving one is an error rather than silently ignored.
var calibrateRejects = []string{"profile", "prefill-profile", "decode-profile", "format", "write-config", "label", "slo", "kill"}

func newSimCalibrateCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:     "calibrate RUN_DIR... --base-profile NAME|FILE --out PROFILE [cluster and router flags]",
		Short:   "Fit the engine model to router bench runs of a real deployment; write the profile",
		Long:    calibrateLong,
		Example: calibrateExample,
		Args:    cobra.MinimumNArgs(1),
	}
	fs := cmd.Flags()
	f := bindSimFlags(fs)
	fs.Lookup("out").Usage = "file receiving the fitted profile (YAML, the form --profile FILE reads; required)"
	var baseName string
	var maxEvals int
	var holdout string
	fs.StringVar(&holdout, "holdout", "highest", "level left out of the fit and predicted: highest (the busiest level), none, a level number, LABEL or RUN/LABEL")
	fs.StringVar(&baseName, "base-profile", sim.DefaultProfile, "profile the fit starts from: a preset (router fakeworker profiles) or a profile file")
	fs.IntVar(&maxEvals, "max-evals", 400, "bound on objective evaluations (each simulates every run)")
	workloadFlags := pflag.NewFlagSet("", pflag.ContinueOnError)
	addWorkloadFlags(workloadFlags, new(workloads.Params), new(workloads.LoadParams))
	cmd.RunE = func(cmd *cobra.Command, args []string) error {
		var bad []string
		workloadFlags.VisitAll(func(fl *pflag.Flag) {
			if fs.Changed(fl.Name) && fl.Name != "seed" {
				bad = append(bad, "--"+fl.Name)
			}
		})
		for _, n := range calibrateRejects {
			if fs.Changed(n) {
				bad = append(bad, "--"+n)
			}
		}
		if len(bad) > 0 {
			return fmt.Errorf("sim calibrate: %s: the workload and load come from each run's results.json, the profile from --base-profile", strings.Join(bad, ", "))
		}
		if f.out == "" {
			return fmt.Errorf("sim calibrate: --out PROFILE is required (the fitted profile's file)")
		}
		cfg, err := f.resolve(fs, version)
		if err != nil {
			return err
		}
		base, err := resolveBaseProfile(baseName)
		if err != nil {
			return err
		}
		var runs []sim.CalibrationRun
		for _, dir := range args {
			r, err := readCalibrationRun(dir)
			if err != nil {
				return err
			}
			runs = append(runs, r)
		}
		stderr, stdout := cmd.ErrOrStderr(), cmd.OutOrStdout()
		var servers []sim.ServerInfo
		for i, dir := range args {
			s, warns := readServerInfo(dir)
			for _, w := range warns {
				fmt.Fprintf(stderr, "calibrate: %s: %s\n", runs[i].Name, w)
			}
			servers = append(servers, s...)
		}
		if len(servers) == 0 {
			fmt.Fprintln(stdout, "warning: no run recorded its workers' /get_server_info: KV capacity, chunked prefill size and the other engine arguments are the base profile's and the flags', not the deployment's")
		}
		var notes []string
		cfg.Cluster, base, notes = sim.ApplyServerInfo(cfg.Cluster, base, cfg.Router.PDDisaggregation, servers)
		notes = append(notes, applyRecordedParallelism(fs, &cfg.Cluster, servers)...)
		for _, n := range notes {
			fmt.Fprintf(stdout, "engine arguments: %s\n", n)
		}
		held, err := sim.ResolveHoldout(runs, holdout)
		if err != nil {
			return err
		}
		fmt.Fprintf(stderr, "calibrate: %d runs, base %s, up to %d evaluations\n", len(runs), base.Name, maxEvals)
		writeLevels(stdout, runs, held)
		start := time.Now()
		c, err := sim.Calibrate(sim.CalibrateConfig{Base: base, Cluster: cfg.Cluster, Router: cfg.Router, Runs: runs, MaxEvals: maxEvals, Holdout: held,
			Progress: func(eval int, loss, best float64) {
				if eval%20 == 0 {
					fmt.Fprintf(stderr, "calibrate: evaluation %d, loss %.4f (best %.4f), %.0f s\n", eval, loss, best, time.Since(start).Seconds())
				}
			}})
		if err != nil {
			return err
		}
		name := strings.TrimSuffix(filepath.Base(f.out), filepath.Ext(f.out))
		c.Profile.Name = name
		c.Profile.Source = fmt.Sprintf("router sim calibrate from %s on %s; rms log error %.3f (base %.3f)",
			base.Name, strings.Join(args, ", "), c.FitRMSE, c.BaseRMSE)
		if len(held) > 0 {
			c.Profile.Source += fmt.Sprintf(", held out %.3f", c.HoldoutRMSE)
		}
		if err := writeCalibration(cmd.OutOrStdout(), c, base.Name); err != nil {
			return err
		}
		out, err := profileYAML(c.Profile)
		if err != nil {
			return err
		}
		if err := os.WriteFile(f.out, out, 0o644); err != nil {
			return fmt.Errorf("sim calibrate: --out: %w", err)
		}
		for _, w := range c.Warnings {
			fmt.Fprintf(stdout, "warning: %s\n", w)
		}
		fmt.Fprintf(stderr, "calibrate: %d evaluations in %.1f s; wrote %s\n", c.Evaluations, time.Since(start).Seconds(), f.out)
		return nil
	}
	return cmd
}

// resolveBaseProfile reads --base-profile: a file or a preset.
func resolveBaseProfile(v string) (engine.Profile, error) {
	if isProfileFile(v) {
		p, err := loadProfileFile(v)
		if err != nil {
			return p, fmt.Errorf("sim calibrate: --base-profile: %w", err)
		}
		return p, nil
	}
	p, err := fakeworker.ResolveProfile(v, 0, 0)
	if err != nil {
		return p, fmt.Errorf("sim calibrate: --base-profile: %w", err)
	}
	return p, nil
}

// readCalibrationRun reads one bench run and refuses, naming what is missing, one that cannot
// be replayed or lacks per-request tokens.
func readCalibrationRun(dir string) (sim.CalibrationRun, error) {
	run, err := reports.ReadRun(dir, true)
	if err != nil {
		return sim.CalibrationRun{}, fmt.Errorf("sim calibrate: %w", err)
	}
	res := run.Results
	switch {
	case res.Meta.Tool != reports.ToolBench:
		return sim.CalibrationRun{}, fmt.Errorf("sim calibrate: %s is a %s run: calibrate fits measurements (router bench --out)", dir, res.Meta.Tool)
	case len(res.Meta.Replay) == 0:
		return sim.CalibrationRun{}, fmt.Errorf("sim calibrate: %s: results.json has no meta.replay (the run's exact workload and load); bench it again with this version of router bench", dir)
	case len(run.Records) == 0:
		return sim.CalibrationRun{}, fmt.Errorf("sim calibrate: %s: no per-request records (%s missing or empty)", dir, reports.RequestsFile)
	}
	for _, r := range run.Records {
		if r.Error == nil && (r.InputTokens <= 0 || r.OutputTokens <= 0) {
			return sim.CalibrationRun{}, fmt.Errorf("sim calibrate: %s: request %s has no prompt or output token count; calibration needs the server to report usage", dir, r.ID)
		}
	}
	var rp workloads.Replay
	if err := json.Unmarshal(res.Meta.Replay, &rp); err != nil {
		return sim.CalibrationRun{}, fmt.Errorf("sim calibrate: %s: meta.replay: %w", dir, err)
	}
	if err := rp.Workload.Validate(); err != nil {
		return sim.CalibrationRun{}, fmt.Errorf("sim calibrate: %s: cannot replay the workload: %w", dir, err)
	}
	for _, l := range res.Levels {
		if l.Errors > 0 {
			return sim.CalibrationRun{}, fmt.Errorf("sim calibrate: %s: level %s has %d failed requests; calibrate on clean runs", dir, l.Label, l.Errors)
		}
	}
	return sim.CalibrationRun{Name: run.Name, Workload: rp.Workload, Load: rp.Load, Measured: res.Levels, Records: run.Records}, nil
}

// writeCalibration prints the fitted coefficients, every compared figure, and each held-out
// level's error per figure.
func writeCalibration(w io.Writer, c *sim.Calibration, base string) error {
	f := c.Fit
	fmt.Fprintf(w, "fit (× %s): prefill linear ×%.3f, prefill attention ×%.3f, prefill fixed %.2f ms, decode memory ×%.3f, decode compute ×%.3f, decode fixed %.2f ms, PD overhead %.1f ms\n",
		base, f.Prefill, f.PrefillAttn, f.PrefillFixed*1e3, f.Decode, f.DecodeCompute, f.DecodeFixed*1e3, f.PDOverhead*1e3)
	fmt.Fprintf(w, "rms log error on the fitted levels: base %.3f, fitted %.3f (%d evaluations)\n", c.BaseRMSE, c.FitRMSE, c.Evaluations)
	if fr := c.Profile.Fit; fr != nil {
		fmt.Fprintf(w, "fitted range: prompts %d–%d tokens, up to %d requests in flight per decode rank\n", fr.PromptTokensMin, fr.PromptTokensMax, fr.BatchPerRankMax)
	}
	fmt.Fprintln(w)
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "run\tlevel\tfigure\tmeasured ms\tbase ms\terror\tfitted ms\terror\t\t")
	for _, p := range c.Points {
		mark := ""
		if p.HeldOut {
			mark = "held out"
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%.2f\t%.2f\t%+.1f%%\t%.2f\t%+.1f%%\t%s\t\n", p.Run, p.Level, p.Metric, p.Measured, p.Base, p.ErrPct(true), p.Fitted, p.ErrPct(false), mark)
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	for _, l := range c.Levels {
		if !l.HeldOut {
			continue
		}
		var parts []string
		for _, p := range c.Points {
			if p.HeldOut && p.Run == l.Run && p.Level == l.Level {
				parts = append(parts, fmt.Sprintf("%s %+.1f%%", p.Metric, p.ErrPct(false)))
			}
		}
		fmt.Fprintf(w, "\nheld-out level %s/%s, predicted by the fit: %s (rms log error %.3f)\n", l.Run, l.Level, strings.Join(parts, ", "), l.RMSE)
	}
	return nil
}

// writeLevels lists the measured levels with their numbers (--holdout N) and which is held out.
func writeLevels(w io.Writer, runs []sim.CalibrationRun, held []sim.LevelRef) {
	fmt.Fprintln(w, "levels:")
	for i, l := range sim.CalibrationLevels(runs) {
		m := runs[l.Run].Measured[slices.IndexFunc(runs[l.Run].Measured, func(x reports.Level) bool { return x.Label == l.Label })]
		mark := "fitted"
		if slices.Contains(held, l) {
			mark = "held out"
		}
		fmt.Fprintf(w, "  %d  %s/%s  %.1f requests in flight  %s\n", i+1, runs[l.Run].Name, l.Label, m.Throughput.ReqS*m.E2EMs.Mean/1000, mark)
	}
}

// readServerInfo reads the workers a bench run recorded (meta.workers) as sim.ServerInfo,
// with a warning for each worker without a usable /get_server_info.
func readServerInfo(dir string) ([]sim.ServerInfo, []string) {
	res, err := reports.ReadResults(dir)
	if err != nil {
		return nil, []string{err.Error()}
	}
	var out []sim.ServerInfo
	warns := append([]string(nil), res.Meta.Warnings...)
	for _, w := range res.Meta.Workers {
		if w.ServerInfo == nil {
			continue // its error is among the run's warnings
		}
		si, err := sim.ParseServerInfo(w.ServerInfo)
		if err != nil {
			warns = append(warns, fmt.Sprintf("worker %s: %v", w.URL, err))
			continue
		}
		si.URL = w.URL
		if w.Role != "" {
			si.Role = w.Role
		}
		out = append(out, si)
	}
	return out, warns
}

// applyRecordedParallelism sets the cluster's DP size and DP attention from the recorded
// dp_size and enable_dp_attention when neither the flags nor a --cluster file gave them and
// every server agrees; it returns notes on what it did.
func applyRecordedParallelism(fs *pflag.FlagSet, cl *sim.Cluster, servers []sim.ServerInfo) []string {
	if len(servers) == 0 || fs.Changed("cluster") {
		return nil
	}
	changed := func(names ...string) bool {
		for _, n := range names {
			if fs.Lookup(n) != nil && fs.Changed(n) {
				return true
			}
		}
		return false
	}
	var notes []string
	dp, agree := servers[0].DPSize, true
	for _, s := range servers {
		agree = agree && s.DPSize == dp
	}
	switch {
	case dp == 0 || changed("dp-size"):
	case !agree:
		notes = append(notes, "the servers report different dp_size: --dp-size stays as given")
	case dp != cl.DPSize:
		cl.DPSize = dp
		notes = append(notes, fmt.Sprintf("dp_size %d, as recorded", dp))
	}
	att := servers[0].DPAttention
	for _, s := range servers {
		if s.DPAttention == nil || att == nil || *s.DPAttention != *att {
			att = nil
			break
		}
	}
	if att != nil && !changed("dp-attention", "enable-dp-attention") && *att != cl.DPAttention {
		cl.DPAttention = *att
		notes = append(notes, fmt.Sprintf("enable_dp_attention %t, as recorded", *att))
	}
	return notes
}
