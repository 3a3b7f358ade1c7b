package fakeworker

import "time"

// waker wakes the engine loop when the engine's next event is due. Go's runtime timers can
// fire up to about a millisecond late when the process is idle (the netpoller sleeps in whole
// milliseconds): measured here, a 300 µs timer fired ~780 µs late and a 20 ms one ~220 µs
// late, which turned a constant 20 ms TTFT into 20.7 ms at 500 req/s. On Linux a timerfd read
// through the netpoller wakes within a few microseconds without blocking a thread or
// spinning; elsewhere, or if the timerfd cannot be created, a time.Timer is used.
type waker interface {
	// C receives after the armed instant (possibly spuriously: the loop just re-checks).
	C() <-chan struct{}
	// Arm makes C fire after d, replacing any earlier arming.
	Arm(d time.Duration)
	// Disarm cancels the arming.
	Disarm()
	// Close releases the waker; C never fires again.
	Close()
}

// timerWaker is the portable waker.
type timerWaker struct {
	t  *time.Timer
	ch chan struct{}
	q  chan struct{}
}

func newTimerWaker() *timerWaker {
	w := &timerWaker{t: time.NewTimer(time.Hour), ch: make(chan struct{}, 1), q: make(chan struct{})}
	w.t.Stop()
	go func() {
		for {
			select {
			case <-w.t.C:
				select {
				case w.ch <- struct{}{}:
				default:
				}
			case <-w.q:
				return
			}
		}
	}()
	return w
}

func (w *timerWaker) C() <-chan struct{}  { return w.ch }
func (w *timerWaker) Arm(d time.Duration) { w.t.Reset(d) }
func (w *timerWaker) Disarm()             { w.t.Stop() }
func (w *timerWaker) Close()              { w.t.Stop(); close(w.q) }
