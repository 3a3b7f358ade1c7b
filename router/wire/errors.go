package wire

import "strconv"

// OpenAI error types used by the router.
const (
	TypeInvalidRequest = "invalid_request_error" // the client's request is at fault (4xx)
	TypeUpstream       = "upstream_error"        // a worker failed after the response started
)

// ErrorBody returns the OpenAI-style error body
// `{"error":{"message":…,"type":…,"code":status}}` (code is the HTTP status as a number).
func ErrorBody(status int, typ, message string) []byte {
	return AppendErrorBody(make([]byte, 0, len(message)+len(typ)+48), status, typ, message)
}

// AppendErrorBody appends ErrorBody(status, typ, message) to dst.
func AppendErrorBody(dst []byte, status int, typ, message string) []byte {
	dst = append(dst, `{"error":{"message":`...)
	dst = appendQuote(dst, message)
	dst = append(dst, `,"type":`...)
	dst = appendQuote(dst, typ)
	dst = append(dst, `,"code":`...)
	dst = strconv.AppendInt(dst, int64(status), 10)
	return append(dst, "}}"...)
}

// StreamError returns the bytes that end a stream that failed after its headers were sent
// (SPEC §1.4 step 6): `data: {"error":{"message":…,"type":"upstream_error","code":status}}`,
// a blank line, then `data: [DONE]` and a blank line.
func StreamError(status int, message string) []byte {
	dst := make([]byte, 0, len(message)+96)
	dst = append(dst, "data: "...)
	dst = AppendErrorBody(dst, status, TypeUpstream, message)
	return append(dst, "\n\ndata: [DONE]\n\n"...)
}
