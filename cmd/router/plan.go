package main

import (
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"runtime"
	"runtime/debug"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/pdrouter/pdrouter/sim"
	"github.com/pdrouter/pdrouter/sim/plan"
	"github.com/pdrouter/pdrouter/workloads"
)

const planLong = `plan searches for the cheapest SGLang PD deployment that meets service-level objectives on a
workload: how many prefill and decode servers, each role's parallelism (--tp-size, and for a MoE
model DP attention with expert parallelism: --tp-size N --dp-size N --ep-size N
--enable-dp-attention), and the router's settings. It prints the candidates ranked, writes the
winner's 'router serve' settings file (--write-config) and a kustomize overlay deploying it
(--overlay).

Inputs:
  the workload and load   every workload flag of 'router sim' (--workload, --rate, --concurrency,
                          --requests, --trace-file …); the plan must hold at every level
  the model and GPU       --model-path and --gpu (the plan chooses each role's parallelism among
                          those valid for the card and the node: heads divisible, weights and a
                          KV pool fitting in memory), or --profile with its fixed parallelism
                          (the plan then chooses counts)
  the budget              --gpus (most GPUs in all) and --gpus-per-node (most GPUs per server)
  the objectives          --slo-ttft-ms and --slo-tpot-ms at --slo-percentile (p90), at every
                          level; --goodput-target: the least share of requests meeting both
  the objective           --objective min-gpus (fewest GPUs meeting the SLO, then the most
                          goodput per GPU) or goodput-per-gpu
  router settings         --vary KEY=v1,v2 (sweep's keys: policy, cache_threshold, …), tried on
                          the --top best clusters; every other router flag is the base

How: every cluster within the budget is first bounded without a simulation; it is pruned when
  - a server's weights and KV pool do not fit its GPUs, or a rank's KV pool is smaller than the
    longest request;
  - the SLO percentile of the requests' idle prefill times (each prompt less the longest prefix
    an earlier prompt shares, on an idle rank) is above --slo-ttft-ms;
  - a decode batch of one at the percentile's prompt steps slower than --slo-tpot-ms;
  - open loop: the prefill pool's best token rate is below the offered uncached prompt tokens,
    or the decode pool's best output rate below the offered output tokens.
The others are simulated (in parallel, each deterministic) with the router core in the loop;
then --vary's grid runs on the --top best clusters meeting the SLO, and the winner is
re-simulated at --verify-seeds other seeds (seed+1, seed+2, …): a winner that misses the SLO at
one gives way to the next candidate. Same flags and seed: the same table, byte for byte.
Progress goes to stderr.

Load over time: --hourly-rates r0,r1,… (req/s per hour, e.g. a diurnal curve) plans each hour
alone at its rate — the fewest GPUs meeting the SLO, simulating clusters of equal GPU count
together, fewest first; --vary is not run per hour — and prints the servers per role per hour,
an autoscaler's schedule.
--hourly-from-trace takes the rates from a trace workload's timestamps, one per --hour window
(each hour's requests then arrive as Poisson at that rate).

Large searches: 'plan --shard i/N --out DIR' simulates every N-th surviving cluster and writes
DIR/sweep.json (the format of 'router sim sweep --shard', so deploy/k8s/sim-sweep-job.yaml's
Indexed Job runs it with 'plan' for 'sweep'); 'plan --merge DIR...' with the same flags ranks
the union, runs --vary and the verification here, and writes the outputs.

The overlay (--overlay DIR) is deploy/k8s/base (--overlay-base, a path from here or a URL) with
the settings file as a ConfigMap the router reads with --config, and SGLang prefill and decode
Deployments of the winner's counts, parallelism and GPUs (nvidia.com/gpu), labelled as the
base's selectors pick them: 'kustomize build DIR' renders it, 'kubectl apply -k DIR' applies it.
docs/plan.md walks through a plan from workload to overlay.`

const planExample = `  # 70B on an 8-GPU H200 node, random 2k-token prompts at 6 req/s:
  router sim plan --model-path llama3-70b --gpu h200-sxm --gpus 8 \
    --workload random --input-len 2048 --output-len 256 --rate 6 --requests 600 \
    --slo-ttft-ms 1000 --slo-tpot-ms 40 --vary policy=cache_aware,round_robin \
    --write-config plan.yaml --overlay deploy/overlays/llama70b

  # a MoE model, the most goodput per GPU, multiturn chat at 32 clients:
  router sim plan --model-path qwen3-30b-a3b --gpu h100-sxm --gpus 8 --concurrency 32 \
    --slo-ttft-ms 300 --slo-tpot-ms 20 --objective goodput-per-gpu

  # servers per role for each hour of a day's rates:
  router sim plan --model-path llama3-8b --gpu h100-sxm --gpus 16 --workload random \
    --requests 400 --slo-ttft-ms 500 --slo-tpot-ms 30 --hourly-rates 2,2,1,1,1,2,4,8,12,14,15,15,14,14,15,15,14,12,10,8,6,4,3,2`

// planFlags are plan's own flags (the others are sim's).
type planFlags struct {
	spec        plan.Spec
	varies      []string
	shard       string
	merge       bool
	rows        int
	showPruned  bool
	overlay     string
	overlayBase string
	namespace   string
	image       string
	hourlyRates []float64
	hourlyTrace bool
	hour        time.Duration
}

func bindPlanFlags(fs *pflag.FlagSet) *planFlags {
	p := &planFlags{}
	s := &p.spec
	fs.IntVar(&s.GPUs, "gpus", 8, "GPU budget: no candidate takes more")
	fs.IntVar(&s.GPUsPerNode, "gpus-per-node", 8, "GPUs of a node: the most one server takes (its --tp-size)")
	fs.StringVar(&s.SLO.Percentile, "slo-percentile", "p90", "percentile the TTFT and TPOT objectives hold at: "+strings.Join(plan.Percentiles, ", "))
	fs.Float64Var(&s.SLO.TTFTMs, "slo-ttft-ms", 0, "TTFT objective in ms at --slo-percentile (0: none)")
	fs.Float64Var(&s.SLO.TPOTMs, "slo-tpot-ms", 0, "TPOT objective in ms at --slo-percentile (0: none)")
	fs.Float64Var(&s.SLO.Goodput, "goodput-target", 0, "least share of requests meeting both objectives, in [0,1] (0: none)")
	fs.StringVar(&s.Objective, "objective", plan.ObjectiveMinGPUs, "ranking of the candidates meeting the SLO: "+strings.Join(plan.Objectives, ", "))
	fs.StringArrayVar(&p.varies, "vary", nil, "KEY=v1,v2,…: router settings to try on the --top best clusters (sweep's keys; repeatable)")
	fs.IntSliceVar(&s.TPSizes, "tp-sizes", nil, "the --tp-size values a server may take, e.g. 2,4 (default: every power of two up to --gpus-per-node that the model's heads divide)")
	fs.IntVar(&s.Top, "top", 3, "clusters meeting the SLO that --vary's grid runs on")
	fs.IntVar(&s.Parallel, "parallel", runtime.GOMAXPROCS(0), "simulations at once (default: one per core)")
	fs.IntVar(&s.VerifySeeds, "verify-seeds", 3, "re-simulate the winner at this many other seeds; it must meet the SLO at each")
	fs.StringVar(&p.shard, "shard", "", "I/N: simulate only every N-th surviving cluster (index I mod N) and write --out DIR/sweep.json for --merge")
	fs.BoolVar(&p.merge, "merge", false, "rank the shards in the directories given as arguments (same flags as the shards) instead of simulating the clusters")
	fs.IntVar(&p.rows, "rows", 20, "rows of the ranked table (0: all)")
	fs.BoolVar(&p.showPruned, "show-pruned", false, "list every pruned cluster with its reason")
	fs.StringVar(&p.overlay, "overlay", "", "write the winner's deployment as a kustomize overlay in this directory")
	fs.StringVar(&p.overlayBase, "overlay-base", "deploy/k8s/base", "the router's kustomize base the overlay builds on: a directory (from here) or a remote URL")
	fs.StringVar(&p.namespace, "overlay-namespace", "pdrouter-plan", "namespace (and instance label) of the overlay's objects")
	fs.StringVar(&p.image, "sglang-image", "lmsysorg/sglang:latest", "image of the overlay's SGLang workers")
	fs.Var((*rateList)(&p.hourlyRates), "hourly-rates", "plan each hour alone at its rate (req/s, comma-separated): the servers per role per hour")
	fs.BoolVar(&p.hourlyTrace, "hourly-from-trace", false, "plan each --hour of a trace workload alone at the rate its timestamps give that hour")
	fs.DurationVar(&p.hour, "hour", time.Hour, "the window of --hourly-from-trace (after --time-scale)")
	return p
}

func newSimPlanCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:     "plan --model-path MODEL --gpu GPU --gpus N --slo-ttft-ms MS --slo-tpot-ms MS [workload flags]",
		Short:   "Search P:D counts, parallelism and router settings for the cheapest deployment meeting SLOs",
		Long:    planLong,
		Example: planExample,
		Args:    cobra.ArbitraryArgs,
	}
	f := bindSimFlags(cmd.Flags())
	pf := bindPlanFlags(cmd.Flags())
	cmd.RunE = func(cmd *cobra.Command, args []string) error {
		fs := cmd.Flags()
		if f.slo != "" {
			return errors.New("plan: give the objectives as --slo-ttft-ms and --slo-tpot-ms (at --slo-percentile), not --slo")
		}
		if f.format != "table" {
			return fmt.Errorf("plan: --format %s: a plan prints a table", f.format)
		}
		if len(args) > 0 && !pf.merge {
			return fmt.Errorf("plan: unexpected argument %q (directories are for --merge)", args[0])
		}
		spec, err := pf.resolve(fs, f)
		if err != nil {
			return err
		}
		if os.Getenv("GOMEMLIMIT") == "" {
			debug.SetMemoryLimit(simMemoryLimit)
		}
		stderr := cmd.ErrOrStderr()
		if note := fitRequests(&spec.Base.Workload, spec.Base.Load); note != "" {
			fmt.Fprintln(stderr, "plan: "+note)
		}
		prog := newPlanProgress(stderr)
		if pf.hourlyTrace {
			if len(pf.hourlyRates) > 0 {
				return errors.New("plan: give --hourly-rates or --hourly-from-trace, not both")
			}
			rates, err := plan.TraceRates(spec.Base.Workload, pf.hour)
			if err != nil {
				return err
			}
			fmt.Fprintf(stderr, "plan: the trace's rate per %v: %v req/s\n", pf.hour, rates)
			pf.hourlyRates = rates
			spec.Base.Load.Arrival = workloads.ArrivalPoisson // each hour at its rate
		}
		if len(pf.hourlyRates) > 0 {
			if pf.merge || spec.Shards > 1 {
				return errors.New("plan: --hourly-rates runs here: it takes no --shard or --merge")
			}
			h, err := plan.Hourly(spec, pf.hourlyRates, prog.done)
			prog.finish()
			if err != nil {
				return err
			}
			return h.WriteTable(cmd.OutOrStdout())
		}
		p, err := plan.Prepare(spec)
		if err != nil {
			return err
		}
		switch {
		case pf.merge:
			if err := p.Merge(args); err != nil {
				return err
			}
		case spec.Shards > 1:
			if f.out == "" {
				return fmt.Errorf("plan: --shard %s needs --out DIR for its results", pf.shard)
			}
			p.Run(prog.done)
			prog.finish()
			if err := p.WriteShard(f.out); err != nil {
				return err
			}
			fmt.Fprintf(cmd.OutOrStdout(), "plan shard %d/%d written to %s (rank the shards with --merge)\n", spec.Shard, spec.Shards, filepath.Join(f.out, sim.ShardFile))
			return nil
		default:
			p.Run(prog.done)
		}
		err = p.Finish(prog.done)
		prog.finish()
		if err != nil {
			return err
		}
		if err := p.WriteTable(cmd.OutOrStdout(), pf.rows, pf.showPruned); err != nil {
			return err
		}
		return pf.writeOutputs(cmd.OutOrStdout(), f, p)
	}
	return cmd
}

// resolve builds the plan's Spec from sim's flags (the base simulation) and plan's own.
func (pf *planFlags) resolve(fs *pflag.FlagSet, f *simFlags) (plan.Spec, error) {
	spec := pf.spec
	for _, name := range []string{"prefill", "decode", "regular", "prefill-tp-size", "prefill-dp-size", "prefill-ep-size", "decode-tp-size", "decode-dp-size", "decode-ep-size"} {
		if fs.Changed(name) {
			return spec, fmt.Errorf("plan: --%s is what the plan chooses: leave it out", name)
		}
	}
	if f.cluster.ModelPath != "" || f.modelConfig != "" {
		for _, name := range []string{"tp-size", "dp-size", "ep-size", "enable-dp-attention"} {
			if fs.Changed(name) {
				return spec, fmt.Errorf("plan: --%s is what the plan chooses with --model-path: leave it out", name)
			}
		}
		// The base cluster is checked as one server of a node's GPUs; every candidate then
		// sets each role's own parallelism.
		f.cluster.TPSize = max(min(spec.GPUsPerNode, spec.GPUs/2), 1)
	}
	base, err := f.resolve(fs, version)
	if err != nil {
		return spec, err
	}
	if len(base.Kills) > 0 || len(base.Direct) > 0 {
		return spec, errors.New("plan: --kill and --direct-load are failure and side-traffic scenarios: run them with 'router sim' on the plan's winner")
	}
	base.KeepITL = false
	spec.Base = base
	for _, s := range pf.varies {
		v, err := sim.ParseVary(s)
		if err != nil {
			return spec, err
		}
		spec.Router = append(spec.Router, v)
	}
	if spec.Shard, spec.Shards, err = parseShard(pf.shard); err != nil {
		return spec, fmt.Errorf("plan: %w", err)
	}
	return spec, spec.Validate()
}

// writeOutputs writes --write-config (the winner's settings) and --overlay.
func (pf *planFlags) writeOutputs(w io.Writer, f *simFlags, p *plan.Plan) error {
	if f.writeConfig == "" && pf.overlay == "" {
		return nil
	}
	if p.Winner == nil {
		return errors.New("plan: no candidate meets the SLO: no settings or overlay written")
	}
	cfg := p.Winner.Point.Config
	settings := f.writeConfig
	if settings == "" {
		settings = filepath.Join(pf.overlay, plan.OverlaySettingsFile)
		if err := os.MkdirAll(pf.overlay, 0o755); err != nil {
			return fmt.Errorf("plan: --overlay: %w", err)
		}
	}
	if err := writeSimConfig(settings, cfg.Router, f.chosenRouting(cfg.Routing, p.Spec.Router)); err != nil {
		return err
	}
	fmt.Fprintf(w, "wrote the winner's router settings to %s\n", settings)
	if pf.overlay == "" {
		return nil
	}
	body, err := os.ReadFile(settings)
	if err != nil {
		return err
	}
	base := pf.overlayBase
	if !strings.Contains(base, "://") && !strings.HasPrefix(base, "github.com/") {
		if st, err := os.Stat(base); err != nil || !st.IsDir() {
			return fmt.Errorf("plan: --overlay-base %s is not a directory here (run from the repository root, or give the path to deploy/k8s/base or a URL)", base)
		}
		absBase, err := filepath.Abs(base)
		if err != nil {
			return err
		}
		absDir, err := filepath.Abs(pf.overlay)
		if err != nil {
			return err
		}
		if base, err = filepath.Rel(absDir, absBase); err != nil {
			return fmt.Errorf("plan: --overlay-base: %w", err)
		}
	}
	if err := p.WriteOverlay(pf.overlay, plan.Overlay{Base: base, Namespace: pf.namespace, Settings: body, Image: pf.image}); err != nil {
		return err
	}
	fmt.Fprintf(w, "wrote the kustomize overlay to %s (kustomize build %s)\n", pf.overlay, pf.overlay)
	return nil
}

// planProgress reports finished simulations on stderr: a bar redrawn in place on a terminal, a
// line per simulation otherwise.
type planProgress struct {
	w   io.Writer
	tty bool
	bar *simProgress
}

func newPlanProgress(w io.Writer) *planProgress {
	return &planProgress{w: w, tty: isTerminal(w), bar: newSimProgress(w)}
}

func (p *planProgress) done(stage string, done, total int, c *plan.Candidate) {
	if p.tty {
		p.bar.update(fmt.Sprintf("sim plan: %s %d/%d", stage, done, total))
		return
	}
	status := "failed: " + fmt.Sprint(c.Point.Err)
	if c.Simulated {
		status = fmt.Sprintf("TTFT %.1f ms, TPOT %.2f ms, goodput %.1f%%", c.TTFTMs, c.TPOTMs, 100*c.Share)
		if c.Meets {
			status += ", meets the SLO"
		}
	}
	fmt.Fprintf(p.w, "sim plan: %s %d/%d: %s (%s GPUs): %s\n", stage, done, total, c.Shape(), strconv.Itoa(c.GPUs()), status)
}

func (p *planProgress) finish() {
	if p.tty {
		p.bar.finish()
	}
}
