package main

import (
	"fmt"
	"io"
	"os"
	"runtime"
	"strings"

	"github.com/spf13/cobra"
)

// version is set at build time with -ldflags "-X main.version=…"; "dev" otherwise.
var version = "dev"

// subcommands holds the constructors of the top-level commands. Each command's file adds its
// own in an init function, so commands are added without editing this file.
var subcommands []func() *cobra.Command

// newRootCmd builds the command tree. Subcommands register themselves here as they are built.
func newRootCmd() *cobra.Command {
	root := &cobra.Command{
		Use:   "router",
		Short: "Route, simulate and benchmark SGLang prefill/decode clusters",
		Long: `router is one binary with several jobs for operators of SGLang clusters that split
prefill and decode onto separate GPU pools (and for regular clusters too):

  serve       a production router: cache-aware and DP-rank-aware load balancing, the exact
              PD wire protocol, retries, circuit breakers, health checks, Prometheus metrics
  sim         a discrete-event simulator of a whole PD cluster with the same router in the loop,
              to tune cache_threshold and the balance thresholds against TTFT/TPOT
  bench       a load generator reporting P50-P99 TTFT/TPOT/ITL/E2E against a live deployment
  fakeworker  an SGLang-compatible fake worker, so a whole PD cluster runs on a laptop
  demo        a local PD cluster of fakeworkers, serve in front, a bench run and the
              simulator's prediction of it side by side (what 'make demo' runs)
  report      an HTML or text report of bench or sim results, or two runs compared

Every command explains its flags with --help.`,
		SilenceUsage:  true,
		SilenceErrors: true,
		Version:       versionString(),
	}
	root.SetVersionTemplate("{{.Version}}\n")
	// Every command's flag errors name it and its --help (serve parses its own flags and says
	// the same).
	root.SetFlagErrorFunc(func(c *cobra.Command, err error) error {
		if c == root {
			return fmt.Errorf("%w (see router --help)", err)
		}
		return fmt.Errorf("%s: %w (see %s --help)", strings.TrimPrefix(c.CommandPath(), "router "), err, c.CommandPath())
	})
	root.AddCommand(newVersionCmd())
	for _, c := range subcommands {
		root.AddCommand(c())
	}
	return root
}

func newVersionCmd() *cobra.Command {
	return &cobra.Command{
		Use:   "version",
		Short: "Print the router version and the Go toolchain that built it",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			_, err := fmt.Fprintln(cmd.OutOrStdout(), versionString())
			return err
		},
	}
}

// versionString is what `router version` and `router --version` print.
func versionString() string {
	return fmt.Sprintf("router %s (%s, %s/%s)", version, runtime.Version(), runtime.GOOS, runtime.GOARCH)
}

// isTerminal reports whether w is a character device (a terminal), where progress may be
// redrawn in place; files and pipes get whole lines.
func isTerminal(w io.Writer) bool {
	f, ok := w.(*os.File)
	if !ok {
		return false
	}
	fi, err := f.Stat()
	return err == nil && fi.Mode()&os.ModeCharDevice != 0
}
