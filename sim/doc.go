// Package sim is `router sim`: a discrete-event simulator of a whole SGLang cluster — prefill
// and decode servers (or regular ones), their DP ranks, the KV transfer and the bootstrap
// handshake — with the real routing core (package router) in the loop, so that the policy,
// cache_threshold, the balance thresholds and DP-awareness can be tuned against TTFT and TPOT
// before the same settings file goes to `router serve --config` (SPEC §4, ARCHITECTURE §5).
//
// # What it simulates
//
// Per request, exactly the path of a live run: the client builds the very body the bench would
// send (package workloads, with the bench's closed- and open-loop scheduling of SPEC §5), the
// router parses it with router/wire, derives the routing text and calls Router.Route; like
// `serve` it then draws the rid and bootstrap room from its own seeded source and sends both
// legs. The engine models of package sim/engine compute everything else: the decode side
// preallocates and registers (Handshake, one network hop), the prefill side computes and
// transfers the KV (TransferDone → KVArrived), decode streams tokens. Decision.Done is called
// when serve would call it: a prefill leg when its response is complete (TransferDone, one hop
// later), a decode or regular leg when its stream ends; failures feed the circuit breaker, the
// paired leg is aborted and reported Cancelled, and the request is retried (re-routed) while no
// token reached the client and the retry budget allows. Replies are workloads.ReplyText, so a
// conversation's next turn carries exactly the text a live fakeworker would have returned.
// Workers are named like live ones (http://sim-prefill-0:30000, …) and --kill WORKER@T kills
// one mid-run; health probes then feed the router's health machine every
// health_check_interval_secs.
//
// Results are the reports types the bench writes, plus SimStats (predicted match rate beside
// the engine's actual hit rate, per-target load spread, engine-side queueing delay).
//
// # How time works
//
// Virtual time starts at Epoch. One goroutine pops events from a typed binary heap ordered by
// (time, sequence number): client sends, arrivals at the router, submissions, handshakes, leg
// ends, client receptions, one wake-up per server at its engine's NextEvent, Router.Tick every
// virtual second, with --kill health probes, and with load reports each replica's polls and
// their answers. Every network hop (client ↔ router ↔ server, decode → prefill registration)
// costs Cluster.NetLatency. The router reads the virtual clock only. Nothing reads the wall
// clock, iterates a map in a decision path or uses a global random source: the same Config
// gives byte-identical results. Config.Progress is the only hook the caller may use to look at
// wall time.
//
// A second goroutine prepares conversations ahead of the event loop, in the source's order:
// every turn's body built, parsed and tokenized, and the reply appended. That is exact because a
// simulated server always generates max_tokens tokens of workloads.ReplyText, and a failed turn
// ends its conversation (there is no reply to append). It only moves work to another core; the
// results do not depend on it.
//
// # KV events and router replicas
//
// Config.Routing shapes the routing layer. With KVEvents on, every server whose role routes
// with cache_aware publishes its radix cache's changes at SGLang's cadence (engine.Config.KVEvents);
// the simulator delivers each batch to each router replica through the event queue after that
// replica's draw of KVEventsDelay (a rank's batches stay in order), or loses it with probability
// KVEventsLoss; each replica applies what it receives to its own kvindex.PathIndex (which
// answers as serve's kvindex.Index answers SGLang's block hashes of the same tokens) as serve's
// subscriber does (first batch: clear and fresh; a sequence gap without replay: stale until an
// AllBlocksCleared), and requests carry their prompt ids so cache_aware matches on the index
// (router.Router.UseKVTokenIndex). With
// Replicas > 1 each replica is a router.Router of its own (tree, pending overlay, in-flight
// counts, index); a request reaches one by ReplicaAffinity and stays on it for its retries.
// Replica 0 draws from the run's seed, the others and the delay and loss draws from seeds
// derived from it, so replicas and delays keep runs byte-identical.
//
// # Engine load reports and overload
//
// With Routing.LoadReportInterval > 0 each replica polls every live server that often, as
// serve's load poller does: the poll samples the server's ranks (engine.Server.Loads) when it
// starts, and its answer reaches the replica after the replica's draw of LoadReportDelay,
// through the event queue, to be handed to Router.ReportLoad stamped with the poll's start (per
// url@rank when DP-aware, else the ranks' sum). A replica's ticker starts at an offset of its
// own; a poll still unanswered at the next tick makes the replica skip that server, and a
// killed server answers nothing, so its report ages out. The router's policies then compare
// what the reports say while they are fresh (router.Config.LoadReportMaxAgeMs). A request that
// Route sheds (router.OverloadError: every available target over a --worker-overload-* bound)
// ends at once as serve answers it, 503 with Retry-After, and is not retried.
//
// # Memory
//
// A run's memory is its engines' caches, the conversations in flight, one record per request
// and the routers' approximate trees. The trees alone grow with the run: serve bounds each at
// max_tree_total_chars (2^30 characters, a gigabyte of text per tree), which a run of a million
// requests reaches. The simulator bounds them lower, at Config.TreeChars (DefaultTreeChars,
// 2^26), and trims them as serve does at its bound; Stats.TreeTrims says whether a run got
// there (no test or default run does). Config.TreeChars < 0 restores serve's bound. The trees
// keep their texts as substrings of the conversations' own (router.Router.RetainRoutedTexts),
// which the prefill and decode trees then share, rather than a copy each.
//
// # Sweeps
//
// Sweep runs a grid of router (and cluster) settings, one independent, deterministic run per
// point, in parallel on all cores, and ranks the points by P95 TTFT.
package sim
