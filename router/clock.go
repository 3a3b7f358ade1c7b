package router

import (
	"sync"
	"time"
)

// Clock is the only way the router reads time.
type Clock interface {
	Now() time.Time
}

// ClockFunc adapts a function to [Clock], e.g. ClockFunc(time.Now) in the live server.
type ClockFunc func() time.Time

// Now returns f().
func (f ClockFunc) Now() time.Time { return f() }

// ManualClock is a [Clock] that moves only when told to; for tests and simple drivers. It is
// safe for concurrent use. The zero value reads as the zero time.
type ManualClock struct {
	mu  sync.Mutex // protects now
	now time.Time
}

// NewManualClock returns a clock reading t.
func NewManualClock(t time.Time) *ManualClock { return &ManualClock{now: t} }

// Now returns the current reading.
func (c *ManualClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

// Set moves the clock to t (backwards too; callers keep it monotonic if they need that).
func (c *ManualClock) Set(t time.Time) {
	c.mu.Lock()
	c.now = t
	c.mu.Unlock()
}

// Advance moves the clock forward by d and returns the new reading.
func (c *ManualClock) Advance(d time.Duration) time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = c.now.Add(d)
	return c.now
}
