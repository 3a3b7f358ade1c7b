package server

import (
	"fmt"
	"time"

	"github.com/pdrouter/pdrouter/router"
	"github.com/prometheus/client_golang/prometheus"
)

// A worker removed (DELETE /workers, service discovery) while requests to it are in flight
// leaves routing at once — the router forgets it, so nothing new goes to it — but stays in
// the views (/workers, /get_loads, /readiness, metrics) as "draining", with the load still on
// it, until those requests finish; then it is gone. Both steps are logged at INFO.

// drainingWorker is a removed worker with requests in flight.
type drainingWorker struct {
	w      *router.Worker
	info   router.WorkerInfo // when it was removed
	reason string
	since  time.Time
}

// view is the worker as the views show it now.
func (d *drainingWorker) view() router.WorkerInfo {
	wi := d.info
	wi.State, wi.Healthy, wi.Load = router.WorkerDraining, false, d.w.Load()
	return wi
}

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

// RemoveWorker takes a worker out of routing (DELETE /workers, service discovery). Requests
// already sent to it finish: until they have, it is shown draining (drainingWorkers). Removing
// a worker that is draining already does nothing.
func (s *Server) RemoveWorker(u, source string) error {
	s.regMu.Lock()
	defer s.regMu.Unlock()
	w, info, ok := s.r.Worker(u)
	if !ok && s.drainingWorker(u) != nil {
		return nil
	}
	if err := s.r.RemoveWorker(u); err != nil {
		return err
	}
	reason := removalReason(source)
	if n := w.Load(); n > 0 {
		s.drainMu.Lock()
		s.draining = append(s.draining, &drainingWorker{w: w, info: info, reason: reason, since: time.Now()})
		s.drainMu.Unlock()
		s.log.Info("worker draining: no new requests; removed once its in-flight requests finish",
			"worker", router.RedactURL(u), "role", info.Role.String(), "from", string(info.State), "to", string(router.WorkerDraining),
			"reason", reason, "in_flight", n, "source", source)
		return nil
	}
	s.workerGone(u)
	s.log.Info("worker removed", "worker", router.RedactURL(u), "role", info.Role.String(), "from", string(info.State),
		"reason", reason, "source", source)
	return nil
}

// workerGone drops what the server keeps per worker once it is gone for good.
func (s *Server) workerGone(u string) {
	// Its series go with it: discovery churn must not grow /metrics without bound.
	s.metrics.WorkerErrors.DeletePartialMatch(prometheus.Labels{"worker": router.RedactURL(u)})
	s.logMu.Lock()
	delete(s.lastAttemptLog, u)
	s.logMu.Unlock()
}

// drainingWorker returns the draining worker with url u (or id), or nil.
func (s *Server) drainingWorker(u string) *drainingWorker {
	for _, d := range s.drainingWorkers() {
		if d.info.URL == u || workerID(d.info.URL) == u {
			return d
		}
	}
	return nil
}

// drainingWorkers returns the workers still draining, in removal order, and removes (and
// logs) those whose requests have all finished: every view calls it, so a drained worker is
// never shown, and serve's one-second tick calls it, so the log says when it went.
func (s *Server) drainingWorkers() []*drainingWorker {
	s.drainMu.Lock()
	if len(s.draining) == 0 {
		s.drainMu.Unlock()
		return nil
	}
	var stay, shown, done []*drainingWorker
	for _, d := range s.draining {
		switch _, _, again := s.r.Worker(d.info.URL); {
		case again: // registered again, stopDraining is about to drop it: never shown twice
			stay = append(stay, d)
		case d.w.Load() > 0:
			stay, shown = append(stay, d), append(shown, d)
		default:
			done = append(done, d)
		}
	}
	s.draining = stay
	s.drainMu.Unlock()
	for _, d := range done {
		s.workerGone(d.info.URL)
		s.log.Info("worker removed: its in-flight requests finished", "worker", router.RedactURL(d.info.URL), "role", d.info.Role.String(),
			"from", string(router.WorkerDraining), "reason", fmt.Sprintf("drained in %.1fs after it was %s", time.Since(d.since).Seconds(), d.reason))
	}
	return shown
}

// stopDraining forgets a draining worker whose URL is registered again: the new registration
// is what the views show (the old one's requests still finish, unshown).
func (s *Server) stopDraining(u string) {
	s.drainMu.Lock()
	defer s.drainMu.Unlock()
	for i, d := range s.draining {
		if d.info.URL == u {
			s.draining = append(s.draining[:i:i], s.draining[i+1:]...)
			s.log.Info("worker registered again while draining: its in-flight requests finish unshown",
				"worker", router.RedactURL(u), "role", d.info.Role.String(), "in_flight", d.w.Load())
			return
		}
	}
}

// allWorkers is every worker the views show: the registered ones, then the draining ones.
func (s *Server) allWorkers() []router.WorkerInfo {
	out := s.r.Workers()
	for _, d := range s.drainingWorkers() {
		out = append(out, d.view())
	}
	return out
}

// allTargets is every target the views show: the registered workers', then the draining
// workers' (not healthy: they take no new requests).
func (s *Server) allTargets() []router.TargetInfo {
	out := s.r.Targets()
	for _, d := range s.drainingWorkers() {
		for _, t := range d.w.Targets() {
			rank, _ := t.Rank() // -1 without a rank
			out = append(out, router.TargetInfo{Name: t.Name(), URL: t.URL(), Role: t.Role(), Rank: rank, Load: t.Load()})
		}
	}
	return out
}
