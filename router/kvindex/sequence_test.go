package kvindex

import (
	"encoding/json"
	"os"
	"slices"
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

// seqParityRow is one row of testdata/seqparity.json, the table serve's and the simulator's
// drivers of SeqTracker run too (router/kvevents TestStreamSequenceParity, sim
// TestKVSubSequenceParity); the file's doc says what each field means. replay_fails is not read
// here: the tracker sees what a replay returned, whether the request then failed or not.
type seqParityRow struct {
	Name   string
	Sim    string
	Live   []int64
	Replay []int64 // nil: no replay endpoint
	Clear  []int64
	Want   map[string]seqOutcome // by variant: "replay", "no_replay"
}

type seqOutcome struct {
	Applied []int64
	Stale   bool
	Gaps    int
	Blocks  int
}

// TestSeqTrackerParity runs the parity table through the tracker alone: the reference the
// two drivers are held to. Blocks are named as the drivers name them: live batch i stores
// block i, replayed batch s stores block 100+s.
func TestSeqTrackerParity(t *testing.T) {
	t.Parallel()
	raw, err := os.ReadFile("testdata/seqparity.json")
	require.NoError(t, err)
	var table struct{ Rows []seqParityRow }
	require.NoError(t, json.Unmarshal(raw, &table))
	require.NotEmpty(t, table.Rows)
	names := map[string]bool{}
	for _, row := range table.Rows {
		require.False(t, names[row.Name], "row names are unique: %q", row.Name)
		names[row.Name] = true
		require.NotEmpty(t, row.Sim, "%q: the row says how the simulator's run relates to serve's", row.Name)
		_, withReplay := row.Want["replay"]
		require.Equal(t, row.Replay != nil, withReplay, "%q: a replay outcome iff a replay buffer", row.Name)
		require.Contains(t, row.Want, "no_replay", "%q: every row has the outcome the simulator must give", row.Name)
		for variant, want := range row.Want {
			t.Run(row.Name+"/"+variant, func(t *testing.T) {
				assert.Equal(t, want, trackRow(row, variant == "replay"))
			})
		}
	}
}

// trackRow drives a SeqTracker through row as a subscriber would, with or without the row's
// replay endpoint.
func trackRow(row seqParityRow, replay bool) seqOutcome {
	tr := SeqTracker{Replay: replay}
	var out seqOutcome
	held := map[int]bool{}
	apply := func(seq int64, block int) {
		if slices.Contains(row.Clear, seq) {
			clear(held)
		}
		held[block] = true
		out.Applied = append(out.Applied, seq)
	}
	for i, seq := range row.Live {
		d := tr.Live(seq, slices.Contains(row.Clear, seq))
		if d.Gap {
			out.Gaps++
		}
		if d.Clear {
			clear(held)
		}
		if d.Op == SeqReplay {
			for _, s := range row.Replay {
				if s < d.From {
					continue
				}
				r := tr.Replayed(s, slices.Contains(row.Clear, s))
				if r.Op == SeqStop {
					break
				}
				if r.Op == SeqApply {
					apply(s, 100+int(s))
				}
			}
			d = tr.ReplayDone()
		}
		if d.Op == SeqApply {
			apply(seq, i)
		}
	}
	out.Stale, out.Blocks = tr.Stale(), len(held)
	return out
}
