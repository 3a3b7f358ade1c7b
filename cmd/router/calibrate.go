package main

import (
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"
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
moves the free coefficients of --base-profile (prefill and decode speed, their fixed costs per
step, the PD overhead and KV transfer setup) until the simulated TTFT, TPOT and ITL percentiles
match the measured ones (Nelder-Mead, gonum/optimize; runs simulated in parallel on all cores).

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
		stderr := cmd.ErrOrStderr()
		fmt.Fprintf(stderr, "calibrate: %d runs, base %s, up to %d evaluations\n", len(runs), base.Name, maxEvals)
		start := time.Now()
		c, err := sim.Calibrate(sim.CalibrateConfig{Base: base, Cluster: cfg.Cluster, Router: cfg.Router, Runs: runs, MaxEvals: maxEvals,
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

// writeCalibration prints the fitted coefficients and every compared figure.
func writeCalibration(w io.Writer, c *sim.Calibration, base string) error {
	fmt.Fprintf(w, "fit (× %s): prefill ×%.3f, prefill fixed %.2f ms, decode ×%.3f, decode fixed %.2f ms, PD overhead %.1f ms, KV setup %.2f ms\n",
		base, c.Fit.Prefill, c.Fit.PrefillFixed*1e3, c.Fit.Decode, c.Fit.DecodeFixed*1e3, c.Fit.PDOverhead*1e3, c.Fit.T0*1e3)
	fmt.Fprintf(w, "rms log error: base %.3f, fitted %.3f (%d evaluations)\n\n", c.BaseRMSE, c.FitRMSE, c.Evaluations)
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "run\tlevel\tfigure\tmeasured ms\tbase ms\terror\tfitted ms\terror\t")
	for _, p := range c.Points {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%.2f\t%.2f\t%+.1f%%\t%.2f\t%+.1f%%\t\n", p.Run, p.Level, p.Metric, p.Measured, p.Base, p.ErrPct(true), p.Fitted, p.ErrPct(false))
	}
	return tw.Flush()
}
