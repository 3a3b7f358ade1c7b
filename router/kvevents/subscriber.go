package kvevents

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"log"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/go-zeromq/zmq4"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/pdrouter/pdrouter/router/kvindex"
)

// Options parameterise a [Subscriber]. Zero values take the defaults stated per field.
type Options struct {
	// Registerer receives the pdrouter_kv_events_* metrics; nil registers none.
	Registerer prometheus.Registerer
	// Logger receives structured logs naming the target and endpoint; nil discards them.
	Logger *slog.Logger
	// Now is the clock that stamps applied batches and the event lag; nil is time.Now.
	Now func() time.Time
	// DialTimeout bounds one TCP dial (PUB or replay). Default 2 s.
	DialTimeout time.Duration
	// MinBackoff and MaxBackoff bound the wait between dials after a failed dial or a lost
	// subscription; it doubles from MinBackoff up to MaxBackoff. Defaults 100 ms and 5 s.
	MinBackoff, MaxBackoff time.Duration
	// ReplayTimeout bounds one replay request, from dial to end marker. Default 5 s.
	ReplayTimeout time.Duration
}

func (o *Options) fill() {
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	if o.DialTimeout <= 0 {
		o.DialTimeout = 2 * time.Second
	}
	if o.MinBackoff <= 0 {
		o.MinBackoff = 100 * time.Millisecond
	}
	if o.MaxBackoff < o.MinBackoff {
		o.MaxBackoff = max(5*time.Second, o.MinBackoff)
	}
	if o.ReplayTimeout <= 0 {
		o.ReplayTimeout = 5 * time.Second
	}
}

// indexer is what the subscriber needs of a [kvindex.Index] (a seam for tests).
type indexer interface {
	Target(name string) kvindex.TargetID
	RemoveTarget(id kvindex.TargetID)
	Apply(id kvindex.TargetID, evs []kvindex.Event, now time.Time)
	SetStale(id kvindex.TargetID, stale bool)
}

var _ indexer = (*kvindex.Index)(nil)

// Subscriber keeps an index fed from SGLang's KV-event publishers: one SUB socket per
// [Endpoint], each in its own goroutine, redialled with backoff. Its methods are safe for
// concurrent use.
type Subscriber struct {
	ix   indexer
	opts Options
	m    *metrics

	mu     sync.Mutex // protects subs, closed
	subs   map[string]*stream
	closed bool
}

// New returns a subscriber feeding ix. It subscribes to nothing until [Subscriber.Add].
func New(ix *kvindex.Index, opts Options) *Subscriber { return newSubscriber(ix, opts) }

func newSubscriber(ix indexer, opts Options) *Subscriber {
	opts.fill()
	s := &Subscriber{ix: ix, opts: opts, m: newMetrics(opts.Registerer), subs: make(map[string]*stream)}
	if opts.Registerer != nil {
		opts.Registerer.MustRegister(indexCollector{s})
	}
	return s
}

// Add subscribes to ep's publisher for ep.Target. The target is stale until the first batch
// arrives; that batch fixes the sequence, clears whatever the index held for the target and
// makes it fresh. Adding a target already subscribed to the same endpoint does nothing; to
// another endpoint, it replaces the subscription.
func (s *Subscriber) Add(ep Endpoint) error {
	if ep.Target == "" {
		return errors.New("kvevents: endpoint has no target")
	}
	if !strings.HasPrefix(ep.Pub, "tcp://") {
		return fmt.Errorf("kvevents: %s: pub endpoint %q is not tcp://host:port", redact(ep.Target), ep.Pub)
	}
	if ep.Replay != "" && !strings.HasPrefix(ep.Replay, "tcp://") {
		return fmt.Errorf("kvevents: %s: replay endpoint %q is not tcp://host:port", redact(ep.Target), ep.Replay)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return errors.New("kvevents: subscriber is closed")
	}
	st := newStream(s, ep)
	if old, ok := s.subs[ep.Target]; ok {
		if old.ep == ep {
			st.cancel()
			return nil
		}
		old.stop()
	}
	// Until its first batch a subscription knows nothing of the target: stale (match 0).
	s.ix.SetStale(st.id, true)
	s.m.stale.Inc()
	s.m.init(st.label)
	s.subs[ep.Target] = st
	go st.run()
	return nil
}

// Remove ends ep.Target's subscription, waits for its goroutine to finish, and forgets the
// target's blocks in the index (nothing keeps them true any longer). Unknown targets are
// ignored.
func (s *Subscriber) Remove(target string) {
	s.mu.Lock()
	st, ok := s.subs[target]
	delete(s.subs, target)
	s.mu.Unlock()
	if !ok {
		return
	}
	st.stop()
	s.ix.RemoveTarget(st.id)
	s.m.forget(target)
}

// Close ends every subscription and waits for their goroutines. The index keeps its blocks.
func (s *Subscriber) Close() {
	s.mu.Lock()
	s.closed = true
	subs := s.subs
	s.subs = map[string]*stream{}
	s.mu.Unlock()
	for _, st := range subs {
		st.stop()
	}
}

// Status is one subscription's state, for /readiness and debugging.
type Status struct {
	Target    string
	Pub       string
	Replay    string // "" without a replay endpoint
	Connected bool   // the SUB socket is connected to the publisher
	Stale     bool   // the index view is untrustworthy: no batch yet, or a gap without replay
	LastSeq   int64  // the last applied batch's sequence number, -1 before the first
	LastBatch time.Time
	Batches   uint64 // batches applied
	Gaps      uint64 // sequence gaps seen
	LastError string // the last dial, receive or decode error, "" for none
}

// Status returns every subscription's state, sorted by target.
func (s *Subscriber) Status() []Status {
	s.mu.Lock()
	out := make([]Status, 0, len(s.subs))
	for _, st := range s.subs {
		out = append(out, st.status())
	}
	s.mu.Unlock()
	slices.SortFunc(out, func(a, b Status) int { return strings.Compare(a.Target, b.Target) })
	return out
}

// stream is one subscription. Its sequence state is owned by its goroutine; st, the copy
// Status reads, is guarded by mu.
type stream struct {
	s      *Subscriber
	ep     Endpoint
	id     kvindex.TargetID
	log    *slog.Logger
	label  string // redacted target, the metrics label
	cancel context.CancelFunc
	ctx    context.Context
	done   chan struct{}

	// replay fetches the batches from a sequence number up to the publisher's latest; nil
	// without a replay endpoint (then seq.Replay is false). A field so tests can drive the
	// sequence handling directly.
	replay func(ctx context.Context, from int64) ([]Message, error)

	// Owned by the stream's goroutine.
	seq        kvindex.SeqTracker        // what to do with each batch
	stale      bool                      // what the index, the gauge and st were last told
	digests    map[kvindex.Hash][32]byte // full digests of stored blocks verified (hash self-check), bounded
	mismatched bool                      // a hash mismatch was logged already

	mu sync.Mutex // protects st
	st Status
}

func newStream(s *Subscriber, ep Endpoint) *stream {
	ctx, cancel := context.WithCancel(context.Background())
	st := &stream{s: s, ep: ep, id: s.ix.Target(ep.Target), label: redact(ep.Target), ctx: ctx, cancel: cancel,
		done: make(chan struct{}), stale: true,
		log: s.opts.Logger.With("target", redact(ep.Target), "endpoint", ep.Pub, "rank", ep.Rank),
		st:  Status{Target: ep.Target, Pub: ep.Pub, Replay: ep.Replay, LastSeq: -1, Stale: true}}
	if ep.Replay != "" {
		st.replay, st.seq.Replay = st.requestReplay, true
	}
	return st
}

func (st *stream) status() Status {
	st.mu.Lock()
	defer st.mu.Unlock()
	return st.st
}

func (st *stream) update(f func(*Status)) {
	st.mu.Lock()
	f(&st.st)
	st.mu.Unlock()
}

// stop cancels the stream and waits for its goroutine; its stale mark leaves the gauge.
func (st *stream) stop() {
	st.cancel()
	<-st.done
	if st.stale {
		st.s.m.stale.Dec()
	}
}

var discardLog = log.New(io.Discard, "", 0)

// run dials the publisher, reads until the connection fails, and dials again after a backoff,
// until the stream is stopped. zmq4's own reconnect is off: this loop owns the backoff and
// every wait ends with the context.
func (st *stream) run() {
	defer close(st.done)
	opts := st.s.opts
	backoff := opts.MinBackoff
	for st.ctx.Err() == nil {
		sock := zmq4.NewSub(st.ctx, zmq4.WithDialerMaxRetries(0), zmq4.WithDialerTimeout(opts.DialTimeout), zmq4.WithLogger(discardLog))
		err := sock.SetOption(zmq4.OptionSubscribe, st.ep.Topic)
		if err == nil {
			err = sock.Dial(st.ep.Pub)
		}
		if err == nil {
			st.log.Info("kv events subscribed", "topic", st.ep.Topic)
			st.setConnected(true)
			backoff = opts.MinBackoff
			err = st.read(sock)
			st.setConnected(false)
		}
		_ = sock.Close()
		if st.ctx.Err() != nil {
			return
		}
		st.s.m.reconnects.WithLabelValues(st.label).Inc()
		st.update(func(s *Status) { s.LastError = err.Error() })
		st.log.Warn("kv events subscription lost; redialling", "err", err, "backoff", backoff)
		t := time.NewTimer(backoff)
		select {
		case <-st.ctx.Done():
			t.Stop()
			return
		case <-t.C:
		}
		backoff = min(2*backoff, opts.MaxBackoff)
	}
}

func (st *stream) setConnected(c bool) {
	if c {
		st.s.m.connected.Inc()
	} else {
		st.s.m.connected.Dec()
	}
	st.update(func(s *Status) { s.Connected = c })
}

// read receives until the socket fails or the stream is stopped.
func (st *stream) read(sock zmq4.Socket) error {
	for {
		msg, err := sock.Recv()
		if err != nil {
			return fmt.Errorf("receive: %w", err)
		}
		st.onFrames(msg.Frames)
	}
}

func (st *stream) onFrames(frames [][]byte) {
	m, err := Decode(frames)
	if err != nil {
		// The batch is lost: the next one shows a gap, handled as any other.
		st.s.m.decodeErrors.WithLabelValues(st.label).Inc()
		st.update(func(s *Status) { s.LastError = err.Error() })
		st.log.Warn("kv events: undecodable message", "err", err)
		return
	}
	if m.End || !strings.HasPrefix(m.Topic, st.ep.Topic) {
		return
	}
	st.handle(m)
}

// handle applies a live batch as the stream's [kvindex.SeqTracker] decides: the first batch
// since Add fixes the sequence; a gap is replayed when the publisher has a replay socket, else
// the target goes stale; a batch behind the sequence, not a replayed duplicate, is a restarted
// publisher (its seq restarts at 0: sglang event_publisher.py numbers batches with
// itertools.count() per process). The replay's I/O is here; the tracker only asks for it.
func (st *stream) handle(m Message) {
	b := m.Batch
	expected := st.seq.Next()
	d := st.seq.Live(b.Seq, hasClear(b.Events))
	if d.Restart {
		st.s.m.restarts.WithLabelValues(st.label).Inc()
		st.log.Warn("kv events: publisher restarted (seq went back); clearing the target", "seq", b.Seq, "expected", expected)
	}
	if d.Gap {
		st.s.m.gaps.WithLabelValues(st.label).Inc()
		st.update(func(s *Status) { s.Gaps++ })
		st.log.Warn("kv events: sequence gap", "seq", b.Seq, "expected", expected, "replay", st.seq.Replay)
	}
	if d.Clear {
		// A fresh subscription or a new publisher process: the view is rebuilt from here on
		// (kvindex.Index.SetStale).
		st.s.ix.Apply(st.id, []kvindex.Event{{Kind: kvindex.AllBlocksCleared}}, st.s.opts.Now())
		st.setStale(false)
	}
	missing := expected
	if d.Op == kvindex.SeqReplay {
		d, missing = st.fill(d.From)
	}
	if d.Stale {
		// Missed removals would make the view claim blocks the engine evicted.
		st.log.Warn("kv events: gap not recovered; target stale until its cache is rebuilt", "missing_from", missing, "seq", b.Seq)
		st.setStale(true)
	}
	if d.Op == kvindex.SeqApply {
		st.apply(m, d.Fresh)
	}
}

// fill replays from `from`, applying the batches the tracker takes (those that continue the
// sequence; it stops at one beyond it: the publisher's buffer no longer holds what is
// missing). It returns the tracker's decision on the live batch that asked for the replay and
// the first sequence number still missing.
func (st *stream) fill(from int64) (kvindex.SeqDecision, int64) {
	bs, err := st.replay(st.ctx, from)
	result := "ok"
	if err != nil {
		result = "failed"
		st.update(func(s *Status) { s.LastError = err.Error() })
		st.log.Warn("kv events: replay failed", "from", from, "err", err, "replay_endpoint", st.ep.Replay)
	}
	for _, m := range bs {
		d := st.seq.Replayed(m.Batch.Seq, hasClear(m.Batch.Events))
		if d.Op == kvindex.SeqStop {
			result = "failed"
			st.log.Warn("kv events: replay does not reach back far enough", "from", from, "first", m.Batch.Seq)
			break
		}
		if d.Op == kvindex.SeqApply {
			st.apply(m, d.Fresh)
		}
	}
	st.s.m.replays.WithLabelValues(st.label, result).Inc()
	missing := st.seq.Next()
	return st.seq.ReplayDone(), missing
}

func hasClear(evs []kvindex.Event) bool {
	return slices.ContainsFunc(evs, func(ev kvindex.Event) bool { return ev.Kind == kvindex.AllBlocksCleared })
}

func (st *stream) setStale(stale bool) {
	if stale == st.stale {
		return
	}
	st.stale = stale
	st.s.ix.SetStale(st.id, stale)
	if stale {
		st.s.m.stale.Inc()
	} else {
		st.s.m.stale.Dec()
		st.log.Info("kv events: target fresh again")
	}
	st.update(func(s *Status) { s.Stale = stale })
}

// apply applies msg's batch (one the tracker took) to the index; fresh: the batch's
// AllBlocksCleared made the target fresh again (the engine's cache was flushed and the view
// rebuilt from it).
func (st *stream) apply(msg Message, fresh bool) {
	b := msg.Batch
	now := st.s.opts.Now()
	m := st.s.m
	if msg.Skipped > 0 {
		m.unknown.WithLabelValues(st.label).Add(float64(msg.Skipped))
	}
	for _, ev := range b.Events {
		switch ev.Kind {
		case kvindex.BlockStored:
			m.events.WithLabelValues(st.label, "stored").Inc()
			m.blocks.WithLabelValues(st.label, "stored").Add(float64(len(ev.Hashes)))
			st.selfCheck(ev)
		case kvindex.BlockRemoved:
			m.events.WithLabelValues(st.label, "removed").Inc()
			m.blocks.WithLabelValues(st.label, "removed").Add(float64(len(ev.Hashes)))
			for _, h := range ev.Hashes {
				delete(st.digests, h)
			}
		case kvindex.AllBlocksCleared:
			m.events.WithLabelValues(st.label, "cleared").Inc()
			clear(st.digests)
		}
	}
	if len(b.Events) > 0 {
		st.s.ix.Apply(st.id, b.Events, now)
	}
	if fresh {
		st.setStale(false)
	}
	m.batches.WithLabelValues(st.label).Inc()
	if b.TS > 0 {
		m.lag.Observe(now.Sub(time.Unix(0, int64(b.TS*1e9))).Seconds())
	}
	st.update(func(s *Status) {
		s.LastSeq, s.LastBatch = b.Seq, now
		s.Batches++
	})
}

// maxDigests bounds the full digests a stream keeps for the hash self-check (32 bytes each).
const maxDigests = 1 << 16

// selfCheck recomputes a stored event's block hashes from its token ids when the chain can be
// continued: a chain's first block (no parent: the unsalted seed, or the salt's), or a parent
// whose full digest an earlier check kept (an event carries only its parent's truncated hash,
// kvindex.VerifyStored). Results are counted; the first mismatch is logged.
func (st *stream) selfCheck(ev kvindex.Event) {
	if len(ev.Tokens) == 0 || ev.BlockSize < 1 || len(ev.Hashes) == 0 {
		return
	}
	var prev *[32]byte
	switch {
	case !ev.HasParent && ev.CacheSalt != "":
		seed := kvindex.SaltSeed(ev.CacheSalt)
		prev = &seed
	case ev.HasParent:
		d, ok := st.digests[ev.Parent]
		if !ok {
			return // the parent's full digest is unknown: cannot continue its chain
		}
		prev = &d
	}
	bad, last := kvindex.VerifyStored(prev, ev)
	m := st.s.m
	if ok := len(ev.Hashes) - bad; ok > 0 {
		m.hashChecks.WithLabelValues(st.label, "ok").Add(float64(ok))
	}
	if bad > 0 {
		m.hashChecks.WithLabelValues(st.label, "mismatch").Add(float64(bad))
		if !st.mismatched {
			st.mismatched = true
			st.log.Warn("kv events: a stored block's hash differs from the router's computation of it: the worker hashes blocks differently (SGLang version, page size, salt or LoRA), so precise routing will not match it",
				"blocks", len(ev.Hashes), "mismatches", bad, "block_size", ev.BlockSize)
		}
		return
	}
	if st.digests == nil || len(st.digests) >= maxDigests {
		st.digests = make(map[kvindex.Hash][32]byte)
	}
	st.digests[ev.Hashes[len(ev.Hashes)-1]] = last
}

// requestReplay asks the publisher's ROUTER for the batches from `from` on. SGLang reads
// [identity, "", start_seq (8 bytes big-endian)] and answers [identity, "", seq, payload] per
// buffered batch with seq >= start_seq, then [identity, "", -1, ""]
// (event_publisher.py ZmqEventPublisher._service_replay). A DEALER sends the empty delimiter
// itself; a REQ would add it but takes only one reply, and SGLang streams many.
func (st *stream) requestReplay(ctx context.Context, from int64) ([]Message, error) {
	opts := st.s.opts
	ctx, cancel := context.WithTimeout(ctx, opts.ReplayTimeout)
	defer cancel()
	d := zmq4.NewDealer(ctx, zmq4.WithDialerMaxRetries(0), zmq4.WithDialerTimeout(opts.DialTimeout),
		zmq4.WithTimeout(opts.ReplayTimeout), zmq4.WithLogger(discardLog))
	defer d.Close()
	if err := d.Dial(st.ep.Replay); err != nil {
		return nil, fmt.Errorf("replay dial: %w", err)
	}
	if err := d.Send(zmq4.NewMsgFrom([]byte{}, binary.BigEndian.AppendUint64(nil, uint64(from)))); err != nil {
		return nil, fmt.Errorf("replay request: %w", err)
	}
	var out []Message
	for {
		msg, err := d.Recv()
		if err != nil {
			return out, fmt.Errorf("replay receive after %d batches: %w", len(out), err)
		}
		m, err := DecodeReplay(msg.Frames)
		if err != nil {
			st.s.m.decodeErrors.WithLabelValues(st.label).Inc()
			return out, err
		}
		if m.End {
			return out, nil
		}
		out = append(out, m)
	}
}
