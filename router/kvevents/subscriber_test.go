package kvevents

import (
	"context"
	"encoding/binary"
	"fmt"
	"runtime"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/go-zeromq/zmq4"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/pdrouter/pdrouter/router/kvindex"
)

// fakeIndex is a minimal model of kvindex.Index's apply semantics (a set of hashes per
// target, a stale flag), so the subscriber is tested on its own.
type fakeIndex struct {
	mu      sync.Mutex
	ids     map[string]kvindex.TargetID
	blocks  map[kvindex.TargetID]map[kvindex.Hash]bool
	stale   map[kvindex.TargetID]bool
	removed []kvindex.TargetID
}

func newFakeIndex() *fakeIndex {
	return &fakeIndex{ids: map[string]kvindex.TargetID{}, blocks: map[kvindex.TargetID]map[kvindex.Hash]bool{},
		stale: map[kvindex.TargetID]bool{}}
}

func (f *fakeIndex) Target(name string) kvindex.TargetID {
	f.mu.Lock()
	defer f.mu.Unlock()
	id, ok := f.ids[name]
	if !ok {
		id = kvindex.TargetID(len(f.ids))
		f.ids[name] = id
	}
	return id
}

func (f *fakeIndex) RemoveTarget(id kvindex.TargetID) {
	f.mu.Lock()
	defer f.mu.Unlock()
	delete(f.blocks, id)
	delete(f.stale, id)
	f.removed = append(f.removed, id)
}

func (f *fakeIndex) Apply(id kvindex.TargetID, evs []kvindex.Event, _ time.Time) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.blocks[id] == nil {
		f.blocks[id] = map[kvindex.Hash]bool{}
	}
	for _, ev := range evs {
		switch ev.Kind {
		case kvindex.BlockStored:
			for _, h := range ev.Hashes {
				f.blocks[id][h] = true
			}
		case kvindex.BlockRemoved:
			for _, h := range ev.Hashes {
				delete(f.blocks[id], h)
			}
		case kvindex.AllBlocksCleared:
			f.blocks[id] = map[kvindex.Hash]bool{}
		}
	}
}

func (f *fakeIndex) SetStale(id kvindex.TargetID, stale bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.stale[id] = stale
}

// held returns the target's hashes, sorted.
func (f *fakeIndex) held(name string) []kvindex.Hash {
	id := f.Target(name)
	f.mu.Lock()
	defer f.mu.Unlock()
	var hs []kvindex.Hash
	for h := range f.blocks[id] {
		hs = append(hs, h)
	}
	slices.Sort(hs)
	return hs
}

func (f *fakeIndex) isStale(name string) bool {
	id := f.Target(name)
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.stale[id]
}

// waitWithin and pollEvery bound require.Eventually's polls (only where no event can tell).
const waitWithin, pollEvery = 10 * time.Second, 2 * time.Millisecond

func stored(hs ...int64) []any {
	l := make([]any, len(hs))
	for i, h := range hs {
		l[i] = h
	}
	return []any{"BlockStored", l, nil, []any{}, 1, nil, "GPU"}
}

func removed(hs ...int64) map[string]any {
	l := make([]any, len(hs))
	for i, h := range hs {
		l[i] = h
	}
	return map[string]any{"type": "BlockRemoved", "block_hashes": l, "medium": "GPU"}
}

var cleared = []any{"AllBlocksCleared"}

// testPub is a Go PUB publishing SGLang-shaped frames, with a ROUTER answering replay
// requests from its buffer as SGLang's does.
type testPub struct {
	t      *testing.T
	pub    zmq4.Socket
	router zmq4.Socket
	topic  string
	addr   string
	mu     sync.Mutex
	buffer map[int64][]byte
	done   chan struct{}
}

func newTestPub(t *testing.T, addr, topic string, replay bool) *testPub {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	p := &testPub{t: t, topic: topic, buffer: map[int64][]byte{}, done: make(chan struct{})}
	p.pub = zmq4.NewPub(ctx, zmq4.WithLogger(discardLog))
	if addr == "" {
		addr = "tcp://127.0.0.1:0"
	}
	require.NoError(t, p.pub.Listen(addr))
	p.addr = "tcp://" + p.pub.Addr().String()
	if replay {
		p.router = zmq4.NewRouter(ctx, zmq4.WithLogger(discardLog))
		require.NoError(t, p.router.Listen("tcp://127.0.0.1:0"))
		go p.serveReplay()
	} else {
		close(p.done)
	}
	t.Cleanup(func() { p.close(); cancel() })
	return p
}

func (p *testPub) replayAddr() string { return "tcp://" + p.router.Addr().String() }

func (p *testPub) close() {
	_ = p.pub.Close()
	if p.router != nil {
		_ = p.router.Close()
	}
	<-p.done
}

func (p *testPub) serveReplay() {
	defer close(p.done)
	for {
		msg, err := p.router.Recv()
		if err != nil {
			return
		}
		if len(msg.Frames) != 3 {
			p.t.Errorf("replay request has %d frames, want [id, \"\", seq]", len(msg.Frames))
			continue
		}
		id, from := msg.Frames[0], int64(binary.BigEndian.Uint64(msg.Frames[2]))
		p.mu.Lock()
		var seqs []int64
		for s := range p.buffer {
			if s >= from {
				seqs = append(seqs, s)
			}
		}
		slices.Sort(seqs)
		var msgs []zmq4.Msg
		for _, s := range seqs {
			msgs = append(msgs, zmq4.NewMsgFrom(id, []byte{}, seqFrame(s), p.buffer[s]))
		}
		p.mu.Unlock()
		msgs = append(msgs, zmq4.NewMsgFrom(id, []byte{}, seqFrame(-1), []byte{}))
		for _, m := range msgs {
			if err := p.router.Send(m); err != nil {
				return
			}
		}
	}
}

// waitSubscribed waits until a subscriber's subscription reached the PUB (a PUB drops what it
// sends before).
func (p *testPub) waitSubscribed() {
	p.t.Helper()
	require.Eventually(p.t, func() bool {
		return slices.Contains(p.pub.(zmq4.Topics).Topics(), p.topic)
	}, waitWithin, pollEvery, "subscription")
}

// publish sends batch seq (and buffers it for replay) unless lost, which only buffers it.
func (p *testPub) publish(seq int64, lost bool, events ...any) {
	p.t.Helper()
	payload := pack(p.t, []any{float64(time.Now().UnixNano()) / 1e9, events, 0})
	p.mu.Lock()
	p.buffer[seq] = payload
	p.mu.Unlock()
	if !lost {
		require.NoError(p.t, p.pub.Send(zmq4.NewMsgFrom([]byte(p.topic), seqFrame(seq), payload)))
	}
}

func fastOpts(reg prometheus.Registerer) Options {
	return Options{Registerer: reg, MinBackoff: 5 * time.Millisecond, MaxBackoff: 50 * time.Millisecond,
		DialTimeout: time.Second, ReplayTimeout: 5 * time.Second}
}

func lastSeq(s *Subscriber, target string) int64 {
	for _, st := range s.Status() {
		if st.Target == target {
			return st.LastSeq
		}
	}
	return -2
}

const target = "http://user:pw@127.0.0.1:30000@0"

func TestSubscriberAppliesBatches(t *testing.T) {
	ix, reg := newFakeIndex(), prometheus.NewPedanticRegistry()
	s := newSubscriber(ix, fastOpts(reg))
	defer s.Close()
	p := newTestPub(t, "", "kv", false)
	require.NoError(t, s.Add(Endpoint{Target: target, Pub: p.addr, Topic: "kv"}))
	p.waitSubscribed()
	assert.True(t, s.Status()[0].Stale, "stale until the first batch")
	assert.True(t, ix.isStale(target))
	assert.Equal(t, 1.0, testutil.ToFloat64(s.m.stale))

	p.publish(0, false, stored(1, 2, 3))
	p.publish(1, false, map[string]any{"type": "BlockStored", "block_hashes": []any{4}, "token_ids": []any{}, "block_size": 1, "extra": true}, removed(2))
	p.publish(2, false, []any{"SomethingNew", 1}, stored(5))
	require.Eventually(t, func() bool { return lastSeq(s, target) == 2 }, waitWithin, pollEvery, "seq 2")

	assert.Equal(t, []kvindex.Hash{1, 3, 4, 5}, ix.held(target))
	assert.False(t, ix.isStale(target))
	st := s.Status()
	require.Len(t, st, 1)
	assert.True(t, st[0].Connected)
	assert.False(t, st[0].Stale)
	assert.Equal(t, uint64(3), st[0].Batches)
	assert.False(t, st[0].LastBatch.IsZero())

	label := "http://***@127.0.0.1:30000@0"
	assert.Equal(t, 5.0, testutil.ToFloat64(s.m.blocks.WithLabelValues(label, "stored")))
	assert.Equal(t, 1.0, testutil.ToFloat64(s.m.blocks.WithLabelValues(label, "removed")))
	assert.Equal(t, 1.0, testutil.ToFloat64(s.m.unknown.WithLabelValues(label)))
	assert.Equal(t, 3.0, testutil.ToFloat64(s.m.batches.WithLabelValues(label)))
	assert.Equal(t, 1.0, testutil.ToFloat64(s.m.connected))
	assert.Equal(t, 0.0, testutil.ToFloat64(s.m.stale))
	n, err := testutil.GatherAndCount(reg, "pdrouter_kv_events_lag_seconds")
	require.NoError(t, err)
	assert.Equal(t, 1, n)
}

func TestSubscriberGapWithoutReplayMarksStale(t *testing.T) {
	ix := newFakeIndex()
	s := newSubscriber(ix, fastOpts(nil))
	defer s.Close()
	p := newTestPub(t, "", "", false)
	require.NoError(t, s.Add(Endpoint{Target: target, Pub: p.addr}))
	p.waitSubscribed()

	p.publish(0, false, stored(1, 2))
	p.publish(1, true, removed(1)) // lost
	p.publish(2, false, stored(3))
	require.Eventually(t, func() bool { return lastSeq(s, target) == 2 }, waitWithin, pollEvery, "seq 2")
	assert.True(t, ix.isStale(target))
	st := s.Status()[0]
	assert.True(t, st.Stale)
	assert.Equal(t, uint64(1), st.Gaps)
	assert.Equal(t, 1.0, testutil.ToFloat64(s.m.stale))

	// Stays stale through ordinary batches; an AllBlocksCleared rebuilds it.
	p.publish(3, false, stored(4))
	require.Eventually(t, func() bool { return lastSeq(s, target) == 3 }, waitWithin, pollEvery, "seq 3")
	assert.True(t, ix.isStale(target))
	p.publish(4, false, cleared, stored(9))
	require.Eventually(t, func() bool { return lastSeq(s, target) == 4 }, waitWithin, pollEvery, "seq 4")
	assert.False(t, ix.isStale(target))
	assert.Equal(t, []kvindex.Hash{9}, ix.held(target))
	assert.Equal(t, 0.0, testutil.ToFloat64(s.m.stale))
}

func TestSubscriberGapWithReplay(t *testing.T) {
	ix := newFakeIndex()
	s := newSubscriber(ix, fastOpts(nil))
	defer s.Close()
	p := newTestPub(t, "", "kv", true)
	require.NoError(t, s.Add(Endpoint{Target: target, Pub: p.addr, Replay: p.replayAddr(), Topic: "kv"}))
	p.waitSubscribed()

	p.publish(0, false, stored(1, 2))
	p.publish(1, true, removed(1), stored(7)) // lost: recovered by replay
	p.publish(2, true, stored(8))             // lost too
	p.publish(3, false, stored(9))
	require.Eventually(t, func() bool { return lastSeq(s, target) == 3 }, waitWithin, pollEvery, "seq 3")
	p.publish(4, false, removed(9))
	require.Eventually(t, func() bool { return lastSeq(s, target) == 4 }, waitWithin, pollEvery, "seq 4")

	assert.Equal(t, []kvindex.Hash{2, 7, 8}, ix.held(target))
	assert.False(t, ix.isStale(target))
	st := s.Status()[0]
	assert.Equal(t, uint64(1), st.Gaps)
	assert.Equal(t, uint64(5), st.Batches) // 0, replayed 1-3, 4; the live 3 was a duplicate
	assert.Equal(t, 1.0, testutil.ToFloat64(s.m.replays.WithLabelValues(redact(target), "ok")))
}

func TestSubscriberPublisherRestart(t *testing.T) {
	ix := newFakeIndex()
	s := newSubscriber(ix, fastOpts(nil))
	defer s.Close()
	p := newTestPub(t, "", "", false)
	require.NoError(t, s.Add(Endpoint{Target: target, Pub: p.addr}))
	p.waitSubscribed()
	p.publish(0, false, stored(1))
	p.publish(1, false, stored(2))
	p.publish(3, false, stored(3)) // gap: stale
	require.Eventually(t, func() bool { return lastSeq(s, target) == 3 }, waitWithin, pollEvery, "seq 3")
	require.True(t, ix.isStale(target))

	// The process restarts on the same port: the connection drops, the subscriber redials,
	// and the new publisher counts from 0 again.
	addr := p.addr
	p.close()
	p2 := newTestPub(t, addr, "", false)
	p2.waitSubscribed()
	p2.publish(0, false, stored(10))
	require.Eventually(t, func() bool { return lastSeq(s, target) == 0 }, waitWithin, pollEvery, "restart seq 0")
	assert.Equal(t, []kvindex.Hash{10}, ix.held(target))
	assert.False(t, ix.isStale(target))
	assert.Equal(t, 1.0, testutil.ToFloat64(s.m.restarts.WithLabelValues(redact(target))))
	assert.GreaterOrEqual(t, testutil.ToFloat64(s.m.reconnects.WithLabelValues(redact(target))), 1.0)
}

func TestSubscriberRemoveStopsGoroutine(t *testing.T) {
	ix := newFakeIndex()
	s := newSubscriber(ix, fastOpts(nil))
	p := newTestPub(t, "", "", false)
	base := runtime.NumGoroutine() // the publisher's own goroutines
	// One target connected, one redialling an address nobody listens on.
	require.NoError(t, s.Add(Endpoint{Target: target, Pub: p.addr}))
	require.NoError(t, s.Add(Endpoint{Target: "http://h:1@1", Pub: "tcp://127.0.0.1:1"}))
	p.waitSubscribed()
	p.publish(0, false, stored(1))
	require.Eventually(t, func() bool { return lastSeq(s, target) == 0 }, waitWithin, pollEvery, "seq 0")
	require.Len(t, s.Status(), 2)

	s.Remove(target)
	s.Remove("http://h:1@1")
	s.Remove("unknown")
	assert.Empty(t, s.Status())
	assert.Len(t, ix.removed, 2)
	assert.Empty(t, ix.held(target))
	require.Eventually(t, func() bool {
		return runtime.NumGoroutine()-1 <= base // -1: the goroutine require.Eventually runs this on
	}, waitWithin, pollEvery, "goroutines back to their level")
	s.Close()
	assert.Error(t, s.Add(Endpoint{Target: target, Pub: p.addr}))
}

func TestSubscriberAddValidates(t *testing.T) {
	t.Parallel()
	s := newSubscriber(newFakeIndex(), Options{})
	defer s.Close()
	assert.ErrorContains(t, s.Add(Endpoint{Pub: "tcp://h:1"}), "no target")
	assert.ErrorContains(t, s.Add(Endpoint{Target: "http://u:p@h:1", Pub: "ipc:///x"}), `http://***@h:1: pub endpoint "ipc:///x"`)
	assert.ErrorContains(t, s.Add(Endpoint{Target: "t", Pub: "tcp://h:1", Replay: "h:2"}), "replay endpoint")
}

// TestStreamSequence drives the sequence state machine directly with a scripted replay.
func TestStreamSequence(t *testing.T) {
	t.Parallel()
	b := func(seq int64, events ...kvindex.Event) kvindex.Batch { return kvindex.Batch{Seq: seq, Events: events} }
	st := func(hs ...kvindex.Hash) kvindex.Event { return kvindex.Event{Kind: kvindex.BlockStored, Hashes: hs} }
	tests := []struct {
		name      string
		replay    map[int64]kvindex.Batch // the publisher's buffer; nil: no replay endpoint
		replayErr error
		batches   []kvindex.Batch
		held      []kvindex.Hash
		stale     bool
	}{
		{name: "first batch fixes the sequence", batches: []kvindex.Batch{b(41, st(1)), b(42, st(2))}, held: []kvindex.Hash{1, 2}},
		{name: "replay buffer too short: stale", replay: map[int64]kvindex.Batch{2: b(2, st(3))},
			batches: []kvindex.Batch{b(0, st(1)), b(3, st(4))}, held: []kvindex.Hash{1, 4}, stale: true},
		{name: "replay fails: stale", replay: map[int64]kvindex.Batch{}, replayErr: fmt.Errorf("boom"),
			batches: []kvindex.Batch{b(0, st(1)), b(2, st(2))}, held: []kvindex.Hash{1, 2}, stale: true},
		{name: "restart to a later seq with replay: new stream's prefix replayed",
			replay:  map[int64]kvindex.Batch{0: b(0, st(20)), 1: b(1, st(21))},
			batches: []kvindex.Batch{b(5, st(1)), b(6, st(2)), b(1, st(21))}, held: []kvindex.Hash{20, 21}},
		{name: "restart to a later seq without replay: not stale (missing stores only under-match)",
			batches: []kvindex.Batch{b(5, st(1)), b(6, st(2)), b(3, st(30))}, held: []kvindex.Hash{30}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			ix := newFakeIndex()
			s := newSubscriber(ix, Options{})
			str := newStream(s, Endpoint{Target: "t", Pub: "tcp://h:1"})
			if tc.replay != nil {
				str.seq.Replay = true
				str.replay = func(_ context.Context, from int64) ([]Message, error) {
					var out []Message
					for seq := from; seq < from+100; seq++ {
						if bb, ok := tc.replay[seq]; ok {
							out = append(out, Message{Batch: bb})
						}
					}
					return out, tc.replayErr
				}
			}
			for _, bb := range tc.batches {
				str.handle(Message{Batch: bb})
			}
			assert.Equal(t, tc.held, ix.held("t"))
			assert.Equal(t, tc.stale, ix.isStale("t"))
			assert.Equal(t, tc.stale, str.status().Stale)
		})
	}
}
