package router

// PDAttempt is the state machine of one PD attempt's two legs (SPEC §1.4 steps 4–8): the one
// place where serve and the simulator decide, from what each leg did, which worker's breaker
// each leg charges, whether the other leg must be cancelled, whether decode's head may go to
// the client, and how a failed attempt is named, avoided and retried.
//
// Leg events in: [PDAttempt.Answered] (prefill's whole reply, or decode's first event or whole
// body, arrived), [PDAttempt.Failed] (a leg failed on its own account: an error status, an
// error event before the first token, a transport error that the router did not cause) and
// [PDAttempt.Commit] (decode's head is about to go to the client). Out: Failed's verdict
// (cancel the peer or not), Commit's, [PDAttempt.Outcome] (what a leg that did not complete
// reports to [Decision.Done]) and [PDAttempt.Failure] (how the attempt failed).
//
// The first leg to fail before the commit decides who is charged ([PDBlame]): a leg that gave
// up waiting for a peer still silent charges the peer, which then reports Failure whatever
// ended it. A leg that completes (prefill's reply read whole; decode's relay at its end) is
// reported by the driver itself: Success, or after the commit what the relay saw.
//
// The zero value is an attempt with both legs open. A PDAttempt is not safe for concurrent
// use: serve's two leg goroutines share it under a mutex, the simulator drives it from its
// event loop.
type PDAttempt struct {
	answered  [numRoles]bool    // the leg answered (Answered)
	failed    [numRoles]bool    // the leg failed on its own account (Failed)
	own       [numRoles]Outcome // a failed leg's own outcome (PDBlame's first result)
	charged   [numRoles]bool    // the peer's failure was this leg's doing: it reports Failure
	failure   PDFailureReport   // the first failure before the commit, when hasFailed
	hasFailed bool              // failure is set
	committed bool              // decode's head went to the client: a failure no longer ends the attempt
}

// PDFailureReport is how a PD attempt failed before its commit: what serve answers, counts and
// avoids, and what the simulator records, alike.
type PDFailureReport struct {
	// Failed is the leg whose failure ended the attempt: the first to fail.
	Failed Role
	// Blamed is the leg whose worker is at fault: Failed, or its peer when Failed gave up
	// waiting for a peer still silent (PDBlame). The retry avoids Blamed's worker and the
	// error names it.
	Blamed Role
	// Attempt is how Failed failed, for [Retrier.Next] (Started is the driver's to set).
	Attempt Attempt
}

// peerOf returns the other leg of a PD pair.
func peerOf(role Role) Role {
	if role == Prefill {
		return Decode
	}
	return Prefill
}

// Answered records that role's leg answered: prefill's whole reply arrived, or decode's first
// event (a stream) or whole body. From then on a failure of the peer is not this leg's silence.
func (a *PDAttempt) Answered(role Role) { a.answered[role] = true }

// Failed records that role's leg failed on its own account, as attempt says, and reports
// whether the driver must cancel the peer leg: when this is the first failure and decode's
// head has not gone to the client. A leg that ends because the router cancelled it is not
// Failed: its Outcome says what it reports. A second Failed of the same leg is ignored.
func (a *PDAttempt) Failed(role Role, attempt Attempt) (cancelPeer bool) {
	if a.failed[role] {
		return false
	}
	a.failed[role] = true
	peer := peerOf(role)
	mine, theirs := PDBlame(PDFailure{Role: role, Attempt: attempt, PeerOpen: !a.answered[peer] && !a.failed[peer]})
	a.own[role] = mine
	if a.hasFailed || a.committed {
		return false // the attempt's fate is decided already
	}
	a.hasFailed = true
	a.charged[peer] = theirs == Failure
	a.failure = PDFailureReport{Failed: role, Blamed: role, Attempt: attempt}
	if a.charged[peer] {
		a.failure.Blamed = peer
	}
	return true
}

// Commit reports whether decode's head may go to the client, and if so records that it has:
// true unless a leg failed first. After it, a leg's failure no longer ends the attempt.
func (a *PDAttempt) Commit() bool {
	if a.hasFailed {
		return false
	}
	a.committed = true
	return true
}

// Committed reports whether Commit succeeded.
func (a *PDAttempt) Committed() bool { return a.committed }

// Outcome is what role's leg reports to [Decision.Done] when it ended without completing:
// Failure when the peer's failure was its doing, its own outcome when it failed, and Cancelled
// when the router cancelled it (the peer failed first, the client went away, the request
// timed out).
func (a *PDAttempt) Outcome(role Role) Outcome {
	switch {
	case a.charged[role]:
		return Failure
	case a.failed[role]:
		return a.own[role]
	}
	return Cancelled
}

// Failure returns how the attempt failed; ok is false while no leg failed before the commit.
func (a *PDAttempt) Failure() (f PDFailureReport, ok bool) { return a.failure, a.hasFailed }
