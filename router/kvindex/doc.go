// Package kvindex is the precise prefix index behind cache-aware routing on SGLang's own KV
// events: which KV blocks each `url@rank` target holds, keyed by the engine's block hash, on
// which tier (GPU, or HiCache's host memory, disk, external store: [Tier]), with
// store/remove/clear applied from the event stream per medium, the longest consecutive prefix
// of a request's hash chain per target (on the GPU, then on the GPU or the host), and a short-lived pending overlay for requests routed but
// not yet published. It also computes SGLang's block-hash chain from token ids.
//
// PathIndex answers the same questions for a feed that knows each change's token path (the
// simulator's engines): a radix tree of page runs, with no hash and no map entry per block.
//
// The package is pure: no I/O, no wall clock (times are passed in), no global random source.
// serve feeds Index through router/kvevents; the simulator feeds PathIndex.
package kvindex
