package fakeworker

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"sync"
	"sync/atomic"
	"time"

	"github.com/go-zeromq/zmq4"
	"github.com/vmihailenco/msgpack/v5"

	"github.com/pdrouter/pdrouter/router/kvindex"
	"github.com/pdrouter/pdrouter/sim/engine"
)

// The KV-event publisher: what SGLang's ZmqEventPublisher sends (python/sglang/srt/utils/
// event_publisher.py), one per attention-DP rank. The engine loop hands each published batch
// (engine.Config.KVEvents) to a bounded per-rank queue and never waits; the rank's goroutine
// hashes the pages (router/kvindex, SGLang's chain), encodes the payload with msgpack and sends
// the three frames [topic, seq (8-byte big-endian, from 0), payload] on its PUB socket, keeping
// the last buffer_steps messages for its ROUTER replay socket. The payload is the EventBatch
// [ts, events, attn_dp_rank]; events are one BlockStored or BlockRemoved per page, as
// mem_cache/radix_cache.py _record_store_event / _record_remove_event emit them, or
// AllBlocksCleared, in the tagged-array or the tagged-map shape (KVShapeArray, KVShapeMap).

// kvEndSeq is the replay end marker: -1 as 8 big-endian bytes (ZmqEventPublisher.END_SEQ).
var kvEndSeq = []byte{0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff}

// kvMediumGPU is BlockStored/BlockRemoved's medium for the GPU tier (kv_events.py
// StorageMedium.GPU): what an engine event without a medium (no host tier) is published with.
// With a host tier (--hicache-ratio) the engine names each change's own: "GPU" or "CPU_PINNED".
const kvMediumGPU = "GPU"

// kvMedium is the medium an engine event is published with.
func kvMedium(m string) string {
	if m == "" {
		return kvMediumGPU
	}
	return m
}

// kvBatch is one engine publish, copied off the engine loop.
type kvBatch struct {
	ts  float64 // seconds since the epoch (SGLang: time.time())
	evs []engine.KVEvent
}

// kvPublisher publishes the KV events of every rank of one worker.
type kvPublisher struct {
	cfg   KVEventsConfig
	shape string
	page  int
	log   *slog.Logger
	ranks []*kvRank

	cancel context.CancelFunc
	wg     sync.WaitGroup

	published, dropped atomic.Uint64 // batches sent on PUB / dropped because the queue was full
}

// kvRank is one rank's publisher: its queue, sockets and replay buffer.
type kvRank struct {
	p    *kvPublisher
	rank int
	pub  zmq4.Socket
	rep  zmq4.Socket // nil without replay_endpoint
	// pubPort and repPort are the rank's ports (base + rank).
	pubPort, repPort int

	mu    sync.Mutex // protects queue
	queue []kvBatch
	wake  chan struct{} // one slot: the queue has work

	bufMu sync.Mutex // protects buf, next
	buf   []kvSent   // ring of the last buffer_steps messages
	next  int        // once full, the ring position of the oldest message
	seq   uint64     // next sequence number (owned by the rank's goroutine)

	// Failure injection (Worker.DropKVEventBatches, Worker.RestartKVEventStream).
	drop  atomic.Int64 // batches still to lose: sequenced and kept for replay, not sent
	reset atomic.Bool  // restart the stream before the next batch: seq from 0, replay buffer empty
}

// kvSent is a message kept for replay.
type kvSent struct {
	seq     uint64
	payload []byte
}

// startKVPublisher binds (or connects) every rank's sockets and starts their goroutines.
// A port 0 in a bound endpoint picks a base port for which base+rank is free for every rank.
func startKVPublisher(cfg KVEventsConfig, shape string, dpSize, page int, workerHost string, log *slog.Logger) (*kvPublisher, error) {
	ctx, cancel := context.WithCancel(context.Background())
	p := &kvPublisher{cfg: cfg, shape: shape, page: page, log: log, cancel: cancel}
	for r := range dpSize {
		p.ranks = append(p.ranks, &kvRank{p: p, rank: r, wake: make(chan struct{}, 1)})
	}
	fail := func(err error) (*kvPublisher, error) {
		cancel()
		p.wg.Wait()
		p.closeSockets()
		return nil, err
	}
	// SGLang binds a wildcard endpoint and connects any other (to a remote indexer); a
	// fakeworker also binds its own --host, so loopback setups work.
	host, port, _ := splitTCPEndpoint(cfg.Endpoint)
	bind := wildcardHost(host) || host == workerHost
	err := p.open(ctx, host, port, bind, "endpoint",
		func() zmq4.Socket { return zmq4.NewPub(ctx) },
		func(kr *kvRank, s zmq4.Socket, port int) { kr.pub, kr.pubPort = s, port })
	if err != nil {
		return fail(err)
	}
	for _, kr := range p.ranks {
		if cfg.HWM > 0 {
			if err := kr.pub.SetOption(zmq4.OptionHWM, cfg.HWM); err != nil {
				return fail(fmt.Errorf("fakeworker: --kv-events-config hwm: %w", err))
			}
		}
	}
	if cfg.ReplayEndpoint != nil {
		rh, rp, _ := splitTCPEndpoint(*cfg.ReplayEndpoint)
		err := p.open(ctx, rh, rp, true, "replay_endpoint",
			func() zmq4.Socket { return zmq4.NewRouter(ctx) },
			func(kr *kvRank, s zmq4.Socket, port int) { kr.rep, kr.repPort = s, port })
		if err != nil {
			return fail(err)
		}
	}
	for _, kr := range p.ranks {
		p.wg.Add(1)
		go func() { defer p.wg.Done(); kr.run(ctx) }()
		if kr.rep != nil {
			p.wg.Add(1)
			go func() { defer p.wg.Done(); kr.serveReplay(ctx) }()
		}
	}
	return p, nil
}

// open creates one socket per rank at port+rank (SGLang's offset_endpoint_port), bound or
// (bind false) dialled in the background. With port 0 the first rank's bound port is the base;
// when a later rank's port is taken, the whole set is tried again (a few times).
func (p *kvPublisher) open(ctx context.Context, host string, port int, bind bool, field string, mk func() zmq4.Socket, set func(*kvRank, zmq4.Socket, int)) error {
	if !bind {
		for _, kr := range p.ranks {
			s := mk()
			set(kr, s, port+kr.rank)
			ep := tcpEndpoint(host, port+kr.rank)
			p.wg.Add(1)
			go func() { defer p.wg.Done(); p.dial(ctx, s, ep) }()
		}
		return nil
	}
	var lastErr error
	for range 16 {
		base := port
		socks := make([]zmq4.Socket, 0, len(p.ranks))
		for _, kr := range p.ranks {
			s := mk()
			if err := s.Listen(tcpEndpoint(host, base+kr.rank)); err != nil {
				s.Close()
				lastErr = err
				break
			}
			if kr.rank == 0 {
				if a, ok := s.Addr().(*net.TCPAddr); ok {
					base = a.Port
				}
			}
			socks = append(socks, s)
		}
		if len(socks) == len(p.ranks) {
			for i, kr := range p.ranks {
				set(kr, socks[i], base+kr.rank)
			}
			return nil
		}
		for _, s := range socks {
			s.Close()
		}
		if port != 0 {
			break
		}
	}
	return fmt.Errorf("fakeworker: --kv-events-config %s %s: %w", field, tcpEndpoint(host, port), lastErr)
}

// dial connects s to ep, retrying until it succeeds or ctx ends (libzmq connects lazily and
// reconnects on its own; zmq4 needs the loop).
func (p *kvPublisher) dial(ctx context.Context, s zmq4.Socket, ep string) {
	backoff := 100 * time.Millisecond
	for {
		err := s.Dial(ep)
		if err == nil {
			return
		}
		p.log.Warn("fakeworker: kv events: connecting the publisher", "endpoint", ep, "err", err)
		select {
		case <-ctx.Done():
			return
		case <-time.After(backoff):
		}
		backoff = min(2*backoff, 5*time.Second)
	}
}

func (p *kvPublisher) closeSockets() {
	for _, kr := range p.ranks {
		if kr.pub != nil {
			kr.pub.Close()
		}
		if kr.rep != nil {
			kr.rep.Close()
		}
	}
}

// close stops the goroutines and closes the sockets (queued batches are dropped).
func (p *kvPublisher) close() {
	p.cancel()
	p.closeSockets() // unblocks a replay Recv
	p.wg.Wait()
}

// hook is the engine's Config.KVEvents: it copies the batch into rank's queue, or drops it
// (counted) when max_queue_size batches wait. Runs on the engine loop; never blocks on I/O.
func (p *kvPublisher) hook(at time.Time, rank int, evs []engine.KVEvent) {
	if rank < 0 || rank >= len(p.ranks) {
		return
	}
	n := 0
	for _, e := range evs {
		n += len(e.Path)
	}
	toks := make([]uint32, 0, n)
	b := kvBatch{ts: float64(at.UnixNano()) / 1e9, evs: make([]engine.KVEvent, len(evs))}
	for i, e := range evs {
		start := len(toks)
		toks = append(toks, e.Path...)
		b.evs[i] = engine.KVEvent{Kind: e.Kind, New: e.New, Path: toks[start:len(toks):len(toks)], Medium: e.Medium}
	}
	kr := p.ranks[rank]
	kr.mu.Lock()
	if len(kr.queue) >= p.cfg.MaxQueueSize {
		kr.mu.Unlock()
		p.dropped.Add(1)
		return
	}
	kr.queue = append(kr.queue, b)
	kr.mu.Unlock()
	select {
	case kr.wake <- struct{}{}:
	default:
	}
}

// run sends the rank's queued batches until ctx ends.
func (kr *kvRank) run(ctx context.Context) {
	var enc kvEncoder
	enc.init(kr.p.shape)
	var hashes []kvindex.Hash
	var batch []kvBatch
	for {
		select {
		case <-ctx.Done():
			return
		case <-kr.wake:
		}
		kr.mu.Lock()
		batch, kr.queue = kr.queue, batch[:0]
		kr.mu.Unlock()
		for i := range batch {
			var payload []byte
			payload, hashes = enc.batch(batch[i], kr.rank, kr.p.page, hashes)
			kr.send(payload)
			batch[i] = kvBatch{}
		}
	}
}

// send keeps one payload for replay with the next sequence number, then publishes it.
func (kr *kvRank) send(payload []byte) {
	if kr.reset.Swap(false) {
		kr.bufMu.Lock()
		kr.seq, kr.buf, kr.next = 0, nil, 0
		kr.bufMu.Unlock()
	}
	seq := kr.seq
	kr.seq++
	var sb [8]byte
	binary.BigEndian.PutUint64(sb[:], seq)
	// Buffered before it is sent: a subscriber that asks for a replay as soon as it sees
	// the message must find it (the replay goroutine answers concurrently).
	kr.bufMu.Lock()
	if len(kr.buf) < kr.p.cfg.BufferSteps {
		kr.buf = append(kr.buf, kvSent{seq, payload})
	} else {
		kr.buf[kr.next] = kvSent{seq, payload}
		kr.next = (kr.next + 1) % len(kr.buf)
	}
	kr.bufMu.Unlock()
	msg := zmq4.NewMsgFrom([]byte(kr.p.cfg.Topic), sb[:], payload)
	if kr.drop.Load() > 0 {
		kr.drop.Add(-1) // lost on the way: a gap the subscriber sees at the next batch
	} else if err := kr.pub.SendMulti(msg); err != nil {
		kr.p.log.Warn("fakeworker: kv events: publish", "rank", kr.rank, "seq", seq, "err", err)
	} else {
		kr.p.published.Add(1)
	}
}

// replayFrom returns the buffered messages with seq ≥ start, oldest first.
func (kr *kvRank) replayFrom(start uint64) []kvSent {
	kr.bufMu.Lock()
	defer kr.bufMu.Unlock()
	var out []kvSent
	for i := range kr.buf {
		m := kr.buf[(kr.next+i)%len(kr.buf)]
		if m.seq >= start {
			out = append(out, m)
		}
	}
	return out
}

// serveReplay answers replay requests on the rank's ROUTER socket: a request is
// [identity, "", start_seq (8 bytes big-endian)]; the answer is [identity, "", seq, payload] for
// every buffered message from start_seq on, then [identity, "", -1, ""]
// (ZmqEventPublisher._service_replay). Other requests are ignored.
func (kr *kvRank) serveReplay(ctx context.Context) {
	for {
		msg, err := kr.rep.Recv()
		if err != nil {
			if ctx.Err() != nil || errors.Is(err, context.Canceled) {
				return
			}
			kr.p.log.Debug("fakeworker: kv events: replay recv", "rank", kr.rank, "err", err)
			select {
			case <-ctx.Done():
				return
			case <-time.After(10 * time.Millisecond):
			}
			continue
		}
		if len(msg.Frames) != 3 || len(msg.Frames[1]) != 0 || len(msg.Frames[2]) != 8 {
			kr.p.log.Warn("fakeworker: kv events: invalid replay request", "rank", kr.rank, "frames", len(msg.Frames))
			continue
		}
		id := bytes.Clone(msg.Frames[0])
		start := binary.BigEndian.Uint64(msg.Frames[2])
		for _, m := range kr.replayFrom(start) {
			var sb [8]byte
			binary.BigEndian.PutUint64(sb[:], m.seq)
			if err := kr.rep.SendMulti(zmq4.NewMsgFrom(id, nil, sb[:], m.payload)); err != nil {
				kr.p.log.Debug("fakeworker: kv events: replay send", "rank", kr.rank, "err", err)
				break
			}
		}
		kr.rep.SendMulti(zmq4.NewMsgFrom(id, nil, kvEndSeq, nil))
	}
}

// kvEncoder encodes EventBatch payloads.
type kvEncoder struct {
	buf   bytes.Buffer
	enc   *msgpack.Encoder
	shape string
}

func (e *kvEncoder) init(shape string) {
	e.enc = msgpack.NewEncoder(&e.buf)
	e.shape = shape
}

// batch encodes [ts, events, rank]; hashes is scratch, returned for reuse. The payload is a
// new slice (it is kept for replay).
func (e *kvEncoder) batch(b kvBatch, rank, page int, hashes []kvindex.Hash) ([]byte, []kvindex.Hash) {
	e.buf.Reset()
	m := e.enc
	n := 0
	for _, ev := range b.evs {
		if ev.Kind == engine.KVCleared {
			n++
		} else {
			n += ev.New / page
		}
	}
	m.EncodeArrayLen(3)
	m.EncodeFloat64(b.ts)
	m.EncodeArrayLen(n)
	for _, ev := range b.evs {
		if ev.Kind == engine.KVCleared {
			e.tag("AllBlocksCleared", 0)
			continue
		}
		hashes = kvindex.AppendBlockHashes(hashes[:0], ev.Path, page, "")
		first := (len(ev.Path) - ev.New) / page
		for i := first; i < len(hashes); i++ {
			if ev.Kind == engine.KVStored {
				e.stored(hashes, i, ev.Path[i*page:(i+1)*page], ev.Medium)
			} else {
				e.removed(hashes[i], ev.Medium)
			}
		}
	}
	m.EncodeInt(int64(rank))
	return bytes.Clone(e.buf.Bytes()), hashes
}

// tag starts an event of type name with fields more fields after the tag.
func (e *kvEncoder) tag(name string, fields int) {
	if e.shape == KVShapeMap {
		e.enc.EncodeMapLen(fields + 1)
		e.enc.EncodeString("type")
	} else {
		e.enc.EncodeArrayLen(fields + 1)
	}
	e.enc.EncodeString(name)
}

func (e *kvEncoder) key(k string) {
	if e.shape == KVShapeMap {
		e.enc.EncodeString(k)
	}
}

// stored encodes BlockStored for page i: block_hashes [h], parent_block_hash (nil for the
// first page), token_ids, block_size, lora_id nil, medium (kvMedium).
func (e *kvEncoder) stored(hashes []kvindex.Hash, i int, toks []uint32, medium string) {
	m := e.enc
	e.tag("BlockStored", 6)
	e.key("block_hashes")
	m.EncodeArrayLen(1)
	m.EncodeInt(int64(hashes[i]))
	e.key("parent_block_hash")
	if i == 0 {
		m.EncodeNil()
	} else {
		m.EncodeInt(int64(hashes[i-1]))
	}
	e.key("token_ids")
	m.EncodeArrayLen(len(toks))
	for _, t := range toks {
		m.EncodeUint(uint64(t))
	}
	e.key("block_size")
	m.EncodeInt(int64(len(toks)))
	e.key("lora_id")
	m.EncodeNil()
	e.key("medium")
	m.EncodeString(kvMedium(medium))
}

// removed encodes BlockRemoved: block_hashes [h], medium (kvMedium).
func (e *kvEncoder) removed(h kvindex.Hash, medium string) {
	m := e.enc
	e.tag("BlockRemoved", 2)
	e.key("block_hashes")
	m.EncodeArrayLen(1)
	m.EncodeInt(int64(h))
	e.key("medium")
	m.EncodeString(kvMedium(medium))
}
