package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"syscall"

	"github.com/pdrouter/pdrouter/router/server"
	"github.com/spf13/cobra"
	"go.yaml.in/yaml/v3"
)

func init() { subcommands = append(subcommands, newServeCmd) }

const serveLong = `Serve an SGLang cluster: a drop-in replacement for the SGLang router (sgl-router)
with the same flags, endpoints and wire format toward workers.

Regular mode routes to --worker-urls. PD mode (--pd-disaggregation) pairs a prefill and a decode
worker per request and sends both legs at once with the bootstrap fields SGLang expects; a
failure of either leg is answered at once and cancels the other.

Settings come from the defaults, then --config FILE (YAML or JSON, the same keys as the flags
with underscores — the file 'router sim sweep --write-config' writes), then the flags. Worker
lists from flags are added to the file's.

Every flag of today's sgl-router (the SGLang Model Gateway, smg) works here with its meaning,
under its old spellings too, except those docs/sgl-router-compat.md lists as unsupported, with
why: serve refuses them (exit 1, naming each and what it would have done) unless
--allow-ignored-flags is given, which runs without them after one warning.`

const serveExample = `  # PD cluster, cache-aware and DP-aware, as sgl-router takes it
  router serve --pd-disaggregation --dp-aware \
    --prefill http://10.0.0.1:30001 9001 --prefill http://10.0.0.2:30001 none \
    --decode http://10.0.0.3:30002 --host 0.0.0.0 --port 30000

  # apply settings tuned with 'router sim sweep --write-config tuned.yaml'
  router serve --config tuned.yaml --prefill http://10.0.0.1:30001 --decode http://10.0.0.3:30002

  # check what would run, then exit
  router serve --config tuned.yaml --worker-urls http://a:30000 http://b:30000 --print-config`

func newServeCmd() *cobra.Command {
	flagCfg := serveDefaults()
	var configPath, apiKeyFile string
	var printConfig, flushEachEvent, allowIgnored bool
	cmd := &cobra.Command{
		Use:     "serve [flags]",
		Short:   "Route requests to an SGLang cluster (regular or prefill/decode)",
		Long:    serveLong,
		Example: serveExample,
		// sgl-router's argparse forms (--prefill URL PORT, --worker-urls A B) are normalized
		// before the flags are parsed, so cobra must not parse them first.
		DisableFlagParsing: true,
		SilenceUsage:       true,
		RunE: func(cmd *cobra.Command, args []string) error {
			norm, ignored := normalizeServeArgs(args)
			fs := cmd.Flags()
			if err := fs.Parse(norm); err != nil {
				return fmt.Errorf("serve: %w (see router serve --help)", err)
			}
			if help, _ := fs.GetBool("help"); help {
				return cmd.Help()
			}
			if fs.NArg() > 0 {
				return fmt.Errorf("serve: unexpected argument %q (flags take the form --name value)", fs.Arg(0))
			}
			cfg := flagCfg
			var file settingsFile
			if configPath != "" {
				fileCfg, f, err := loadConfigFile(configPath)
				if err != nil {
					return err
				}
				cfg, file = mergeFlags(fs, fileCfg, flagCfg), f
			}
			// Running without a feature the command line asked for (discovery, TLS, …) is
			// worse than not starting: ignored flags are an error unless allowed.
			if w := ignoredWarning(ignored); w != "" {
				if !allowIgnored {
					return fmt.Errorf("serve: %s; remove them, or give --allow-ignored-flags to run without them", w)
				}
				if cfg.LogJSON { // --log-json: every line is JSON
					newLogger(cfg, cmd.ErrOrStderr()).Warn("ignoring " + w)
				} else {
					fmt.Fprintln(cmd.ErrOrStderr(), "warning: ignoring "+w)
				}
			}
			if err := apiKeyFrom(&cfg, fs.Changed("api-key") || file.lines["api_key"] > 0, apiKeyFile); err != nil {
				return err
			}
			if err := cfg.Validate(); err != nil {
				return file.explain(err, fs)
			}
			if printConfig {
				out, err := yaml.Marshal(cfg.Redacted())
				if err != nil {
					return err
				}
				_, err = cmd.OutOrStdout().Write(out)
				return err
			}
			ctx, stop := signal.NotifyContext(cmd.Context(), os.Interrupt, syscall.SIGTERM)
			defer stop()
			return runServe(ctx, cfg, serveExtras{flushEachEvent}, cmd.ErrOrStderr())
		},
	}
	cmd.Flags().SortFlags = false
	cmd.Flags().StringVar(&configPath, "config", "", "settings file (YAML or JSON) read before the flags; flags override it")
	cmd.Flags().BoolVar(&printConfig, "print-config", false, "print the effective settings as YAML and exit")
	cmd.Flags().BoolVar(&allowIgnored, "allow-ignored-flags", false, "start even when sgl-router flags pdrouter does not implement are given (they are then ignored, with a warning)")
	cmd.Flags().StringVar(&apiKeyFile, "api-key-file", "", "read the API key from this file (first line), not the command line where ps shows it; PDROUTER_API_KEY in the environment works too")
	serveFlags(cmd.Flags(), &flagCfg)
	// For benchmarks only (BenchmarkProxy's flush comparison): the slower flush policy.
	cmd.Flags().BoolVar(&flushEachEvent, "flush-each-event", false, "flush relayed streams after every SSE event (slower; for benchmarks)")
	_ = cmd.Flags().MarkHidden("flush-each-event")
	cmd.Flags().BoolP("help", "h", false, "help for serve")
	return cmd
}

// serveExtras are serve's hidden flags, there to measure alternatives (BenchmarkProxy).
type serveExtras struct {
	flushEachEvent bool // --flush-each-event: server.Options.FlushEachEvent
}

// runServe runs the router until ctx is cancelled, then drains in-flight requests.
// x carries the hidden benchmark flags.
func runServe(ctx context.Context, cfg server.Config, x serveExtras, stderr io.Writer) error {
	logger := newLogger(cfg, stderr)
	opts := server.Options{Config: cfg, LocalIP: localIP(), Logger: logger, FlushEachEvent: x.flushEachEvent}
	models, err := latencyModels(cfg)
	if err != nil {
		return err
	}
	opts.LatencyModels = models
	closeAll := func() {}
	if cfg.DecisionLog != "" {
		f, err := os.Create(cfg.DecisionLog)
		if err != nil {
			return fmt.Errorf("--decision-log: %w", err)
		}
		opts.DecisionLog = f
		closeAll = func() { f.Close() }
	}
	defer func() { closeAll() }()
	switch cfg.AccessLog {
	case "":
	case "-":
		opts.AccessLog = stderr
	default:
		f, err := os.OpenFile(cfg.AccessLog, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
		if err != nil {
			return fmt.Errorf("--access-log: %w", err)
		}
		opts.AccessLog = f
		prev := closeAll
		closeAll = func() { prev(); f.Close() }
	}
	s, err := server.New(opts)
	if err != nil {
		return err
	}
	ln, err := net.Listen("tcp", net.JoinHostPort(cfg.Host, strconv.Itoa(cfg.Port)))
	if err != nil {
		return fmt.Errorf("--host/--port: %w", err)
	}
	mln, err := net.Listen("tcp", net.JoinHostPort(cfg.PrometheusHost, strconv.Itoa(cfg.PrometheusPort)))
	if err != nil {
		ln.Close()
		return fmt.Errorf("--prometheus-host/--prometheus-port: %w", err)
	}
	bg, cancelBG := context.WithCancel(context.Background())
	stopDiscovery := func() {}
	defer func() { cancelBG(); stopDiscovery(); s.Wait() }()
	logger.Info("registering workers", "mode", mode(cfg), "policy", cfg.Policy, "seed", s.Seed())
	if err := s.Start(bg); err != nil {
		ln.Close()
		mln.Close()
		return err
	}
	stop, err := startDiscovery(bg, cfg, s, logger)
	if err != nil {
		ln.Close()
		mln.Close()
		return err
	}
	stopDiscovery = stop
	// /metrics stays up while the router drains; if it fails, the router drains and stops.
	sctx, stopServe := context.WithCancel(ctx)
	defer stopServe()
	mctx, stopMetrics := context.WithCancel(context.Background())
	merr := make(chan error, 1)
	go func() {
		err := s.ServeMetrics(mctx, mln)
		stopServe()
		merr <- err
	}()
	scheme := "http"
	if cfg.TLSCertPath != "" {
		scheme = "https"
	}
	// One parseable line for scripts and tests that start the router on port 0.
	if cfg.LogJSON {
		logger.Info("router listening", "url", scheme+"://"+ln.Addr().String(), "metrics", "http://"+mln.Addr().String()+"/metrics")
	} else {
		fmt.Fprintf(stderr, "router listening on %s://%s (metrics on http://%s/metrics)\n", scheme, ln.Addr(), mln.Addr())
	}
	err = s.Serve(sctx, ln)
	stopMetrics()
	return errors.Join(err, <-merr)
}

func mode(cfg server.Config) string {
	if cfg.PDDisaggregation {
		return "pd"
	}
	return "regular"
}

func newLogger(cfg server.Config, w io.Writer) *slog.Logger {
	var level slog.Level
	switch cfg.LogLevel {
	case "debug":
		level = slog.LevelDebug
	case "warn", "warning":
		level = slog.LevelWarn
	case "error":
		level = slog.LevelError
	}
	opts := &slog.HandlerOptions{Level: level}
	if cfg.LogJSON {
		return slog.New(slog.NewJSONHandler(w, opts))
	}
	return slog.New(slog.NewTextHandler(w, opts))
}

// localIP finds the address this host uses for outbound traffic, as sgl-router does: a UDP
// "connect" picks a route without sending any packet. It falls back to 127.0.0.1.
func localIP() string {
	conn, err := net.Dial("udp", "192.0.2.1:9") // TEST-NET-1; connect() on UDP sends nothing
	if err != nil {
		return "127.0.0.1"
	}
	defer conn.Close()
	if a, ok := conn.LocalAddr().(*net.UDPAddr); ok && !a.IP.IsUnspecified() {
		return a.IP.String()
	}
	return "127.0.0.1"
}

// apiKeyEnv names the environment variable serve reads the API key from.
const apiKeyEnv = "PDROUTER_API_KEY"

// apiKeyFrom fills cfg.APIKey from --api-key-file or PDROUTER_API_KEY when neither --api-key
// nor the settings file gave one (given says they did): a key on the command line shows in
// ps. Two sources of a key are an error naming both.
func apiKeyFrom(cfg *server.Config, given bool, file string) error {
	if file != "" {
		if given {
			return fmt.Errorf("serve: --api-key-file and --api-key (or the settings file's api_key) both give the key: keep one")
		}
		raw, err := os.ReadFile(file)
		if err != nil {
			return fmt.Errorf("serve: --api-key-file: %w", err)
		}
		key, _, _ := strings.Cut(string(raw), "\n")
		if key = strings.TrimSpace(key); key == "" {
			return fmt.Errorf("serve: --api-key-file %s is empty", file)
		}
		cfg.APIKey = key
		return nil
	}
	if env := strings.TrimSpace(os.Getenv(apiKeyEnv)); env != "" && !given {
		cfg.APIKey = env
	}
	return nil
}
