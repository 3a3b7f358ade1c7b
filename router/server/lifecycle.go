package server

import (
	"github.com/pdrouter/pdrouter/router"
	"github.com/prometheus/client_golang/prometheus"
)

// The worker lifecycle (added → starting → healthy/unhealthy/breaker_open → draining → gone)
// is the router core's; the server adds and removes workers through it, logs its events as
// they happen (workerEvent) and drops what it keeps per worker when one is gone. A worker
// removed (DELETE /workers, service discovery) while requests to it are in flight leaves
// routing at once but stays in every view as "draining", with its load, until they finish.

// removalReason says why a worker was removed, for the logs.
func removalReason(source string) string {
	switch source {
	case "api":
		return "removed through the API"
	case "discovery":
		return "its pod left service discovery"
	}
	return "removed (" + source + ")"
}

// RemoveWorker takes a worker out of routing (DELETE /workers, service discovery); source
// ("api", "discovery") is logged. Requests already sent to it finish: until they have, it is
// shown draining. Removing a worker that is draining already does nothing.
func (s *Server) RemoveWorker(u, source string) error {
	_, err := s.remove(u, source)
	return err
}

// remove is RemoveWorker returning the worker as it is after the removal.
func (s *Server) remove(u, source string) (router.WorkerInfo, error) {
	return s.r.RemoveWorker(u, router.Removal{Source: source, Reason: removalReason(source)})
}

// workerEvent logs one step of a worker's lifecycle and, when the worker is gone, drops what
// the server keeps per worker. The router calls it with its lock held, in order: it must not
// call the router.
func (s *Server) workerEvent(ev router.WorkerEvent) {
	u, role := router.RedactURL(ev.URL), ev.Role.String()
	switch {
	case ev.From == router.WorkerAdded || ev.From == router.WorkerDraining && ev.To != router.WorkerGone:
		if s.kv != nil && ev.From == router.WorkerAdded {
			s.kv.workerAdded(ev.URL, ev.Role, ev.DPSize)
		}
		if ev.From == router.WorkerDraining {
			s.log.Info("worker registered again while draining: its in-flight requests finish unshown",
				"worker", u, "role", role, "in_flight", ev.InFlight)
		}
		if ev.Source == "config" {
			s.log.Info("worker registered", "url", u, "role", role, "dp_size", ev.DPSize)
		} else {
			s.log.Info("worker added", "url", u, "role", role, "dp_size", ev.DPSize, "source", ev.Source)
		}
	case ev.To == router.WorkerDraining:
		s.log.Info("worker draining: no new requests; removed once its in-flight requests finish",
			"worker", u, "role", role, "from", string(ev.From), "to", string(ev.To), "reason", ev.Reason, "in_flight", ev.InFlight, "source", ev.Source)
	case ev.To == router.WorkerGone:
		s.workerGone(ev.URL)
		if ev.From == router.WorkerDraining {
			s.log.Info("worker removed: its in-flight requests finished", "worker", u, "role", role, "from", string(ev.From), "reason", ev.Reason)
		} else {
			s.log.Info("worker removed", "worker", u, "role", role, "from", string(ev.From), "reason", ev.Reason, "source", ev.Source)
		}
	case ev.To == router.WorkerHealthy && ev.From == router.WorkerStarting:
		s.log.Info("worker ready: takes traffic", "worker", u, "role", role, "from", string(ev.From), "to", string(ev.To), "reason", ev.Reason)
	case ev.To == router.WorkerHealthy:
		s.log.Info("worker takes traffic again", "worker", u, "role", role, "from", string(ev.From), "to", string(ev.To), "reason", ev.Reason)
	default:
		s.log.Warn("worker stopped taking traffic", "worker", u, "role", role, "from", string(ev.From), "to", string(ev.To), "reason", ev.Reason)
	}
}

// workerGone drops what the server keeps per worker once it is gone for good.
func (s *Server) workerGone(u string) {
	if s.kv != nil {
		s.kv.workerGone(u)
	}
	if s.loads != nil {
		s.loads.forget(u)
	}
	// Its series go with it: discovery churn must not grow /metrics without bound.
	s.metrics.WorkerErrors.DeletePartialMatch(prometheus.Labels{"worker": router.RedactURL(u)})
	s.logMu.Lock()
	delete(s.lastAttemptLog, u)
	s.logMu.Unlock()
}
