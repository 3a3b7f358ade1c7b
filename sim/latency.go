package sim

import (
	"github.com/pdrouter/pdrouter/router"
	"github.com/pdrouter/pdrouter/router/wire"
	"github.com/pdrouter/pdrouter/sim/engine"
)

// useLatencyModel gives every replica's predicted_latency policy of role the cost model of
// that role's simulated servers (cfg, with defaults): the router predicts with the very engine
// model the simulator runs, as serve does with --latency-profile.
func (x *sim) useLatencyModel(role router.Role, cfg engine.Config) error {
	m, err := engine.NewCostModel(cfg)
	if err != nil {
		return err
	}
	for _, rep := range x.reps {
		if err := rep.rt.UseLatencyModel(role, m); err != nil {
			return err
		}
	}
	return nil
}

// logObserved writes predicted_latency's line of a request whose end the router observed to
// the decision log, as serve writes it: the prediction beside the observation.
func (x *sim) logObserved(d *router.Decision, p router.Prediction) {
	line := wire.ObservedLine{ID: d.LogID(), Prefill: p.Prefill.Name(), Decode: p.Decode.Name(),
		Predicted: wire.Figures(p.TTFT, p.TPOT, p.CorrectionTTFT, p.CorrectionTPOT), Observed: wire.Figures(p.ObservedTTFT, p.ObservedTPOT, 0, 0)}
	x.logBuf = wire.AppendObservedLine(x.logBuf[:0], &line)
	if _, err := x.cfg.DecisionLog.Write(x.logBuf); err != nil {
		x.err = err
	}
}
