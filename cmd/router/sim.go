package main

import (
	"bufio"
	"cmp"
	"errors"
	"fmt"
	"io"
	"maps"
	"math"
	"os"
	"path/filepath"
	"runtime"
	"runtime/debug"
	"slices"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
	"go.yaml.in/yaml/v3"

	"github.com/pdrouter/pdrouter/reports"
	"github.com/pdrouter/pdrouter/router"
	"github.com/pdrouter/pdrouter/router/server"
	"github.com/pdrouter/pdrouter/sim"
	"github.com/pdrouter/pdrouter/sim/engine"
	"github.com/pdrouter/pdrouter/workloads"
)

func init() { subcommands = append(subcommands, newSimCmd) }

const simLong = `sim runs a discrete-event simulation of a whole SGLang cluster — prefill and decode
servers (or regular ones), their DP ranks, the KV transfer and the bootstrap handshake — with the
real router core in the loop, in virtual time: the same policies, thresholds, retries and circuit
breakers as 'router serve', fed the very request bodies 'router bench' would send.

With no flags it simulates the embedded default: a PD cluster of 2 prefill + 2 decode servers
(profile llama3-8b-h100, dp-size 1, 400 Gb/s KV link, 100µs network hops), cache_aware routing
with sgl-router's default thresholds, and the multiturn workload (64 conversations of 4 turns,
1,024-token system prompts shared by groups of 8, 128-token questions, 256-token replies) at
concurrency 16 (a trace workload replays its own timestamps instead). --regular K simulates a regular (non-PD) cluster of K servers instead.

A model on a GPU instead of a preset: --model-path MODEL --gpu GPU builds every server's profile
from the model card and the GPU at SGLang's parallelism (--tp-size, --dp-size, --ep-size,
--enable-dp-attention; --prefill-tp-size, --decode-dp-size … give a pool its own sizes and
--prefill-gpu, --decode-gpu its own GPU), and SGLang's
engine arguments not given (--chunked-prefill-size, --max-running-requests, --max-total-tokens,
--page-size, --cuda-graph-max-bs, --mem-fraction-static, --schedule-conservativeness, each also as
--prefill-… and --decode-…) take the values SGLang picks for that GPU's memory and parallelism.
With a preset they keep the engine's defaults. results.json records what each pool ran with
(meta.cluster.resolved), e.g.

  router sim --model-path llama3-70b --gpu h100-sxm --tp-size 4 --regular 1 --rate 4

The router flags are serve's, under the same names, and --config reads the same settings file
(flags override it). --write-config FILE writes the routing settings (mode included, no worker
lists; kv_events auto/off when --kv-events was given) for 'router serve --config FILE --prefill …
--decode …'.

Each level draws conversations of its own (--same-conversations replays level 1's), and
levels whose clients outnumber the conversations, or whose percentiles rest on fewer than 100
requests, are named in a warning. At the end, stderr gets the events/s and requests/s of the
run. Memory: ITLs are counted per level (requests.jsonl keeps them only with --out), the router
trees are trimmed past 2^26 characters each (a note on stderr says when), and the heap is held
near 1.5 GiB (set GOMEMLIMIT to change it).

Precise routing and router replicas: --kv-events on makes every server whose role routes with
cache_aware publish its radix cache's KV events as SGLang does with --kv-events-config (per page,
after each prefill batch, every 40 decode steps, when idle; a PD prefill server after its
transfers), and cache_aware route on an index of them, as 'router serve' does: requests carry
their prompt token ids, the very ids the engines cache. --kv-events-delay sets how late a batch
reaches a router (a duration, exp:MEAN or uniform:LO-HI, drawn per batch and router; a rank's
batches stay in order) and --kv-events-loss how often one is lost: like serve's subscriber
without a replay endpoint, the target then routes on the approximate tree until its cache is
flushed. --router-replicas N runs N routers, each with its own tree, in-flight counts and event
index; --replica-affinity round-robin spreads requests over them as a Kubernetes Service does,
session keeps a conversation on one. With --vary kv_events=off,on
--vary router_replicas=1,2,4 --vary kv_events_delay=0,100ms, 'router sim sweep' answers what
precise routing wins and what replicas cost on a workload (try --workload cache-pressure).
--hicache-ratio R gives the servers SGLang HiCache's host tier (R × the GPU pool; what the GPU
evicts moves there and is loaded back at --hicache-bandwidth): their events then name each
block's medium and --kv-host-tier-weight says what a host hit is worth to cache_aware; results
split the cache hits into GPU and host (docs/kv-events.md, "KV tiers").

Engine load reports: every --load-report-interval (default 500ms, serve's
--load-poll-interval-ms) each router replica reads every server's load per DP rank — running and
waiting requests, queued uncached prompt tokens, KV token usage, as SGLang's GET /v1/loads
reports them — and the answer reaches it --load-report-delay later (default 1ms; a duration,
exp:MEAN or uniform:LO-HI). As in serve, cache_aware's balance check and fallback, power_of_two
and least_load then compare queued uncached tokens, then waiting, running and in-flight
requests while every candidate's report is younger than --load-report-max-age-ms, and in-flight
counts otherwise; a DP-aware router gets each rank's report, any other the ranks' sum. Reports
count every replica's requests, which a replica's own in-flight counts miss.
--load-report-interval 0 routes on in-flight counts alone (serve without load reports).
--worker-overload-waiting-requests N (or --worker-overload-token-usage U) passes over a worker
whose report says it is over the bound and, when every worker is, sheds the request: it ends at
once as an http_503 error with Retry-After, counted on stderr, never queued, and the client does
not retry it (as the bench's does not). 'router sim sweep --vary
load_report_interval=0,100ms,1s' shows what the reports and their age are worth on a workload
(try --workload hotspot, whose bursts of hot prefixes pile cache_aware onto one worker);
docs/engine-load.md has the tables of 8 regular and 2P+4D clusters.

--policy predicted_latency routes each request to the (prefill, decode) pair — or worker — the
engine model predicts the lowest TTFT for within its TPOT SLO (--tpot-slo-ms; --ttft-slo-ms and
--slo-miss shed turn away what no pair serves in time), predicting with the simulated servers'
own engine and correcting each worker's prediction from what the simulated router observes
(--latency-correction-half-life-ms, in virtual time); its decision log carries every
prediction. 'router sim sweep --vary tpot_slo_ms=0,20 --vary slo_miss=best_effort,shed' shows
what an SLO buys (docs/predicted-latency.md).

Same flags and seed give byte-identical results. Results: the metrics table of 'router bench'
plus the engine-side cache hit rate beside the router's predicted match rate, the per-target
load spread and the engine-side queueing delay; --out DIR writes results.json and
requests.jsonl. Simulated workers are named http://sim-prefill-0:30000, http://sim-decode-1:30000,
http://sim-regular-0:30000 …, e.g. for --kill http://sim-decode-0:30000@30s.`

// simFlags holds everything `router sim` and `router sim sweep` parse.
type simFlags struct {
	cfg         router.Config
	params      workloads.Params
	load        workloads.LoadParams
	cluster     sim.Cluster
	clusterFile string
	configFile  string
	modelConfig string // --model-config: a Hugging Face config.json the servers' model is built from
	format      string
	out         string
	writeConfig string
	// kvEventsGiven: --kv-events was set on the command line (resolve), so --write-config
	// carries serve's kv_events (see writeSimConfig).
	kvEventsGiven bool
	decisionLog   string // --decision-log: a file of the sim's own, not a routing setting
	routing       sim.Routing
	label         string
	slo           string
	kills         []string
	direct        []string // --direct-load
	// args, prefillArgs and decodeArgs are the engine-argument flags (--chunked-prefill-size,
	// --prefill-…, --decode-…); resolve lays the given ones over the cluster file's.
	args, prefillArgs, decodeArgs engine.ServerArgs
}

// bindSimFlags registers the sim flags on fs: router flags first (they own --seed), then the
// workload and load flags shared with bench, then the cluster and output flags.
func bindSimFlags(fs *pflag.FlagSet) *simFlags {
	f := &simFlags{cfg: router.DefaultConfig(), params: workloads.DefaultParams(), load: workloads.DefaultLoadParams()}
	f.cfg.PDDisaggregation = true
	f.load.Concurrency = []int{16}
	routingFlags(fs, &f.cfg)
	fs.StringVar(&f.decisionLog, "decision-log", "", flagHelp(cmdSim, "decision_log", ""))
	routingLayerFlags(fs, &f.routing)
	addWorkloadFlags(fs, &f.params, &f.load)
	fs.StringVar(&f.configFile, "config", "", "router settings file (YAML or JSON, serve's format); flags override it")
	c := &f.cluster
	fs.IntVar(&c.Prefill, "prefill", 0, "prefill servers (PD mode; default 2)")
	fs.IntVar(&c.Decode, "decode", 0, "decode servers (PD mode; default 2)")
	fs.IntVar(&c.Regular, "regular", 0, "regular servers: simulate a regular (non-PD) cluster (default 4 when --pd-disaggregation=false)")
	fs.StringVar(&c.ModelPath, "model-path", "", modelFlagHelp["model_path"][cmdSim])
	fs.StringVar(&f.modelConfig, "model-config", "", modelFlagHelp["model_config"][cmdSim])
	fs.StringVar(&c.GPU, "gpu", "", modelFlagHelp["gpu"][cmdSim])
	fs.StringVar(&c.PrefillGPU, "prefill-gpu", "", "GPU of the prefill servers with --model-path (default --gpu)")
	fs.StringVar(&c.DecodeGPU, "decode-gpu", "", "GPU of the decode servers with --model-path (default --gpu)")
	parallelismFlags(fs, cmdSim, &c.TPSize, &c.DPSize, &c.EPSize, &c.DPAttention)
	fs.BoolVar(&c.TwoBatchOverlap, "enable-two-batch-overlap", false, "two-batch overlap of MoE communication and compute, as SGLang --enable-two-batch-overlap (a --model-path engine with --ep-size)")
	fs.StringVar(&c.DeepEPMode, "deepep-mode", "", `DeepEP all-to-all of MoE layers, as SGLang --deepep-mode: normal, low_latency or auto ("": no DeepEP; a --model-path engine with --ep-size)`)
	for _, pool := range []struct {
		name       string
		tp, dp, ep *int
	}{{"prefill", &c.PrefillTPSize, &c.PrefillDPSize, &c.PrefillEPSize}, {"decode", &c.DecodeTPSize, &c.DecodeDPSize, &c.DecodeEPSize}} {
		fs.IntVar(pool.tp, pool.name+"-tp-size", 0, "--tp-size of the "+pool.name+" servers (default --tp-size)")
		fs.IntVar(pool.dp, pool.name+"-dp-size", 0, "--dp-size of the "+pool.name+" servers (default --dp-size)")
		fs.IntVar(pool.ep, pool.name+"-ep-size", 0, "--ep-size of the "+pool.name+" servers (default --ep-size)")
	}
	engineArgFlags(fs, &f.args, "")
	engineArgFlags(fs, &f.prefillArgs, "prefill-")
	engineArgFlags(fs, &f.decodeArgs, "decode-")
	fs.StringVar(&c.SchedulePolicy, "schedule-policy", engine.PolicyLPM, "prefill queue order, as SGLang --schedule-policy: lpm (longest prefix first, in-batch prefix sharing, FCFS past 128 waiting) or fcfs")
	fs.BoolVar(&c.DisableOverlap, "disable-overlap-schedule", false, "as SGLang: a batch's prompts are matchable when its step ends, not after the next batch is scheduled")
	fs.BoolVar(&c.MixedChunk, "enable-mixed-chunk", false, "as SGLang: a regular server's running requests decode one token inside each prefill step (the chunk shrinks by their number) instead of waiting for the prompt's last chunk; off under speculative decoding")
	fs.BoolVar(&c.DecodeRadixCache, "decode-radix-cache", false, "decode servers keep a prefix cache of the prompts they served (SGLang --disaggregation-decode-enable-radix-cache); a hit shrinks the KV transfer")
	fs.StringVar(&c.Profile, "profile", "", "engine profile of every server: a preset (router fakeworker profiles lists them) or a profile file (YAML/JSON) (default "+sim.DefaultProfile+" unless --model-path)")
	fs.StringVar(&c.PrefillProfile, "prefill-profile", "", "engine profile of prefill servers (default --profile)")
	fs.StringVar(&c.DecodeProfile, "decode-profile", "", "engine profile of decode servers (default --profile)")
	fs.DurationVar(&c.TTFT, "ttft", 100*time.Millisecond, "--profile constant: time to first token")
	fs.DurationVar(&c.ITL, "itl", 20*time.Millisecond, "--profile constant: time between tokens")
	fs.Float64Var(&c.LinkGbps, "link-gbps", sim.DefaultLinkGbps, "KV transfer bandwidth per room, Gb/s")
	fs.DurationVar(&c.NetLatency, "net-latency", sim.DefaultNetLatency, "one-way latency of each network hop (client, router, servers); negative: none")
	fs.Float64Var(&c.Speedup, "speedup", 1, "divide every model duration by this factor (as fakeworker)")
	fs.StringVar(&f.clusterFile, "cluster", "", "cluster file (YAML or JSON with the cluster flags' names, underscores for dashes); flags override it")
	fs.StringVar(&f.format, "format", "table", "output format: table, json, md, csv")
	fs.StringVar(&f.out, "out", "", "directory receiving results.json and requests.jsonl")
	fs.StringVar(&f.writeConfig, "write-config", "", "write the router settings (serve --config format) to this file")
	fs.StringVar(&f.label, "label", "", "name of the run in reports (default: the --out directory's name); recorded with the command line")
	fs.StringVar(&f.slo, "slo", "", "service-level objectives ttft=MS,tpot=MS: goodput per level (sweep: filter)")
	fs.StringArrayVar(&f.kills, "kill", nil, "WORKER@T or WORKER@T..BACK: the simulated worker dies at virtual time T and, with BACK, restarts then with empty caches (repeatable), e.g. http://sim-decode-0:30000@30s")
	fs.StringArrayVar(&f.direct, "direct-load", nil, "worker=URL,rank=R,requests=N,prompt=TOKENS,output=TOKENS,at=T: N requests reach a regular worker's DP rank at virtual time T around the routers, which see them only in its load reports (repeatable), e.g. worker=http://sim-regular-0:30000,requests=24,prompt=7500,output=600")
	return f
}

// resolve turns the parsed flags into a sim.Config.
func (f *simFlags) resolve(fs *pflag.FlagSet, version string) (sim.Config, error) {
	rc := f.cfg
	f.kvEventsGiven = fs.Changed("kv-events")
	var file settingsFile
	// The settings file is serve's: its server settings are checked with the rest but do
	// not reach the simulator, which runs on the routing settings (rc) alone.
	fileCfg := server.DefaultConfig()
	if f.configFile != "" {
		var err error
		fileCfg, file, err = loadConfigFile(f.configFile)
		if err != nil {
			return sim.Config{}, err
		}
		rc = mergeFlags(fs, fileCfg.Config, f.cfg)
	}
	cl := f.cluster
	if f.clusterFile != "" {
		fileCl, err := loadSimCluster(f.clusterFile)
		if err != nil {
			return sim.Config{}, err
		}
		cl = mergeFlags(fs, fileCl, f.cluster)
	}
	if fs.Changed("enable-dp-attention") { // the cluster key keeps the old name, dp_attention
		cl.DPAttention = f.cluster.DPAttention
	}
	if f.modelConfig != "" {
		if cl.Profile != "" || cl.PrefillProfile != "" || cl.DecodeProfile != "" {
			return sim.Config{}, fmt.Errorf("sim: --model-config and --profile (or --prefill-profile, --decode-profile) both pick the engine: give one")
		}
		m, err := readModelConfig(f.modelConfig, cl.ModelPath)
		if err != nil {
			return sim.Config{}, fmt.Errorf("sim: %w", err)
		}
		cl.Models = map[string]engine.ModelCard{m.Name: m}
		cl.ModelPath = m.Name
	}
	for _, pool := range []struct {
		prefix string
		flags  engine.ServerArgs
		dst    **engine.ServerArgs
	}{{"", f.args, nil}, {"prefill-", f.prefillArgs, &cl.PrefillArgs}, {"decode-", f.decodeArgs, &cl.DecodeArgs}} {
		if err := checkEngineArgFlags(fs, pool.flags, pool.prefix); err != nil {
			return sim.Config{}, fmt.Errorf("sim: %w", err)
		}
		if pool.dst == nil {
			cl.Args, _ = overlayEngineArgs(fs, cl.Args, pool.flags, "")
			continue
		}
		base := cl.Args // a pool's arguments start from every server's
		if *pool.dst != nil {
			base = **pool.dst
		}
		if a, ok := overlayEngineArgs(fs, base, pool.flags, pool.prefix); ok {
			*pool.dst = &a
		}
	}
	if err := loadClusterProfiles(&cl); err != nil {
		return sim.Config{}, err
	}
	for _, n := range []struct {
		flag string
		v    float64
	}{{"dp-size", float64(cl.DPSize)}, {"tp-size", float64(cl.TPSize)}, {"ep-size", float64(cl.EPSize)},
		{"prefill-tp-size", float64(cl.PrefillTPSize)}, {"prefill-dp-size", float64(cl.PrefillDPSize)}, {"prefill-ep-size", float64(cl.PrefillEPSize)},
		{"decode-tp-size", float64(cl.DecodeTPSize)}, {"decode-dp-size", float64(cl.DecodeDPSize)}, {"decode-ep-size", float64(cl.DecodeEPSize)},
		{"speedup", cl.Speedup}, {"link-gbps", cl.LinkGbps}} {
		if fs.Changed(n.flag) && !(n.v > 0) {
			return sim.Config{}, fmt.Errorf("sim: --%s %g must be > 0", n.flag, n.v)
		}
	}
	if err := checkSchedulePolicy(cl.SchedulePolicy); err != nil {
		return sim.Config{}, err
	}
	if cl.Regular > 0 && !fs.Changed("pd-disaggregation") {
		rc.PDDisaggregation = false
	}
	if !fs.Changed("concurrency") && (fs.Changed("rate") || f.params.IsTrace() || f.load.Arrival == workloads.ArrivalTrace) {
		f.load.Concurrency = nil // the default concurrency gives way to --rate and to trace timestamps
	}
	seed := int64(1)
	if rc.Seed != nil {
		seed = *rc.Seed
	}
	rc.Seed = &seed
	f.params.Seed = uint64(seed)
	if err := validateWorkloadFlags(f.params, f.load); err != nil {
		return sim.Config{}, err
	}
	fileCfg.Config = rc
	if err := fileCfg.Validate(); err != nil {
		return sim.Config{}, file.explain(err, fs)
	}
	if err := cl.Validate(rc.PDDisaggregation); err != nil {
		return sim.Config{}, err
	}
	if err := f.routing.Validate(); err != nil {
		return sim.Config{}, err
	}
	cfg := sim.Config{Cluster: cl, Router: rc, Routing: f.routing, Workload: f.params, Load: f.load, Version: version, KeepITL: f.out != ""}
	for _, k := range f.kills {
		kill, err := sim.ParseKill(k)
		if err != nil {
			return sim.Config{}, err
		}
		cfg.Kills = append(cfg.Kills, kill)
	}
	for _, s := range f.direct {
		d, err := sim.ParseDirectLoad(s)
		if err != nil {
			return sim.Config{}, err
		}
		cfg.Direct = append(cfg.Direct, d)
	}
	if f.slo != "" {
		slo, err := parseSimSLO(f.slo)
		if err != nil {
			return sim.Config{}, err
		}
		cfg.SLO = slo
	}
	return cfg, nil
}

func newSimCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "sim",
		Short: "Simulate a PD (or regular) SGLang cluster with the real router in the loop",
		Long:  simLong,
		Args:  cobra.NoArgs,
	}
	f := bindSimFlags(cmd.Flags())
	cmd.RunE = func(cmd *cobra.Command, _ []string) error {
		cfg, err := f.resolve(cmd.Flags(), version)
		if err != nil {
			return err
		}
		if os.Getenv("GOMEMLIMIT") == "" {
			debug.SetMemoryLimit(simMemoryLimit)
		}
		if path := f.decisionLog; path != "" {
			file, err := os.Create(path)
			if err != nil {
				return fmt.Errorf("--decision-log: %w", err)
			}
			defer file.Close()
			bw := bufio.NewWriterSize(file, 1<<16)
			defer bw.Flush()
			cfg.DecisionLog = bw
		}
		if note := fitRequests(&cfg.Workload, cfg.Load); note != "" {
			fmt.Fprintln(cmd.ErrOrStderr(), "sim: "+note)
		}
		prog := newSimProgress(cmd.ErrOrStderr())
		cfg.Progress = func(level string, done int, virtual time.Duration) {
			prog.update(fmt.Sprintf("sim: level %s, %d requests done, %.1f s virtual", level, done, virtual.Seconds()))
		}
		start := time.Now()
		res, err := sim.Run(cfg)
		prog.finish()
		if err != nil {
			return err
		}
		if wall := time.Since(start).Seconds(); wall > 0 {
			fmt.Fprintf(cmd.ErrOrStderr(), "sim: %d events and %d requests in %.2f s of wall time: %.0f events/s, %.0f requests/s\n",
				res.Stats.Events, res.Stats.Requests, wall, float64(res.Stats.Events)/wall, float64(res.Stats.Requests)/wall)
		}
		res.Results.Meta.Label, res.Results.Meta.Command = f.label, commandLine
		if err := writeSimOutput(cmd.OutOrStdout(), f.format, res.Results); err != nil {
			return err
		}
		printKVStats(cmd.ErrOrStderr(), cfg.Routing, res.Stats.KV)
		printLoadStats(cmd.ErrOrStderr(), res.Stats)
		printBreakerOpens(cmd.ErrOrStderr(), res.Stats.BreakerOpens)
		printTenants(cmd.ErrOrStderr(), res.Stats.Tenants)
		printTreeTrims(cmd.ErrOrStderr(), cfg, res.Stats.TreeTrims)
		printLevelWarnings(cmd.ErrOrStderr(), res.Results, cfg.Workload, cfg.Load)
		printExtrapolationWarnings(cmd.ErrOrStderr(), cfg, res)
		if f.out != "" {
			if err := reports.WriteDir(f.out, res.Results, res.Records); err != nil {
				return err
			}
		}
		if f.writeConfig != "" {
			return writeSimConfig(f.writeConfig, cfg.Router, f.chosenRouting(cfg.Routing, nil))
		}
		return nil
	}
	cmd.AddCommand(newSimSweepCmd(), newSimPlanCmd(), newSimCalibrateCmd(), newSimValidateCmd())
	return cmd
}

func newSimSweepCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "sweep --vary KEY=v1,v2,... [--vary ...] | --merge DIR...",
		Short: "Simulate a grid of router settings in parallel and rank them by an objective",
		Long: `sweep runs 'router sim' once per point of the grid given by --vary (the cartesian
product; KEY is a router setting under its config-file name, e.g. cache_threshold,
balance_abs_threshold, balance_rel_threshold, policy, dp_aware, a cluster key such as dp_size,
tp_size or gpu, or an SGLang engine argument such as chunked_prefill_size or max_running_requests,
prefixed prefill_ or decode_ for one pool, or a routing-layer key: kv_events (off/on, or
approximate/precise), kv_events_delay, kv_events_loss, router_replicas, replica_affinity,
load_report_interval (a duration, 0: off; or serve's load_poll_interval_ms), load_report_delay),
in parallel on all cores, each run deterministic, and prints the configurations ranked by
--objective over all levels, each point scored by its worst level:

  p95-ttft    the highest P95 TTFT of any level (default; lower is better)
  p99-ttft    the highest P99 TTFT of any level
  goodput     the lowest requests/s meeting --slo of any level (higher is better)
  throughput  the lowest requests/s of any level

Configurations with equal scores share a rank ("2=") and are named as ties; runs with errors
rank last. --slo ttft=MS,tpot=MS drops configurations whose P95 misses it at any level (with
--objective goodput it defines the goodput instead). Below the table: the best configuration's
margin over the runner-up and over the defaults (the grid point with every varied key at its
default). When the best beats the defaults by no more than --tie-margin percent, the defaults
are the winner: a tie is no reason to move a setting. --write-config FILE writes the winner in
'router serve --config' form and --out DIR its results. Progress goes to stderr: a bar on a
terminal, a line per finished point otherwise.

On several machines: 'sweep --shard i/N --out DIR ...' runs every N-th point of the same grid
(those whose index is i mod N) and writes DIR/sweep.json; 'sweep --merge DIR... [--write-config
FILE]' reads every shard and ranks the union exactly as one sweep would
(deploy/k8s/sim-sweep-job.yaml runs the shards as a Kubernetes Indexed Job). Every other flag
is sim's.`,
		Example: `  router sim sweep --vary cache_threshold=0.1,0.3,0.5 --vary balance_abs_threshold=8,32,64 --write-config best.yaml
  router sim sweep --objective goodput --slo ttft=500,tpot=50 --rate 4,8 --vary policy=cache_aware,round_robin
  router sim sweep --workload cache-pressure --regular 8 --rate 6 --vary kv_events=approximate,precise --vary router_replicas=1,2,4 --vary kv_events_delay=0,10ms,100ms,1s
  router sim sweep --workload hotspot --regular 8 --rate 110 --router-replicas 4 --objective p99-ttft --vary load_report_interval=0,10ms,100ms,1s
  router sim sweep --model-path llama3-8b --gpu h100-sxm --vary chunked_prefill_size=2048,4096,8192 --vary decode_max_running_requests=64,256
  router sim sweep --shard 0/3 --out runs/shard-0 --vary cache_threshold=0.1,0.3,0.5
  router sim sweep --merge runs/shard-0 runs/shard-1 runs/shard-2 --write-config best.yaml`,
		Args: cobra.ArbitraryArgs,
	}
	f := bindSimFlags(cmd.Flags())
	var (
		varies    []string
		objective string
		shard     string
		merge     bool
		tieMargin float64
	)
	parallel := runtime.GOMAXPROCS(0)
	cmd.Flags().StringArrayVar(&varies, "vary", nil, "KEY=v1,v2,...: one sweep dimension (repeatable)")
	cmd.Flags().IntVar(&parallel, "parallel", parallel, "runs at once (default: one per core)")
	cmd.Flags().StringVar(&objective, "objective", sim.ObjectiveP95TTFT, "ranking: "+strings.Join(sim.Objectives, ", ")+", each over the worst level")
	cmd.Flags().StringVar(&shard, "shard", "", "I/N: run only the points whose index is I mod N, writing them to --out DIR for --merge")
	cmd.Flags().BoolVar(&merge, "merge", false, "rank the shards in the directories given as arguments instead of running")
	cmd.Flags().Float64Var(&tieMargin, "tie-margin", 2, "percent of the objective within which a configuration does not beat the defaults: --write-config then keeps the defaults")
	cmd.RunE = func(cmd *cobra.Command, args []string) error {
		if f.format != "table" {
			return fmt.Errorf("sweep: --format %s: a sweep prints a table (use --out DIR for the best run's results)", f.format)
		}
		var slo *reports.SLO
		if f.slo != "" {
			s, err := parseSimSLO(f.slo)
			if err != nil {
				return err
			}
			slo = s
		}
		obj, err := sim.ParseObjective(objective, slo)
		if err != nil {
			return err
		}
		if merge {
			if len(varies) > 0 || shard != "" {
				return fmt.Errorf("sweep: --merge ranks finished shards: it takes no --vary or --shard")
			}
			vars, pts, base, err := sim.ReadShards(args)
			if err != nil {
				return err
			}
			return finishSweep(cmd.OutOrStdout(), f, vars, pts, obj, false, base, tieMargin)
		}
		if len(args) > 0 {
			return fmt.Errorf("sweep: unexpected argument %q (directories are for --merge)", args[0])
		}
		if len(varies) == 0 {
			return errors.New("sweep: give at least one --vary KEY=v1,v2,… (router sim sweep --help)")
		}
		si, sn, err := parseShard(shard)
		if err != nil {
			return err
		}
		if sn > 1 && f.out == "" {
			return fmt.Errorf("sweep: --shard %s needs --out DIR for its results", shard)
		}
		base, err := f.resolve(cmd.Flags(), version)
		if err != nil {
			return err
		}
		var vars []sim.Vary
		for _, s := range varies {
			v, err := sim.ParseVary(s)
			if err != nil {
				return err
			}
			vars = append(vars, v)
		}
		all, err := sim.Grid(base, vars)
		if err != nil {
			return err
		}
		defaults := sim.BaseIndex(base, vars, all) // a grid index
		prog := newSweepProgress(cmd.ErrOrStderr(), vars, obj)
		pts, err := sim.SweepShard(base, vars, parallel, si, sn, prog.point)
		prog.finish()
		if err != nil {
			return err
		}
		for _, p := range pts {
			if p.Err != nil {
				return fmt.Errorf("sweep: %s: %w", p.Label(vars), p.Err)
			}
		}
		if sn > 1 {
			if err := sim.WriteShard(f.out, vars, len(all), defaults, si, sn, pts); err != nil {
				return err
			}
			fmt.Fprintf(cmd.OutOrStdout(), "shard %d/%d: %d of %d points written to %s (rank them with --merge)\n", si, sn, len(pts), len(all), filepath.Join(f.out, sim.ShardFile))
			return nil
		}
		return finishSweep(cmd.OutOrStdout(), f, vars, pts, obj, true, defaults, tieMargin)
	}
	return cmd
}

// finishSweep ranks pts, prints the table and the winner's margins, and writes --out (the
// chosen run's results, when its records are at hand) and --write-config. base is the grid
// index of the defaults' point (-1: not in the grid): when no configuration beats it by more
// than tieMargin percent, the defaults are chosen.
func finishSweep(w io.Writer, f *simFlags, vars []sim.Vary, pts []sim.Point, obj sim.Objective, haveRecords bool, base int, tieMargin float64) error {
	ranked := sim.RankBy(pts, obj)
	if err := writeSweepTable(w, vars, ranked, len(pts), obj); err != nil {
		return err
	}
	choice := chooseWinner(w, vars, ranked, base, obj, tieMargin)
	if f.out != "" && choice >= 0 && haveRecords {
		if err := reports.WriteDir(f.out, ranked[choice].Result.Results, ranked[choice].Result.Records); err != nil {
			return err
		}
	}
	if f.writeConfig != "" {
		if choice < 0 {
			return fmt.Errorf("sweep: no configuration meets --slo %s; %s not written", f.slo, f.writeConfig)
		}
		if err := writeSimConfig(f.writeConfig, ranked[choice].Config.Router, f.chosenRouting(ranked[choice].Config.Routing, vars)); err != nil {
			return err
		}
		fmt.Fprintf(w, "\nwrote the chosen configuration (%s) to %s\n", ranked[choice].Label(vars), f.writeConfig)
	}
	return nil
}

// chooseWinner prints the best configuration's margin over the runner-up and over the
// defaults (grid index base) and returns the position in ranked of the one to keep: the best,
// or the defaults when the best beats them by no more than tieMargin percent of the objective
// (-1: nothing ranked).
func chooseWinner(w io.Writer, vars []sim.Vary, ranked []sim.Ranked, base int, obj sim.Objective, tieMargin float64) int {
	if len(ranked) == 0 {
		return -1
	}
	best := &ranked[0]
	// margin is how much worse other scores than the best, in percent of the best.
	margin := func(other float64) float64 {
		if best.Score == 0 {
			return 0
		}
		m := 100 * (other - best.Score) / math.Abs(best.Score)
		if obj.HigherIsBetter() {
			m = -m
		}
		return m
	}
	def := -1
	if base >= 0 {
		for i := range ranked {
			if ranked[i].Index == base {
				def = i
			}
		}
	}
	line := fmt.Sprintf("\nbest: %s (%s %.4g)", best.Label(vars), obj.Label(), best.Score)
	if len(ranked) > 1 {
		line += fmt.Sprintf("; runner-up %s by %.1f %%", ranked[1].Label(vars), margin(ranked[1].Score))
	}
	switch {
	case base < 0:
		line += "; the defaults are not in the grid"
	case def < 0:
		line += "; the defaults miss the SLO"
	case def > 0:
		line += fmt.Sprintf("; the defaults (%s) by %.1f %%", ranked[def].Label(vars), margin(ranked[def].Score))
	}
	fmt.Fprintln(w, line)
	if def > 0 && margin(ranked[def].Score) <= tieMargin && !ranked[def].Failed() {
		fmt.Fprintf(w, "no configuration beats the defaults by more than --tie-margin %g %%: keeping the defaults (%s)\n", tieMargin, ranked[def].Label(vars))
		return def
	}
	return 0
}

// parseShard parses --shard I/N ("" is the whole grid, 0/1).
func parseShard(s string) (int, int, error) {
	if s == "" {
		return 0, 1, nil
	}
	a, b, ok := strings.Cut(s, "/")
	i, err1 := strconv.Atoi(strings.TrimSpace(a))
	n, err2 := strconv.Atoi(strings.TrimSpace(b))
	if !ok || err1 != nil || err2 != nil || n < 1 || i < 0 || i >= n {
		return 0, 0, fmt.Errorf("sweep: --shard %q: want I/N with 0 ≤ I < N, e.g. 0/3", s)
	}
	return i, n, nil
}

// sweepProgress reports finished points on stderr: a bar redrawn in place on a terminal, a
// line per point otherwise.
type sweepProgress struct {
	w    io.Writer
	tty  bool
	vars []sim.Vary
	obj  sim.Objective
	bar  *simProgress
}

func newSweepProgress(w io.Writer, vars []sim.Vary, obj sim.Objective) *sweepProgress {
	return &sweepProgress{w: w, tty: isTerminal(w), vars: vars, obj: obj, bar: newSimProgress(w)}
}

func (p *sweepProgress) point(done, total int, pt *sim.Point) {
	if p.tty {
		p.bar.update(fmt.Sprintf("sim sweep: %d/%d points done", done, total))
		return
	}
	status := "failed: " + fmt.Sprint(pt.Err)
	if pt.Err == nil {
		score, _ := p.obj.Score(pt)
		status = fmt.Sprintf("%s %.4g", p.obj.Label(), score)
	}
	fmt.Fprintf(p.w, "sim sweep: point %d/%d done (%s): %s\n", done, total, pt.Label(p.vars), status)
}

func (p *sweepProgress) finish() {
	if p.tty {
		p.bar.finish()
	}
}

// writeSweepTable prints the ranked points.
func writeSweepTable(w io.Writer, vars []sim.Vary, ranked []sim.Ranked, total int, obj sim.Objective) error {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	head := []string{"rank"}
	for _, v := range vars {
		head = append(head, v.Key)
	}
	head = append(head, obj.Label(), "TTFT p95 ms", "TPOT p95 ms", "req/s", "errs", "cache", "spread")
	fmt.Fprintln(tw, strings.Join(head, "\t")+"\t")
	ties := map[int][]string{}
	for _, p := range ranked {
		l := p.Last()
		rank := strconv.Itoa(p.Rank)
		if p.Tied {
			rank += "="
			ties[p.Rank] = append(ties[p.Rank], p.Label(vars))
		}
		row := []string{rank}
		row = append(row, p.Values...)
		cache := "-"
		if l.CacheHitRate != nil {
			cache = fmt.Sprintf("%.1f%%", 100**l.CacheHitRate)
		}
		spread := "-"
		if l.Sim != nil {
			spread = fmt.Sprintf("%.2f", l.Sim.LoadSpread)
		}
		row = append(row, fmt.Sprintf("%.4g", p.Score), fmt.Sprintf("%.1f", l.TTFTMs.P95), fmt.Sprintf("%.2f", l.TPOTMs.P95),
			fmt.Sprintf("%.1f", l.Throughput.ReqS), strconv.Itoa(l.Errors), cache, spread)
		fmt.Fprintln(tw, strings.Join(row, "\t")+"\t")
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	fmt.Fprintf(w, "(ranked by %s: each configuration's worst level; the other columns are its last level)\n", obj.Name)
	ranks := slices.Sorted(maps.Keys(ties))
	for _, r := range ranks {
		fmt.Fprintf(w, "tie at rank %d: %s\n", r, strings.Join(ties[r], " | "))
	}
	if len(ranked) < total {
		_, err := fmt.Fprintf(w, "(%d of %d configurations miss the SLO)\n", total-len(ranked), total)
		return err
	}
	return nil
}

// writeSimOutput renders results in format.
func writeSimOutput(w io.Writer, format string, res *reports.Results) error {
	f, err := reports.ParseFormat(format)
	if err != nil {
		return err
	}
	if f == reports.FormatJSON {
		return reports.EncodeResults(w, res)
	}
	return reports.Render(w, f, res)
}

// writeSimConfig writes the routing settings of rc in serve --config form: every setting and
// the mode, without worker lists, listen addresses, secrets or the seed (a live router should
// draw fresh rooms). When the simulation chose KV-event routing explicitly (rt.KVEvents set by
// --kv-events or a sweep's kv_events axis), the file carries serve's kv_events too — auto for
// precise, off for approximate — so serve routes as the simulated winner did; a simulation
// that never said leaves serve's default.
func writeSimConfig(path string, rc router.Config, rt sim.Routing) error {
	rc = rc.RoutingOnly()
	rc.Seed = nil
	b, err := yaml.Marshal(rc)
	if err != nil {
		return fmt.Errorf("--write-config: %w", err)
	}
	if rt.KVEvents != "" {
		mode := "off"
		if rt.PreciseOn() {
			mode = "auto"
		}
		b = fmt.Appendf(b, "# KV-event routing as simulated (--kv-events %s): serve's kv_events\nkv_events: %s\n", rt.KVEvents, mode)
	}
	if err := os.WriteFile(path, b, 0o644); err != nil {
		return fmt.Errorf("--write-config: %w", err)
	}
	return nil
}

// chosenRouting is rt when the simulation chose KV-event routing — --kv-events given, or a
// kv_events axis among vars — and the zero Routing otherwise (the flag's default is not a
// choice: the written file then leaves serve's own default).
func (f *simFlags) chosenRouting(rt sim.Routing, vars []sim.Vary) sim.Routing {
	if f.kvEventsGiven {
		return rt
	}
	for _, v := range vars {
		if v.Key == "kv_events" {
			return rt
		}
	}
	return sim.Routing{}
}

// parseSimSLO parses "ttft=MS,tpot=MS[,e2e=MS]".
func parseSimSLO(s string) (*reports.SLO, error) {
	slo := &reports.SLO{}
	for _, part := range strings.Split(s, ",") {
		k, v, ok := strings.Cut(strings.TrimSpace(part), "=")
		n, err := strconv.ParseFloat(strings.TrimSuffix(v, "ms"), 64)
		if !ok || err != nil || !(n > 0) {
			return nil, fmt.Errorf("--slo %q: want ttft=MS,tpot=MS with positive numbers", s)
		}
		switch strings.ToLower(k) {
		case "ttft":
			slo.TTFTMs = n
		case "tpot":
			slo.TPOTMs = n
		case "e2e":
			slo.E2EMs = n
		default:
			return nil, fmt.Errorf("--slo %q: unknown objective %q (ttft, tpot, e2e)", s, k)
		}
	}
	return slo, nil
}

// loadSimCluster reads a --cluster file: YAML or JSON keyed like the cluster flags with
// underscores (prefill, decode, dp_size, profile, net_latency: "100us", …). Unknown keys and
// wrong types are errors naming the file, line and key.
func loadSimCluster(path string) (sim.Cluster, error) {
	var cl sim.Cluster
	doc, file, err := readSettingsFile("--cluster", path)
	if err != nil || doc == nil {
		return cl, err
	}
	if v, ok := doc["enable_dp_attention"]; ok { // SGLang's name of the dp_attention key
		if _, both := doc["dp_attention"]; both {
			return cl, fmt.Errorf("%s: enable_dp_attention and dp_attention are one setting: give one", file.at("enable_dp_attention"))
		}
		doc["dp_attention"] = v
		delete(doc, "enable_dp_attention")
	}
	for _, k := range []string{"ttft", "itl", "net_latency"} {
		if s, ok := doc[k].(string); ok {
			d, err := time.ParseDuration(s)
			if err != nil {
				return cl, fmt.Errorf("%s: %s: %w", file.at(k), k, err)
			}
			doc[k] = int64(d)
		}
	}
	return cl, file.decode(doc, &cl)
}

// simProgress prints a progress line on stderr once a run has taken more than 2 s of wall
// time, at most twice a second — the only wall-clock use of `router sim`, outside the results.
type simProgress struct {
	w       io.Writer
	start   time.Time
	last    time.Time
	printed bool
}

func newSimProgress(w io.Writer) *simProgress { return &simProgress{w: w, start: time.Now()} }

func (p *simProgress) update(msg string) {
	now := time.Now()
	if now.Sub(p.start) < 2*time.Second || now.Sub(p.last) < 500*time.Millisecond {
		return
	}
	p.last, p.printed = now, true
	fmt.Fprintf(p.w, "\r%s, %.1f s wall ", msg, now.Sub(p.start).Seconds())
}

func (p *simProgress) finish() {
	if p.printed {
		fmt.Fprintln(p.w)
	}
}

// simMemoryLimit is the soft heap limit of `router sim` unless GOMEMLIMIT is set: near it the
// garbage collector works harder instead of letting the heap grow to twice the live data. A run
// of a million requests on 32 servers (BenchmarkRunScale's) ends with about 750 MB of live data
// (engine caches, records, conversations in flight, the router trees at sim.DefaultTreeChars):
// at 900 MiB the collector ran nearly without pause, 34 s (0.94 GB peak RSS); at 1.5 GiB it
// takes 23 s (1.55 GB). A run of 100,000 requests takes 2.25 s either way, peaking at 0.87 GB
// at 900 MiB and 0.95-1.04 GB at 1.5 GiB (idle 2-core machine).
const simMemoryLimit = 1536 << 20

// checkSchedulePolicy names --schedule-policy when its value is not one the engine has.
func checkSchedulePolicy(p string) error {
	if p != "" && p != engine.PolicyLPM && p != engine.PolicyFCFS {
		return fmt.Errorf("--schedule-policy %q is not lpm or fcfs", p)
	}
	return nil
}

// loadClusterProfiles reads the profile files named by --profile, --prefill-profile and
// --decode-profile into the cluster's Profiles, naming each by its file's name: field.
func loadClusterProfiles(cl *sim.Cluster) error {
	for _, name := range []*string{&cl.Profile, &cl.PrefillProfile, &cl.DecodeProfile} {
		if !isProfileFile(*name) {
			continue
		}
		p, err := loadProfileFile(*name)
		if err != nil {
			return fmt.Errorf("sim: %w", err)
		}
		if cl.Profiles == nil {
			cl.Profiles = map[string]engine.Profile{}
		}
		cl.Profiles[p.Name] = p
		*name = p.Name
	}
	return nil
}

// printExtrapolationWarnings warns when a calibrated profile (one whose file records the
// ranges it was fitted on) is asked to predict outside them: the run's prompt lengths (its
// successful requests) and its most requests in flight per decode-side DP rank (Little's law
// on each level: req/s × mean E2E).
func printExtrapolationWarnings(w io.Writer, cfg sim.Config, res *sim.Result) {
	promptMin, promptMax := math.MaxInt, 0
	for _, r := range res.Records {
		if r.Error == nil && r.InputTokens > 0 {
			promptMin, promptMax = min(promptMin, r.InputTokens), max(promptMax, r.InputTokens)
		}
	}
	if promptMax == 0 {
		return
	}
	cl := cfg.Cluster.WithDefaults(cfg.Router.PDDisaggregation)
	ranks := cl.DecodeRanks(cfg.Router.PDDisaggregation)
	batch := 0
	for _, l := range res.Results.Levels {
		batch = max(batch, int(math.Ceil(l.Throughput.ReqS*l.E2EMs.Mean/1000/float64(ranks))))
	}
	for _, n := range slices.Sorted(maps.Keys(cl.Profiles)) {
		for _, msg := range sim.ExtrapolationWarnings(cl.Profiles[n], promptMin, promptMax, batch) {
			fmt.Fprintln(w, "warning: "+msg)
		}
	}
}

// routingLayerFlags registers the routing layer's flags (sim.Routing): KV-event routing and
// router replicas.
func routingLayerFlags(fs *pflag.FlagSet, r *sim.Routing) {
	r.KVEvents, r.Replicas, r.ReplicaAffinity = "off", 1, sim.AffinityRoundRobin
	fs.StringVar(&r.KVEvents, "kv-events", r.KVEvents, "on: cache_aware routes on the workers' KV events (serve's precise mode; the servers publish as SGLang with --kv-events-config); off: on its approximate tree")
	fs.Var(&r.KVEventsDelay, "kv-events-delay", "time from a worker's publish to a router applying the batch: a duration (10ms), exp:MEAN (exponential, e.g. exp:10ms) or uniform:LO-HI (e.g. uniform:0-20ms), drawn per batch and router")
	fs.Float64Var(&r.KVEventsLoss, "kv-events-loss", 0, "probability a router misses a KV-event batch; the sequence gap makes that target stale (routed on the tree) until its cache is flushed, as serve's subscriber without a replay endpoint")
	fs.IntVar(&r.Replicas, "router-replicas", r.Replicas, "router replicas, each with its own tree, in-flight counts and KV-event index")
	fs.StringVar(&r.ReplicaAffinity, "replica-affinity", r.ReplicaAffinity, "how requests reach the replicas: round-robin (each request to the next, as a Kubernetes Service) or session (a conversation sticks to one)")
	r.LoadReportInterval, r.LoadReportDelay = sim.DefaultLoadReportInterval, sim.Delay{Fixed: sim.DefaultLoadReportDelay}
	fs.DurationVar(&r.LoadReportInterval, "load-report-interval", r.LoadReportInterval, "each router reads every worker's engine load (per DP rank, as SGLang's GET /v1/loads) this often, as serve's --load-poll-interval-ms; the policies compare queued uncached tokens, then waiting, running and in-flight requests while every report is younger than --load-report-max-age-ms; 0: never (in-flight counts only)")
	fs.StringVar(&r.TenantMix, "tenant-mix", "", "tenants of the requests, NAME:WEIGHT,... (e.g. batch:9,chat:1): each conversation is one tenant's, drawn by weight; a NAME given a --tenants entry takes its weight and limits, the others the --tenant-* defaults; stderr then shows who waits (TTFT and admission queue wait per tenant)")
	fs.StringVar(&r.PriorityMix, "priority-mix", "", "priorities of the requests, PRIORITY:WEIGHT,... (e.g. 0:9,10:1), drawn per request: the admission queue serves a tenant's higher values first (--schedule-low-priority-values-first: lower)")
	fs.Var(&r.LoadReportDelay, "load-report-delay", "age of an engine load report when its router gets it: a duration (1ms), exp:MEAN or uniform:LO-HI, drawn per poll and router; a delay above the interval makes the router skip polls, as serve does")
}

// printTenants writes on w (stderr) who waits: per tenant, its recorded requests, those
// admission refused and why, and the TTFT and admission queue wait of the others.
func printTenants(w io.Writer, tenants []*sim.TenantStats) {
	if len(tenants) == 0 {
		return
	}
	fmt.Fprintln(w, "sim: who waits (recorded requests per tenant; ms)")
	fmt.Fprintln(w, "| level | tenant | requests | refused | TTFT P50 | TTFT P99 | queue wait mean | queue wait P99 |")
	fmt.Fprintln(w, "|---|---|---:|---|---:|---:|---:|---:|")
	for _, ts := range tenants {
		refused := "0"
		if len(ts.Rejected) > 0 {
			var parts []string
			for _, reason := range slices.Sorted(maps.Keys(ts.Rejected)) {
				parts = append(parts, fmt.Sprintf("%d %s", ts.Rejected[reason], reason))
			}
			refused = strings.Join(parts, ", ")
		}
		ttft, wait := reports.Summarize(ts.TTFTs), reports.Summarize(ts.Waits)
		fmt.Fprintf(w, "| %s | %s | %d | %s | %.1f | %.1f | %.1f | %.1f |\n", ts.Level, ts.Tenant, ts.Requests, refused, ttft.P50, ttft.P99, wait.Mean, wait.P99)
	}
}

// printBreakerOpens names on w (stderr) the workers whose circuit breaker opened during the
// run, and how often: a sign the load or the --cb-* settings take workers out of rotation.
func printBreakerOpens(w io.Writer, opens map[string]int) {
	if len(opens) == 0 {
		return
	}
	var parts []string
	for _, url := range slices.Sorted(maps.Keys(opens)) {
		parts = append(parts, fmt.Sprintf("%s ×%d", url, opens[url]))
	}
	fmt.Fprintf(w, "sim: circuit breakers opened (--cb-failure-threshold failures in a row): %s\n", strings.Join(parts, ", "))
}

// printTreeTrims says on w (stderr) when the router trees reached the simulator's bound: from
// then on cache_aware matched against less history than serve's trees would keep.
func printTreeTrims(w io.Writer, cfg sim.Config, trims int) {
	if trims == 0 {
		return
	}
	bound := min(cmp.Or(cfg.TreeChars, sim.DefaultTreeChars), cfg.Router.MaxTreeTotalChars)
	if cfg.TreeChars < 0 {
		bound = cfg.Router.MaxTreeTotalChars
	}
	fmt.Fprintf(w, "sim: the router trees went over %d characters %d times and were trimmed (least recently used first, to 90 %%): the simulator's bound, which keeps a long run's memory in check; serve's trees keep up to --max-tree-total-chars each\n",
		bound, trims)
}

// printKVStats writes the run's KV-event traffic on w (stderr) when events were on.
func printKVStats(w io.Writer, r sim.Routing, kv sim.KVStats) {
	if !r.PreciseOn() {
		return
	}
	fmt.Fprintf(w, "sim: KV events: %d batches (%d events) published, %d deliveries applied, %d lost, %d sequence gaps; at the end %d rank views stale after a gap, %d never fed (routed on the tree)\n",
		kv.Batches, kv.Events, kv.Delivered, kv.Lost, kv.Gaps, kv.StaleTargets, kv.Silent)
}

// printLoadStats writes the run's engine load reports and shed requests on w (stderr).
func printLoadStats(w io.Writer, st sim.Stats) {
	if l := st.Loads; l.Reports > 0 || l.Skipped > 0 {
		fmt.Fprintf(w, "sim: engine load reports: %d polls answered", l.Reports)
		if l.Skipped > 0 {
			fmt.Fprintf(w, ", %d skipped (the previous poll of the worker was still unanswered: --load-report-delay above --load-report-interval)", l.Skipped)
		}
		fmt.Fprintln(w)
	}
	if st.Shed > 0 {
		fmt.Fprintf(w, "sim: %d requests shed with 503 and Retry-After (%.0f s in all): every worker over --worker-overload-*\n",
			st.Shed, st.ShedRetryAfter.Seconds())
	}
}
