package testutil

import (
	"sync"
	"time"
)

// ManualClock is a clock that moves only when a test tells it to: its Now satisfies
// router.Clock and any other `Now() time.Time` injection. It is safe for concurrent use; the
// zero value reads as the zero time.
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
