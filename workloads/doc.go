// Package workloads produces the requests that `router bench` sends and `router sim` simulates,
// and owns the token arithmetic every other package agrees on.
//
// Quick map of the API (see each name's doc for units and defaults):
//
//	Tokenize(text) []uint32, Count(text) int          the shared approximate tokenizer (tokenizer.go)
//	RenderPrompt(api, body) (string, error)            the prompt text a model sees (prompt.go)
//	PromptIDs(api, body) ([]uint32, error)             its token ids (input_ids passed through)
//	ReplyText(promptIDs, n) string                     deterministic reply of exactly n tokens (reply.go)
//	NewSource(Params) (Source, error)                  lazy stream of *Session by workload name (source.go)
//	(*Session).Next(prevReply) (Turn, bool)            the next request body of a conversation (session.go)
//	OpenMooncake(path, seed) (*MooncakeReader, error)  stream a Mooncake JSONL trace (mooncake.go);
//	(*MooncakeReader).Next() (MooncakeRequest, error)  io.EOF at the end; the request has
//	    .Arrival, .InputLength, .OutputTokens, .HashIDs, .promptIDs(), .PromptText()
//	OpenAzure(path, seed) (*AzureReader, error)        stream an Azure 2023 CSV trace (azure.go)
//	Arrivals.At(i) (offset, ok): Constant, Burst, NewPoisson, NewGamma, TraceArrivals (arrivals.go)
//	Params, DefaultParams, (Params).Validate: workload options, SPEC §7 (params.go)
//	LoadParams, DefaultLoadParams, Validate, Levels(isTrace) []Level, (Level).Arrivals (load.go)
//
// The flags for Params and LoadParams are registered once, in cmd/router (workloadflags.go).
// Functions are pure and safe for concurrent use; Source is safe for concurrent use; a Session
// and the trace readers are not.
//
// Tokens. One deterministic, approximate tokenizer (roughly 4–5 characters per token on
// English-like text) is shared by fakeworker, the simulator and the bench, so token counts agree
// everywhere. Its rules, applied left to right:
//
//  1. "\n" is always a token of its own.
//  2. A single space followed by a word rune (a letter or digit, not CJK) starts a word token:
//     the space plus up to 6 word runes. Longer words continue in chunks of up to 6 runes.
//  3. A word rune starts a word token of up to 6 word runes (no leading space).
//  4. A CJK/ideographic rune (U+2E80 and above that is a letter) is a token of its own.
//  5. Other whitespace forms one token per run, ending before "\n" or before a space that
//     starts a word token (rule 2).
//  6. Any other rune (punctuation, symbols) is a token of its own.
//
// A token's id is the 32-bit FNV-1a hash of its UTF-8 bytes. Generated text is a sequence of
// words " xxxx" (a space and 1–4 lowercase letters) from a fixed 4,096-word vocabulary, so a
// generated piece of n words is exactly n tokens, and the tokens of a concatenation of generated
// pieces are the concatenation of their tokens: prefix sharing in characters is prefix sharing
// in tokens.
//
// Lengths in Params (system prompt, question, output, input) are content tokens. With
// --api completions or generate the prompt is the pieces joined by "\n" (one token each); with
// --api chat the chat template of RenderPrompt adds a fixed number of tokens per message.
// Turn.InputTokens is always the token count of the rendered prompt.
//
// Everything here is deterministic from Params.Seed and never reads the wall clock. Sources
// are lazy: memory is proportional to the sessions in flight, not to the workload size.
package workloads
