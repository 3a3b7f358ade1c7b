package engine

import "time"

// The host tier: SGLang's HiCache (--enable-hierarchical-cache) keeps KV that leaves the GPU
// in a pinned host-memory pool (L2) of --hicache-ratio times the device pool, and a request
// whose prefix is found there has it copied back to the GPU before the rest is prefilled
// (python/sglang/srt/mem_cache/hiradix_cache.py: match_prefix reports the device part and the
// host part after it, init_load_back copies the host part in).
//
// The model here, with Config.HostCacheTokens > 0 on a prefill or unified server:
//
//   - a leaf the GPU cache evicts moves to the rank's host pool: its whole token path is
//     inserted there (a radix tree of its own, least recently used first out), so the pool
//     also holds the ancestors still on the GPU, as HiCache's write-through would have backed
//     them up. Over its capacity the pool evicts its own least recently used leaves;
//   - admission matches the GPU first, then the host pool: the host match beyond the GPU's is
//     loaded back. It needs GPU KV like computed tokens (the reservation is unchanged) but is
//     not computed: the prefill batch that starts the request takes
//     tokens · Profile.KVBytesPerToken / HostCacheBandwidth longer, before its compute;
//   - the loaded tokens join the GPU cache when the prompt is cached (KV events: BlockStored
//     "GPU"), and stay in the pool (HiCache keeps the host copy);
//   - with KV events, every change is published with its medium: "GPU" for the device cache,
//     "CPU_PINNED" for the pool (SGLang's StorageMedium), in the order they happened;
//   - constant profiles (no batches) count host hits as cached but take no load-back time.
//
// Not modelled: HiCache's write-through of every insert (the pool here fills on eviction, as
// its write_back policy), the L3 storage tier, prefetch, and the PCIe traffic of backups.

// DefaultHostCacheBandwidth is the host-to-GPU bandwidth of a load-back, bytes/s: PCIe Gen5
// x16 carries 64 GB/s per direction and some 50 GB/s in practice (SGLang measured its kernel
// I/O backend's load path at 73–97 GB/s over GB300's faster C2C link, sglang PR #40278, and a
// per-layer copy at 28 GB/s on H20, PR #37231).
const DefaultHostCacheBandwidth = 50e9

// hostCache is one rank's host pool.
type hostCache struct {
	tree     *radix // the paths evicted from the GPU; nodes are never locked
	capacity int    // tokens, whole pages
}

func newHostCache(page, capacity int) *hostCache {
	t := newRadix(page)
	t.medium = mediumHost
	return &hostCache{tree: t, capacity: capacity / t.page * t.page}
}

// put takes path (whole pages), just evicted from the GPU, into the pool, evicting the pool's
// least recently used leaves beyond its capacity.
func (h *hostCache) put(path []uint32) {
	if h.capacity < h.tree.page {
		return
	}
	h.tree.insert(path)
	if over := h.tree.size - h.capacity; over > 0 {
		h.tree.evict(over)
	}
}

// hit returns how many tokens of key beyond its first gpu (the GPU cache's hit) the pool holds.
func (h *hostCache) hit(key []uint32, gpu int) int {
	if len(key)-gpu < h.tree.page {
		return 0
	}
	n, _ := h.tree.match(key)
	return max(n-gpu, 0)
}

// reset empties the pool without recording events: the GPU cache's AllBlocksCleared, recorded
// just before, clears the rank's every tier.
func (h *hostCache) reset() {
	l := h.tree.log
	h.tree.log = nil
	h.tree.reset()
	h.tree.log = l
}

// enableHostCache gives every prefill or unified rank its pool (Config.HostCacheTokens > 0).
func (s *Server) enableHostCache() {
	for _, rk := range s.ranks {
		if rk.cache == nil {
			continue
		}
		rk.cache.medium = mediumGPU
		rk.cache.spill = newHostCache(s.cfg.PageSize, s.cfg.HostCacheTokens)
	}
}

// host returns rk's pool, or nil.
func (rk *rank) host() *hostCache {
	if rk.cache == nil {
		return nil
	}
	return rk.cache.spill
}

// loadBackTime is how long the load-backs of the batch's newly admitted requests take, each's
// host hit (request.loadBack) counted once.
func (s *Server) loadBackTime(rk *rank) time.Duration {
	tokens := 0
	for _, c := range rk.batch {
		tokens += int(c.r.loadBack)
		c.r.loadBack = 0
	}
	if tokens == 0 || s.cfg.Profile.KVBytesPerToken <= 0 {
		return 0
	}
	return time.Duration(float64(tokens) * s.cfg.Profile.KVBytesPerToken / s.cfg.HostCacheBandwidth * 1e9)
}
