package workloads

import (
	"io"
	"math/rand/v2"
	"sync"
	"time"

	"gonum.org/v1/gonum/stat/distuv"
)

// Arrivals is an open-loop arrival process: At(i) is the offset of the i-th arrival (0-based)
// from the start of the level, and false once the process has no i-th arrival. Offsets are
// non-decreasing in i and depend only on i and the construction parameters (seed included), so
// a simulator can drive the process in virtual time and a pacer in real time. Implementations
// here are safe for concurrent use; sequential calls (i, i+1, …) cost O(1).
type Arrivals interface {
	At(i int) (offset time.Duration, ok bool)
}

// Constant spaces arrivals exactly 1/Rate apart, the first at 0. Limit > 0 caps the number of
// arrivals; Limit ≤ 0 means unbounded.
type Constant struct {
	Rate  float64 // arrivals per second, > 0
	Limit int
}

// At implements Arrivals.
func (c Constant) At(i int) (time.Duration, bool) {
	if i < 0 || c.Limit > 0 && i >= c.Limit || !(c.Rate > 0) {
		return 0, false
	}
	return time.Duration(float64(i) / c.Rate * float64(time.Second)), true
}

// Burst sends every arrival at offset 0 (--rate inf). Limit > 0 caps the count.
type Burst struct{ Limit int }

// At implements Arrivals.
func (b Burst) At(i int) (time.Duration, bool) {
	return 0, i >= 0 && (b.Limit <= 0 || i < b.Limit)
}

// renewal is a renewal process with i.i.d. gaps drawn in order from a seeded stream; the first
// arrival is at 0. It remembers its position, so sequential At calls are O(1); a call for an
// earlier index replays the stream from the start (same seed, same offsets).
type renewal struct {
	mu    sync.Mutex // protects the fields below
	seed  uint64
	limit int
	gap   func(r *rand.Rand) float64 // seconds
	r     *rand.Rand
	i     int
	t     float64 // seconds of arrival i
}

func (p *renewal) At(i int) (time.Duration, bool) {
	if i < 0 || p.limit > 0 && i >= p.limit {
		return 0, false
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.r == nil || i < p.i {
		p.r, p.i, p.t = rand.New(rand.NewPCG(p.seed, 0x61727269)), 0, 0
	}
	for p.i < i {
		p.t += p.gap(p.r)
		p.i++
	}
	return time.Duration(p.t * float64(time.Second)), true
}

// NewPoisson returns a Poisson process of rate arrivals per second (exponential gaps of mean
// 1/rate), seeded; limit > 0 caps the count. rate must be > 0.
func NewPoisson(rate float64, seed uint64, limit int) Arrivals {
	return &renewal{seed: seed, limit: limit, gap: func(r *rand.Rand) float64 { return r.ExpFloat64() / rate }}
}

// NewGamma returns a gamma renewal process with sglang/vLLM semantics: gap ~ Gamma(shape =
// burstiness, scale = 1/(rate·burstiness)), mean 1/rate. Burstiness 1 is Poisson; below 1 is
// burstier, above 1 more regular. rate and burstiness must be > 0; limit > 0 caps the count.
func NewGamma(rate, burstiness float64, seed uint64, limit int) Arrivals {
	return &renewal{seed: seed, limit: limit, gap: func(r *rand.Rand) float64 {
		return distuv.Gamma{Alpha: burstiness, Beta: rate * burstiness, Src: r}.Rand()
	}}
}

// TraceArrivals replays a trace's own arrival offsets (already × --time-scale). It pulls
// offsets from next on demand and keeps those read (8 bytes each) so At is random access.
type TraceArrivals struct {
	mu   sync.Mutex // protects seen, done, err
	next func() (time.Duration, error)
	seen []time.Duration
	done bool
	err  error
}

// NewTraceArrivals returns trace arrivals fed by next (io.EOF ends the trace).
func NewTraceArrivals(next func() (time.Duration, error)) *TraceArrivals {
	return &TraceArrivals{next: next}
}

// OpenTraceArrivals reads only the timestamps of p's trace file (mooncake or azure), lazily.
// Close the returned closer when done.
func OpenTraceArrivals(p Params) (*TraceArrivals, io.Closer, error) {
	switch p.Workload {
	case WorkloadMooncake:
		r, err := OpenMooncake(p.TraceFile, p.Seed)
		if err != nil {
			return nil, nil, err
		}
		r.TimeScale = p.TimeScale
		return NewTraceArrivals(func() (time.Duration, error) {
			q, err := r.Next()
			return q.Arrival, err
		}), r, nil
	case WorkloadAzure:
		r, err := OpenAzure(p.TraceFile, p.Seed)
		if err != nil {
			return nil, nil, err
		}
		r.TimeScale = p.TimeScale
		return NewTraceArrivals(func() (time.Duration, error) {
			q, err := r.Next()
			return q.Arrival, err
		}), r, nil
	}
	return nil, nil, errNotTrace(p.Workload)
}

// At implements Arrivals; a read error ends the process (see Err).
func (t *TraceArrivals) At(i int) (time.Duration, bool) {
	if i < 0 {
		return 0, false
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	for len(t.seen) <= i && !t.done {
		d, err := t.next()
		if err != nil {
			t.done = true
			if err != io.EOF {
				t.err = err
			}
			break
		}
		t.seen = append(t.seen, d)
	}
	if i < len(t.seen) {
		return t.seen[i], true
	}
	return 0, false
}

// Err returns the read error that ended the trace early, if any.
func (t *TraceArrivals) Err() error {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.err
}
