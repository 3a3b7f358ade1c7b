// Package wire is the wire format between clients, the router and SGLang workers: everything
// about request and response bytes that both the live proxy (router/server) and the simulator
// (sim) need, with no HTTP in it.
//
// Requests. Parse reads a body for one of the three inference routes (Route: Generate, Chat,
// Completions) into a Body: a small typed view (stream, n, logprobs wanted, client rid, model,
// batch size, routing text) plus every top-level member of the original, in order and byte for
// byte. Bodies are never decoded into structs and re-encoded, so fields this package does not
// know (and big numbers, odd unicode, nested objects) reach the workers untouched — unlike
// sgl-router, which drops unmodelled fields. Rewritten bodies (Body.Append, Body.PD,
// Body.DPRankPieces) equal the original member for member, except the keys they set: those replace
// the first existing occurrence in place or are appended. Parse errors are *Error values (400,
// invalid_request_error) naming the field at fault.
//
// Routing text (SPEC §1.2), the string the cache-aware policy matches on:
//   - chat: for every message in order, its content (a string, or the "text" of each part of a
//     content array) then its reasoning_content; every role counts (system, user, assistant,
//     tool, …). Pieces are joined by single spaces; empty strings are skipped.
//   - completions: "prompt" if a string; for a list of strings its first element; for token ids
//     (a flat list is one prompt, a list of lists a batch) the first prompt's ids joined by
//     single spaces.
//   - generate: "text" (a list: its first element); else "input_ids" joined by single spaces
//     (a batch: its first element); "" for input_embeds.
//   - at most MaxRoutingText bytes of it (16 MiB, cut at a character boundary): an outsized
//     body is routed on a prefix of its text.
//
// Batches: generate "text" list or "input_ids" list of lists, completions "prompt" list of
// strings or of token lists, chat n > 1. A batch gets list-valued rid and bootstrap fields of
// the batch size; a client rid must then be a list of that size (a string rid is rejected, as
// SGLang does).
//
// PD. IDGen makes rids and bootstrap rooms from an injected *rand.Rand; BootstrapHost derives
// bootstrap_host from a prefill URL exactly like sgl-router; Body.PD writes both PD legs with the
// bootstrap and DP-rank fields of SPEC §1.4 (FieldStyle picks the legacy or routed names), as
// Pieces: the bytes Body.Append would write, referring to the original's long runs rather than
// copying them.
// MergeLogprobs, PrefillLogprobs and AppendMergedEvent prepend the prefill leg's input token
// logprobs to the decode response, whole or streamed.
//
// Streams. Parser is an incremental server-sent-event parser whose output does not depend on
// network chunking; Event.Raw gives each event's original bytes for relaying without
// re-encoding; AppendEvent writes events.
//
// Errors and logs. ErrorBody and StreamError write OpenAI-style error bodies and the mid-stream
// error event; AppendDecisionLine writes one --decision-log line (SPEC §2).
//
// Nothing here reads the clock or the global random source; the only state is in IDGen (safe
// for concurrent use) and Parser (one goroutine at a time). All functions are total: malformed
// input yields an error or an unchanged pass-through, never a panic.
package wire
