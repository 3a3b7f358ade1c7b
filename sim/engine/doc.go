// Package engine models an SGLang server closely enough for routing studies: a pure,
// deterministic state machine that the simulator (sim) drives in virtual time and fakeworker
// drives in real time, so a simulated server and a fake one you can curl behave alike
// (ARCHITECTURE §4).
//
// # What it models
//
// A Server has a Role (prefill, decode or unified), Config.DPSize ranks and a Profile. Each rank
// has a KV pool of max_total_num_tokens tokens and, except on decode servers, a radix prefix cache
// over token ids (page-aligned, LRU eviction of unreferenced leaves; nodes used by a running
// request are locked). A request's prefix hit (cached_tokens) is measured when it is admitted.
//
//   - Prefill role (SGLang's disaggregation queues): bootstrap (until Handshake) → waiting →
//     chunked prefill batches under ChunkedPrefillSize tokens, each chunk's KV sent as it is
//     computed over the rank's link (LinkBandwidth, shared by concurrent transfers) → inflight
//     → TransferDone (last byte out + T0 + PDOverhead) and Finished. The first output token is
//     produced by prefill and travels with the KV.
//   - Decode role: prealloc (SGLang's DecodePreallocQueue: the prompt's KV is allocated when it
//     fits with ReservedDecodeTokens per room kept free; the queue waits when memory is short,
//     which keeps the prefill side's room in bootstrap) → transfer (until KVArrived) → waiting →
//     running (continuous batching, MaxRunningRequests, one token per request per step;
//     requests are retracted in SGLang's order when KV runs out).
//   - Unified role: continuous batching with chunked prefill, prefill-first; admission by
//     SGLang's new-token ratio (running requests charged ratio × their remaining outputs).
//   - Profile.HostOverhead delays a request's arrival at the scheduler; Config.CUDAGraphMaxBS
//     pads decode batches to SGLang's captured sizes (PaddedBatch).
//   - Rooms follow KVPoll's states, Bootstrapping → WaitingForInput → Transferring → Success |
//     Failed, with a BootstrapTimeout on each side; Abort, Kill (the server dies) and
//     Config.NeverSignalKV (a transfer never completes) are the failure hooks.
//   - DP ranks come from Req.Rank, else room % DPSize (PD) or round-robin (unified). With
//     DPAttention all ranks step in lockstep and a step lasts as long as the busiest rank's.
//   - Step times follow the Profile's coefficients (Build derives them from a model card, a GPU and a
//     parallelism; Presets lists named ones). Constant and Instant profiles are load-independent: every
//     request gets exactly TTFT and ITL however many run.
//   - KV events (Config.KVEvents): each rank's radix cache records block stores, evictions and
//     clears as SGLang's RadixCache does, handed out in batches at SGLang's publish cadence
//     (kvevents.go), so a driver can publish them as SGLang's --kv-events-config does.
//
// Not modelled: CPU/host KV tiers (a retracted decode room's KV offload is free), speculative
// decoding, mixed prefill+decode batches, and stop conditions other than MaxNew.
//
// # How time works
//
// The package never reads the wall clock, sleeps or uses a global random source. Every call takes
// the model time now; times must not decrease (an earlier time counts as the latest seen). Each
// call first processes everything due up to its now, so a call never changes the past. The
// server says when it next needs attention with NextEvent; the driver calls Advance at that time
// (the simulator schedules it on its event heap; fakeworker sleeps until then or until a new
// call), and Advance returns the outputs produced since the previous Advance, each stamped with
// the model instant it happened (At). Config.Speedup divides every model duration.
//
// # API in brief
//
//	s, _ := engine.New(engine.Config{Role: engine.RoleDecode, DPSize: 4, Profile: p})
//	s.Submit(now, engine.Req{Room: room, Rank: -1, Prompt: ids, MaxNew: 128})
//	s.Handshake(now, room)          // prefill: the decode side registered and preallocated
//	s.KVArrived(now, room, cached)  // decode: the prefill's KV and first token landed
//	s.Abort(now, room, "client went away")
//	t, ok := s.NextEvent()
//	outs := s.Advance(t)            // Preallocated, TransferDone, Token, Finished, Failed
//	ls := s.Loads(t)                // per DP rank, what SGLang's /v1/loads reports (RankLoad)
//
// A PD driver forwards Preallocated (decode) as Handshake to the prefill server and TransferDone
// (prefill) as KVArrived, with its CachedTokens, to the decode server. Every submitted room ends
// with exactly one Finished or Failed output.
//
// A Server is not safe for concurrent use: one goroutine drives it at a time.
package engine
