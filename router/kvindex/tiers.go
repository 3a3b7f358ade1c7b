package kvindex

import "strings"

// Tier is where an engine holds a block: SGLang's HiCache publishes each copy's place as the
// `medium` of its BlockStored and BlockRemoved events (StorageMedium in
// python/sglang/srt/disaggregation/kv_events.py: "GPU" device HBM (L1), "CPU_PINNED" host
// pinned memory (L2), "DISK" local SSD (L3), "EXTERNAL" a shared pool such as Mooncake (L4)).
// A block backed up to the host sits on both GPU and host at once; the device copy can be
// evicted while the host copy stays, and loaded back later. So the index keeps a copy per tier
// and applies each event to its own tier only.
type Tier uint8

const (
	TierGPU      Tier = iota // "GPU", or no medium (a publisher from before tiers)
	TierHost                 // "CPU_PINNED" (and "CPU", which older HiCache builds published)
	TierDisk                 // "DISK"
	TierExternal             // "EXTERNAL"
	NumTiers
)

var tierNames = [NumTiers]string{"gpu", "host", "disk", "external"}

// String returns the tier's lower-case name (gpu, host, disk, external), as decision logs and
// metrics write it.
func (t Tier) String() string {
	if t < NumTiers {
		return tierNames[t]
	}
	return "Tier(?)"
}

// allTiers is the set every tier is in (bit t for tier t).
const allTiers = 1<<NumTiers - 1

// tierOf returns the tier a medium names, or false for a medium this build does not know.
func tierOf(medium string) (Tier, bool) {
	switch {
	case medium == "" || strings.EqualFold(medium, "GPU"):
		return TierGPU, true
	case strings.EqualFold(medium, "CPU_PINNED") || strings.EqualFold(medium, "CPU"):
		return TierHost, true
	case strings.EqualFold(medium, "DISK"):
		return TierDisk, true
	case strings.EqualFold(medium, "EXTERNAL"):
		return TierExternal, true
	}
	return 0, false
}

// storeTier returns the tier a BlockStored of medium lands on. A medium this build does not
// know lands nowhere (false): filing it as a device copy would make a copy of unknown cost a
// device hit, and dropping it costs at most a cold prefill.
func storeTier(medium string) (Tier, bool) { return tierOf(medium) }

// removeTiers returns the set of tiers (bit t for tier t) a BlockRemoved of medium clears: its
// own tier, or every tier when the event names none (a publisher from before tiers, for which
// a removal meant the block was gone) or one this build does not know. Removing too much costs
// at most a cold prefill; a copy never removed would be a hit that is not there for good.
func removeTiers(medium string) uint8 {
	if medium == "" {
		return allTiers
	}
	if t, ok := tierOf(medium); ok {
		return 1 << t
	}
	return allTiers
}

// TierMatch is one target's match of a hash chain across tiers: GPU leading blocks are on the
// device (or pending there), and the Host blocks after them are on the device or in host
// memory (HiCache loads the host part back before it prefills the rest). Disk and external
// copies are kept by the index but not matched: their load cost is not known here. A stale
// or unknown target has GPU −1 and Host 0.
type TierMatch struct {
	GPU, Host int
}

// matchOut is where a match writes its answer for the targets it was asked about: out[j] the
// GPU blocks of target j, or, with tiers instead, tiers[j] its TierMatch, whose Host holds the
// GPU-or-host count until finish.
type matchOut struct {
	out   []int
	tiers []TierMatch
}

// set sets target j's GPU match (gpu) or GPU-or-host match (not gpu) to v.
func (m matchOut) set(j, v int, gpu bool) {
	switch {
	case !gpu:
		m.tiers[j].Host = v
	case m.tiers != nil:
		m.tiers[j].GPU = v
	default:
		m.out[j] = v
	}
}

// start sets target j's matches to n before the walk (or marks it stale with staleVal).
func (m matchOut) start(j, n int, stale bool, staleVal int) {
	if stale {
		m.set(j, staleVal, true)
		return
	}
	m.set(j, n, true)
	if m.tiers != nil {
		m.set(j, n, false)
	}
}

// stop sets, for every target of ids in word w whose bit is in miss, its GPU (or GPU-or-host)
// match to at.
func (m matchOut) stop(ids []TargetID, miss uint64, w, at int, gpu bool) {
	for j, id := range ids {
		if int(id)>>6 == w && miss&(uint64(1)<<(id&63)) != 0 {
			m.set(j, at, gpu)
		}
	}
}

// finish turns the tiers' GPU-or-host counts into the Host blocks beyond the GPU's.
func (m matchOut) finish() {
	for j := range m.tiers {
		if m.tiers[j].GPU >= 0 {
			m.tiers[j].Host -= m.tiers[j].GPU
		} else {
			m.tiers[j].Host = 0
		}
	}
}
