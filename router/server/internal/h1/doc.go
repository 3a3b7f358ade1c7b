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
// On Linux its connections do their reads and writes as raw system calls ([Raw]), and the
// server's client connections can too ([RawListener]): the runtime's poller still waits, but
// no entersyscall wakes its sysmon thread per request (issue 29: at closed loop 1, router CPU
// per request −25 to −30 %, syscalls 17.6 → 11.6 and context switches 6.9 → 3.1 per request).
//
// Scope: http:// URLs with a host. Anything else (https) goes to the fallback [Doer].
// Response heads are parsed by a fast path for the usual ones (head.go) or by net/http's
// ReadResponse, which decides every other case, and bounded at [MaxResponseHead];
// request header names and values are validated as net/http validates them.
package h1
