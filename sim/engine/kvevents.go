package engine

import "time"

// KV cache events: each rank's radix cache records its changes as SGLang's RadixCache does
// (python/sglang/srt/mem_cache/radix_cache.py: _record_store_event when _insert_helper adds a
// node, _record_remove_event for every leaf evict deletes, _record_all_cleared_event in reset,
// which __init__ calls too), and the server hands them to Config.KVEvents at the moments
// SGLang's scheduler publishes them (take_events in _publish_kv_events,
// python/sglang/srt/managers/scheduler_metrics_mixin.py):
//
//   - when a prefill batch is formed (get_new_batch_prefill → log_prefill_stats): after its
//     admission (evictions made room for it) and, with the overlap scheduler, before the
//     prompts of the batch that just ended are inserted (they wait for the next publish);
//   - every DecodeLogInterval decode steps of a rank (process_batch_result_decode →
//     log_decode_stats when forward_ct_decode % decode_log_interval == 0);
//   - when the rank forms no batch (on_idle / self_check_during_idle);
//   - on prefill servers, whenever the scheduler polls its inflight (transfer) queue
//     (disaggregation/prefill.py process_disagg_prefill_inflight_queue publishes at its end):
//     at every scheduling instant while the rank has rooms in transfer, and when one leaves it.
//
// Constant profiles have no batches: their cache changes are published as they happen.

// DecodeLogInterval is SGLang's --decode-log-interval default (server_args.py): decode steps
// between two log_decode_stats calls, which publish the KV events of decode-only phases.
const DecodeLogInterval = 40

// KVEventKind says what a KVEvent reports.
type KVEventKind uint8

// KV event kinds, as SGLang's BlockStored, BlockRemoved and AllBlocksCleared.
const (
	KVStored  KVEventKind = iota + 1 // a run of pages was added to the cache
	KVRemoved                        // a run of pages was evicted
	KVCleared                        // the rank's cache was emptied (flush, restart, start)
)

func (k KVEventKind) String() string {
	switch k {
	case KVStored:
		return "stored"
	case KVRemoved:
		return "removed"
	case KVCleared:
		return "cleared"
	}
	return "KVEventKind(?)"
}

// KVEvent is one change of a rank's radix cache: one tree node stored or evicted (SGLang
// records one event per page of the node; a consumer splits the run into pages of the server's
// PageSize) or the whole cache cleared.
type KVEvent struct {
	Kind KVEventKind
	// Path is the token path from the root to the end of the stored or removed run, a whole
	// number of pages; the run is its last New tokens, the tokens before them its ancestors
	// (so a consumer hashes the page chain from Path). Nil for KVCleared. Path is only valid
	// during the Config.KVEvents call (copy what you keep) unless PromptView.
	Path []uint32
	// PromptView says Path is a view of the Req.Prompt whose caching stored the run (for a
	// store, or the removal of a run so stored), not of the engine's scratch: it stays valid
	// as long as the caller leaves that prompt unchanged, as Req asks (the simulator keeps the
	// view instead of a copy).
	PromptView bool
	// New is the number of trailing tokens of Path stored or removed (a multiple of the page
	// size, ≥ 1 page); 0 for KVCleared.
	New int
	// Medium is the tier of the change, as SGLang's StorageMedium: "" without a host tier
	// (Config.HostCacheTokens 0: the GPU, as before tiers), else "GPU" or "CPU_PINNED" (the
	// host pool, hostcache.go).
	Medium string
}

// The media the engine publishes with a host tier (SGLang's StorageMedium.GPU and .CPU).
const (
	mediumGPU  = "GPU"
	mediumHost = "CPU_PINNED"
)

// kvRec is one recorded event: its path is log.buf[start:end].
type kvRec struct {
	kind       KVEventKind
	start, end int
	new        int
	medium     string
	view       []uint32 // the path, when a view of a prompt (recordView)
}

// kvLog is one radix cache's event queue (SGLang's kv_event_queue), drained by publishKV.
type kvLog struct {
	recs []kvRec
	buf  []uint32 // the recorded paths, back to back
	evs  []KVEvent
	up   []*node // scratch: a node's ancestors
}

// record appends an event for node x (stored or removed) on medium, its path built from x's
// ancestors (appended root first: nothing is cleared or copied twice). x must still be
// attached to its parent.
func (l *kvLog) record(kind KVEventKind, x *node, medium string) {
	up := l.up[:0]
	for y := x; y != nil; y = y.parent {
		up = append(up, y)
	}
	start := len(l.buf)
	for i := len(up) - 1; i >= 0; i-- {
		l.buf = append(l.buf, up[i].key...)
	}
	clear(up)
	l.up = up[:0]
	l.recs = append(l.recs, kvRec{kind: kind, start: start, end: len(l.buf), new: len(x.key), medium: medium})
}

// recordView is record of a stored node x whose path from the root is path, a view of a
// request's prompt (radix.insertPrompt): the event keeps the view instead of a copy.
func (l *kvLog) recordView(kind KVEventKind, x *node, path []uint32, medium string) {
	l.recs = append(l.recs, kvRec{kind: kind, new: len(x.key), medium: medium, view: path})
}

func (l *kvLog) cleared() {
	l.recs = append(l.recs, kvRec{kind: KVCleared})
}

// drop forgets every recorded event (a killed server loses what it had not published).
func (l *kvLog) drop() {
	clear(l.recs) // the prompts viewed
	l.recs, l.buf = l.recs[:0], l.buf[:0]
}

// enableKVEvents turns on event recording for every rank's cache: SGLang's RadixCache records
// an AllBlocksCleared from its constructor (reset), so a server starts with one per rank.
func (s *Server) enableKVEvents() {
	for _, rk := range s.ranks {
		if t := rk.tree(); t != nil {
			t.log = &kvLog{}
			t.log.cleared()
			if t.spill != nil {
				t.spill.tree.log = t.log // one queue: the tiers' changes in the order they happened
			}
		}
	}
}

// publishKV hands rank rk's recorded events to Config.KVEvents, stamped t, and empties the
// queue; nothing when there are none (SGLang publishes only non-empty batches).
func (s *Server) publishKV(rk *rank, t time.Time) {
	tr := rk.tree()
	if tr == nil || tr.log == nil || len(tr.log.recs) == 0 || s.dead {
		return
	}
	l := tr.log
	evs := l.evs[:0]
	for _, r := range l.recs {
		ev := KVEvent{Kind: r.kind, New: r.new, Medium: r.medium}
		switch {
		case r.view != nil:
			ev.Path, ev.PromptView = r.view, true
		case r.kind != KVCleared:
			ev.Path = l.buf[r.start:r.end:r.end]
		}
		evs = append(evs, ev)
	}
	s.cfg.KVEvents(t, rk.id, evs)
	clear(evs)
	l.evs = evs[:0]
	l.drop()
}

// publishKVPrefillPoll publishes, on a prefill server, the events of every rank whose inflight
// queue the scheduler polled at t (rooms in transfer now, or one that just left).
func (s *Server) publishKVPrefillPoll(t time.Time) {
	for _, rk := range s.ranks {
		if rk.n[QueueInflight] > 0 || rk.polled {
			rk.polled = false
			s.publishKV(rk, t)
		}
	}
}
