// Package fakeworker is an SGLang-compatible fake worker (SPEC §3): the HTTP face of the
// sim/engine model in real time, so a whole prefill/decode cluster runs on a laptop with no GPU
// and behaves like the simulated one.
//
// # Shape
//
//   - Start runs one Worker in mode regular (engine.RoleUnified), prefill or decode; StartCluster
//     runs several in one process and prints the matching `router serve` line.
//   - One engine loop goroutine per worker owns its engine.Server (loop.go). Handlers send it
//     commands and wait on a per-room mailbox (a mutex-guarded state and a one-slot notify
//     channel) that the loop fills from Advance outputs, so the loop never blocks on a slow
//     client and bursts of tokens coalesce into one wake-up and one flush. The loop sleeps until
//     the engine's NextEvent or the next command; it passes the wall clock to the engine
//     (Config.Speedup and Failures.SlowFactor scale model time inside the engine).
//   - Routes (admin.go, inference.go, loads.go): /generate, /v1/chat/completions,
//     /v1/completions, /v1/models, /health, /health_generate, /get_server_info, /get_model_info,
//     /v1/loads, /get_load, /flush_cache, /abort_request, /metrics. Prompt tokens come from
//     workloads.PromptIDs and the reply text from workloads.ReplyText, exactly as the simulator
//     and the bench count them.
//   - Load reports (loads.go, metrics.go): GET /v1/loads answers as SGLang's (JSON or, with
//     format=prometheus, gauges; dp_rank and include filters) and /metrics carries SGLang's
//     per-rank scheduler gauges (sglang:num_running_reqs, num_queue_reqs, token_usage,
//     gen_throughput, …, with a dp_rank label), both read from the engine's Loads snapshot
//     when asked, never on a timer. Config.NoLoadReports turns both off.
//   - Bodies (respond.go): OpenAI chat/completions objects and SSE chunks (role chunk, one
//     content chunk per token, a final chunk with finish_reason "length", and a usage chunk with
//     prompt_tokens_details.cached_tokens when stream_options.include_usage), SGLang /generate
//     (text, meta_info with prompt_tokens, completion_tokens, cached_tokens and, with
//     return_logprob, input_token_logprobs; streamed as cumulative text). Regular and decode
//     streams send their headers at once, as SGLang does; a room that fails after that ends the
//     stream with an OpenAI-style error event and [DONE]. The prefill leg answers only when its
//     transfer is done, so its status tells success from failure. Chat/completions logprobs are
//     not generated (null); an aborted request ends with finish_reason "abort" (status 200). Batch requests (list prompts, chat n > 1) are
//     answered 400.
//
// # PD and the bootstrap transport
//
// A prefill worker runs a bootstrap server on its bootstrap port (bootstrap.go). A decode worker
// given bootstrap_host/port/room submits the room to its engine; when the engine has
// preallocated the KV it registers the room at the prefill's bootstrap server (a long poll);
// the prefill worker passes that to its engine as Handshake and answers the poll when its
// engine reports TransferDone, carrying cached_tokens; the decode worker then calls KVArrived
// and streams. The prefill leg's own HTTP response goes out at TransferDone. Room states and
// bootstrap timeouts belong to the engines; the transport only carries messages. A decode room
// whose prefill never arrives fails after Config.BootstrapTimeout with a 5xx naming the room and
// the prefill's bootstrap address; a PD worker given no bootstrap fields answers 400. Rooms are
// keyed by bootstrap_room on both sides; a room already live on a worker is refused with 409.
//
// DP ranks: data_parallel_rank (regular, prefill) or data_parallel_rank_decode (decode), else
// routed_dp_rank, else the X-Data-Parallel-Rank header; absent, the engine picks
// bootstrap_room % dp_size in PD and round-robin in regular mode.
//
// # KV events and tokens
//
// With Config.KVEventsConfig (SGLang's --kv-events-config JSON, publisher "zmq") every DP rank
// publishes its radix cache's BlockStored / BlockRemoved / AllBlocksCleared events as SGLang
// does (kvpublish.go): a PUB socket at the endpoint's port + rank sending [topic, seq, msgpack
// [ts, events, rank]], SGLang's block hashes (router/kvindex), the tagged-array or tagged-map
// shape (Config.KVEventsShape), a ROUTER replay socket at replay_endpoint's port + rank, and
// /server_info's kv_events block. The engine loop only queues batches (bounded; dropped and
// counted when full). Config.TokenizerPath tokenizes prompts with a real tokenizer and chat
// template (router/tokenize) instead of the approximate one; token ids in the body
// (generate input_ids, completions ids) are used as they are either way. With a host tier
// (Config.Args.HiCacheRatio, --hicache-ratio: SGLang's HiCache, sim/engine/hostcache.go) the
// events carry each change's medium as HiCache's do: a page the GPU evicts is removed from
// "GPU" and stored on "CPU_PINNED", and a host hit is stored on "GPU" again when loaded back.
//
// # Failure injection (Failures)
//
// Error rate and status, hang rate, crash after N requests (engine killed, connections
// dropped), slow factor, streams cut after N tokens (connection dropped without [DONE]),
// prefill never signalling KV, health failing after T. Draws are seeded (Config.Seed). The
// slow factor also changes at runtime (Worker.SetSlowFactor, or POST /fakeworker/slow_factor
// {"slow_factor": F}, a route of fakeworker's own outside SGLang's API; GET reads it): the
// engine steps that begin after it run F× slower than the model, as a worker degrading behind
// a router's back.
//
// # Stopping
//
// Every goroutine (loop, servers, registrations) stops when Start's context is cancelled:
// waiting rooms fail with 503, hung requests are released, servers shut down within a few
// seconds, and Worker.Wait returns.
package fakeworker
