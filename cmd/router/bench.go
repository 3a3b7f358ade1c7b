package main

import (
	"context"
	"fmt"
	"net/http"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/spf13/cobra"

	"github.com/pdrouter/pdrouter/bench"
	"github.com/pdrouter/pdrouter/reports"
	"github.com/pdrouter/pdrouter/workloads"
)

func init() { subcommands = append(subcommands, newBenchCmd) }

// newBenchCmd builds `router bench` (SPEC §5).
func newBenchCmd() *cobra.Command {
	p, l := workloads.DefaultParams(), workloads.DefaultLoadParams()
	var (
		url, slo, out string
		headers       []string
		timeout       time.Duration
		quiet         bool
		maxErrorRate  float64
		label         string
		scrape        []string
	)
	cmd := &cobra.Command{
		Use:   "bench --url URL [--workload NAME] [load flags]",
		Short: "Load-test a live OpenAI/SGLang endpoint and report TTFT, TPOT, ITL, E2E per level",
		Long: `bench drives a live endpoint (router serve, a worker, any OpenAI- or SGLang-compatible
deployment) with a workload and reports P50-P99 TTFT, TPOT, ITL and E2E latency, throughput,
cache hit rate and goodput per level, measured as sglang bench_serving measures them.

Levels: --concurrency 1,2,4 runs closed loop (N clients, each running one conversation at a
time, turns in order with the actual reply appended); --rate R|inf runs open loop (each
arrival of --arrival starts a conversation; client-side queueing is reported as queue_ms).
--requests and --duration bound each level (a generated workload that holds fewer than
--warmup + --requests draws more conversations of the same shape, and says so on stderr);
--warmup requests precede each level unrecorded; --flush-cache POSTs /flush_cache to the
target between levels. Without --model, requests name the first model of the target's
/v1/models.

Progress goes to stderr (a bar on a terminal; otherwise one line per level and warm-up and a
heartbeat every 10 s: requests done, errors, P50 TTFT so far), the
table to stdout, and with --out DIR results.json and requests.jsonl (render them again with
router report). results.json records what the run ran against: --label, the command line,
the target's /get_server_info and, from a router serve, its settings (/get_router_config), so
router report --compare names the settings that differ between two runs; and the exact workload
and load, so router sim calibrate can replay the run. requests.jsonl holds every request's
prompt, cached and output tokens, send time, TTFT, ITLs and E2E. --scrape-metrics samples the
workers' SGLang gauges during the run into metrics.jsonl.

Datasets: ` + workloads.DatasetSchema + `

Exit status: 1 when a level's failed requests exceed --max-error-rate (default 0: any failed
request), after every level ran, with each failing level's error kinds and the first message
of each on stderr; the table and results are still written.`,
		Example: `  router bench --url http://127.0.0.1:30000 --workload multiturn --concurrency 1,4,16,64 --out runs/on
  router bench --url http://127.0.0.1:30000 --workload sharegpt --dataset-path ShareGPT_V3_unfiltered_cleaned_split.json --num-prompts 1000 --rate 8
  router bench --url http://127.0.0.1:30000 --workload custom --dataset-path prompts.jsonl --concurrency 16
  router bench --url http://127.0.0.1:30000 --workload gsp --rate 2,4,8 --duration 2m --slo ttft=500,tpot=50`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := validateWorkloadFlags(p, l); err != nil {
				return err
			}
			if note := fitRequests(&p, l); note != "" && !quiet {
				fmt.Fprintln(cmd.ErrOrStderr(), "bench: "+note)
			}
			cfg := bench.Config{URL: url, Header: http.Header{}, Workload: p, Load: l,
				RequestTimeout: timeout, Out: out, Version: version, MaxErrorRate: maxErrorRate,
				Label: label, Command: commandLine, ScrapeMetrics: scrape,
				DiscoverModel: !cmd.Flags().Changed("model")}
			for _, h := range headers {
				if err := bench.ParseHeader(cfg.Header, h); err != nil {
					return err
				}
			}
			if slo != "" {
				s, err := bench.ParseSLO(slo)
				if err != nil {
					return err
				}
				cfg.SLO = s
			}
			if !quiet {
				cfg.Progress = cmd.ErrOrStderr()
				cfg.ProgressTTY = isTerminal(cfg.Progress)
			}
			ctx := cmd.Context()
			if ctx == nil {
				ctx = context.Background()
			}
			ctx, stop := signal.NotifyContext(ctx, os.Interrupt, syscall.SIGTERM)
			defer stop()
			res, runErr := bench.Run(ctx, cfg)
			if res != nil && len(res.Levels) > 0 {
				if err := reports.RenderTable(cmd.OutOrStdout(), res); err != nil {
					return err
				}
				printLevelWarnings(cmd.ErrOrStderr(), res, p, l)
			}
			if runErr != nil {
				return runErr
			}
			if out != "" && !quiet {
				fmt.Fprintf(cmd.ErrOrStderr(), "results in %s\n", out)
			}
			return nil
		},
	}
	fs := cmd.Flags()
	fs.StringVar(&url, "url", "", "base URL of the endpoint, e.g. http://127.0.0.1:30000 (required)")
	fs.StringArrayVar(&headers, "header", nil, `extra request header "Key: value" (repeatable)`)
	fs.StringVar(&slo, "slo", "", "goodput objectives in ms, e.g. ttft=500,tpot=50 (also e2e=MS)")
	fs.StringVar(&out, "out", "", "directory for results.json and requests.jsonl")
	fs.StringVar(&label, "label", "", "name of the run in reports (default: the --out directory's name); recorded with the command line and the target's settings")
	fs.DurationVar(&timeout, "request-timeout", bench.DefaultRequestTimeout, "bound on one request, stream included")
	fs.BoolVar(&quiet, "quiet", false, "no progress on stderr")
	fs.StringSliceVar(&scrape, "scrape-metrics", nil, "worker URLs (comma-separated) whose /metrics are sampled every second into DIR/metrics.jsonl (sglang:num_running_reqs, num_queue_reqs, token_usage, gen_throughput, cache_hit_rate); needs --out")
	fs.Float64Var(&maxErrorRate, "max-error-rate", 0, "fraction of a level's requests that may fail before bench exits 1 (0: none may; negative: never fail)")
	addWorkloadFlags(fs, &p, &l)
	_ = cmd.MarkFlagRequired("url")
	return cmd
}
