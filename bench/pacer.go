package bench

import (
	"time"

	vegeta "github.com/tsenart/vegeta/v12/lib"

	"github.com/pdrouter/pdrouter/workloads"
)

// Pacer paces an open-loop level for vegeta: the hits-th request is due at Arrivals.At(hits)
// after the attack began. It is a pure function of its arguments, so the simulator's clients
// and the bench agree on when arrivals happen. Safe for concurrent use when Arrivals is.
type Pacer struct {
	// Arrivals is the arrival process (workloads.NewPoisson, Constant, Burst, TraceArrivals…).
	Arrivals workloads.Arrivals
	// Nominal is the requests/s Rate reports (the level's --rate; +Inf for a burst; 0 when
	// unknown, as for a trace).
	Nominal float64
}

var _ vegeta.Pacer = Pacer{}

// Pace implements vegeta.Pacer: the wait until request hits is due (≤ 0 when late), and stop
// once the process has no such arrival.
func (p Pacer) Pace(elapsed time.Duration, hits uint64) (time.Duration, bool) {
	at, ok := p.Arrivals.At(int(hits))
	if !ok {
		return 0, true
	}
	return at - elapsed, false
}

// Rate implements vegeta.Pacer: the nominal rate in requests/s.
func (p Pacer) Rate(time.Duration) float64 { return p.Nominal }
