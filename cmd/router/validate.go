package main

import (
	"errors"
	"fmt"
	"io"
	"math"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/pdrouter/pdrouter/sim/validate"
)

const simValidateLong = `validate runs the published-results suite: public measurements of real SGLang
deployments (sglang's own benchmark READMEs and PRs, the LMSYS blogs), each a data file with its
source, setup (model, precision, GPU, TP/DP/EP, DP attention, PD layout, the server arguments
that were set), workload and the figures published per load level. For every level the
simulator runs the same setup and computes the same figures; the table shows sim ÷ published
per figure beside its band:

  TTFT mean/median ±25 %, TPOT and ITL mean/median ±15 %, throughputs (req/s, tok/s, per node,
  per GPU) and benchmark duration ±15 %, E2E mean/median ±25 %, P99s ±50 %.

Serving levels run through the simulator with the router in the loop (one regular server, or
the set's prefill/decode layout); ShareGPT sets use the generated sharegpt workload (lengths as
bench_serving samples ShareGPT, without the dataset); phase-isolated levels (the large-scale EP
blogs' prefill-only and decode-only throughputs) drive one server of the measured pool directly.
A model, GPU or layout the simulator cannot express yet gives a "not expressible yet" row; it
fails like a figure outside its band. A figure a level lists under known_gaps (with why the
model misses it) is shown as a known gap and does not fail while it lies outside its band; once
within, it fails until the entry is removed.

With no FILE the embedded suite runs (sim/validate/published/*.json); FILEs run other data
files of the same format. Exit status 1 when any figure is outside its band or not computed
(--no-fail: report only).

Adding a set: write NAME.json in the format of sim/validate/published/README.md (source URL,
date, SGLang version, model, precision, GPU, parallelism, pd, server_args, workload, levels with
load, figures and the place each figure was read), try it with 'router sim validate NAME.json',
move it into sim/validate/published/, and refresh the table of docs/validation.md with
'go test ./sim/validate -run TestREADMETable -update'.`

func newSimValidateCmd() *cobra.Command {
	var markdown, noFail, fit, cross bool
	var fitFields, fitMetrics []string
	cmd := &cobra.Command{
		Use:   "validate [FILE...]",
		Short: "Compare the simulator with published SGLang measurements (sim ÷ published per figure)",
		Long:  simValidateLong,
		Example: `  router sim validate                       # the embedded suite, table and summary
  router sim validate --markdown --no-fail  # the table of docs/validation.md
  router sim validate my-cluster.json       # a data file of your own
  router sim validate --fit --fit-metrics ttft my-cluster.json  # the GPU constants that predict its TTFT best`,
		RunE: func(cmd *cobra.Command, files []string) error {
			if fit || cross || len(fitFields) > 0 || len(fitMetrics) > 0 {
				return runValidateFit(cmd, files, fitFields, fitMetrics, cross)
			}
			sets, err := validate.Embedded()
			if len(files) > 0 {
				sets, err = validate.Load(files...)
			}
			if err != nil {
				return err
			}
			start := time.Now()
			reps := validate.Run(sets)
			wall := time.Since(start)
			out := cmd.OutOrStdout()
			tally := validate.Count(validate.Results(reps))
			if markdown {
				if err := validate.WriteMarkdown(out, reps); err != nil {
					return err
				}
			} else {
				if err := validate.WriteTable(out, reps); err != nil {
					return err
				}
				fmt.Fprintf(out, "\nvalidate: %s\n", tally)
			}
			fmt.Fprintf(cmd.ErrOrStderr(), "validate: %d sets in %.1f s of wall time\n", len(sets), wall.Seconds())
			if !tally.OK() && !noFail {
				return fmt.Errorf("validate: %d figures outside their band, %d not computed (--no-fail to only report)", tally.Outside, tally.NotComputed)
			}
			return nil
		},
	}
	cmd.Flags().BoolVar(&markdown, "markdown", false, "print the table as markdown, as docs/validation.md holds it (with the summary line)")
	cmd.Flags().BoolVar(&noFail, "no-fail", false, "exit 0 even when figures are outside their band")
	cmd.Flags().BoolVar(&fit, "fit", false, "fit every GPU's achieved shares and per-step overheads (--fit-fields) to the embedded suite and the FILEs together, within physical bounds, and print the constants and the median errors before and after (the built-in constants are not changed: the headline fit's are sim/engine/fitted.go, which go test ./sim/validate -run TestHeldOutCrossValidated -update rewrites)")
	var names []string
	for _, f := range validate.FitFields {
		names = append(names, f.Name)
	}
	cmd.Flags().StringSliceVar(&fitFields, "fit-fields", nil, "the constants --fit chooses (default all): "+strings.Join(names, ", "))
	cmd.Flags().StringSliceVar(&fitMetrics, "fit-metrics", nil, "the figures whose errors --fit minimises (default all): "+strings.Join(validate.FitMetrics, ", ")+" (tpot: TPOT and ITL; throughput: the rates and duration); e.g. ttft chooses the constants that predict TTFT best, whatever that costs the other figures")
	cmd.Flags().BoolVar(&cross, "cross", false, "with the fit, predict each set from a fit without it (leave-one-set-out: one Gauss-Newton step from the full fit) and from the fit run again without its whole source, the repository or site that published it (leave-one-source-out), and print those errors too, per source and per set (implies --fit)")
	return cmd
}

// writePerSet is one line a set: its median |error| and TTFT ratio with the built-in
// constants and cross-validated (where TTFT's error comes from, set by set).
func writePerSet(out io.Writer, sets []validate.SetMedians) {
	fmt.Fprintf(out, "\nper set, built-in → cross-validated: median |sim ÷ published − 1| and median TTFT sim ÷ published (P99s and known gaps left out)\n")
	fmt.Fprintf(out, "%-58s %4s %16s %16s %14s\n", "set", "n", "all", "TTFT", "TTFT ratio")
	for _, m := range sets {
		fmt.Fprintf(out, "%-58s %4d %16s %16s %14s\n", m.Set, m.Builtin.N,
			pctNaN(m.Builtin.All)+" → "+pctNaN(m.Cross.All), pctNaN(m.Builtin.TTFT)+" → "+pctNaN(m.Cross.TTFT), ratioNaN(m.Builtin.TTFTRatio)+" → "+ratioNaN(m.Cross.TTFTRatio))
	}
}

// writePerSource is one line a source (Set.Source): its sets' median |error| and TTFT ratio
// left out one set at a time → the whole source left out (how the model does on a
// publication it has not seen).
func writePerSource(out io.Writer, srcs []validate.SourceMedians) {
	fmt.Fprintf(out, "\nper source, each set left out → the whole source left out: median |sim ÷ published − 1| and median TTFT sim ÷ published (P99s and known gaps left out)\n")
	fmt.Fprintf(out, "%-36s %4s %4s %16s %16s %16s %16s %14s\n", "source", "sets", "n", "all", "TTFT", "TPOT/ITL", "thruput", "TTFT ratio")
	for _, m := range srcs {
		fmt.Fprintf(out, "%-36s %4d %4d %16s %16s %16s %16s %14s\n", m.Source, len(m.Sets), m.BySet.N,
			pctNaN(m.BySet.All)+" → "+pctNaN(m.BySource.All), pctNaN(m.BySet.TTFT)+" → "+pctNaN(m.BySource.TTFT),
			pctNaN(m.BySet.TPOT)+" → "+pctNaN(m.BySource.TPOT), pctNaN(m.BySet.Throughput)+" → "+pctNaN(m.BySource.Throughput),
			ratioNaN(m.BySet.TTFTRatio)+" → "+ratioNaN(m.BySource.TTFTRatio))
	}
}

// pctNaN prints an error as a percentage, "-" when there is none (NaN).
func pctNaN(v float64) string {
	if math.IsNaN(v) {
		return "-"
	}
	return fmt.Sprintf("%.1f%%", 100*v)
}

// ratioNaN prints a ratio, "-" when there is none (NaN).
func ratioNaN(v float64) string {
	if math.IsNaN(v) {
		return "-"
	}
	return fmt.Sprintf("%.2f", v)
}

// writeFarOff lists the cross-validated figures beyond 2×, level by level, each level with its
// beyond_2x reason (once) or as unexplained, and how many of each.
func writeFarOff(out io.Writer, far []validate.Result) {
	explained := 0
	for _, r := range far {
		if r.Explained != "" {
			explained++
		}
	}
	fmt.Fprintf(out, "\ncross-validated figures beyond 2× (P99s and known gaps left out): %d, %d with a documented cause (the level's beyond_2x), %d mispredicted\n",
		len(far), explained, len(far)-explained)
	for i, r := range far {
		if i == 0 || r.Set != far[i-1].Set || r.Level != far[i-1].Level {
			why := "mispredicted: nothing in the source explains it"
			if r.Explained != "" {
				why = r.Explained
			}
			fmt.Fprintf(out, "  %s | %s — %s\n", r.Set, r.Level, why)
		}
		fmt.Fprintf(out, "      %s: published %.4g, sim %.4g, ×%.2f\n", r.Figure, r.Published, r.Simulated, r.Ratio)
	}
}

// runValidateFit is validate --fit [--cross]: the embedded suite and files fitted together.
func runValidateFit(cmd *cobra.Command, files, fields, metrics []string, cross bool) error {
	sets, err := validate.Embedded()
	if err != nil {
		return err
	}
	inSample := map[string]bool{}
	for _, s := range sets {
		inSample[s.Name] = true
	}
	if len(files) > 0 {
		more, err := validate.Load(files...)
		if err != nil {
			return err
		}
		sets = append(sets, more...)
	}
	start := time.Now()
	stderr := cmd.ErrOrStderr()
	rep, err := validate.Fit(sets, validate.FitOptions{Fields: fields, Metrics: metrics, Cross: cross,
		Progress: func(msg string) { fmt.Fprintln(stderr, "validate: "+msg) }})
	switch {
	case errors.Is(err, validate.ErrUnknownField):
		return fmt.Errorf("--fit-fields: %w", err)
	case errors.Is(err, validate.ErrUnknownMetric):
		return fmt.Errorf("--fit-metrics: %w", err)
	case err != nil:
		return err
	}
	out := cmd.OutOrStdout()
	fmt.Fprintf(out, "%-10s %-24s %12s %12s\n", "GPU", "constant", "built-in", "fitted")
	for _, p := range rep.Params {
		fmt.Fprintf(out, "%-10s %-24s %12.4g %12.4g\n", p.GPU, p.Field, p.Before, p.After)
	}
	fmt.Fprintf(out, "\nmedian |sim ÷ published − 1| (P99s and known gaps left out); TTFT ratio is the median sim ÷ published\n")
	fmt.Fprintf(out, "%-28s %5s %8s %8s %8s %8s %8s %10s %9s\n", "", "n", "all", "TTFT", "TPOT/ITL", "thruput", "E2E", "TTFT ratio", "in band")
	row := func(name string, rs []validate.Result, keep func(string) bool) {
		m := validate.Medians(rs, keep)
		pct := func(v float64) string { return fmt.Sprintf("%.1f%%", 100*v) }
		fmt.Fprintf(out, "%-28s %5d %8s %8s %8s %8s %8s %10.2f %4d/%-4d\n", name, m.N, pct(m.All), pct(m.TTFT), pct(m.TPOT), pct(m.Throughput), pct(m.E2E), m.TTFTRatio, m.InBand, m.Figures)
	}
	embedded := func(s string) bool { return inSample[s] }
	others := func(s string) bool { return !inSample[s] }
	row("embedded, built-in", rep.Before, embedded)
	row("embedded, fitted", rep.After, embedded)
	if cross {
		row("embedded, cross-validated", rep.Cross, embedded)
		row("embedded, source left out", rep.CrossSource, embedded)
	}
	if len(files) > 0 {
		row("files, built-in", rep.Before, others)
		row("files, fitted", rep.After, others)
		if cross {
			row("files, cross-validated", rep.Cross, others)
			row("files, source left out", rep.CrossSource, others)
		}
	}
	if cross {
		writePerSource(out, validate.PerSource(sets, rep.Cross, rep.CrossSource))
		writePerSet(out, validate.PerSet(rep.Before, rep.Cross))
		writeFarOff(out, validate.FarOff(rep.Cross, func(string) bool { return true }))
	}
	fmt.Fprintf(stderr, "validate: fit of %d sets in %.1f s of wall time (%d runs of a GPU's sets: %d set runs, %d more the same as an earlier one)\n",
		len(sets), time.Since(start).Seconds(), rep.Evaluations, rep.Runs, rep.Reused)
	return nil
}
