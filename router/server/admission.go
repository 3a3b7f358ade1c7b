package server

import (
	"context"
	"errors"
	"sync"
	"time"
)

// Admission errors; the handler maps them to 429 and 408 (SPEC §1.6).
var (
	ErrQueueFull    = errors.New("too many requests: the admission queue is full")
	ErrQueueTimeout = errors.New("request timed out waiting for an admission slot")
)

// admission limits concurrent requests (--max-concurrent-requests) with a bounded FIFO queue
// of waiters (--queue-size) that wait at most --queue-timeout-secs. A permit is held for the
// whole request, stream included: release it when the response is finished. Safe for
// concurrent use. A nil *admission admits everything.
type admission struct {
	slots   chan struct{} // one token per running request
	timeout time.Duration
	after   func(time.Duration) <-chan time.Time // time.After; injected by tests

	mu       sync.Mutex // protects waiting
	waiting  int
	maxQueue int
}

// newAdmission returns nil (no limit) when maxConcurrent < 1.
func newAdmission(maxConcurrent, queueSize int, timeout time.Duration) *admission {
	if maxConcurrent < 1 {
		return nil
	}
	return &admission{slots: make(chan struct{}, maxConcurrent), maxQueue: queueSize, timeout: timeout, after: time.After}
}

// acquire takes a permit, waiting in the queue if all are taken. It returns ErrQueueFull at
// once when the queue is full, ErrQueueTimeout after the queue timeout, or ctx's error. The
// returned release must be called exactly once (extra calls are no-ops).
func (a *admission) acquire(ctx context.Context) (release func(), err error) {
	if a == nil {
		return func() {}, nil
	}
	select {
	case a.slots <- struct{}{}:
		return a.releaser(), nil
	default:
	}
	a.mu.Lock()
	if a.waiting >= a.maxQueue {
		a.mu.Unlock()
		return nil, ErrQueueFull
	}
	a.waiting++
	a.mu.Unlock()
	defer func() {
		a.mu.Lock()
		a.waiting--
		a.mu.Unlock()
	}()
	select {
	case a.slots <- struct{}{}: // blocked senders are served in FIFO order
		return a.releaser(), nil
	case <-a.after(a.timeout):
		return nil, ErrQueueTimeout
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

func (a *admission) releaser() func() {
	var once sync.Once
	return func() { once.Do(func() { <-a.slots }) }
}
