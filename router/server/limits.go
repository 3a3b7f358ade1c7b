package server

import (
	"os"
	"runtime"
	"runtime/debug"
	"runtime/metrics"
	"sync"
	"sync/atomic"
)

// initLimits sets up what bounds the cost of hostile or excessive clients: the memory budget
// for bodies in flight (--body-memory-budget), the connection cap (--max-connections) and
// their metrics. New calls it once the registry is known.
func (s *Server) initLimits() {
	s.budget = newBudget(s.cfg.BodyMemoryBudget)
	s.limits = newLimitsMetrics(s.reg, s.budget)
	s.maxConns = s.cfg.MaxConnections
	// Half the descriptors at most go to client connections: the rest are for the workers'
	// connections (one or two per request in flight), the listeners and files.
	if n, ok := openFileLimit(); ok && s.maxConns > 0 && uint64(s.maxConns) > n/2 {
		s.log.Warn("--max-connections is over half the open-file limit; capping it there",
			"max_connections", s.cfg.MaxConnections, "open_file_limit", n, "cap", n/2)
		s.maxConns = int(n / 2)
	}
	s.log.Debug("limits", "body_memory_budget", s.budget.limit, "max_connections", s.maxConns)
}

// setMemoryLimit sets the Go runtime's soft memory limit, unless GOMEMLIMIT is set, to twice
// the body budget plus 64 MiB: what the bodies in flight may cost at most (a body costs about
// its size in regular mode), so near it the collector frees the bodies of finished and refused
// requests before the heap grows, instead of letting it reach twice what is live.
func (s *Server) setMemoryLimit() {
	if os.Getenv("GOMEMLIMIT") != "" {
		return
	}
	limit := 2*s.budget.limit + 64<<20
	debug.SetMemoryLimit(limit)
	s.log.Debug("Go memory limit set from --body-memory-budget", "bytes", limit)
}

// keepMinHeap keeps the collector from running before the heap reaches --gc-min-heap bytes,
// until the returned stop is called (Serve defers it), unless GOGC is set (the operator's
// pacing wins) or the setting is 0. After each collection it sets GOGC to gcMinHeapPercent of
// what that collection found live: above 100 only while less than half the floor is live, so
// the heap is at most the floor where Go's default would keep it smaller, and paced as Go's
// default paces it above. The memory limit (setMemoryLimit) still bounds it. stop puts back
// the GOGC percent the process had before, at once. The collector is the process's: of several
// Servers serving in one process (tests), the last one started sets it, and the tuning ends
// when that one stops.
func (s *Server) keepMinHeap() (stop func()) {
	floor := s.cfg.GCMinHeap
	if floor <= 0 {
		return func() {}
	}
	if v := os.Getenv("GOGC"); v != "" {
		s.log.Debug("GOGC is set: --gc-min-heap left alone", "GOGC", v)
		return func() {}
	}
	t := &minHeapTuner{floor: uint64(floor),
		samples: []metrics.Sample{{Name: "/gc/heap/live:bytes"}, {Name: "/gc/scan/stack:bytes"}, {Name: "/gc/scan/globals:bytes"}}}
	minHeapMu.Lock()
	if prev := minHeapTuning.Swap(t); prev != nil {
		t.before = prev.before // what the process had before any tuning
	} else {
		t.before = debug.SetGCPercent(goDefaultGCPercent)
	}
	minHeapMu.Unlock()
	t.tune()
	s.log.Debug("Go collector: heap floor from --gc-min-heap", "bytes", floor)
	return func() {
		minHeapMu.Lock()
		defer minHeapMu.Unlock()
		if minHeapTuning.CompareAndSwap(t, nil) {
			debug.SetGCPercent(t.before)
		}
	}
}

// minHeapTuning is the tuning the collector follows (keepMinHeap's latest); nil: none.
// minHeapMu orders a tuning step against stop, so that a step never sets GOGC after stop put
// it back.
var (
	minHeapTuning atomic.Pointer[minHeapTuner]
	minHeapMu     sync.Mutex
)

// minHeapTuner is one Serve's keepMinHeap.
type minHeapTuner struct {
	floor   uint64
	before  int              // the GOGC percent before the tuning began, put back by stop
	samples []metrics.Sample // the live heap, stacks and globals of the last collection
}

// tune sets GOGC for the floor from what the last collection found, and runs again after the
// next collection, while it is the tuning the collector follows.
func (t *minHeapTuner) tune() {
	minHeapMu.Lock()
	defer minHeapMu.Unlock()
	if minHeapTuning.Load() != t { // stopped, or a later Serve's took over
		return
	}
	metrics.Read(t.samples)
	live, scan := t.samples[0].Value.Uint64(), t.samples[1].Value.Uint64()+t.samples[2].Value.Uint64()
	debug.SetGCPercent(gcMinHeapPercent(t.floor, live, scan))
	// The cleanup of an object nothing refers to runs after the collection that finds it so:
	// the next one.
	runtime.AddCleanup(new(gcCycle), (*minHeapTuner).tune, t)
}

// gcCycle is the object whose cleanup runs keepMinHeap's tuning once per collection (it holds
// a pointer so that it is not a tiny allocation, whose cleanup may never run).
type gcCycle struct{ _ *gcCycle }

// goDefaultGCPercent is GOGC's default, and the runtime's heap minimum at it.
const (
	goDefaultGCPercent = 100
	goHeapMinimum      = 4 << 20
)

// gcMinHeapPercent returns the smallest GOGC percent, at least Go's default, at which the
// collector's next heap goal is at least floor bytes, when the last collection found live bytes
// live and scanned scan bytes of stacks and globals. At percent p the runtime's goal is
// live + (live+scan)·p/100, and never below its heap minimum, 4 MiB·p/100.
func gcMinHeapPercent(floor, live, scan uint64) int {
	floor = min(floor, 1<<40) // (a TiB: no overflow below, and GOGC fits an int32)
	if live+(live+scan)*goDefaultGCPercent/100 >= floor {
		return goDefaultGCPercent
	}
	p := ceilDiv(100*floor, goHeapMinimum) // the heap minimum reaches the floor
	if work := live + scan; work > 0 {
		p = min(p, ceilDiv(100*(floor-live), work)) // the goal proper does
	}
	return int(max(p, goDefaultGCPercent))
}

func ceilDiv(a, b uint64) uint64 { return (a + b - 1) / b }
