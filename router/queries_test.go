package router

// What only the tests ask of a Router: one worker by URL, a breaker fed directly, whether a
// decision is finished.

// worker returns the worker with url — registered, or else draining — and a snapshot of it.
func (r *Router) worker(url string) (*Worker, WorkerInfo, bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	w := r.lookupLocked(url)
	if w == nil {
		return nil, WorkerInfo{}, false
	}
	return w, infoLocked(w, r.clock.Now()), true
}

// lookupLocked returns the registered worker with url, else the draining one, else nil.
func (r *Router) lookupLocked(url string) *Worker {
	if role, i, ok := r.findLocked(url); ok {
		return r.workers[role][i]
	}
	return r.drainingLocked(url)
}

// recordOutcome feeds an outcome that is not tied to a decision into the breaker of the
// worker with url (tests' shortcut to a breaker state). Unknown URLs are ignored.
func (r *Router) recordOutcome(url string, o Outcome) {
	if o == Cancelled {
		return
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if role, i, ok := r.findLocked(url); ok {
		r.recordLocked(r.workers[role][i], o == Success)
	}
}

// finished reports whether every leg of the decision has been reported done.
func (d *Decision) finished() bool {
	for i := range d.legs {
		if d.legs[i].target != nil && !d.legs[i].done.Load() {
			return false
		}
	}
	return true
}
