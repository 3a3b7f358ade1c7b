//go:build !linux

package fakeworker

// newWaker returns the portable waker.
func newWaker() waker { return newTimerWaker() }
