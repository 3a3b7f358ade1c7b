package h1

import (
	"context"
	"sync"
)

// Cancel ends the exchange sent with it (Request.Cancel) from another goroutine, besides its
// context. It is for a caller that ends one exchange on another's account (PD: a failed
// prefill leg ends its decode leg, a failed decode leg its prefill leg) without a context of
// its own per exchange: context.WithCancelCause and the context.AfterFunc the transport
// registers on it cost a children map, a channel and several allocations per exchange; a
// Cancel costs none. An exchange cancelled so fails as one whose context was cancelled:
// with context.Canceled; Cause tells why.
//
// The zero value is ready. One exchange at a time may run with a Cancel; it must not be
// copied after first use.
type Cancel struct {
	mu    sync.Mutex
	cause error  // set once cancelled
	abort func() // the running exchange's (while one runs and c is not cancelled)
}

// Cancel cancels c with cause (context.Canceled when nil); the first call's cause stays.
// It unblocks the running exchange's reads and writes.
func (c *Cancel) Cancel(cause error) {
	if cause == nil {
		cause = context.Canceled
	}
	c.mu.Lock()
	if c.cause != nil {
		c.mu.Unlock()
		return
	}
	c.cause = cause
	abort := c.abort
	c.abort = nil
	c.mu.Unlock()
	if abort != nil {
		abort()
	}
}

// Err returns nil until c is cancelled, then context.Canceled (as a cancelled context's Err).
func (c *Cancel) Err() error {
	if c.Cause() != nil {
		return context.Canceled
	}
	return nil
}

// Cause returns the cause c was cancelled with, or nil.
func (c *Cancel) Cause() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.cause
}

// watch has abort run when c is cancelled, until unwatch; it reports false (and registers
// nothing) when c is cancelled already. c may be nil: nothing to watch.
func (c *Cancel) watch(abort func()) bool {
	if c == nil {
		return true
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.cause != nil {
		return false
	}
	c.abort = abort
	return true
}

// unwatch ends watch, and reports whether its abort had not run (as a context.AfterFunc's
// stop does). c may be nil.
func (c *Cancel) unwatch() bool {
	if c == nil {
		return true
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	c.abort = nil
	return c.cause == nil
}

// err returns context.Canceled when c (which may be nil) is cancelled.
func (c *Cancel) err() error {
	if c == nil {
		return nil
	}
	return c.Err()
}
