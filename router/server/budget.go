package server

import (
	"errors"
	"io"
	"os"
	"strconv"
	"strings"
	"sync/atomic"
)

// errOverBudget ends a body read that would take the bodies in flight over
// --body-memory-budget: the request is answered 503 with Retry-After and is not retried.
var errOverBudget = errors.New("the router's memory budget for bodies in flight (--body-memory-budget) is exhausted")

// fallbackBudget is the memory budget without a container memory limit.
const fallbackBudget = 2 << 30

// budget is the memory budget for bodies in flight across all requests (--body-memory-budget):
// request bodies as they are read, and the worker replies the router holds whole before
// relaying them (a PD decode leg's non-streaming reply, a prefill leg's answer). It counts
// bytes the router allocated for them, not the Go heap; a request's whole cost is a small
// multiple of its body (docs/serve.md, "Limits"), so the heap stays within a multiple of the budget. Safe
// for concurrent use. A nil *budget admits everything.
type budget struct {
	limit int64
	used  atomic.Int64
}

// newBudget returns a budget of limit bytes; limit 0 means the default (defaultBudget).
func newBudget(limit int64) *budget {
	if limit == 0 {
		limit = defaultBudget()
	}
	return &budget{limit: limit}
}

// reserve takes n bytes if they fit and reports whether they did.
func (b *budget) reserve(n int64) bool {
	if b == nil || n <= 0 {
		return true
	}
	for {
		u := b.used.Load()
		if u+n > b.limit {
			return false
		}
		if b.used.CompareAndSwap(u, u+n) {
			return true
		}
	}
}

// release gives back n bytes taken by reserve.
func (b *budget) release(n int64) {
	if b != nil && n > 0 {
		b.used.Add(-n)
	}
}

// charge is what one body holds of a budget; release gives it all back. Not safe for
// concurrent use (one body is read by one goroutine).
type charge struct {
	b *budget
	n int64
}

// add takes n more bytes (none for n ≤ 0), or reports false (taking nothing) when they do not fit.
func (c *charge) add(n int64) bool {
	if n <= 0 {
		return true
	}
	if !c.b.reserve(n) {
		return false
	}
	c.n += n
	return true
}

// release gives back everything the charge holds; it may be called again.
func (c *charge) release() {
	c.b.release(c.n)
	c.n = 0
}

// budgetedBody is a worker reply the router holds whole: each Read is charged to the budget
// until Close, and a Read that would go over it fails with errOverBudget.
type budgetedBody struct {
	io.ReadCloser
	c    charge
	over bool
}

func (r *budgetedBody) Read(p []byte) (int, error) {
	if r.over {
		return 0, errOverBudget
	}
	n, err := r.ReadCloser.Read(p)
	if n > 0 && !r.c.add(int64(n)) {
		r.over = true
		return 0, errOverBudget
	}
	return n, err
}

func (r *budgetedBody) Close() error {
	r.c.release()
	return r.ReadCloser.Close()
}

// defaultBudget is a quarter of the container's memory limit (cgroup v2 memory.max, else
// cgroup v1 memory.limit_in_bytes), or fallbackBudget without one. A quarter leaves room for
// a request's cost beyond its body (at most about twice its size) and for everything else the
// router holds.
func defaultBudget() int64 {
	if limit, ok := cgroupMemoryLimit("/sys/fs/cgroup"); ok {
		return max(limit/4, 1<<20)
	}
	return fallbackBudget
}

// cgroupMemoryLimit reads the memory limit of the cgroup mounted at root: v2's memory.max,
// else v1's memory/memory.limit_in_bytes. "max", a missing file, or v1's "no limit" value
// (a page-rounded 2^63-1) mean none.
func cgroupMemoryLimit(root string) (int64, bool) {
	for _, f := range []string{root + "/memory.max", root + "/memory/memory.limit_in_bytes"} {
		raw, err := os.ReadFile(f)
		if err != nil {
			continue
		}
		v := strings.TrimSpace(string(raw))
		if v == "max" {
			return 0, false
		}
		n, err := strconv.ParseInt(v, 10, 64)
		if err != nil || n <= 0 || n >= 1<<60 {
			return 0, false
		}
		return n, true
	}
	return 0, false
}
