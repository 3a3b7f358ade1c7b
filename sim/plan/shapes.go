package plan

import (
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/pdrouter/pdrouter/sim"
	"github.com/pdrouter/pdrouter/sim/engine"
)

// Server is one SGLang server's parallelism, in SGLang's flags: --tp-size, --dp-size,
// --ep-size, --enable-dp-attention.
type Server struct {
	TP, DP, EP  int
	DPAttention bool
}

// GPUs is the GPUs one server takes: TP under DP attention, TP × DP replicas otherwise.
func (s Server) GPUs() int {
	if s.DPAttention {
		return s.TP
	}
	return s.TP * s.DP
}

// String is "tp4", "tp2 dp2" or "tp8 dp8 ep8 dpa" (DP attention).
func (s Server) String() string {
	b := "tp" + strconv.Itoa(s.TP)
	if s.DP > 1 {
		b += " dp" + strconv.Itoa(s.DP)
	}
	if s.EP > 1 {
		b += " ep" + strconv.Itoa(s.EP)
	}
	if s.DPAttention {
		b += " dpa"
	}
	return b
}

// ServerOptions lists the parallelisms a server of model m may take on nodes of gpusPerNode
// GPUs and a budget of gpus: --tp-size a power of two up to both whose query heads divide
// evenly and whose KV heads divide or are divided by it (SGLang replicates KV heads past
// their count), --dp-size 1; for a MoE model also DP attention with expert parallelism over
// the server (--tp-size N --dp-size N --ep-size N --enable-dp-attention) from 2 GPUs. Whether
// the weights and a KV pool fit is the engine's to say (Bound).
func ServerOptions(m engine.ModelCard, gpusPerNode, gpus int) []Server {
	var out []Server
	for tp := 1; tp <= min(gpusPerNode, gpus); tp *= 2 {
		if m.Heads%tp != 0 || (m.KVHeads%tp != 0 && tp%m.KVHeads != 0) {
			continue
		}
		out = append(out, Server{TP: tp, DP: 1, EP: 1})
	}
	if m.Experts > 0 {
		for tp := 2; tp <= min(gpusPerNode, gpus); tp *= 2 {
			out = append(out, Server{TP: tp, DP: tp, EP: tp, DPAttention: true})
		}
	}
	return out
}

// Candidate is one cluster a plan considers: Prefill servers of P and Decode servers of D,
// with the router settings Router (the values of Spec.Router's keys; nil: the base's).
type Candidate struct {
	Index           int
	Prefill, Decode int
	P, D            Server
	Router          []string
	// Pruned says why the bounds rule the cluster out without a simulation ("": simulated).
	Pruned string
	// Point is the simulation: its Config, and its Result once run.
	Point sim.Point
	// Outcome of the simulation (Score).
	Outcome
	// superseded: a router variant holds this cluster's run under its settings' name.
	superseded bool
}

// GPUs is the candidate's GPU count.
func (c *Candidate) GPUs() int { return c.Prefill*c.P.GPUs() + c.Decode*c.D.GPUs() }

// Shape is "2×tp2 + 1×tp4": the prefill servers, then the decode servers.
func (c *Candidate) Shape() string {
	return fmt.Sprintf("%d×%s + %d×%s", c.Prefill, c.P, c.Decode, c.D)
}

// clusterVars are the sweep keys (sim.Vary) that set a candidate's cluster on the base.
func (c *Candidate) clusterVars() []sim.Vary {
	kv := func(k string, v any) sim.Vary { return sim.Vary{Key: k, Values: []string{fmt.Sprint(v)}} }
	return []sim.Vary{kv("prefill", c.Prefill), kv("decode", c.Decode),
		kv("prefill_tp_size", c.P.TP), kv("prefill_dp_size", c.P.DP), kv("prefill_ep_size", c.P.EP),
		kv("decode_tp_size", c.D.TP), kv("decode_dp_size", c.D.DP), kv("decode_ep_size", c.D.EP),
		kv("dp_attention", c.P.DPAttention || c.D.DPAttention)}
}

// bounds are one candidate's resolved servers: their engine profiles and arguments.
type bounds struct {
	prefill, decode         engine.Profile
	prefillArgs, decodeArgs engine.ServerArgs
}

// Bound returns why cfg (a candidate's cluster) cannot meet slo on workload w, or "" when
// the bounds leave it possible. Each reason is a bound no simulation can beat:
//
//   - the engine cannot build a server (weights and a KV pool do not fit in its GPUs);
//   - a rank's KV pool holds less than the longest request (prompt + output; a prefill
//     rank: the longest prompt): that request can never run;
//   - TTFT: the SLO's percentile of the requests' idle prefill time — each request's least
//     uncached prompt (Workload.UncachedMin) chunked at --chunked-prefill-size on an idle
//     rank, attention from position 0, plus the fixed cost of a KV transfer — is above the
//     TTFT objective (a request's TTFT is at least that);
//   - TPOT: the decode step of a batch of one at the SLO's percentile of prompt lengths is
//     above the TPOT objective (a request's every step is at least that of a batch of one
//     at its context);
//   - open loop: the prefill pool's best token rate (full chunks, no attention, every rank)
//     is below the offered uncached prompt tokens (rate × mean UncachedMin), or the decode
//     pool's best output rate (every rank's batch as large as its KV pool and
//     --max-running-requests allow at the mean prompt) below the offered output tokens: the
//     queues grow without end.
func Bound(cfg sim.Config, w Workload, slo SLO) string {
	cl := cfg.Cluster.WithDefaults(true)
	var b bounds
	var err error
	if b.prefill, b.prefillArgs, err = cl.Server(engine.RolePrefill); err != nil {
		return "prefill memory: " + lastClause(err)
	}
	if b.decode, b.decodeArgs, err = cl.Server(engine.RoleDecode); err != nil {
		return "decode memory: " + lastClause(err)
	}
	speed := cl.Speedup
	_, pdp, _ := cl.Sizes(engine.RolePrefill)
	_, ddp, _ := cl.Sizes(engine.RoleDecode)
	pdpa, ddpa := cl.DPAttention && pdp > 1, cl.DPAttention && ddp > 1
	maxInput := 0
	for _, n := range w.Input {
		maxInput = max(maxInput, n)
	}
	if kv := kvPool(b.prefill, b.prefillArgs); kv < maxInput {
		return fmt.Sprintf("prefill KV: a rank's KV pool (%d tokens) is smaller than the longest prompt (%d)", kv, maxInput)
	}
	if kv := kvPool(b.decode, b.decodeArgs); kv < w.Longest() {
		return fmt.Sprintf("decode KV: a rank's KV pool (%d tokens) is smaller than the longest request (%d)", kv, w.Longest())
	}
	chunk := or(b.prefillArgs.ChunkedPrefillSize, engine.DefaultChunkedPrefillSize)
	if slo.TTFTMs > 0 {
		idle := make([]int, len(w.UncachedMin)) // microseconds
		for i, n := range w.UncachedMin {
			idle[i] = int(prefillIdle(b.prefill, n, chunk, pdpa).Microseconds())
		}
		q := Quantile(idle, slo.q())
		if ms := float64(q) / 1000 / speed; ms > slo.TTFTMs {
			return fmt.Sprintf("TTFT: the %s idle prefill (uncached prompts alone) takes %.0f ms > %g ms", slo.Percentile, ms, slo.TTFTMs)
		}
	}
	if slo.TPOTMs > 0 {
		var ctx []int
		for i, n := range w.Input {
			if w.Output[i] >= 2 {
				ctx = append(ctx, n)
			}
		}
		if len(ctx) > 0 {
			c := Quantile(ctx, slo.q())
			step := decodeStep(b.decode, 1, c, ddpa, ddp)
			if ms := step.Seconds() * 1000 / speed; ms > slo.TPOTMs {
				return fmt.Sprintf("TPOT: a batch of one at the %s prompt (%d tokens) steps in %.1f ms > %g ms", slo.Percentile, c, ms, slo.TPOTMs)
			}
		}
	}
	if w.Rate <= 0 {
		return ""
	}
	ranksP := float64(cl.Prefill * pdp)
	step := prefillStep(b.prefill, chunk, pdpa, pdp)
	capP := ranksP * float64(chunk) / step.Seconds() * speed
	if offered := w.Rate * Mean(w.UncachedMin); offered > capP {
		return fmt.Sprintf("prefill capacity: %.0f tok/s < offered uncached prompt tokens %.0f tok/s", capP, offered)
	}
	ctx := max(int(Mean(w.Input)), 1)
	kv := kvPool(b.decode, b.decodeArgs)
	batch := max(min(or(b.decodeArgs.MaxRunningRequests, engine.DefaultMaxRunningRequests), kv/ctx), 1)
	dstep := decodeStep(b.decode, batch, ctx, ddpa, ddp)
	capD := float64(cl.Decode*ddp*batch) / dstep.Seconds() * speed
	if offered := w.Rate * Mean(w.Output); offered > capD {
		return fmt.Sprintf("decode capacity: %.0f tok/s < offered output tokens %.0f tok/s", capD, offered)
	}
	return ""
}

// lastClause is an error's last clause: the engine's reason without the flags and names that
// wrap it ("llama3-70b weights (141 GB) do not fit in 1×h200-sxm (--tp-size 1 --dp-size 1)").
func lastClause(err error) string {
	msg := err.Error()
	return msg[strings.LastIndex(msg, ": ")+2:]
}

func or(v, def int) int {
	if v > 0 {
		return v
	}
	return def
}

// kvPool is a rank's KV pool in tokens: the resolved --max-total-tokens, else the profile's.
func kvPool(p engine.Profile, a engine.ServerArgs) int {
	if a.MaxTotalTokens > 0 && (p.MaxTotalTokens == 0 || a.MaxTotalTokens < p.MaxTotalTokens) {
		return a.MaxTotalTokens
	}
	return p.MaxTotalTokens
}

// prefillIdle is the least TTFT of a request of n new tokens: its prefill alone on an idle
// rank — chunks of chunk tokens, each attending to the chunks before it (the mean position),
// the shared part of a DP-attention step on this rank's tokens alone — and the fixed part of
// its KV transfer (T0 and PDOverhead).
func prefillIdle(p engine.Profile, n, chunk int, dpa bool) time.Duration {
	if p.Constant {
		return p.TTFT
	}
	// Every request's KV transfer costs at least its fixed part, which TTFT holds once.
	d := time.Duration((p.PDOverhead + p.T0) * float64(time.Second))
	for done := 0; done < n; {
		c := min(chunk, n-done)
		ctx := float64(done) + float64(c)/2
		d += p.AttnPrefillTime(c, float64(c)*ctx)
		if dpa {
			d += p.SharedPrefillTime(c)
		}
		done += c
	}
	return d
}

// prefillStep is the shortest step of a full chunk on every rank of a server: no attention
// (the least a step can cost per token).
func prefillStep(p engine.Profile, chunk int, dpa bool, dp int) time.Duration {
	if p.Constant {
		return max(p.TTFT, time.Nanosecond)
	}
	if dpa {
		return p.AttnPrefillTime(chunk, 0) + p.SharedPrefillTime(chunk*dp)
	}
	return max(p.PrefillTime(chunk, 0), time.Nanosecond)
}

// decodeStep is a decode step of batch requests of ctx tokens each on one rank (under DP
// attention, every rank of the server at that batch).
func decodeStep(p engine.Profile, batch, ctx int, dpa bool, dp int) time.Duration {
	if p.Constant {
		return max(p.ITL, time.Nanosecond)
	}
	if dpa {
		return p.AttnDecodeTime(batch, batch*ctx) + p.SharedTime(batch*dp)
	}
	return max(p.DecodeTime(batch, batch*ctx), time.Nanosecond)
}
