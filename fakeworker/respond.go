package fakeworker

import (
	"strconv"

	"github.com/pdrouter/pdrouter/router/wire"
)

// Response bodies, written by hand into reused buffers: OpenAI chat/completions objects and
// chunks, and SGLang /generate bodies (cumulative text when streamed). The reply text is
// workloads.ReplyText: words " xxxx", one token each.

// usage is the token accounting a reply reports.
type usage struct {
	prompt, completion, cached int
}

// Finish reasons.
const (
	finishLength = "length" // the engine always produces exactly max tokens
	finishAbort  = "abort"  // ended by /abort_request
)

// render holds everything needed to write one request's reply.
type render struct {
	route        wire.Route
	id           []byte // JSON-quoted response id (OpenAI "id"; generate meta_info.id)
	model        []byte // JSON-quoted model
	created      int64  // unix seconds
	text         string // the whole reply
	ends         []int  // ends[i]: end offset in text of token i
	prompt       []uint32
	logprobs     bool // return_logprob / logprobs asked for
	noInputLP    bool // decode in PD: input_token_logprobs is [] (the prefill computed the prompt)
	includeUsage bool // stream_options.include_usage
	withMeta     bool // prefill leg: chat/completions bodies carry meta_info too
}

// tokenEnds returns the end offset of every word token of a ReplyText reply.
func tokenEnds(text string, dst []int) []int {
	for i := 1; i < len(text); i++ {
		if text[i] == ' ' {
			dst = append(dst, i)
		}
	}
	if len(text) > 0 {
		dst = append(dst, len(text))
	}
	return dst
}

func (r *render) tokenText(i int) string {
	start := 0
	if i > 0 {
		start = r.ends[i-1]
	}
	return r.text[start:r.ends[i]]
}

// textUpTo is the reply's first n tokens.
func (r *render) textUpTo(n int) string {
	if n <= 0 {
		return ""
	}
	return r.text[:r.ends[min(n, len(r.ends))-1]]
}

// appendString appends s as a JSON string (wire's encoder: one for the whole repository).
func appendString(dst []byte, s string) []byte { return wire.AppendJSONString(dst, s) }

func appendInt(dst []byte, n int) []byte { return strconv.AppendInt(dst, int64(n), 10) }

func (r *render) appendUsage(dst []byte, u usage) []byte {
	dst = append(dst, `{"prompt_tokens":`...)
	dst = appendInt(dst, u.prompt)
	dst = append(dst, `,"total_tokens":`...)
	dst = appendInt(dst, u.prompt+u.completion)
	dst = append(dst, `,"completion_tokens":`...)
	dst = appendInt(dst, u.completion)
	dst = append(dst, `,"prompt_tokens_details":{"cached_tokens":`...)
	dst = appendInt(dst, u.cached)
	return append(dst, "}}"...)
}

// appendInputLogprobs appends SGLang's input_token_logprobs: [logprob, token_id, null] per prompt
// token (the first has a null logprob), deterministic from the token ids.
func (r *render) appendInputLogprobs(dst []byte) []byte {
	dst = append(dst, '[')
	if !r.noInputLP {
		for i, id := range r.prompt {
			if i > 0 {
				dst = append(dst, ',')
			}
			dst = append(dst, '[')
			if i == 0 {
				dst = append(dst, "null"...)
			} else {
				dst = strconv.AppendFloat(dst, -float64(id%997+1)/256, 'f', -1, 64)
			}
			dst = append(dst, ',')
			dst = strconv.AppendUint(dst, uint64(id), 10)
			dst = append(dst, ",null]"...)
		}
	}
	return append(dst, ']')
}

// appendMeta appends SGLang's meta_info object. finish "" writes a null finish_reason (a
// stream chunk before the end); reason is the abort message.
func (r *render) appendMeta(dst []byte, u usage, finish, reason string, final bool) []byte {
	dst = append(dst, `{"id":`...)
	dst = append(dst, r.id...)
	dst = append(dst, `,"finish_reason":`...)
	switch finish {
	case "":
		dst = append(dst, "null"...)
	case finishAbort:
		dst = append(dst, `{"type":"abort","message":`...)
		dst = appendString(dst, reason)
		dst = append(dst, '}')
	default:
		dst = append(dst, `{"type":"length","length":`...)
		dst = appendInt(dst, u.completion)
		dst = append(dst, '}')
	}
	dst = append(dst, `,"prompt_tokens":`...)
	dst = appendInt(dst, u.prompt)
	dst = append(dst, `,"completion_tokens":`...)
	dst = appendInt(dst, u.completion)
	if final {
		dst = append(dst, `,"cached_tokens":`...)
		dst = appendInt(dst, u.cached)
	}
	if r.logprobs {
		dst = append(dst, `,"input_token_logprobs":`...)
		dst = r.appendInputLogprobs(dst)
	}
	return append(dst, '}')
}

func (r *render) appendHead(dst []byte, object string) []byte {
	dst = append(dst, `{"id":`...)
	dst = append(dst, r.id...)
	dst = append(dst, `,"object":"`...)
	dst = append(dst, object...)
	dst = append(dst, `","created":`...)
	dst = strconv.AppendInt(dst, r.created, 10)
	dst = append(dst, `,"model":`...)
	return append(dst, r.model...)
}

func appendFinish(dst []byte, finish string) []byte {
	if finish == "" {
		return append(dst, "null"...)
	}
	dst = append(dst, '"')
	dst = append(dst, finish...)
	return append(dst, '"')
}

// appendJSON appends the complete (non-streamed) reply of n tokens.
func (r *render) appendJSON(dst []byte, n int, u usage, finish, reason string) []byte {
	text := r.textUpTo(n)
	switch r.route {
	case wire.Generate:
		dst = append(dst, `{"text":`...)
		dst = appendString(dst, text)
		dst = append(dst, `,"meta_info":`...)
		dst = r.appendMeta(dst, u, finish, reason, true)
		return append(dst, '}')
	case wire.Chat:
		dst = r.appendHead(dst, "chat.completion")
		dst = append(dst, `,"choices":[{"index":0,"message":{"role":"assistant","content":`...)
		dst = appendString(dst, text)
		dst = append(dst, `,"reasoning_content":null,"tool_calls":null},"logprobs":null,"finish_reason":`...)
	default:
		dst = r.appendHead(dst, "text_completion")
		dst = append(dst, `,"choices":[{"index":0,"text":`...)
		dst = appendString(dst, text)
		dst = append(dst, `,"logprobs":null,"finish_reason":`...)
	}
	dst = appendFinish(dst, finish)
	dst = append(dst, `,"matched_stop":null}],"usage":`...)
	dst = r.appendUsage(dst, u)
	if r.withMeta {
		dst = append(dst, `,"meta_info":`...)
		dst = r.appendMeta(dst, u, finish, reason, true)
	}
	return append(dst, '}')
}

func beginEvent(dst []byte) []byte { return append(dst, "data: "...) }
func endEvent(dst []byte) []byte   { return append(dst, '\n', '\n') }

// appendTokenEvents appends one SSE event per token in [from, to). For generate, when fin is
// non-nil the last event carries the finish reason and the final meta_info.
func (r *render) appendTokenEvents(dst []byte, from, to int, promptTokens int, fin *usage) []byte {
	for i := from; i < to; i++ {
		dst = beginEvent(dst)
		switch r.route {
		case wire.Generate:
			dst = append(dst, `{"text":`...)
			dst = appendString(dst, r.textUpTo(i+1))
			dst = append(dst, `,"meta_info":`...)
			if fin != nil && i == to-1 {
				dst = r.appendMeta(dst, *fin, finishLength, "", true)
			} else {
				dst = r.appendMeta(dst, usage{prompt: promptTokens, completion: i + 1}, "", "", false)
			}
			dst = append(dst, '}')
		case wire.Chat:
			if i == 0 {
				dst = r.appendHead(dst, "chat.completion.chunk")
				dst = append(dst, `,"choices":[{"index":0,"delta":{"role":"assistant","content":""},"logprobs":null,"finish_reason":null}]}`...)
				dst = endEvent(dst)
				dst = beginEvent(dst)
			}
			dst = r.appendHead(dst, "chat.completion.chunk")
			dst = append(dst, `,"choices":[{"index":0,"delta":{"content":`...)
			dst = appendString(dst, r.tokenText(i))
			dst = append(dst, `},"logprobs":null,"finish_reason":null}]}`...)
		default:
			dst = r.appendHead(dst, "text_completion")
			dst = append(dst, `,"choices":[{"index":0,"text":`...)
			dst = appendString(dst, r.tokenText(i))
			dst = append(dst, `,"logprobs":null,"finish_reason":null}]}`...)
		}
		dst = endEvent(dst)
	}
	return dst
}

// appendStreamEnd appends what follows the last token: for chat/completions a chunk with the
// finish reason and, when asked, a usage chunk; for generate an event with the finish reason
// unless the last token event carried it (lastCarried); then [DONE].
func (r *render) appendStreamEnd(dst []byte, n int, u usage, finish, reason string, lastCarried bool) []byte {
	switch r.route {
	case wire.Generate:
		if !lastCarried {
			dst = beginEvent(dst)
			dst = append(dst, `{"text":`...)
			dst = appendString(dst, r.textUpTo(n))
			dst = append(dst, `,"meta_info":`...)
			dst = r.appendMeta(dst, u, finish, reason, true)
			dst = append(dst, '}')
			dst = endEvent(dst)
		}
	default:
		object := "text_completion"
		if r.route == wire.Chat {
			object = "chat.completion.chunk"
		}
		dst = beginEvent(dst)
		dst = r.appendHead(dst, object)
		if r.route == wire.Chat {
			dst = append(dst, `,"choices":[{"index":0,"delta":{},"logprobs":null,"finish_reason":`...)
		} else {
			dst = append(dst, `,"choices":[{"index":0,"text":"","logprobs":null,"finish_reason":`...)
		}
		dst = appendFinish(dst, finish)
		dst = append(dst, `,"matched_stop":null}]}`...)
		dst = endEvent(dst)
		if r.includeUsage {
			dst = beginEvent(dst)
			dst = r.appendHead(dst, object)
			dst = append(dst, `,"choices":[],"usage":`...)
			dst = r.appendUsage(dst, u)
			dst = append(dst, '}')
			dst = endEvent(dst)
		}
	}
	return append(dst, wire.Done...)
}

// appendStreamError appends an error event (OpenAI-style body) and [DONE], for a stream whose
// room failed after the headers were sent.
func appendStreamError(dst []byte, status int, message string) []byte {
	dst = beginEvent(dst)
	dst = wire.AppendErrorBody(dst, status, "server_error", message)
	dst = endEvent(dst)
	return append(dst, wire.Done...)
}
