package engine

import (
	"fmt"
	"time"
)

// Defaults applied by New to zero Config fields.
const (
	DefaultChunkedPrefillSize   = 8192             // tokens per prefill step (SGLang --chunked-prefill-size)
	DefaultMaxRunningRequests   = 1024             // per rank (SGLang --max-running-requests)
	DefaultReservedDecodeTokens = 512              // decode prealloc reserve beyond the prompt (SGLANG_NUM_RESERVED_DECODE_TOKENS)
	DefaultBootstrapTimeout     = 30 * time.Second // SPEC §3 --bootstrap-timeout
	DefaultLinkBandwidth        = 50e9             // bytes/s: one 400 Gb/s RDMA NIC
)

// Schedule policies of the prefill queue (SGLang --schedule-policy).
const (
	// PolicyLPM, SGLang's default: longest prefix match first, with in-batch prefix sharing,
	// falling back to FCFS when more than LPMQueueLimit requests wait.
	PolicyLPM = "lpm"
	// PolicyFCFS: first come, first served.
	PolicyFCFS = "fcfs"
)

// SGLang's scheduler constants (python/sglang/srt/managers/schedule_policy.py).
const (
	// LPMQueueLimit: above this many waiting requests, lpm turns off its prefix matching and
	// sorting and schedules FCFS (_determine_active_policy).
	LPMQueueLimit = 128
	// InBatchCheckThreshold: a request whose cached prefix is at most this long is checked
	// against the other waiting requests (IN_BATCH_PREFIX_CACHING_CHECK_THRESHOLD).
	InBatchCheckThreshold = 32
	// InBatchDeprioritizeThreshold: a checked request sharing at least this many leading
	// tokens with one picked before it waits (IN_BATCH_PREFIX_CACHING_DEPRIORITIZE_THRESHOLD).
	InBatchDeprioritizeThreshold = 32
	// ClipMaxNewTokens caps the output tokens admission charges a request with
	// (CLIP_MAX_NEW_TOKENS, env SGLANG_CLIP_MAX_NEW_TOKENS_ESTIMATION, default 4096).
	ClipMaxNewTokens = 4096
)

// SGLang's new-token-ratio constants (python/sglang/srt/environ.py, used by scheduler.py and
// managers/scheduler_components/new_token_ratio_tracker.py NewTokenRatioTracker).
const (
	InitNewTokenRatio       = 0.7  // SGLANG_INIT_NEW_TOKEN_RATIO: the ratio at start and after idle, × ScheduleConservativeness (≤ 1)
	MinNewTokenRatioFactor  = 0.14 // SGLANG_MIN_NEW_TOKEN_RATIO_FACTOR: the floor is the initial ratio × this
	NewTokenRatioDecaySteps = 600  // SGLANG_NEW_TOKEN_RATIO_DECAY_STEPS: decode steps from the initial ratio to the floor
	RetractDecodeSteps      = 20   // SGLANG_RETRACT_DECODE_STEPS: decode steps of headroom the ratio assumes after a retraction
)

// Config describes one server. Zero fields take the defaults named on them.
type Config struct {
	Role        Role
	DPSize      int     // DP ranks; 0 → 1
	Profile     Profile // step-time model (see Presets, Build, ConstantProfile, Instant)
	DPAttention bool    // lockstep: all ranks step together, each step as long as the busiest rank's (ignored by Constant profiles)

	LinkBandwidth        float64       // prefill: KV transfer bandwidth of each DP rank's link, bytes/s, shared by its concurrent transfers; 0 → DefaultLinkBandwidth
	PageSize             int           // tokens per KV page; 0 → 1
	MaxTotalTokens       int           // KV capacity per rank, tokens; 0 → Profile.MaxTotalTokens
	ChunkedPrefillSize   int           // token budget of a prefill step; 0 → DefaultChunkedPrefillSize
	MaxRunningRequests   int           // per rank, requests being prefilled or decoded (unified, decode); 0 → DefaultMaxRunningRequests
	ReservedDecodeTokens int           // decode: KV kept free per room for its outputs when preallocating (num_reserved_decode_tokens); 0 → DefaultReservedDecodeTokens
	BootstrapTimeout     time.Duration // PD: Handshake (prefill) / KVArrived (decode) deadline after Submit; 0 → DefaultBootstrapTimeout; < 0 → never
	Speedup              float64       // every model duration (steps, transfers, TTFT, ITL) is divided by it; 0 → 1. A slow factor f is Speedup 1/f.
	NeverSignalKV        bool          // failure hook (prefill): compute, then never finish the transfer (the whole run)

	// SchedulePolicy orders the prefill queue (prefill, unified): PolicyLPM (default, as
	// SGLang) or PolicyFCFS; "" → PolicyLPM.
	SchedulePolicy string
	// DisableOverlap is SGLang's --disable-overlap-schedule (and SGLang before v0.4, which had
	// no overlap scheduler): a prefill batch's prompts become matchable in the prefix cache as
	// soon as its step ends, and each decode step waits for the scheduler's per-request CPU
	// work (NoOverlapHostPerRequest). By default (false), as with SGLang's overlap scheduler,
	// prompts become matchable only after the next batch has been scheduled (scheduler.py: the
	// next batch is formed before the last one's results are processed, and
	// process_batch_result inserts the prompts) and the CPU work hides behind the GPU step.
	DisableOverlap bool
	// DecodeRadixCache is SGLang's --disaggregation-decode-enable-radix-cache (decode role):
	// the decode server keeps the prompts it served in a prefix cache of its own (LRU, in the
	// same KV pool). A room whose prompt prefix is cached there reserves KV only for the rest,
	// reports its hit in Preallocated.CachedTokens, and the driver passes it to the prefill
	// server's Handshake, which then transfers only the tokens the decode side lacks.
	DecodeRadixCache bool

	// CUDAGraphMaxBS is SGLang's --cuda-graph-max-bs: decode batches up to it replay a CUDA
	// graph captured for the next captured size (the batch is padded to it, see PaddedBatch);
	// larger batches run eagerly, paying Profile.EagerOverhead per step. 0 → no CUDA-graph
	// modelling (every step unpadded, no eager overhead).
	CUDAGraphMaxBS int
	// ScheduleConservativeness is SGLang's --schedule-conservativeness: it scales the
	// new-token ratio admission charges running requests with; 0 → 1.
	ScheduleConservativeness float64
	// MixedChunk is SGLang's --enable-mixed-chunk (unified servers): while a prefill batch
	// forms, the running requests join it for one decode token each instead of waiting for
	// the next decode step (scheduler.py get_new_batch_prefill, ScheduleBatch.mix_with_running),
	// and the step's prompt budget shrinks by their number (PrefillAdder rem_chunk_tokens).
	// Off under speculative decoding, as SGLang turns it off.
	MixedChunk bool
	// Spec is speculative decoding (spec.go): decode steps draft, verify and accept
	// Spec.AcceptLength tokens per request on average, timed with Profile.Draft (which it
	// needs), without the overlap scheduler (DisableOverlap is implied). Zero: off.
	Spec Spec

	// KVEvents, when set, receives each rank's radix-cache changes (stores, evictions,
	// clears) as SGLang's scheduler publishes them with --kv-events-config: in batches, at its
	// cadence (after forming a prefill batch, every DecodeLogInterval decode steps, when idle,
	// and on prefill servers whenever the transfer queue is polled; see kvevents.go). at is the
	// model time of the publish, rank the DP rank. It is called on the goroutine driving the
	// server, from inside its methods; evs and their Paths are only valid during the call.
	// Decode servers without DecodeRadixCache have no cache and publish nothing. nil: nothing
	// is recorded, at no cost.
	KVEvents func(at time.Time, rank int, evs []KVEvent)

	// HostCacheTokens is the host tier of each prefill or unified rank, in tokens: SGLang's
	// HiCache pool (--enable-hierarchical-cache, --hicache-ratio × the device pool). KV the GPU
	// cache evicts moves there, and a prefix found there is loaded back at HostCacheBandwidth
	// before the rest is prefilled (hostcache.go). 0: no host tier (SGLang's default).
	HostCacheTokens int
	// HostCacheBandwidth is the load-back's bytes/s; 0 → DefaultHostCacheBandwidth.
	HostCacheBandwidth float64
}

func (c Config) withDefaults() Config {
	if c.DPSize == 0 {
		c.DPSize = 1
	}
	if c.LinkBandwidth == 0 {
		c.LinkBandwidth = DefaultLinkBandwidth
	}
	if c.PageSize == 0 {
		c.PageSize = 1
	}
	if c.MaxTotalTokens == 0 {
		c.MaxTotalTokens = c.Profile.MaxTotalTokens
	}
	if c.ChunkedPrefillSize == 0 {
		c.ChunkedPrefillSize = DefaultChunkedPrefillSize
	}
	if c.MaxRunningRequests == 0 {
		c.MaxRunningRequests = DefaultMaxRunningRequests
	}
	if c.ReservedDecodeTokens == 0 {
		c.ReservedDecodeTokens = DefaultReservedDecodeTokens
	}
	if c.BootstrapTimeout == 0 {
		c.BootstrapTimeout = DefaultBootstrapTimeout
	}
	if c.Speedup == 0 {
		c.Speedup = 1
	}
	if c.SchedulePolicy == "" {
		c.SchedulePolicy = PolicyLPM
	}
	if c.ScheduleConservativeness == 0 {
		c.ScheduleConservativeness = 1
	}
	if c.HostCacheBandwidth == 0 {
		c.HostCacheBandwidth = DefaultHostCacheBandwidth
	}
	return c
}

// Validate reports the first invalid field of c (after defaults), naming it.
func (c Config) Validate() error {
	c = c.withDefaults()
	switch {
	case c.Role > RoleDecode:
		return fmt.Errorf("engine: role %d is not prefill, decode or unified", c.Role)
	case c.DPSize < 1:
		return fmt.Errorf("engine: dp size %d < 1", c.DPSize)
	case c.PageSize < 1:
		return fmt.Errorf("engine: page size %d < 1", c.PageSize)
	case c.MaxTotalTokens < c.PageSize:
		return fmt.Errorf("engine: max total tokens %d is smaller than a page (%d); set it or use a profile that derives it", c.MaxTotalTokens, c.PageSize)
	case c.ChunkedPrefillSize < 1:
		return fmt.Errorf("engine: chunked prefill size %d < 1", c.ChunkedPrefillSize)
	case c.MaxRunningRequests < 1:
		return fmt.Errorf("engine: max running requests %d < 1", c.MaxRunningRequests)
	case c.ReservedDecodeTokens < 1:
		return fmt.Errorf("engine: reserved decode tokens %d < 1", c.ReservedDecodeTokens)
	case c.SchedulePolicy != PolicyLPM && c.SchedulePolicy != PolicyFCFS:
		return fmt.Errorf("engine: schedule policy %q is not lpm or fcfs", c.SchedulePolicy)
	case !(c.Speedup > 0):
		return fmt.Errorf("engine: speedup %g must be > 0", c.Speedup)
	case c.CUDAGraphMaxBS < 0:
		return fmt.Errorf("engine: cuda graph max bs %d < 0", c.CUDAGraphMaxBS)
	case !(c.ScheduleConservativeness > 0):
		return fmt.Errorf("engine: schedule conservativeness %g must be > 0", c.ScheduleConservativeness)
	case c.HostCacheTokens < 0:
		return fmt.Errorf("engine: host cache tokens %d < 0", c.HostCacheTokens)
	case !(c.HostCacheBandwidth > 0):
		return fmt.Errorf("engine: host cache bandwidth %g bytes/s must be > 0", c.HostCacheBandwidth)
	case c.LinkBandwidth < 0:
		return fmt.Errorf("engine: link bandwidth %g bytes/s < 0", c.LinkBandwidth)
	case c.Profile.Constant && (c.Profile.TTFT < 0 || c.Profile.ITL < 0):
		return fmt.Errorf("engine: profile %s: negative ttft or itl", c.Profile.Name)
	case c.Spec.On() && c.Profile.Draft == nil:
		return fmt.Errorf("engine: --speculative-algorithm %s needs a --model-path engine: its draft model is built from the model card (profile %s has none)", c.Spec.Algorithm, c.Profile.Name)
	}
	return c.Spec.check()
}
