package reports

import (
	"fmt"
	"slices"
	"strconv"
)

// SLO is a set of per-request latency objectives in ms for goodput; a zero field is not
// constrained. A request meets the SLO when it succeeded and TTFT ≤ TTFTMs, TPOT ≤ TPOTMs
// and E2E ≤ E2EMs (≤ as vLLM's goodput). A request with fewer than two output tokens has no
// TPOT and meets the TPOT objective; one with no TTFT misses the TTFT objective.
type SLO struct {
	TTFTMs float64
	TPOTMs float64
	E2EMs  float64
}

// meets reports whether a successful record meets every objective.
func (s *SLO) meets(r *Record) bool {
	if s.TTFTMs > 0 && (r.TTFTMs == nil || *r.TTFTMs > s.TTFTMs) {
		return false
	}
	if s.TPOTMs > 0 && r.OutputTokens >= 2 && r.TPOTMs != nil && *r.TPOTMs > s.TPOTMs {
		return false
	}
	if s.E2EMs > 0 && r.E2EMs > s.E2EMs {
		return false
	}
	return true
}

// Aggregate summarises one level's records (SPEC §5, §6):
//   - requests counts every record; errors those with Error set, by ErrorKind in errors_by_kind;
//   - TTFT, E2E and ITL stats cover successful requests only (ITL: every gap of every one; TTFT:
//     those that have one); TPOT covers successful requests with ≥ 2 output tokens and a TPOT;
//   - queue_ms is non-null for open-loop levels (no concurrency) and covers every record that
//     carries queue_ms, errors included: client-side queueing happens before the outcome;
//   - throughput is successful requests and their input/output tokens per second of
//     info.Duration (zero when the duration is zero);
//   - cache_hit_rate = Σcached/Σinput tokens over successful requests (null if
//     info.CacheUnknown, 0 if Σinput is 0);
//   - goodput = requests meeting info.SLO / requests (null without an SLO, 0 with no requests).
//
// Empty sample sets give zero stats. Every record must belong to info.Label and pass
// Record.Validate. Aggregate does not modify records.
func Aggregate(info LevelInfo, records []Record) (Level, error) {
	if err := checkShape(info.Label, info.Concurrency, info.Rate, info.Arrival); err != nil {
		return Level{}, err
	}
	if info.Duration < 0 {
		return Level{}, fmt.Errorf("reports: level %q: negative duration %v", info.Label, info.Duration)
	}
	l := Level{
		Label:       info.Label,
		Concurrency: info.Concurrency,
		Rate:        info.Rate,
		Arrival:     info.Arrival,
		Requests:    len(records),
		DurationS:   info.Duration.Seconds(),
		Sim:         info.Sim,
	}
	nITL := 0
	for i := range records {
		r := &records[i]
		if err := r.Validate(); err != nil {
			return Level{}, err
		}
		if r.Level != info.Label {
			return Level{}, fmt.Errorf("reports: record %q is in level %q, aggregating level %q", r.ID, r.Level, info.Label)
		}
		if !r.Failed() {
			nITL += len(r.ITLMs)
		}
	}

	ttft := make([]float64, 0, len(records))
	tpot := make([]float64, 0, len(records))
	e2e := make([]float64, 0, len(records))
	itl := make([]float64, 0, nITL)
	var queue []float64
	if info.openLoop() {
		queue = make([]float64, 0, len(records))
	}
	var ok, good, inTok, outTok, cached int
	for i := range records {
		r := &records[i]
		if info.openLoop() && r.QueueMs != nil {
			queue = append(queue, *r.QueueMs)
		}
		if r.Failed() {
			l.Errors++
			if l.ErrorsByKind == nil {
				l.ErrorsByKind = map[string]int{}
			}
			l.ErrorsByKind[ErrorKind(*r.Error)]++
			continue
		}
		ok++
		if r.TTFTMs != nil {
			ttft = append(ttft, *r.TTFTMs)
		}
		if r.OutputTokens >= 2 && r.TPOTMs != nil {
			tpot = append(tpot, *r.TPOTMs)
		}
		e2e = append(e2e, r.E2EMs)
		itl = append(itl, r.ITLMs...)
		inTok += r.InputTokens
		outTok += r.OutputTokens
		cached += r.CachedTokens
		if info.SLO != nil && info.SLO.meets(r) {
			good++
		}
	}

	l.TTFTMs = sortSummarize(ttft)
	l.TPOTMs = sortSummarize(tpot)
	l.ITLMs = sortSummarize(itl)
	if info.ITL != nil {
		l.ITLMs = info.ITL.Stats()
	}
	l.E2EMs = sortSummarize(e2e)
	if info.openLoop() {
		q := sortSummarize(queue)
		l.QueueMs = &q
	}
	if d := l.DurationS; d > 0 {
		l.Throughput = Throughput{
			ReqS:       float64(ok) / d,
			InputTokS:  float64(inTok) / d,
			OutputTokS: float64(outTok) / d,
		}
	}
	l.SGLangCacheHitRate = info.SGLangCacheHitRate
	if !info.CacheUnknown {
		rate := 0.0
		if inTok > 0 {
			rate = float64(cached) / float64(inTok)
		}
		l.CacheHitRate = &rate
	}
	if info.SLO != nil {
		g := 0.0
		if len(records) > 0 {
			g = float64(good) / float64(len(records))
		}
		l.Goodput = &g
	}
	return l, nil
}

// sortSummarize sorts s in place and summarises it.
func sortSummarize(s []float64) Stats {
	slices.Sort(s)
	return summarizeSorted(s)
}

// MinPercentileSamples is the fewest successful requests a level's P95/P99 should rest on.
const MinPercentileSamples = 100

// LevelWarnings says what makes a level's figures weaker than they look: a closed-loop level
// with more clients than the workload has conversations (conversations > 0) cannot keep them
// busy, so its concurrency is really at most that; percentiles resting on fewer than
// MinPercentileSamples successful requests move with a handful of them.
func LevelWarnings(l *Level, conversations int) []string {
	var out []string
	if l.Concurrency != nil && conversations > 0 && conversations < *l.Concurrency {
		out = append(out, fmt.Sprintf("level %s: the workload has %d conversations for %d clients, so at most %d requests run at once (raise --conversations, or the workload's own count)",
			l.Label, conversations, *l.Concurrency, conversations))
	}
	if ok := l.Requests - l.Errors; ok < MinPercentileSamples {
		out = append(out, fmt.Sprintf("level %s: its percentiles rest on %d successful requests (fewer than %d: P95 is about the %s-largest; raise --requests or --duration)",
			l.Label, ok, MinPercentileSamples, ordinal(max(1, int(float64(ok)*0.05+0.5)))))
	}
	return out
}

func ordinal(n int) string {
	if n == 1 {
		return "1st"
	}
	suffix := "th"
	switch {
	case n%100 >= 11 && n%100 <= 13:
	case n%10 == 1:
		suffix = "st"
	case n%10 == 2:
		suffix = "nd"
	case n%10 == 3:
		suffix = "rd"
	}
	return strconv.Itoa(n) + suffix
}
