package engine

import (
	"fmt"
	"time"
)

// Role is what a server does: prefill only, decode only (the two halves of a PD pair), or both.
type Role uint8

// The server roles. The zero value is RoleUnified.
const (
	RoleUnified Role = iota // continuous batching with chunked prefill, prefill-first (SGLang "null" mode)
	RolePrefill             // disaggregated prefill: bootstrap → waiting → chunked prefill → inflight (transfer)
	RoleDecode              // disaggregated decode: prealloc → transfer → waiting → running
)

// String returns the SGLang name of the role: "unified", "prefill" or "decode".
func (r Role) String() string {
	switch r {
	case RoleUnified:
		return "unified"
	case RolePrefill:
		return "prefill"
	case RoleDecode:
		return "decode"
	}
	return fmt.Sprintf("Role(%d)", uint8(r))
}

// ParseRole parses "prefill", "decode", "unified" (also accepted: "regular", "null", "").
func ParseRole(s string) (Role, error) {
	switch s {
	case "unified", "regular", "null", "":
		return RoleUnified, nil
	case "prefill":
		return RolePrefill, nil
	case "decode":
		return RoleDecode, nil
	}
	return 0, fmt.Errorf("engine: role %q is not one of prefill, decode, unified", s)
}

// Req is one request submitted to a server. The server keeps Prompt, and its prefix cache
// keeps views of it (the runs the prompt adds, and the paths of their KV events), so it must
// not be modified after Submit.
type Req struct {
	Room   uint64   // bootstrap room (PD) or any unique request id (unified); unique among live requests of a server
	Rank   int      // DP rank, 0..DPSize-1; negative: the server picks (room % dp_size in PD, round-robin in unified)
	Prompt []uint32 // prompt token ids; at least one
	MaxNew int      // output tokens to generate (≥ 1; 0 means 1); the engine never stops early
	// Output optionally holds the output token ids the driver will reply with (e.g. the tokens of
	// workloads.ReplyText). A unified server then caches prompt + output when the request
	// finishes, as SGLang caches finished sequences, so a conversation's next turn hits them.
	// nil: only the prompt is cached. Must not be modified after Submit.
	Output []uint32
	// Gaps, when set, receives the gaps between the room's consecutive output tokens instead of
	// a KindToken output per token: only the first token (Index 0) is reported. A decode step
	// hands the gaps it produced to their sinks in runs (one AddN per run of equal gaps), so a
	// driver that keeps only the distribution of inter-token latencies pays nothing per token.
	// Every gap reaches its sink before the Advance that reports the room's end returns.
	Gaps GapSink
}

// GapSink counts inter-token gaps: n gaps of ns nanoseconds each (reports.Counts is one).
type GapSink interface {
	AddN(ns, n int64)
}

// Kind says which event an Output reports.
type Kind uint8

// The output kinds. Every submitted room produces exactly one terminal output, Finished or Failed.
const (
	KindPreallocated Kind = iota + 1 // decode: KV reserved for Room; the driver sends Handshake to the prefill server
	KindTransferDone                 // prefill: KV and first token of Room delivered; the driver sends KVArrived to the decode server
	KindToken                        // an output token of Room (Index 0, 1, …) was produced
	KindFinished                     // Room completed successfully (terminal); Usage filled in
	KindFailed                       // Room failed (terminal); Reason says why
)

// String returns the kind's name, e.g. "token".
func (k Kind) String() string {
	switch k {
	case KindPreallocated:
		return "preallocated"
	case KindTransferDone:
		return "transfer_done"
	case KindToken:
		return "token"
	case KindFinished:
		return "finished"
	case KindFailed:
		return "failed"
	}
	return fmt.Sprintf("Kind(%d)", uint8(k))
}

// Usage is the token accounting of a finished request, as SGLang reports it in meta_info/usage.
type Usage struct {
	PromptTokens     int // len(Req.Prompt)
	CompletionTokens int // output tokens produced (MaxNew; 1 on a prefill server)
	CachedTokens     int // prompt tokens found in the prefix cache at admission (in PD: the prefill server's hit)
}

// Output is one event produced by Advance. Only the fields of its Kind are set.
type Output struct {
	Kind Kind
	At   time.Time // model instant the event happened; never later than the now given to Advance
	Room uint64
	Rank int // DP rank that served the room

	Index        int       // KindToken: 0-based output token index
	CachedTokens int       // KindTransferDone: the prefill server's prefix hit; KindPreallocated: the decode server's (DecodeRadixCache), in tokens
	FirstToken   time.Time // KindTransferDone: when prefill produced the first output token
	Usage        Usage     // KindFinished
	Reason       string    // KindFailed: human-readable cause naming the room
}

// String renders the output compactly for logs and test failure messages.
func (o Output) String() string {
	s := fmt.Sprintf("%s room=%d rank=%d at=%s", o.Kind, o.Room, o.Rank, o.At.Format("15:04:05.000000"))
	switch o.Kind {
	case KindToken:
		s += fmt.Sprintf(" index=%d", o.Index)
	case KindTransferDone:
		s += fmt.Sprintf(" cached=%d", o.CachedTokens)
	case KindFinished:
		s += fmt.Sprintf(" prompt=%d completion=%d cached=%d", o.Usage.PromptTokens, o.Usage.CompletionTokens, o.Usage.CachedTokens)
	case KindFailed:
		s += " reason=" + o.Reason
	}
	return s
}

// State is a room's KV-transfer state, the states of SGLang's KVPoll.
type State uint8

// The room states: Bootstrapping → WaitingForInput → Transferring → Success | Failed.
// On a prefill server a room is Bootstrapping until Handshake, WaitingForInput while it waits for
// or undergoes prefill, Transferring while its KV is on the wire, Success once TransferDone is out.
// On a decode server it is Bootstrapping until its KV is preallocated, WaitingForInput until
// KVArrived, then Success while it decodes. A unified server's requests are WaitingForInput until
// their prefill completes and Success after. Finished and failed rooms are forgotten by the
// server; Failed is reported only through a KindFailed output.
const (
	StateBootstrapping State = iota + 1
	StateWaitingForInput
	StateTransferring
	StateSuccess
	StateFailed
)

// String returns the state's KVPoll name, e.g. "WaitingForInput".
func (s State) String() string {
	switch s {
	case StateBootstrapping:
		return "Bootstrapping"
	case StateWaitingForInput:
		return "WaitingForInput"
	case StateTransferring:
		return "Transferring"
	case StateSuccess:
		return "Success"
	case StateFailed:
		return "Failed"
	}
	return fmt.Sprintf("State(%d)", uint8(s))
}

// Queue names the scheduler queue a live request sits in.
type Queue uint8

// The queues (SGLang's disaggregation queues, plus the unified scheduler's).
const (
	QueueBootstrap Queue = iota + 1 // prefill: waiting for Handshake
	QueuePrealloc                   // decode: waiting for KV memory to be reserved
	QueueTransfer                   // decode: reserved, waiting for KVArrived
	QueueWaiting                    // waiting to be scheduled (prefill, or decode admission into the running batch)
	QueueRunning                    // being prefilled (possibly chunked) or in the decode running batch
	QueueInflight                   // prefill: computed, KV transfer in progress
)

// String returns the queue's name, e.g. "bootstrap".
func (q Queue) String() string {
	switch q {
	case QueueBootstrap:
		return "bootstrap"
	case QueuePrealloc:
		return "prealloc"
	case QueueTransfer:
		return "transfer"
	case QueueWaiting:
		return "waiting"
	case QueueRunning:
		return "running"
	case QueueInflight:
		return "inflight"
	}
	return fmt.Sprintf("Queue(%d)", uint8(q))
}

// RankLoad is a snapshot of one DP rank: what SGLang's scheduler reports of it (GET /v1/loads,
// built by managers/scheduler_components/load_inquirer.py SchedulerLoadInquirer.get_loads; the
// deprecated /get_load; the Prometheus gauges of /metrics), plus the engine's own counters.
type RankLoad struct {
	Rank int
	// Running counts the requests in the running set: being prefilled (the chunked one
	// included) or in the decode batch. SGLang's num_running_reqs is RunningReqs.
	Running int
	// Queued is WaitingReqs under its older name.
	Queued   int
	Inflight int // prefill: requests whose KV is being transferred
	// KVTokens is the KV held on the rank: the whole prefix cache, its evictable part
	// included, plus the requests' private KV. SGLang's num_used_tokens is UsedTokens.
	KVTokens int
	// KVCapacity is MaxTotalTokens under its older name.
	KVCapacity   int
	TokenUsage   float64 // UsedTokens / MaxTotalTokens (SGLang's token_usage; in [0,1])
	CacheHitRate float64 // cumulative cached / prompt tokens admitted on this rank
	// PromptTokens and CachedTokens are CacheHitRate's counts; HostCachedTokens is the part of
	// CachedTokens loaded back from the host tier, HostTokens what the tier holds now and
	// HostCapacity its size (all 0 without one: Config.HostCacheTokens).
	PromptTokens, CachedTokens, HostCachedTokens int64
	HostTokens, HostCapacity                     int
	// BatchHitTokens and BatchNewTokens are SGLang's per-prefill-batch hit accounting summed
	// over every batch of the rank: cached tokens before each chunk (prefix hit and earlier
	// chunks) and tokens computed. SGLangCacheHitRate = hit / (hit + new), what SGLang's
	// scheduler logs and exports as sglang:cache_hit_rate.
	BatchHitTokens, BatchNewTokens int64
	SGLangCacheHitRate             float64
	Retractions                    int   // cumulative requests retracted from the running batch for lack of KV
	RecomputedTokens               int64 // cumulative tokens prefilled again after retractions (unified)

	// The rest is SGLang's load report, one field per entry of /v1/loads (named in
	// parentheses), as its load inquirer computes it.

	// RunningReqs (num_running_reqs) is the decode running batch: unified and decode servers'
	// requests past their prefill, not yet finished. Always 0 on a prefill server, whose
	// prefilled requests go to the inflight queue, never to a running batch (Constant
	// profiles: the requests past their handshake or KV arrival, whose tokens are due).
	RunningReqs int
	// WaitingReqs (num_waiting_reqs) counts the requests queued before the running set: the
	// waiting queue, plus on a prefill server the bootstrap queue and on a decode server the
	// prealloc, transfer and retracted queues. Requests still on the host path
	// (Profile.HostOverhead) count already.
	WaitingReqs int
	// WaitingUncachedTokens (num_waiting_uncached_tokens) is the prefill work queued on the
	// rank, in tokens: over the waiting queue, and on a prefill server the bootstrap queue,
	// each request's tokens to prefill (its prompt, plus its outputs after a retraction) less
	// its matched prefix, plus the chunked request's tokens past the chunk in flight (SGLang
	// reports after its prefix_indices took that chunk in). A request's
	// matched prefix is what the lpm policy measured when it last ordered the waiting queue
	// (SGLang's num_matched_prefix_tokens), so it is 0 for requests that arrived since, for
	// bootstrap-queue requests, under fcfs and past LPMQueueLimit waiting requests. Always 0 on
	// a decode server.
	WaitingUncachedTokens int
	// UsedTokens (num_used_tokens) is the KV held by requests, as SGLang counts it:
	// max_total_num_tokens − (free + evictable), i.e. KVTokens without the cache's
	// evictable (unreferenced) part. Constant profiles hold no request KV: 0.
	UsedTokens int
	// TotalTokens (num_total_tokens) is UsedTokens plus the tokens of the requests whose KV
	// is not allocated yet: the waiting queue's (prefill, unified; no prefix deducted) and
	// the bootstrap queue's (prefill), the prealloc and retracted queues' (decode).
	TotalTokens int
	// MaxTotalTokens (max_total_num_tokens) is the rank's KV capacity in tokens.
	MaxTotalTokens int
	// MaxRunningRequests (max_running_requests) is the rank's Config.MaxRunningRequests.
	MaxRunningRequests int
	// GenThroughput (gen_throughput) is the rank's decode rate in tokens per second of server
	// time: the output tokens its decode steps produced (one per running request per step,
	// SGLang's num_generated_tokens; not the first token, which prefill produces) from the
	// start of the GenWindowSlot-aligned slot GenWindowSlots−1 slots before now's, to now,
	// divided by that span (0.9 to 1 s). SGLang's is the tokens of its last 40 decode steps
	// over their duration, refreshed every 40 steps; this one is deterministic in model time
	// and falls to 0 within a second of the rank going idle.
	GenThroughput float64
	// ByQueue counts the rank's live requests per Queue (index: the Queue; 0 unused).
	ByQueue [QueueInflight + 1]int
	// RetractedReqs counts the decode server's requests in its retracted queue (counted in
	// WaitingReqs and ByQueue[QueueWaiting]); 0 on other roles, whose retracted requests
	// rejoin the waiting queue.
	RetractedReqs int
}

// The GenThroughput window: GenWindowSlots slots of GenWindowSlot each.
const (
	GenWindowSlot  = 100 * time.Millisecond
	GenWindowSlots = 10
)
