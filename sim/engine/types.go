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

// Req is one request submitted to a server. The server keeps Prompt (it must not be modified
// after Submit) and copies only the tokens it caches.
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

// RankLoad is a snapshot of one DP rank, what SGLang's /get_load and metrics report.
type RankLoad struct {
	Rank         int
	Running      int     // requests being prefilled or decoded (sglang:num_running_reqs)
	Queued       int     // requests in bootstrap, prealloc, transfer and waiting queues (sglang:num_queue_reqs)
	Inflight     int     // prefill: requests whose KV is being transferred
	KVTokens     int     // KV tokens in use: cached tree plus request-private (num_tokens)
	KVCapacity   int     // max_total_num_tokens of the rank
	TokenUsage   float64 // KVTokens / KVCapacity (sglang:token_usage)
	CacheHitRate float64 // cumulative cached / prompt tokens admitted on this rank
	// BatchHitTokens and BatchNewTokens are SGLang's per-prefill-batch hit accounting summed
	// over every batch of the rank: cached tokens before each chunk (prefix hit and earlier
	// chunks) and tokens computed. SGLangCacheHitRate = hit / (hit + new), what SGLang's
	// scheduler logs and exports as sglang:cache_hit_rate.
	BatchHitTokens, BatchNewTokens int64
	SGLangCacheHitRate             float64
	Retractions                    int   // cumulative requests retracted from the running batch for lack of KV
	RecomputedTokens               int64 // cumulative tokens prefilled again after retractions (unified)
}
