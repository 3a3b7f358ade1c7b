package router

import (
	"fmt"
	"time"
)

// A worker's lifecycle lives here, in one place: added (AddWorker) → starting →
// healthy/unhealthy/breaker_open (health probes, request outcomes) → draining (RemoveWorker
// while requests to it are in flight) → gone (its last request done, or removed idle). Every
// step is a WorkerEvent handed to the driver's OnWorkerEvent; every view (Workers, Targets,
// Worker) reads the one registry, draining workers included.

// OnWorkerEvent sets fn to receive every worker lifecycle event, in order, as it happens.
// fn is called with the router's lock held: it must be quick (log, count) and must not call
// the Router. Set it once, before workers are added; nil stops the events.
func (r *Router) OnWorkerEvent(fn func(WorkerEvent)) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.onEvent = fn
}

// emitLocked hands ev to the listener, if any (r.mu held).
func (r *Router) emitLocked(ev WorkerEvent) {
	if r.onEvent != nil {
		r.onEvent(ev)
	}
}

// noteLocked emits w's state change since before, if any (r.mu held).
func (r *Router) noteLocked(w *Worker, before WorkerState, now time.Time, reason string) {
	if after := workerState(w, now); after != before {
		if after == WorkerHealthy {
			w.joined = now
		}
		w.reason = reason
		r.emitLocked(WorkerEvent{URL: w.url, Role: w.role, From: before, To: after, Reason: reason})
	}
}

// AddWorker registers a worker and its targets at the end of its role's order. Under
// --dp-aware it creates DPSize targets "url@0"…; otherwise one target named by the URL.
// A worker with the URL of a draining one replaces it in the views; the old registration's
// requests still finish (and balance its own counters). The registration is an event from
// WorkerAdded (or WorkerDraining, for that replacement) to starting or healthy.
func (r *Router) AddWorker(s WorkerSpec) error {
	if err := CheckWorkerURL(s.URL); err != nil {
		return fmt.Errorf("router: add worker: %w", err)
	}
	if s.Role >= numRoles || r.policies[s.Role] == nil {
		mode := "regular"
		if r.cfg.PDDisaggregation {
			mode = "PD"
		}
		return fmt.Errorf("router: add worker %s: role %s is not served in %s mode", RedactURL(s.URL), s.Role, mode)
	}
	if s.BootstrapPort != nil && s.Role != Prefill {
		return fmt.Errorf("router: add worker %s: bootstrap port is only for prefill workers", RedactURL(s.URL))
	}
	health := NewHealth(r.cfg.Health())
	if s.Starting {
		health = NewStartingHealth(r.cfg.Health())
	}
	w := &Worker{url: s.URL, role: s.Role, health: health, breaker: NewBreaker(r.cfg.Breaker())}
	if s.BootstrapPort != nil {
		p := *s.BootstrapPort
		w.bootstrapPort = &p
	}
	if r.cfg.DPAware {
		if s.DPSize < 1 {
			return fmt.Errorf("router: add worker %s: --dp-aware needs its dp_size (got %d)", RedactURL(s.URL), s.DPSize)
		}
		w.dpSize = s.DPSize
		for rank := range s.DPSize {
			w.targets = append(w.targets, &Target{name: TargetName(s.URL, rank), worker: w, rank: rank})
		}
	} else {
		w.targets = []*Target{{name: s.URL, worker: w, rank: -1}}
	}

	r.mu.Lock()
	defer r.mu.Unlock()
	if _, _, ok := r.findLocked(s.URL); ok {
		return fmt.Errorf("router: add worker %s: already registered", RedactURL(s.URL))
	}
	ev := WorkerEvent{URL: s.URL, Role: s.Role, From: WorkerAdded, Reason: "registered", Source: s.Source, DPSize: w.dpSize}
	if old := r.drainingLocked(s.URL); old != nil {
		r.stopDrainingLocked(old)
		ev.From, ev.InFlight, ev.Reason = WorkerDraining, old.Load(), "registered again while draining"
	}
	r.workers[s.Role] = append(r.workers[s.Role], w)
	r.rebuildLocked(s.Role)
	if a, ok := r.policies[s.Role].(targetAdder); ok {
		for _, t := range w.targets {
			a.AddTarget(t)
		}
	}
	ev.To = workerState(w, r.clock.Now())
	r.emitLocked(ev)
	return nil
}

// RemoveWorker takes the worker with url out of routing at once and drops its tenants from
// the policy's tree. With requests in flight it stays in the views as draining until the
// last of them is done (Decision.Done), then it is gone; idle, it is gone now. It returns
// the worker as it is after the removal (State WorkerDraining or WorkerGone). Removing a
// draining worker again changes nothing.
func (r *Router) RemoveWorker(url string, by Removal) (WorkerInfo, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	now := r.clock.Now()
	role, i, ok := r.findLocked(url)
	if !ok {
		if w := r.drainingLocked(url); w != nil {
			return infoLocked(w, now), nil
		}
		return WorkerInfo{}, fmt.Errorf("router: remove worker %s: not registered", RedactURL(url))
	}
	w := r.workers[role][i]
	before := workerState(w, now)
	r.workers[role] = append(r.workers[role][:i:i], r.workers[role][i+1:]...)
	r.rebuildLocked(role)
	if rm, ok := r.policies[role].(targetRemover); ok {
		for _, t := range w.targets {
			rm.RemoveTarget(t.name)
		}
	}
	// removed before the load is read: a Done racing with this either finished its request
	// before (the load read here is 0) or takes r.mu after and ends the drain itself.
	w.removed.Store(true)
	ev := WorkerEvent{URL: url, Role: role, From: before, To: WorkerGone, Reason: by.Reason, Source: by.Source}
	if n := w.Load(); n > 0 {
		w.draining, w.drainSince, w.removal = true, now, by
		r.draining = append(r.draining, w)
		ev.To, ev.InFlight = WorkerDraining, n
	}
	r.emitLocked(ev)
	return infoLocked(w, now), nil
}

// drainedLocked ends w's drain once its last request is done: w is gone (r.mu held).
func (r *Router) drainedLocked(w *Worker) {
	if !w.draining || w.Load() > 0 {
		return
	}
	r.stopDrainingLocked(w)
	now := r.clock.Now()
	r.emitLocked(WorkerEvent{URL: w.url, Role: w.role, From: WorkerDraining, To: WorkerGone, Source: w.removal.Source,
		Reason: fmt.Sprintf("drained in %.1fs after it was %s", now.Sub(w.drainSince).Seconds(), w.removal.Reason)})
}

// stopDrainingLocked takes w out of the draining list (r.mu held).
func (r *Router) stopDrainingLocked(w *Worker) {
	w.draining = false
	for i, d := range r.draining {
		if d == w {
			r.draining = append(r.draining[:i:i], r.draining[i+1:]...)
			return
		}
	}
}

// drainingLocked returns the draining worker with url, or nil (r.mu held).
func (r *Router) drainingLocked(url string) *Worker {
	for _, w := range r.draining {
		if w.url == url {
			return w
		}
	}
	return nil
}
