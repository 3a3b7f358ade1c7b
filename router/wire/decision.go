package wire

import (
	"math"
	"strconv"
	"time"
)

// DecisionTarget is one target of a routing decision as the decision log writes it.
type DecisionTarget struct {
	Worker string // worker base URL
	Index  int    // the worker's position within its role in the target order
	Rank   *int   // DP rank; nil without --dp-aware (written as null)
	// Signal is what the choice rested on: cache_match, engine_load or in_flight ("" when
	// the policy looked at no load: not written); LoadAgeMs, with engine_load, the oldest
	// engine report's age then, in ms.
	Signal    string
	LoadAgeMs float64
	// Tier is where the KV event index found the worker's cached prefix: "gpu", or "host" when
	// part of it is in the worker's host memory (HiCache) and is loaded back before prefill
	// ("" when the index predicted no cached tokens: not written).
	Tier string
}

// DecisionLine is one line of --decision-log (SPEC §2). It is a plain struct so that serve and
// sim, which both write it, produce comparable logs; nil targets are written as null.
type DecisionLine struct {
	Seq       uint64 // 1-based order of routed requests
	ID        string // the client-visible request id
	RID       string // the rid sent to workers (a batch: its first element)
	Room      uint64 // bootstrap_room (a batch: its first element); 0 in regular mode
	Route     string // the request path, e.g. "/v1/chat/completions"
	Prefill   *DecisionTarget
	Decode    *DecisionTarget
	Regular   *DecisionTarget
	Reason    string  // policy reason: cache_hit, cache_miss, imbalance, …
	MatchRate float64 // predicted prefix match rate in [0,1]; NaN/Inf are written as null
	// Predicted is predicted_latency's prediction (nil: another policy; not written).
	Predicted *LatencyFigures
}

// LatencyFigures are predicted_latency's figures of one request in the decision log, in ms:
// TTFT and TPOT (predicted, or observed), and with a prediction the corrections applied.
type LatencyFigures struct {
	TTFTMs, TPOTMs                 float64
	CorrectionTTFT, CorrectionTPOT float64 // 0: not written (observed figures)
}

// Figures returns the LatencyFigures of a TTFT and a TPOT, with the corrections applied to a
// prediction (0, 0 for observed figures): what serve and the simulator both write.
func Figures(ttft, tpot time.Duration, corrTTFT, corrTPOT float64) LatencyFigures {
	ms := func(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }
	return LatencyFigures{TTFTMs: ms(ttft), TPOTMs: ms(tpot), CorrectionTTFT: corrTTFT, CorrectionTPOT: corrTPOT}
}

// ObservedLine is the decision log's line for a request routed by predicted_latency once its
// end is observed: its prediction beside what the router observed, keyed by the request id
// (the routing line's id) and naming the workers whose corrections it fed.
type ObservedLine struct {
	ID                  string
	Prefill, Decode     string // the targets corrected (regular mode: the same)
	Predicted, Observed LatencyFigures
}

// AppendObservedLine appends o as one JSON line: {"id","observed":{"ttft_ms","tpot_ms"},
// "predicted":{…},"prefill","decode"}.
func AppendObservedLine(dst []byte, o *ObservedLine) []byte {
	dst = append(dst, `{"id":`...)
	dst = appendQuote(dst, o.ID)
	dst = append(dst, `,"observed":`...)
	dst = appendFigures(dst, &o.Observed)
	dst = append(dst, `,"predicted":`...)
	dst = appendFigures(dst, &o.Predicted)
	dst = append(dst, `,"prefill":`...)
	dst = appendQuote(dst, o.Prefill)
	dst = append(dst, `,"decode":`...)
	dst = appendQuote(dst, o.Decode)
	return append(dst, "}\n"...)
}

func appendFigures(dst []byte, f *LatencyFigures) []byte {
	dst = append(dst, `{"ttft_ms":`...)
	dst = strconv.AppendFloat(dst, f.TTFTMs, 'f', 3, 64)
	dst = append(dst, `,"tpot_ms":`...)
	dst = strconv.AppendFloat(dst, f.TPOTMs, 'f', 3, 64)
	if f.CorrectionTTFT > 0 {
		dst = append(dst, `,"correction_ttft":`...)
		dst = strconv.AppendFloat(dst, f.CorrectionTTFT, 'f', 3, 64)
		dst = append(dst, `,"correction_tpot":`...)
		dst = strconv.AppendFloat(dst, f.CorrectionTPOT, 'f', 3, 64)
	}
	return append(dst, '}')
}

// AppendDecisionLine appends d to dst as one JSON line, newline-terminated, with the keys in the
// order seq, id, rid, room, route, prefill, decode, regular, reason, match_rate; each target is
// {"worker","index","rank"} and, when set, "signal" (and with engine_load "load_age_ms") and
// "tier".
func AppendDecisionLine(dst []byte, d *DecisionLine) []byte {
	dst = append(dst, `{"seq":`...)
	dst = strconv.AppendUint(dst, d.Seq, 10)
	dst = append(dst, `,"id":`...)
	dst = appendQuote(dst, d.ID)
	dst = append(dst, `,"rid":`...)
	dst = appendQuote(dst, d.RID)
	dst = append(dst, `,"room":`...)
	dst = strconv.AppendUint(dst, d.Room, 10)
	dst = append(dst, `,"route":`...)
	dst = appendQuote(dst, d.Route)
	dst = append(dst, `,"prefill":`...)
	dst = appendTarget(dst, d.Prefill)
	dst = append(dst, `,"decode":`...)
	dst = appendTarget(dst, d.Decode)
	dst = append(dst, `,"regular":`...)
	dst = appendTarget(dst, d.Regular)
	dst = append(dst, `,"reason":`...)
	dst = appendQuote(dst, d.Reason)
	dst = append(dst, `,"match_rate":`...)
	if math.IsNaN(d.MatchRate) || math.IsInf(d.MatchRate, 0) {
		dst = append(dst, "null"...)
	} else {
		dst = strconv.AppendFloat(dst, d.MatchRate, 'g', -1, 64)
	}
	if d.Predicted != nil {
		dst = append(dst, `,"predicted":`...)
		dst = appendFigures(dst, d.Predicted)
	}
	return append(dst, "}\n"...)
}

func appendTarget(dst []byte, t *DecisionTarget) []byte {
	if t == nil {
		return append(dst, "null"...)
	}
	dst = append(dst, `{"worker":`...)
	dst = appendQuote(dst, t.Worker)
	dst = append(dst, `,"index":`...)
	dst = strconv.AppendInt(dst, int64(t.Index), 10)
	dst = append(dst, `,"rank":`...)
	dst = appendOptInt(dst, t.Rank)
	if t.Signal != "" {
		dst = append(dst, `,"signal":`...)
		dst = appendQuote(dst, t.Signal)
		if t.Signal == "engine_load" {
			dst = append(dst, `,"load_age_ms":`...)
			dst = strconv.AppendFloat(dst, t.LoadAgeMs, 'f', 3, 64)
		}
	}
	if t.Tier != "" {
		dst = append(dst, `,"tier":`...)
		dst = appendQuote(dst, t.Tier)
	}
	return append(dst, '}')
}
