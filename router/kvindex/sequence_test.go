package kvindex

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// seqStep is one call on a SeqTracker and what it must answer.
type seqStep struct {
	call    string // "live", "replayed" or "done" (ReplayDone)
	seq     int64
	cleared bool
	want    SeqDecision
	stale   bool // Stale() after the call
}

func live(seq int64, want SeqDecision, stale bool) seqStep {
	return seqStep{call: "live", seq: seq, want: want, stale: stale}
}

func replayed(seq int64, want SeqDecision, stale bool) seqStep {
	return seqStep{call: "replayed", seq: seq, want: want, stale: stale}
}

func done(want SeqDecision, stale bool) seqStep {
	return seqStep{call: "done", want: want, stale: stale}
}

func withClear(s seqStep) seqStep { s.cleared = true; return s }

var (
	apply    = SeqDecision{Op: SeqApply}
	drop     = SeqDecision{Op: SeqDrop}
	stop     = SeqDecision{Op: SeqStop}
	first    = SeqDecision{Op: SeqApply, Clear: true}
	gapStale = SeqDecision{Op: SeqApply, Gap: true, Stale: true}
)

func replayFrom(from int64) SeqDecision { return SeqDecision{Op: SeqReplay, From: from, Gap: true} }

func TestSeqTrackerDecisions(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name   string
		replay bool
		steps  []seqStep
	}{
		{name: "the first batch fixes the sequence (at any number) and clears the target",
			steps: []seqStep{live(41, first, false), live(42, apply, false)}},
		{name: "gap without replay: stale, applied; a clear later makes it fresh",
			steps: []seqStep{live(0, first, false), live(2, gapStale, true), live(3, apply, true),
				withClear(live(4, SeqDecision{Op: SeqApply, Fresh: true}, false)), live(5, apply, false)}},
		{name: "a second gap while stale is counted but changes nothing else",
			steps: []seqStep{live(0, first, false), live(2, gapStale, true),
				live(4, SeqDecision{Op: SeqApply, Gap: true}, true)}},
		{name: "a clear in the gapped batch itself: stale, then fresh after it",
			steps: []seqStep{live(0, first, false),
				withClear(live(2, SeqDecision{Op: SeqApply, Gap: true, Stale: true, Fresh: true}, false))}},
		{name: "gap with a replay that covers it: the live batch came with the replay", replay: true,
			steps: []seqStep{live(0, first, false), live(3, replayFrom(1), false),
				replayed(1, apply, false), replayed(2, apply, false), replayed(3, apply, false),
				done(drop, false), live(4, apply, false)}},
		{name: "gap with a replay up to the live batch: the live batch applies", replay: true,
			steps: []seqStep{live(0, first, false), live(3, replayFrom(1), false),
				replayed(1, apply, false), replayed(2, apply, false), done(apply, false)}},
		{name: "replay beyond the live batch: later live duplicates dropped until the sequence moves on", replay: true,
			steps: []seqStep{live(0, first, false), live(2, replayFrom(1), false),
				replayed(1, apply, false), replayed(2, apply, false), replayed(3, apply, false),
				done(drop, false), live(3, drop, false), live(4, apply, false),
				live(3, SeqDecision{Op: SeqReplay, From: 0, Clear: true, Restart: true}, false)}},
		{name: "replay that does not reach back: stop, stale", replay: true,
			steps: []seqStep{live(0, first, false), live(4, replayFrom(1), false),
				replayed(3, stop, false), done(SeqDecision{Op: SeqApply, Stale: true}, true), live(5, apply, true)}},
		{name: "a replayed batch the target holds is dropped", replay: true,
			steps: []seqStep{live(0, first, false), live(2, replayFrom(1), false),
				replayed(0, drop, false), replayed(1, apply, false), done(apply, false)}},
		{name: "an empty (or failed) replay: stale", replay: true,
			steps: []seqStep{live(0, first, false), live(2, replayFrom(1), false),
				done(SeqDecision{Op: SeqApply, Stale: true}, true)}},
		{name: "a replayed clear makes a stale target fresh", replay: true,
			steps: []seqStep{live(0, first, false), live(2, replayFrom(1), false),
				done(SeqDecision{Op: SeqApply, Stale: true}, true),
				live(5, replayFrom(3), true), withClear(replayed(3, SeqDecision{Op: SeqApply, Fresh: true}, false)),
				replayed(4, apply, false), replayed(5, apply, false), done(drop, false)}},
		{name: "seq back to 0: restarted publisher, target cleared",
			steps: []seqStep{live(5, first, false), live(6, apply, false),
				live(0, SeqDecision{Op: SeqApply, Clear: true, Restart: true}, false), live(1, apply, false)}},
		{name: "restart while stale makes the target fresh",
			steps: []seqStep{live(0, first, false), live(2, gapStale, true),
				live(0, SeqDecision{Op: SeqApply, Clear: true, Restart: true}, false)}},
		{name: "restart to a later seq without replay: not stale (missing stores only under-match)",
			steps: []seqStep{live(5, first, false), live(6, apply, false),
				live(3, SeqDecision{Op: SeqApply, Clear: true, Restart: true}, false), live(4, apply, false)}},
		{name: "restart to a later seq with replay: the new process's prefix replayed", replay: true,
			steps: []seqStep{live(5, first, false), live(6, apply, false),
				live(2, SeqDecision{Op: SeqReplay, From: 0, Clear: true, Restart: true}, false),
				replayed(0, apply, false), replayed(1, apply, false), done(apply, false), live(3, apply, false)}},
		{name: "restart with a replay that does not reach back: still not stale", replay: true,
			steps: []seqStep{live(5, first, false),
				live(3, SeqDecision{Op: SeqReplay, From: 0, Clear: true, Restart: true}, false),
				replayed(1, stop, false), done(apply, false), live(4, apply, false)}},
		{name: "restart to 0 with replay: nothing to replay", replay: true,
			steps: []seqStep{live(5, first, false), live(0, SeqDecision{Op: SeqApply, Clear: true, Restart: true}, false)}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			tr := SeqTracker{Replay: tc.replay}
			require.True(t, tr.Stale(), "stale before the first batch")
			require.False(t, tr.Established())
			for i, s := range tc.steps {
				var got SeqDecision
				switch s.call {
				case "live":
					got = tr.Live(s.seq, s.cleared)
				case "replayed":
					got = tr.Replayed(s.seq, s.cleared)
				case "done":
					got = tr.ReplayDone()
				}
				require.Equal(t, s.want, got, "step %d: %s %d", i, s.call, s.seq)
				require.Equal(t, s.stale, tr.Stale(), "step %d: Stale() after %s %d", i, s.call, s.seq)
			}
			assert.True(t, tr.Established())
		})
	}
}

func TestSeqTrackerNext(t *testing.T) {
	t.Parallel()
	var tr SeqTracker
	assert.Equal(t, int64(0), tr.Next())
	tr.Live(7, false)
	assert.Equal(t, int64(8), tr.Next())
	tr.Live(10, false)
	assert.Equal(t, int64(11), tr.Next())
}

func TestSeqTrackerMisuse(t *testing.T) {
	t.Parallel()
	var tr SeqTracker
	assert.PanicsWithValue(t, "kvindex: SeqTracker.Replayed outside a replay", func() { tr.Replayed(0, false) })
	assert.PanicsWithValue(t, "kvindex: SeqTracker.ReplayDone outside a replay", func() { tr.ReplayDone() })
	tr = SeqTracker{Replay: true}
	tr.Live(0, false)
	require.Equal(t, SeqReplay, tr.Live(2, false).Op)
	assert.PanicsWithValue(t, "kvindex: SeqTracker.Live during a replay", func() { tr.Live(3, false) })
}
