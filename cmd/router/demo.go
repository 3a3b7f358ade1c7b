package main

import (
	"context"
	"fmt"
	"os"
	"os/signal"
	"syscall"

	"github.com/spf13/cobra"

	"github.com/pdrouter/pdrouter/cmd/router/internal/demo"
)

func init() { subcommands = append(subcommands, newDemoCmd) }

const demoLong = `demo shows the whole product on this machine in under a minute, with no GPU and no network
(everything listens on 127.0.0.1, on ports the OS picks):

  1. starts a fakeworker PD cluster: 2 prefill + 2 decode workers, 4 DP ranks each with
     DP-attention lockstep, every timing from an engine preset (--profile) at --speedup;
  2. puts the router in front of it, as 'router serve' runs it: cache_aware, --dp-aware, --seed;
  3. benches it with 'router bench' (the multiturn workload: 48 conversations of 3 turns with
     shared 1,024-token system prompts, 16 warm-up and --requests recorded requests per level)
     at each --concurrency level, caches flushed between levels, then stops the router and
     the workers;
  4. simulates the very same cluster, profile, speedup, router settings, workload and load with
     'router sim' (in virtual time, well under a second);
  5. prints live and simulated P50/P95 TTFT and TPOT side by side with the simulator's error
     (diff = (sim - live) / live), and writes both runs' results, their decision logs and an
     HTML report comparing them to --out.

Progress goes to stderr, the comparison table to stdout. Ctrl-C stops everything it started.`

func newDemoCmd() *cobra.Command {
	sc := demo.DefaultScenario()
	var out string
	cmd := &cobra.Command{
		Use:   "demo",
		Short: "Run a local PD cluster, the router, a bench run and the simulator's prediction side by side",
		Long:  demoLong,
		Example: `  router demo
  router demo --out runs/demo --concurrency 1,8,32 --requests 64
  router demo --profile llama3-8b-a100 --speedup 3`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			ctx := cmd.Context()
			if ctx == nil {
				ctx = context.Background()
			}
			ctx, stop := signal.NotifyContext(ctx, os.Interrupt, syscall.SIGTERM)
			defer stop()
			_, err := demo.Run(ctx, demo.Config{Scenario: sc, Out: out, Stdout: cmd.OutOrStdout(),
				Stderr: cmd.ErrOrStderr(), Version: version})
			if err != nil && ctx.Err() != nil {
				return fmt.Errorf("demo: interrupted; everything it started has stopped")
			}
			return err
		},
	}
	fs := cmd.Flags()
	fs.StringVar(&out, "out", "", "directory for the results and report.html (default: a fresh directory under the system's temp dir, printed at the end)")
	fs.StringVar(&sc.Profile, "profile", sc.Profile, "engine preset of every worker (router fakeworker profiles lists them)")
	fs.Float64Var(&sc.Speedup, "speedup", sc.Speedup, "divide every model duration by this")
	fs.IntSliceVar(&sc.Load.Concurrency, "concurrency", sc.Load.Concurrency, "closed-loop levels: comma-separated client counts")
	fs.IntVar(&sc.Load.Requests, "requests", sc.Load.Requests, "recorded requests per level")
	seedFlag(fs, cmdDemo, &sc.Seed)
	fs.DurationVar(&sc.NetLatency, "net-latency", sc.NetLatency, "simulated one-way latency of each network hop (stands for loopback HTTP)")
	return cmd
}
