package kvevents

import (
	"context"
	"encoding/json"
	"errors"
	"os"
	"slices"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/pdrouter/pdrouter/router/kvindex"
)

// seqParityPath is the KV-event sequence parity table kvindex's SeqTracker test owns; the
// simulator's kvSub runs it too (sim TestKVSubSequenceParity). Its doc says what each field means.
const seqParityPath = "../kvindex/testdata/seqparity.json"

// parityRow is a row of the parity table, as this driver reads it.
type parityRow struct {
	Name        string
	Live        []int64
	Replay      []int64 // nil: no replay endpoint
	ReplayFails bool    `json:"replay_fails"`
	Clear       []int64
	Want        map[string]parityOutcome // by variant: "replay", "no_replay"
}

type parityOutcome struct {
	Applied []int64
	Stale   bool
	Gaps    int
	Blocks  int
}

// recordingIndex is a fakeIndex that notes which batch each applied store came from.
type recordingIndex struct {
	*fakeIndex
	seqOf   map[kvindex.Hash]int64 // block → the sequence number of the batch storing it
	applied []int64
}

func (r *recordingIndex) Apply(id kvindex.TargetID, evs []kvindex.Event, now time.Time) {
	for _, ev := range evs {
		if ev.Kind == kvindex.BlockStored {
			r.applied = append(r.applied, r.seqOf[ev.Hashes[0]])
		}
	}
	r.fakeIndex.Apply(id, evs, now)
}

// TestStreamSequenceParity runs the parity table through serve's stream.handle, with the
// row's replay buffer behind a scripted replay and, for rows with one, without it too.
func TestStreamSequenceParity(t *testing.T) {
	t.Parallel()
	raw, err := os.ReadFile(seqParityPath)
	require.NoError(t, err)
	var table struct{ Rows []parityRow }
	require.NoError(t, json.Unmarshal(raw, &table))
	require.NotEmpty(t, table.Rows)
	for _, row := range table.Rows {
		for variant, want := range row.Want {
			replay := variant == "replay"
			t.Run(row.Name+"/"+variant, func(t *testing.T) {
				t.Parallel()
				ix := &recordingIndex{fakeIndex: newFakeIndex(), seqOf: map[kvindex.Hash]int64{}}
				// Live batch i stores block i, replayed batch s block 100+s (as kvindex's test).
				batch := func(seq int64, block kvindex.Hash) Message {
					ix.seqOf[block] = seq
					var evs []kvindex.Event
					if slices.Contains(row.Clear, seq) {
						evs = append(evs, kvindex.Event{Kind: kvindex.AllBlocksCleared})
					}
					evs = append(evs, kvindex.Event{Kind: kvindex.BlockStored, Hashes: []kvindex.Hash{block}})
					return Message{Batch: kvindex.Batch{Seq: seq, Events: evs}}
				}
				str := newStream(newSubscriber(ix, Options{}), Endpoint{Target: "t", Pub: "tcp://h:1"})
				if replay {
					str.seq.Replay = true
					str.replay = func(_ context.Context, from int64) ([]Message, error) {
						var out []Message
						for _, s := range row.Replay {
							if s >= from {
								out = append(out, batch(s, kvindex.Hash(100+s)))
							}
						}
						if row.ReplayFails {
							return out, errors.New("scripted replay failure")
						}
						return out, nil
					}
				}
				for i, seq := range row.Live {
					str.handle(batch(seq, kvindex.Hash(i)))
				}
				st := str.status()
				got := parityOutcome{Applied: ix.applied, Stale: st.Stale, Gaps: int(st.Gaps), Blocks: len(ix.held("t"))}
				assert.Equal(t, want, got)
				assert.Equal(t, st.Stale, ix.isStale("t"), "the index is told what Status says")
			})
		}
	}
}
