package testutil

import (
	"testing"
	"time"
)

// Eventually polls cond until it returns true, failing the test with what (the awaited
// condition, as "the gap to be replayed") when within passes first. Use it where no event can
// tell that a condition holds.
//
// cond runs on the caller's goroutine, so it may call require or t.Fatal (testify's
// Eventually runs it on another goroutine, where FailNow must not be called). The poll interval
// starts at 1 ms and doubles up to 20 ms: a quick condition is seen quickly, a slow one (an HTTP
// request, a metrics scrape) is not run in a tight loop.
func Eventually(t testing.TB, within time.Duration, cond func() bool, what string) {
	t.Helper()
	deadline := time.Now().Add(within)
	tick := time.Millisecond
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %s waiting for %s", within, what)
		}
		time.Sleep(tick) // the poll interval, not a guess at how long cond takes
		tick = min(2*tick, 20*time.Millisecond)
	}
}
