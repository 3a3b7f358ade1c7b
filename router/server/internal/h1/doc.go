// Package h1 is the upstream transport of the router's inference legs: plain HTTP/1.1 over
// pooled keep-alive connections, the calling goroutine doing every read and write itself.
//
// Why not net/http's Transport: it runs a read-loop and a write-loop goroutine per
// connection, so one proxied request hands off between goroutines several times, and at
// moderate load each hand-off wakes an idle thread. Here a request is one write, then reads
// on the caller's goroutine until the body ends and the connection goes back to the pool.
// Owning the read buffer also tells the relay when the upstream has nothing more buffered
// (the Pending method of its response bodies), the moment to flush to the client. Measured
// with BenchmarkProxy (the router as its own process beside nginx): net/http on these legs
// cost 11–18 % more router CPU per request and 16–24 % more added TTFT P99 (issue 26).
//
// Scope: http:// URLs with a host. Anything else (https) goes to the fallback [Doer].
// Response heads are parsed by a fast path for the usual ones (head.go) or by net/http's
// ReadResponse, which decides every other case, and bounded at [MaxResponseHead];
// request header names and values are validated as net/http validates them.
package h1
