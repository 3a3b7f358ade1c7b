package kvindex

// SeqTracker follows the batch sequence numbers of one subscription to one publisher (one
// rank's KV-event stream) and says what to do with each batch: apply it, drop it as a
// replayed duplicate, clear the target first, ask for a replay, mark the target stale or fresh.
// It keeps no events and does no I/O: the driver applies batches to its index, fetches replays
// and keeps its own counters. serve's subscriber (router/kvevents) and the simulator's feed
// (sim/kvevents.go) both drive it, so a gap or a restart is handled by one piece of code.
//
// The rules, after SGLang's publisher (event_publisher.py numbers batches per process with
// itertools.count() and keeps a replay buffer behind a ROUTER socket):
//   - the first batch since the subscription started fixes the sequence: the target is cleared
//     (what the index held is of unknown age) and fresh;
//   - a batch one past the previous is applied;
//   - a batch further ahead is a gap: with a replay endpoint the driver fetches the missing
//     batches and feeds them through [SeqTracker.Replayed]; without one, or when the replay does
//     not reach back, the target goes stale (a missed removal would make it claim blocks the
//     engine evicted) and the batch is applied;
//   - a batch behind the sequence that the last replay delivered already is dropped;
//   - any other batch behind the sequence is a restarted publisher: the target is cleared and
//     fresh, and the new process's earlier batches are replayed when they can be (missing them
//     only under-matches: a new process's first batches can only store blocks);
//   - an applied batch carrying an AllBlocksCleared makes a stale target fresh again (the view
//     is rebuilt from the engine's empty cache).
//
// The zero value is a tracker before its first batch, without a replay endpoint: stale. A
// SeqTracker is not safe for concurrent use: one goroutine owns it (serve: the subscription's;
// the simulator: its event loop).
type SeqTracker struct {
	// Replay says the publisher answers replay requests: a gap (or a restart to a sequence
	// number above 0) then asks for one with [SeqReplay]. Zero: no replay endpoint, a gap makes
	// the target stale. Set it before the first batch.
	Replay bool

	established bool  // a batch fixed the sequence
	next        int64 // the sequence number expected next
	dups        bool  // live batches in [dupFrom, next) came with the last replay already
	dupFrom     int64
	fresh       bool // the target's view is trustworthy

	replaying bool  // between a SeqReplay decision and ReplayDone
	from      int64 // the replay's first sequence number
	restart   bool  // the replay was asked for by a restart, not a gap
	pending   int64 // the live batch that asked for the replay
	cleared   bool  // ... and whether it carries an AllBlocksCleared
}

// SeqOp is what a [SeqDecision] tells the driver to do with a batch.
type SeqOp uint8

const (
	// SeqApply: apply the batch to the target (after Clear and Stale, before Fresh).
	SeqApply SeqOp = iota + 1
	// SeqDrop: drop the batch; the target holds it already (a replay delivered it).
	SeqDrop
	// SeqReplay: fetch the publisher's batches from SeqDecision.From on, feed each through
	// [SeqTracker.Replayed] in order, then call [SeqTracker.ReplayDone] for this batch's fate.
	SeqReplay
	// SeqStop (replayed batches only): the replay does not reach back to the sequence; discard
	// this batch and the rest of the replay.
	SeqStop
)

// SeqDecision is a [SeqTracker]'s answer for one batch. The driver acts in field order: Clear,
// Stale, then Op, then Fresh. Stale and Fresh report changes of the tracker's view (each is
// set only when the view changes), Gap and Restart are events to count.
type SeqDecision struct {
	Op   SeqOp
	From int64 // SeqReplay: the first sequence number to fetch

	// Clear: before anything else, apply an AllBlocksCleared to the target and mark it fresh:
	// the first batch of a subscription, or a restarted publisher.
	Clear bool
	// Restart: the sequence went back, not to a replayed batch: the publisher restarted.
	Restart bool
	// Gap: the batch skipped sequence numbers (set on the live batch's first decision, whatever
	// a replay then recovers).
	Gap bool
	// Stale: before applying, mark the target stale: a gap that no replay recovered.
	Stale bool
	// Fresh: after applying, mark the target fresh: the batch's AllBlocksCleared rebuilt a
	// stale view.
	Fresh bool
}

// Live decides a batch received from the publisher: seq is its sequence number, cleared
// whether it carries an AllBlocksCleared. It panics between a [SeqReplay] decision and
// [SeqTracker.ReplayDone] (a programmer error: the replay belongs to the batch that asked).
func (t *SeqTracker) Live(seq int64, cleared bool) SeqDecision {
	if t.replaying {
		panic("kvindex: SeqTracker.Live during a replay")
	}
	var d SeqDecision
	switch {
	case !t.established:
		t.established, t.next, t.fresh = true, seq, true
		d.Clear = true
	case seq == t.next:
		t.dups = false
	case seq < t.next && t.dups && seq >= t.dupFrom:
		return SeqDecision{Op: SeqDrop}
	case seq < t.next:
		d.Restart, d.Clear = true, true
		t.next, t.dups, t.fresh = 0, false, true
		if seq > 0 && t.Replay {
			return t.askReplay(d, 0, true, seq, cleared)
		}
		t.next = seq
	default: // seq > t.next
		d.Gap = true
		if t.Replay {
			return t.askReplay(d, t.next, false, seq, cleared)
		}
		d.Stale = t.markStale()
		t.next = seq
	}
	return t.apply(d, seq, cleared)
}

// Replayed decides a batch the replay asked for by a [SeqReplay] decision returned, in the
// order the publisher sent them: [SeqApply] for the batch that continues the sequence,
// [SeqDrop] for one already held, [SeqStop] for one beyond it (the publisher's buffer no longer
// holds what is missing). It panics outside a replay.
func (t *SeqTracker) Replayed(seq int64, cleared bool) SeqDecision {
	if !t.replaying {
		panic("kvindex: SeqTracker.Replayed outside a replay")
	}
	switch {
	case seq < t.next:
		return SeqDecision{Op: SeqDrop}
	case seq > t.next:
		return SeqDecision{Op: SeqStop}
	}
	return t.apply(SeqDecision{}, seq, cleared)
}

// ReplayDone ends the replay (whatever it delivered, failed or not) and decides the live batch
// that asked for it: [SeqDrop] when the replay delivered it, else [SeqApply] (with Stale when
// a gap remains). It panics outside a replay.
func (t *SeqTracker) ReplayDone() SeqDecision {
	if !t.replaying {
		panic("kvindex: SeqTracker.ReplayDone outside a replay")
	}
	t.replaying = false
	t.dups, t.dupFrom = true, t.from
	seq := t.pending
	var d SeqDecision
	switch {
	case seq < t.next:
		return SeqDecision{Op: SeqDrop}
	case seq > t.next && !t.restart:
		d.Stale = t.markStale()
	}
	t.next = seq
	return t.apply(d, seq, t.cleared)
}

// Established reports whether a batch has fixed the sequence since the tracker started.
func (t *SeqTracker) Established() bool { return t.established }

// Stale reports whether the target's view is untrustworthy: no batch yet, or a gap no replay
// recovered and no AllBlocksCleared since. Only tests call it (the live subscriber and sim act
// on each SeqDecision instead); it is exported for sim's, which check the index agrees with it.
func (t *SeqTracker) Stale() bool { return !t.fresh }

// Next returns the sequence number expected next (0 before the first batch).
func (t *SeqTracker) Next() int64 { return t.next }

func (t *SeqTracker) askReplay(d SeqDecision, from int64, restart bool, seq int64, cleared bool) SeqDecision {
	t.replaying, t.from, t.restart, t.pending, t.cleared = true, from, restart, seq, cleared
	d.Op, d.From = SeqReplay, from
	return d
}

// markStale makes the view stale and reports whether it was fresh.
func (t *SeqTracker) markStale() bool {
	was := t.fresh
	t.fresh = false
	return was
}

// apply commits batch seq (which continues the sequence) as applied.
func (t *SeqTracker) apply(d SeqDecision, seq int64, cleared bool) SeqDecision {
	d.Op = SeqApply
	if cleared && !t.fresh {
		t.fresh, d.Fresh = true, true
	}
	t.next = seq + 1
	return d
}
