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
	Medium    string   // "GPU", "CPU_PINNED", "DISK", "EXTERNAL" (see [Tier]); "" when the shape does not carry it
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
	Blocks        int    // blocks held now on the GPU
	HostBlocks    int    // blocks held now in host memory (HiCache's CPU_PINNED tier)
	StorageBlocks int    // blocks held now on disk or external storage (DISK, EXTERNAL)
	Events        uint64 // events applied
	BlocksStored  uint64
	BlocksRemoved uint64
	Clears        uint64
	Stale         bool // no trustworthy view: match reports 0 blocks; the caller falls back
}

// SaltSeedPrefix starts a salted chain: the chain's seed digest is sha256(SaltSeedPrefix + salt).
const SaltSeedPrefix = "sglang-cache-salt-v1\x00"
