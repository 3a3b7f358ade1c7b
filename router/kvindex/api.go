package kvindex

import "time"

// Hash is a block hash as SGLang publishes it: the first 8 bytes of the page's SHA-256 chain
// digest read big-endian as a signed integer (sglang python/sglang/srt/mem_cache/utils.py).
type Hash int64

// Kind says which change of a rank's radix cache an [Event] reports.
type Kind uint8

const (
	BlockStored      Kind = iota + 1 // blocks added (Hashes, in chain order; Tokens their token ids)
	BlockRemoved                     // blocks evicted (Hashes)
	AllBlocksCleared                 // the rank's whole cache was flushed
)

// Event is one decoded KV event. Fields not carried by an event's shape are zero.
type Event struct {
	Kind      Kind
	Hashes    []Hash
	Parent    Hash // BlockStored: the parent block's (truncated) hash when HasParent
	HasParent bool
	Tokens    []uint32 // BlockStored: the stored blocks' token ids, BlockSize per block
	BlockSize int      // BlockStored: tokens per block (the engine's page size)
	LoRAID    int64    // BlockStored: 0 when none
	Medium    string   // "GPU", "CPU", … ; "" when the shape does not carry it
	CacheSalt string   // BlockStored: the salt that started the chain, when published
}

// Batch is one published message: [ts, events, attn_dp_rank] with the frame's sequence number.
type Batch struct {
	Seq     int64   // from the frame (8-byte big-endian); -1 is the replay end marker
	TS      float64 // publisher's wall clock, seconds since the epoch
	Events  []Event
	Rank    int  // attention-DP rank, when HasRank
	HasRank bool // false when the payload had no (or a nil) rank
}

// TargetID is a target's small-integer handle in an [Index] (interned from its name).
type TargetID int32

// Config parameterises an [Index].
type Config struct {
	// PendingTTL is how long a pending entry (a request routed to a target whose store has not
	// arrived) counts towards matches unless the store arrives first: the modelled prefill time
	// plus one publish interval. 0 disables the overlay.
	PendingTTL time.Duration
}

// Stats are the counters an [Index] keeps per target (for metrics and logs).
type Stats struct {
	Blocks        int    // blocks held now
	Events        uint64 // events applied
	BlocksStored  uint64
	BlocksRemoved uint64
	Clears        uint64
	Stale         bool // no trustworthy view: match reports 0 blocks; the caller falls back
}

// The functions and methods below are the package's API; their bodies are filled in by the
// kvindex work (stubs until then).

// SaltSeedPrefix starts a salted chain: the chain's seed digest is sha256(SaltSeedPrefix + salt).
const SaltSeedPrefix = "sglang-cache-salt-v1\x00"

// AppendBlockHashes appends the hash of every full page of tokens (page tokens each; a partial
// last page has none) to dst, chained as SGLang chains them; salt "" is the unsalted chain.
func AppendBlockHashes(dst []Hash, tokens []uint32, page int, salt string) []Hash {
	panic("kvindex: AppendBlockHashes not implemented yet")
}

// Index is the precise prefix index. It is safe for concurrent use: subscribers apply events
// from their own goroutines while the router matches under its lock.
type Index struct{ cfg Config }

// New returns an empty index.
func New(cfg Config) *Index { return &Index{cfg: cfg} }

// Target returns name's handle, interning it on first use.
func (x *Index) Target(name string) TargetID { panic("kvindex: not implemented yet") }

// RemoveTarget forgets a target and every block it held.
func (x *Index) RemoveTarget(id TargetID) { panic("kvindex: not implemented yet") }

// Apply applies a batch's events to a target. now stamps pending-entry resolution.
func (x *Index) Apply(id TargetID, evs []Event, now time.Time) { panic("kvindex: not implemented yet") }

// SetStale marks a target's view untrustworthy (a sequence gap without replay, a lost
// subscription) or trustworthy again. A stale target matches 0 blocks until it is rebuilt: an
// AllBlocksCleared event, or a fresh subscription (SetStale(id, false) after clearing it).
func (x *Index) SetStale(id TargetID, stale bool) { panic("kvindex: not implemented yet") }

// Stale reports whether the target is stale (unknown targets are stale).
func (x *Index) Stale(id TargetID) bool { panic("kvindex: not implemented yet") }

// Match appends to dst, for each target in ids (in order), the number of leading blocks of
// hashes that target holds consecutively (pending entries not expired at now included) and
// returns dst.
func (x *Index) Match(dst []int, hashes []Hash, ids []TargetID, now time.Time) []int {
	panic("kvindex: not implemented yet")
}

// AddPending records that a request with this hash chain was routed to id at now: until the
// target's stores for those blocks arrive or PendingTTL passes, Match counts them as held.
func (x *Index) AddPending(id TargetID, hashes []Hash, now time.Time) {
	panic("kvindex: not implemented yet")
}

// Stats returns a target's counters.
func (x *Index) Stats(id TargetID) Stats { panic("kvindex: not implemented yet") }
