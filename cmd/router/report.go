package main

import (
	"bytes"
	"fmt"
	"os"
	"strings"

	"github.com/spf13/cobra"

	"github.com/pdrouter/pdrouter/reports"
)

func init() { subcommands = append(subcommands, newReportCmd) }

// newReportCmd builds `router report` (SPEC §6).
func newReportCmd() *cobra.Command {
	var (
		compare bool
		format  string
		out     string
	)
	formats := make([]string, 0, len(reports.Formats()))
	for _, f := range reports.Formats() {
		formats = append(formats, string(f))
	}
	cmd := &cobra.Command{
		Use:   "report FILE... [--compare] [--format table|md|csv|json|html] [--out PATH]",
		Short: "Render bench or sim results, or compare two runs side by side",
		Long: `report renders one or more results files (results.json, or the --out directory of
router bench / router sim that holds it).

With --compare A B it pairs the levels of the two runs by label (c16 with c16, r4 with r4)
and prints A and B side by side with B's improvement over A in percent (positive = B better:
lower latency, higher throughput), e.g. TTFT P95 with DP-aware routing off / on / improvement.

--format html writes one self-contained page (no network access) that fits a 1,280-px
window and a phone's: with --compare a summary first (per level, TTFT and TPOT P50/P95 of both
runs and B's improvement), then SVG charts: TTFT P95 and TPOT P95 against concurrency, one line
per run, and the TTFT CDFs when requests.jsonl lies beside results.json (with --compare both
runs on one chart: a colour per level, A solid, B dashed); then, folded, every compared metric
(one row per level and metric), the settings both runs record with different values and
those only one run records (settings only, not the servers' runtime state; durations as
durations); then each run's level table with means beside the percentiles.`,
		Example: `  router report runs/on
  router report --compare runs/off runs/on
  router report --compare runs/off runs/on --format html --out compare.html`,
		Args: cobra.MinimumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			f, err := reports.ParseFormat(format)
			if err != nil {
				return err
			}
			if compare && len(args) != 2 {
				return fmt.Errorf("report: --compare takes exactly two files (A B), got %d", len(args))
			}
			runs := make([]reports.Run, 0, len(args))
			for _, path := range args {
				run, err := reports.ReadRun(path, f == reports.FormatHTML)
				if err != nil {
					return err
				}
				runs = append(runs, run)
			}
			var buf bytes.Buffer
			if compare {
				err = reports.RenderCompare(&buf, f, runs[0], runs[1])
			} else {
				err = reports.RenderRuns(&buf, f, runs)
			}
			if err != nil {
				return err
			}
			if out == "" || out == "-" {
				_, err = cmd.OutOrStdout().Write(buf.Bytes())
				return err
			}
			if err := os.WriteFile(out, buf.Bytes(), 0o644); err != nil {
				return fmt.Errorf("report: --out: %w", err)
			}
			return nil
		},
	}
	fs := cmd.Flags()
	fs.BoolVar(&compare, "compare", false, "compare two runs A B level by level, with B's improvement over A in %")
	fs.StringVar(&format, "format", string(reports.FormatTable), "output format: "+strings.Join(formats, ", "))
	fs.StringVarP(&out, "out", "o", "", "write to this file instead of stdout")
	return cmd
}
