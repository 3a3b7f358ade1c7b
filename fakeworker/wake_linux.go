//go:build linux

package fakeworker

import (
	"os"
	"time"

	"golang.org/x/sys/unix"
)

// timerfdWaker arms a Linux timerfd; a goroutine reads it through the netpoller (the fd is
// non-blocking, so os.File parks the goroutine in epoll instead of blocking a thread), and
// epoll returns the moment the timer expires.
type timerfdWaker struct {
	fd int
	f  *os.File
	ch chan struct{}
}

// newWaker returns the most precise waker available.
func newWaker() waker {
	fd, err := unix.TimerfdCreate(unix.CLOCK_MONOTONIC, unix.TFD_NONBLOCK|unix.TFD_CLOEXEC)
	if err != nil {
		return newTimerWaker()
	}
	w := &timerfdWaker{fd: fd, f: os.NewFile(uintptr(fd), "timerfd"), ch: make(chan struct{}, 1)}
	go func() {
		var buf [8]byte // the expiration count
		for {
			if _, err := w.f.Read(buf[:]); err != nil {
				return // closed
			}
			select {
			case w.ch <- struct{}{}:
			default:
			}
		}
	}()
	return w
}

func (w *timerfdWaker) C() <-chan struct{} { return w.ch }

func (w *timerfdWaker) Arm(d time.Duration) {
	if d <= 0 {
		d = time.Nanosecond // a zero value would disarm
	}
	spec := unix.ItimerSpec{Value: unix.NsecToTimespec(int64(d))}
	if unix.TimerfdSettime(w.fd, 0, &spec, nil) != nil {
		select { // cannot arm: wake now, the loop re-checks and re-arms
		case w.ch <- struct{}{}:
		default:
		}
	}
}

func (w *timerfdWaker) Disarm() { _ = unix.TimerfdSettime(w.fd, 0, &unix.ItimerSpec{}, nil) }

func (w *timerfdWaker) Close() { _ = w.f.Close() }
