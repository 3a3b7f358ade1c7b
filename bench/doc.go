// Package bench is the load generator behind `router bench` (SPEC §5): it drives any live
// OpenAI- or SGLang-compatible endpoint (the router, one worker, a real deployment) with the
// sessions of a `workloads` workload and measures what sglang bench_serving measures, so the
// numbers compare.
//
// Load. vegeta (github.com/tsenart/vegeta/v12/lib) drives every request: its Attacker sends,
// a Targeter hands it the next turn, and a Pacer paces open-loop arrivals.
//   - Closed loop (Level.Concurrency N): N client goroutines each own one conversation at a
//     time and run its turns in order, appending the reply text actually received; think time
//     keeps the client's slot; when a conversation ends the client takes the next one. The
//     Attacker has exactly N workers whose Targeter takes the next ready turn.
//   - Open loop (a rate, a burst, a trace): Pacer wraps the level's workloads.Arrivals; each
//     arrival starts a new conversation. Its later turns follow their own replies plus think
//     time, not the arrival process: a second Attacker (infinite rate, bounded workers) sends
//     them as they become ready. queue_ms = send time − scheduled time (arrival, or reply +
//     think time for later turns): client-side queueing, reported separately.
//
// Measurement. The Attacker's http.Client has our RoundTripper, which starts each request's
// clock when it sends the request and wraps the response body so every SSE event is
// timestamped when the read that delivered it returns. Requests are keyed by the
// X-Vegeta-Seq header (and X-Vegeta-Attack, one name per Attacker) and joined with vegeta's
// Result on its Seq; vegeta's own Result.Timestamp is taken before the Targeter runs, so our
// transport's clock is the one reported. Each request also carries an X-Request-Id header,
// which `router serve` uses as the client-visible request id.
//
// Definitions (SPEC §5): TTFT is send → first event carrying non-empty text (delta content or
// reasoning_content for chat, choices[0].text for completions, new characters of the
// cumulative text for generate); ITL is the gap between such events; E2E is send → the last
// event ([DONE]); TPOT = (E2E − TTFT)/(output_tokens − 1) with output tokens from
// usage.completion_tokens (chat, completions: the workload bodies ask for
// stream_options.include_usage) or meta_info.completion_tokens (generate). A request
// succeeds only when its stream ends with [DONE]; anything else is an error counted by kind
// (reports.ErrKind…, http_NNN) with its message, never a crash: a refused connection is
// "connection", a non-2xx answer "http_NNN" with the body's message, a stream that ends
// before [DONE] "stream_cut", an in-stream error object "server_error", a request past
// Config.RequestTimeout "timeout". A failed turn ends its conversation.
//
// Levels run in order; each level replays the workload from its start (a fresh Source), so
// levels are comparable, and is scheduled exactly as `router sim` schedules it: the first
// Load.Warmup requests of a level (its workload's first, sent by the same clients or arrivals)
// are not recorded and come on top of Load.Requests; the level's times (start_ms, duration)
// count from its first recorded request; the open-loop arrivals of level i are seeded with
// Workload.Seed + i. Router and worker caches carry over between levels unless
// Load.FlushCache, which POSTs /flush_cache to the target between levels. Record ids are
// "session/turn" as in the simulator; the X-Request-Id header is the level label and issue
// number, unique in the run.
//
// Concurrency: Run may be called from several goroutines with distinct Configs; everything a
// run starts stops before Run returns (or when its context is cancelled, which also aborts
// in-flight requests).
package bench
