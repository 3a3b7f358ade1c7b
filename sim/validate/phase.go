package validate

import (
	"fmt"
	"sort"
	"time"

	"github.com/pdrouter/pdrouter/sim/engine"
)

// Phase-isolated measurements (the LMSYS large-scale EP blogs): one phase at saturation with
// the other given unlimited resources. The suite drives one server of the measured pool
// directly through sim/engine, in virtual time, and measures its steady-state rate.

// prefillBatches is how many full prefill steps every rank runs; the first is the ramp and is
// left out of the rate.
const prefillBatches = 6

// decodeSteps is the output tokens each decode request generates (the first comes with the KV).
const decodeSteps = 32

var t0 = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

// noGaps discards inter-token gaps: the decode rate needs only the end times.
type noGaps struct{}

func (noGaps) AddN(int64, int64) {}

// drive advances srv until it has nothing left to do, handing every output to on.
func drive(srv *engine.Server, on func(o engine.Output)) {
	var outs []engine.Output
	for {
		t, ok := srv.NextEvent()
		if !ok {
			return
		}
		outs = srv.AppendAdvance(outs[:0], t)
		for _, o := range outs {
			on(o)
		}
	}
}

// runPrefillPhase measures the prompt tokens per second of one server of the prefill pool:
// a unified server whose requests ask for one output token (prefill alone), every DP rank
// given prefillBatches chunks' worth of prompts of input_len tokens at once. The rate is the
// prompt tokens finishing after the first step over the time from the first step's end to the
// last's (the steady state of full steps).
func runPrefillPhase(sv server, inputLen int, notes *[]string) (float64, error) {
	cfg := sv.args.Apply(engine.Config{Role: engine.RoleUnified, DPSize: sv.par.DP, DPAttention: sv.par.DPAttention,
		Profile: sv.profile})
	srv, err := engine.New(cfg)
	if err != nil {
		return 0, err
	}
	chunk := srv.Config().ChunkedPrefillSize
	perStep := max(chunk/inputLen, 1)
	perRank := perStep * prefillBatches
	n := perRank * sv.par.DP
	*notes = append(*notes, fmt.Sprintf("prefill: %d prompts of %d tokens, %d per rank per step (chunk %d)", n, inputLen, perStep, chunk))
	base := make([]uint32, inputLen)
	for i := range base {
		base[i] = uint32(i%30000 + 1000)
	}
	for i := range n {
		p := make([]uint32, inputLen)
		copy(p, base)
		p[0], p[1] = uint32(i>>16+1), uint32(i&0xffff+1) // distinct prompts: no prefix hits
		srv.Submit(t0, engine.Req{Room: uint64(i + 1), Rank: i % sv.par.DP, Prompt: p, MaxNew: 1})
	}
	var ends []time.Time
	failed := 0
	drive(srv, func(o engine.Output) {
		switch o.Kind {
		case engine.KindFinished:
			ends = append(ends, o.At)
		case engine.KindFailed:
			failed++
		}
	})
	if failed > 0 {
		*notes = append(*notes, fmt.Sprintf("prefill: %d requests failed", failed))
	}
	return steadyRate(ends, inputLen)
}

// steadyRate is the tokens per request times the requests ending after the first end
// instant, over the time from the first end instant to the last.
func steadyRate(ends []time.Time, tokensEach int) (float64, error) {
	if len(ends) < 2 {
		return 0, fmt.Errorf("too few requests finished (%d)", len(ends))
	}
	sort.Slice(ends, func(i, j int) bool { return ends[i].Before(ends[j]) })
	first, last := ends[0], ends[len(ends)-1]
	after := 0
	for _, e := range ends {
		if e.After(first) {
			after++
		}
	}
	span := last.Sub(first).Seconds()
	if span <= 0 || after == 0 {
		return 0, fmt.Errorf("all requests finished at once: no steady state to measure")
	}
	return float64(after*tokensEach) / span, nil
}

// runDecodePhase measures the output tokens per second of one decode server: batch requests
// on every DP rank, each with a context of ctx tokens whose KV arrives as soon as the decode
// side has reserved it, each generating decodeSteps tokens. The rate is the tokens decoded
// (all but the first, which comes with the KV) over the time from the last KV arrival to the
// last request's end. batch 0 fills the KV pool (capped by max running requests).
func runDecodePhase(sv server, batch, ctx int, notes *[]string) (float64, error) {
	cfg := sv.args.Apply(engine.Config{Role: engine.RoleDecode, DPSize: sv.par.DP, DPAttention: sv.par.DPAttention,
		Profile: sv.profile, ReservedDecodeTokens: sv.reserved})
	if sv.args.MaxRunningRequests == 0 && batch > 0 {
		// The source ran batch requests per rank, so its max_running_requests (not stated)
		// was at least that; the engine's default (1024) must not cap the stated batch.
		cfg.MaxRunningRequests = max(cfg.MaxRunningRequests, batch)
	}
	srv, err := engine.New(cfg)
	if err != nil {
		return 0, err
	}
	c := srv.Config()
	// A room is preallocated while its context plus the decode side's reserve fits what the
	// running rooms leave (disaggregation/decode.py _allocatable_tokens: each room keeps
	// ReservedDecodeTokens free; engine preallocate), so this many run at once.
	fits := min(c.MaxTotalTokens/(ctx+c.ReservedDecodeTokens), c.MaxRunningRequests)
	switch {
	case batch <= 0:
		batch = fits
		*notes = append(*notes, fmt.Sprintf("decode batch per rank not stated: %d fills the KV pool", batch))
	case batch > fits && fits > 0:
		// A stated batch the pool cannot hold at once would run in waves and the rate would
		// count the later ones over too short a span; the LMSYS blogs size the batch to fill the
		// KV cache, so the batch that fills this pool stands for it.
		*notes = append(*notes, fmt.Sprintf("decode batch %d per rank does not fit the KV pool: %d fills it", batch, fits))
		batch = fits
	}
	if batch < 1 {
		return 0, fmt.Errorf("a %d-token context does not fit the decode KV pool (%d tokens)", ctx, c.MaxTotalTokens)
	}
	n := batch * sv.par.DP
	*notes = append(*notes, fmt.Sprintf("decode: %d per rank × %d ranks, context %d, %d tokens each", batch, sv.par.DP, ctx, decodeSteps))
	prompt := make([]uint32, ctx) // read-only, shared: a decode server keeps no prefix cache here
	for i := range prompt {
		prompt[i] = uint32(i%30000 + 1000)
	}
	for i := range n {
		srv.Submit(t0, engine.Req{Room: uint64(i + 1), Rank: i % sv.par.DP, Prompt: prompt, MaxNew: decodeSteps, Gaps: noGaps{}})
	}
	var lastKV, lastEnd time.Time
	done, failed, late := 0, 0, 0
	drive(srv, func(o engine.Output) {
		switch o.Kind {
		case engine.KindPreallocated:
			srv.KVArrived(o.At, o.Room, 0)
			if o.At.After(t0) {
				late++
			}
			if o.At.After(lastKV) {
				lastKV = o.At
			}
		case engine.KindFinished:
			done++
			if o.At.After(lastEnd) {
				lastEnd = o.At
			}
		case engine.KindFailed:
			failed++
		}
	})
	if failed > 0 {
		*notes = append(*notes, fmt.Sprintf("decode: %d requests failed", failed))
	}
	if late > 0 {
		// Not every request fit the KV pool at once: the rate then counts the later ones'
		// tokens over the time after the last of them arrived, an overestimate.
		*notes = append(*notes, fmt.Sprintf("decode: %d of %d requests waited for KV space (the batch does not fit at once)", late, n))
	}
	span := lastEnd.Sub(lastKV).Seconds()
	if done == 0 || span <= 0 {
		return 0, fmt.Errorf("decode run produced no steady state (%d finished)", done)
	}
	return float64(done*(decodeSteps-1)) / span, nil
}
