package main

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"runtime/pprof"
	"syscall"
	"time"

	"github.com/pdrouter/pdrouter/fakeworker"
	"github.com/pdrouter/pdrouter/router/server"
	"github.com/pdrouter/pdrouter/sim/engine"
	"github.com/pdrouter/pdrouter/sim/validate"
	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
)

func init() { subcommands = append(subcommands, newFakeworkerCmd) }

// fakeworkerFlags are the flags shared by `fakeworker` and `fakeworker cluster`.
type fakeworkerFlags struct {
	profile, logLevel string
	modelConfig       string // --model-config: a Hugging Face config.json the engine's model is built from
	ttft, itl         time.Duration
	cfg               fakeworker.Config
}

func (f *fakeworkerFlags) register(fs *pflag.FlagSet) {
	c := &f.cfg
	fs.StringVar(&c.Host, "host", "127.0.0.1", "address to listen on")
	parallelismFlags(fs, cmdFakeworker, &c.TPSize, &c.DPSize, &c.EPSize, &c.DPAttention)
	fs.StringVar(&c.GPU, "gpu", "", modelFlagHelp["gpu"][cmdFakeworker])
	engineArgFlags(fs, &c.Args, "")
	fs.StringVar(&c.SchedulePolicy, "schedule-policy", engine.PolicyLPM, "prefill queue order, as SGLang --schedule-policy: lpm (longest prefix first, in-batch prefix sharing, FCFS past 128 waiting) or fcfs")
	fs.BoolVar(&c.DisableOverlap, "disable-overlap-schedule", false, "as SGLang: a batch's prompts are matchable when its step ends, not after the next batch is scheduled")
	fs.BoolVar(&c.MixedChunk, "enable-mixed-chunk", false, "as SGLang: a regular server's running requests decode one token inside each prefill step (the chunk shrinks by their number) instead of waiting for the prompt's last chunk; off under speculative decoding")
	fs.BoolVar(&c.DecodeRadixCache, "disaggregation-decode-enable-radix-cache", false, "decode worker: keep a prefix cache of the prompts served, as SGLang; a hit shrinks the KV transfer")
	fs.StringVar(&f.profile, "profile", "constant", "timing profile: constant (with --ttft/--itl), instant, a preset listed by \"router fakeworker profiles\", or a profile file (YAML/JSON, see profiles --show)")
	fs.DurationVar(&f.ttft, "ttft", 0, "constant profile: time to first token (default 100ms)")
	fs.DurationVar(&f.itl, "itl", 0, "constant profile: time between output tokens (default 20ms)")
	fs.DurationVar(&c.BootstrapTimeout, "bootstrap-timeout", 30*time.Second, "PD: fail a room whose peer has not shown up within this long")
	fs.Float64Var(&c.LinkGbps, "link-gbps", 0, "prefill: KV transfer link bandwidth in Gbit/s (0: 400)")
	fs.Float64Var(&c.Speedup, "speedup", 1, "divide every model duration by this")
	fs.StringVar(&c.ModelPath, "model-path", fakeworker.DefaultModelPath, modelFlagHelp["model_path"][cmdFakeworker])
	fs.StringVar(&f.modelConfig, "model-config", "", modelFlagHelp["model_config"][cmdFakeworker])
	c.Seed = 1
	seedFlag(fs, cmdFakeworker, &c.Seed)
	fs.StringVar(&f.logLevel, "log-level", "info", "debug, info, warn or error")
	fs.StringVar(&c.KVEventsConfig, "kv-events-config", "", `publish the radix cache's KV events as SGLang does: its KVEventsConfig JSON, e.g. '{"publisher":"zmq","endpoint":"tcp://*:5557","replay_endpoint":"tcp://*:5600","topic":"kv"}' (one PUB, and ROUTER, per DP rank at port+rank)`)
	fs.StringVar(&c.KVEventsShape, "kv-events-shape", fakeworker.KVShapeArray, "KV event wire shape: array (SGLang's tagged arrays) or map (tagged maps with a \"type\" field, sglang PR #37482)")
	fs.StringVar(&c.TokenizerPath, "tokenizer-path", "", "tokenize prompts with this tokenizer (a tokenizer.json file or a model directory), as SGLang; default: the approximate built-in tokenizer")
	fs.StringVar(&c.ChatTemplate, "chat-template", "", "a Jinja chat template file replacing the tokenizer's (needs --tokenizer-path)")
	fs.BoolVar(&c.NoLoadReports, "no-load-reports", false, "report no engine load, as an SGLang without /v1/loads or --enable-metrics: GET /v1/loads answers 404 and /metrics has no per-rank sglang gauges (to test a router's fallback to in-flight counts)")
	fl := &c.Failures
	fs.Float64Var(&fl.ErrorRate, "error-rate", 0, "failure: fraction of inference requests answered at once with --error-status")
	fs.IntVar(&fl.ErrorStatus, "error-status", 500, "failure: HTTP status of injected errors")
	fs.Float64Var(&fl.HangRate, "hang-rate", 0, "failure: fraction of inference requests never answered")
	fs.IntVar(&fl.CrashAfter, "crash-after", 0, "failure: die (drop every connection) on inference request N+1 (0: never)")
	fs.Float64Var(&fl.SlowFactor, "slow-factor", 1, `failure: multiply every model duration by this; change it while running with POST /fakeworker/slow_factor {"slow_factor": F} (GET reads it)`)
	fs.IntVar(&fl.CutStreamAfter, "cut-stream-after", 0, "failure: drop streams after N tokens, without [DONE] (0: never)")
	fs.BoolVar(&fl.NeverSignalKV, "never-signal-kv", false, "failure (prefill): compute, then never finish the KV transfer")
	fs.DurationVar(&fl.FailHealthAfter, "fail-health-after", 0, "failure: /health answers 503 from this long after start (0: never)")
}

// resolve fills the profile and logger into the config.
func (f *fakeworkerFlags) resolve(cmd *cobra.Command) (fakeworker.Config, error) {
	c := f.cfg
	fs := cmd.Flags()
	if err := checkSchedulePolicy(c.SchedulePolicy); err != nil {
		return c, fmt.Errorf("fakeworker: %w", err)
	}
	if err := checkEngineArgFlags(fs, c.Args, ""); err != nil {
		return c, fmt.Errorf("fakeworker: %w", err)
	}
	for _, n := range []string{"tp-size", "dp-size", "ep-size"} {
		if v, _ := fs.GetInt(n); fs.Changed(n) && v < 1 {
			return c, fmt.Errorf("fakeworker: --%s %d must be ≥ 1", n, v)
		}
	}
	if c.GPU != "" {
		// The engine is built from --model-path on --gpu (fakeworker.Config.GPU).
		for _, n := range []string{"profile", "ttft", "itl"} {
			if fs.Changed(n) {
				return c, fmt.Errorf("fakeworker: --gpu (with --model-path) and --%s both pick the engine: give one", n)
			}
		}
		if f.modelConfig != "" {
			name := ""
			if fs.Changed("model-path") {
				name = c.ModelPath
			}
			m, err := readModelConfig(f.modelConfig, name)
			if err != nil {
				return c, fmt.Errorf("fakeworker: %w", err)
			}
			c.Model, c.ModelPath = &m, m.Name
		} else if !fs.Changed("model-path") {
			return c, fmt.Errorf("fakeworker: --gpu %s needs --model-path (%s) or --model-config", c.GPU, modelNames())
		}
	} else {
		if f.modelConfig != "" {
			return c, fmt.Errorf("fakeworker: --model-config %s needs --gpu (%s): the model is built on a GPU", f.modelConfig, gpuNames())
		}
		// A preset or profile file is one rank's engine with its GPUs and experts in it: the
		// sizes that shape only a --model-path engine would be ignored, so they are refused.
		for _, n := range []string{"tp-size", "ep-size"} {
			if v, _ := fs.GetInt(n); fs.Changed(n) && v > 1 {
				return c, fmt.Errorf("fakeworker: --%s %d shapes only a --model-path engine on --gpu: a preset or profile file brings its own GPUs (router fakeworker profiles); give --model-path MODEL --gpu GPU --%s %d, or pick a preset of that size", n, v, n, v)
			}
		}
		if !fs.Changed("profile") && (f.ttft != 0 || f.itl != 0) {
			f.profile = "constant"
		}
		var p engine.Profile
		var err error
		if isProfileFile(f.profile) {
			p, err = loadProfileFile(f.profile)
		} else {
			p, err = fakeworker.ResolveProfile(f.profile, f.ttft, f.itl)
		}
		if err != nil {
			return c, err
		}
		c.Profile = p
	}
	var lvl slog.Level
	if err := lvl.UnmarshalText([]byte(f.logLevel)); err != nil {
		return c, fmt.Errorf("fakeworker: --log-level %q is not debug, info, warn or error", f.logLevel)
	}
	c.Logger = slog.New(slog.NewTextHandler(cmd.ErrOrStderr(), &slog.HandlerOptions{Level: lvl}))
	return c, nil
}

func signalContext(cmd *cobra.Command) (context.Context, context.CancelFunc) {
	return signal.NotifyContext(cmd.Context(), os.Interrupt, syscall.SIGTERM)
}

func newFakeworkerCmd() *cobra.Command {
	var f fakeworkerFlags
	var mode, cpuProfile, tlsCert, tlsKey, tlsClientCA string
	cmd := &cobra.Command{
		Use:   "fakeworker",
		Short: "Run an SGLang-compatible fake worker (regular, prefill or decode) driven by the engine model",
		Long: `fakeworker serves SGLang's HTTP API (/generate, /v1/chat/completions, /v1/completions,
/get_server_info, /get_load, /metrics, ...) with timings from the same engine model the simulator
uses. A prefill worker also runs the fake KV bootstrap server on --bootstrap-port; a decode
worker registers each room there, so a PD pair behaves like real SGLang disaggregation.
It stops cleanly on SIGINT/SIGTERM.

The engine is a --profile (a preset, constant or a profile file), or a model on a GPU:
--model-path MODEL --gpu GPU builds it from the model card and the GPU at SGLang's parallelism
(--tp-size, --dp-size, --ep-size, --enable-dp-attention), with SGLang's engine arguments
(--chunked-prefill-size, --max-running-requests, --max-total-tokens, --page-size,
--cuda-graph-max-bs, --mem-fraction-static, --schedule-conservativeness) defaulting to what SGLang
picks for that GPU's memory and parallelism (with a preset: the engine's defaults).
/get_server_info reports the values the engine runs with, under SGLang's names.

Failure injection (--error-rate, --hang-rate, --crash-after, --slow-factor, ...) is set at start;
the slow factor can also change while the worker runs, behind a router's back:
  curl -d '{"slow_factor": 2}' http://127.0.0.1:30000/fakeworker/slow_factor   # 2x slower from now
  curl http://127.0.0.1:30000/fakeworker/slow_factor                            # {"slow_factor":2}`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			c, err := f.resolve(cmd)
			if err != nil {
				return err
			}
			if c.Mode, err = parseMode(mode); err != nil {
				return err
			}
			if c.Mode != engine.RolePrefill && !cmd.Flags().Changed("bootstrap-port") {
				c.BootstrapPort = 0
			}
			if cpuProfile != "" {
				stopProfile, err := startCPUProfile(cpuProfile)
				if err != nil {
					return err
				}
				defer stopProfile()
			}
			ctx, stop := signalContext(cmd)
			defer stop()
			if c.TLS, err = fakeworkerTLS(tlsCert, tlsKey, tlsClientCA); err != nil {
				return err
			}
			w, err := fakeworker.Start(ctx, c)
			if err != nil {
				return err
			}
			bp := "-"
			if p := w.BootstrapPort(); p != 0 {
				bp = fmt.Sprint(p)
			}
			fmt.Fprintf(cmd.OutOrStdout(), "%s %s bootstrap_port=%s dp_size=%d\n", fakeworker.ModeName(w.Mode()), w.URL(), bp, max(c.DPSize, 1))
			return w.Wait()
		},
	}
	fs := cmd.Flags()
	f.register(fs)
	fs.StringVar(&mode, "mode", "regular", "regular, prefill or decode")
	fs.IntVar(&f.cfg.Port, "port", 30000, "HTTP port (0: any free port)")
	fs.IntVar(&f.cfg.BootstrapPort, "bootstrap-port", fakeworker.DefaultBootstrapPort, "prefill: port of the KV bootstrap server")
	fs.StringVar(&cpuProfile, "cpu-profile", "", "write a CPU profile (pprof) of the whole run to this file")
	fs.StringVar(&tlsCert, "tls-cert-path", "", "serve HTTPS with this certificate (PEM; re-read when it changes)")
	fs.StringVar(&tlsKey, "tls-key-path", "", "serve HTTPS: the certificate's private key (PEM)")
	fs.StringVar(&tlsClientCA, "tls-client-ca", "", "HTTPS: require client certificates signed by this CA bundle (PEM), i.e. mTLS")
	cmd.AddCommand(newFakeworkerClusterCmd(), newFakeworkerProfilesCmd())
	return cmd
}

// startCPUProfile profiles the process into path until the returned function is called.
func startCPUProfile(path string) (func(), error) {
	f, err := os.Create(path)
	if err != nil {
		return nil, fmt.Errorf("fakeworker: --cpu-profile: %w", err)
	}
	if err := pprof.StartCPUProfile(f); err != nil {
		f.Close()
		return nil, fmt.Errorf("fakeworker: --cpu-profile: %w", err)
	}
	return func() { pprof.StopCPUProfile(); f.Close() }, nil
}

func parseMode(s string) (engine.Role, error) {
	switch s {
	case "regular", "prefill", "decode":
		return engine.ParseRole(s)
	}
	return 0, fmt.Errorf("fakeworker: --mode %q is not regular, prefill or decode", s)
}

func newFakeworkerClusterCmd() *cobra.Command {
	var f fakeworkerFlags
	var cc fakeworker.ClusterConfig
	cmd := &cobra.Command{
		Use:   "cluster",
		Short: "Run a whole local cluster of fake workers in one process and print the matching router serve line",
		Long: `cluster starts --prefill N prefill and --decode M decode workers (and --regular K regular
ones), prints every worker URL with its role and bootstrap port, then the router serve command
line that routes to them. Ports: prefill workers get --base-port, --base-port+1, ..., then the
decode workers, then the regular ones, then the prefill bootstrap ports (--base-port 0: any free
ports). It stops cleanly on SIGINT/SIGTERM.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			c, err := f.resolve(cmd)
			if err != nil {
				return err
			}
			cc.Worker = c
			ctx, stop := signalContext(cmd)
			defer stop()
			cl, err := fakeworker.StartCluster(ctx, cc)
			if err != nil {
				return err
			}
			if err := cl.Describe(cmd.OutOrStdout()); err != nil {
				cl.Stop()
			}
			return cl.Wait()
		},
	}
	fs := cmd.Flags()
	f.register(fs)
	fs.IntVar(&cc.Prefill, "prefill", 0, "prefill workers")
	fs.IntVar(&cc.Decode, "decode", 0, "decode workers")
	fs.IntVar(&cc.Regular, "regular", 0, "regular (non-disaggregated) workers")
	fs.IntVar(&cc.BasePort, "base-port", 30001, "first port; the others follow (0: any free ports)")
	return cmd
}

func newFakeworkerProfilesCmd() *cobra.Command {
	var coefficients bool
	var show string
	cmd := &cobra.Command{
		Use:   "profiles [--show NAME]",
		Short: "List the engine presets: KV capacity, modelled prefill tok/s and decode ITL, sources",
		Long: `profiles lists the engine presets of fakeworker and sim, one per line: KV capacity per
rank (tokens), the modelled prefill speed (an 8k-token first chunk on an idle rank) and decode ITL
at batch 1, 64 and 256 (1k-token contexts; DP-attention presets: one rank loaded), and the sources the
numbers come from (model card, GPU datasheet, assumptions). --coefficients adds each preset's
step-time coefficients. After the table, each preset's validation: the published SGLang runs of
its model on its GPU (router sim validate) and its worst error against them, or "unvalidated
roofline" when no published run covers it.

--show NAME prints one preset as a profile file (YAML, units in comments): edit it and pass it
as --profile FILE to sim, sim sweep, fakeworker or fakeworker cluster, or start router sim
calibrate from it (--base-profile).`,
		Example: `  router fakeworker profiles --show llama3-8b-h100 > my-gpu.yaml
  router sim --profile my-gpu.yaml --concurrency 1,8,32`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if show != "" {
				p, err := fakeworker.ResolveProfile(show, 0, 0)
				if err != nil {
					return err
				}
				out, err := profileYAML(p)
				if err != nil {
					return err
				}
				_, err = cmd.OutOrStdout().Write(out)
				return err
			}
			if _, err := fmt.Fprint(cmd.OutOrStdout(), engine.FormatPresets(coefficients)); err != nil {
				return err
			}
			byPreset, err := validate.Validated()
			if err != nil {
				return err
			}
			_, err = fmt.Fprint(cmd.OutOrStdout(), "\nvalidated against published SGLang runs (router sim validate; a preset validates with the sets of its model on its GPU):\n"+
				validate.FormatValidated(modelPresetNames(), byPreset))
			return err
		},
	}
	cmd.Flags().BoolVar(&coefficients, "coefficients", false, "also print each preset's step-time coefficients")
	cmd.Flags().StringVar(&show, "show", "", "print this preset as a profile file (YAML with units), the form --profile FILE reads")
	return cmd
}

// fakeworkerTLS builds the HTTPS settings of `fakeworker --tls-cert-path` (nil without it).
func fakeworkerTLS(certPath, keyPath, clientCA string) (*tls.Config, error) {
	switch {
	case certPath == "" && keyPath == "" && clientCA == "":
		return nil, nil
	case certPath == "" || keyPath == "":
		return nil, fmt.Errorf("fakeworker: --tls-cert-path and --tls-key-path go together (--tls-client-ca needs both)")
	}
	tc, err := server.ServingTLS(certPath, keyPath)
	if err != nil {
		return nil, fmt.Errorf("fakeworker: %w", err)
	}
	if clientCA != "" {
		pem, err := os.ReadFile(clientCA)
		if err != nil {
			return nil, fmt.Errorf("fakeworker: --tls-client-ca: %w", err)
		}
		tc.ClientCAs = x509.NewCertPool()
		if !tc.ClientCAs.AppendCertsFromPEM(pem) {
			return nil, fmt.Errorf("fakeworker: --tls-client-ca %s holds no PEM certificate", clientCA)
		}
		tc.ClientAuth = tls.RequireAndVerifyClientCert
	}
	return tc, nil
}

// modelPresetNames are the presets that model an engine (not constant or instant).
func modelPresetNames() []string {
	var names []string
	for _, p := range engine.Presets() {
		if !p.Constant {
			names = append(names, p.Name)
		}
	}
	return names
}
