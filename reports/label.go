package reports

import (
	"fmt"
	"math"
	"regexp"
	"strconv"
	"time"
)

// Arrival processes of an open-loop level (Level.Arrival). ArrivalBurst is --rate inf (every
// request at t=0); ArrivalTrace replays a trace's own timestamps.
const (
	ArrivalPoisson  = "poisson"
	ArrivalConstant = "constant"
	ArrivalGamma    = "gamma"
	ArrivalBurst    = "burst"
	ArrivalTrace    = "trace"
)

// Labels of the levels that carry no number.
const (
	LabelBurst = "burst"
	LabelTrace = "trace"
)

// labelRE matches the labels of SPEC §6: c{N} with N ≥ 1, r{R} with R > 0 written without
// trailing zeros or exponent (RateLabel), burst, trace. The schema files carry the same pattern.
var labelRE = regexp.MustCompile(`^(c[1-9][0-9]*|r([1-9][0-9]*(\.[0-9]*[1-9])?|0\.[0-9]*[1-9])|burst|trace)$`)

// ConcurrencyLabel returns the label of a closed-loop level of n clients: "c{n}".
func ConcurrencyLabel(n int) string { return "c" + strconv.Itoa(n) }

// RateLabel returns the label of an open-loop level of rate requests/s: "r{rate}" in plain
// decimal without trailing zeros (r2, r0.5, r12.25).
func RateLabel(rate float64) string { return "r" + strconv.FormatFloat(rate, 'f', -1, 64) }

func checkLabel(label string) error {
	if !labelRE.MatchString(label) {
		return fmt.Errorf("level label %q is not c{N}, r{R}, burst or trace", label)
	}
	return nil
}

// checkShape checks that a label agrees with the concurrency, rate and arrival beside it.
func checkShape(label string, concurrency *int, rate *float64, arrival *string) error {
	if err := checkLabel(label); err != nil {
		return fmt.Errorf("reports: %w", err)
	}
	bad := func(what string) error { return fmt.Errorf("reports: level %q: %s", label, what) }
	arr := ""
	if arrival != nil {
		arr = *arrival
	}
	switch label[0] {
	case 'c':
		if concurrency == nil || ConcurrencyLabel(*concurrency) != label {
			return bad("concurrency does not match the label")
		}
		if rate != nil || arrival != nil {
			return bad("a closed-loop level has null rate and arrival")
		}
	case 'r':
		if rate == nil || math.IsInf(*rate, 0) || math.IsNaN(*rate) || RateLabel(*rate) != label {
			return bad("rate does not match the label")
		}
		if concurrency != nil {
			return bad("an open-loop level has null concurrency")
		}
		switch arr {
		case ArrivalPoisson, ArrivalConstant, ArrivalGamma:
		default:
			return bad(fmt.Sprintf("arrival %q, want %s, %s or %s", arr, ArrivalPoisson, ArrivalConstant, ArrivalGamma))
		}
	default: // burst, trace: the label is the arrival
		if arr != label {
			return bad(fmt.Sprintf("arrival %q, want %q", arr, label))
		}
		if concurrency != nil || rate != nil {
			return bad("a " + label + " level has null concurrency and rate")
		}
	}
	return nil
}

// LevelInfo is what Aggregate needs besides the records. Build it with ClosedLoop, OpenLoop,
// Burst or Trace, then set Duration and the optional fields.
type LevelInfo struct {
	// Label, Concurrency, Rate and Arrival are copied to the Level; the constructors keep them
	// consistent.
	Label       string
	Concurrency *int
	Rate        *float64
	Arrival     *string
	// Duration of the level (wall time for bench, virtual time for sim), for throughput.
	// Zero gives zero throughput.
	Duration time.Duration
	// SLO, when non-nil, makes Aggregate compute goodput.
	SLO *SLO
	// CacheUnknown marks a target that does not report cached tokens: cache_hit_rate is null.
	CacheUnknown bool
	// Sim is copied to Level.Sim (the simulator computes it).
	Sim *SimStats
	// SGLangCacheHitRate is copied to Level.SGLangCacheHitRate (from the engines' counters).
	SGLangCacheHitRate *float64
	// ITL, when non-nil, holds the ITLs of the level's successful requests and gives its
	// itl_ms (the records' ITLMs are then not read): a simulator keeps counts, not lists.
	ITL *Counts
}

// ClosedLoop describes a closed-loop level of n clients (label c{n}).
func ClosedLoop(n int) LevelInfo {
	return LevelInfo{Label: ConcurrencyLabel(n), Concurrency: &n}
}

// OpenLoop describes an open-loop level of rate requests/s with the given arrival process
// (ArrivalPoisson, ArrivalConstant or ArrivalGamma); label r{rate}.
func OpenLoop(rate float64, arrival string) LevelInfo {
	return LevelInfo{Label: RateLabel(rate), Rate: &rate, Arrival: &arrival}
}

// Burst describes a --rate inf level: every request arrives at t=0 (label burst).
func Burst() LevelInfo {
	a := ArrivalBurst
	return LevelInfo{Label: LabelBurst, Arrival: &a}
}

// Trace describes a level paced by a trace's timestamps (label trace).
func Trace() LevelInfo {
	a := ArrivalTrace
	return LevelInfo{Label: LabelTrace, Arrival: &a}
}

// openLoop reports whether requests have a scheduled arrival time, hence a client queue.
func (li *LevelInfo) openLoop() bool { return li.Concurrency == nil }
