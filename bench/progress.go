package bench

import (
	"fmt"
	"io"
	"strings"
	"sync"
	"time"
)

// levelCounts is what a level has settled so far.
type levelCounts struct {
	warm, warmTotal int // warm-up requests settled, of warmTotal
	done, errs      int // recorded requests settled, and how many failed
}

// progress reports one level on stderr. On a terminal (tty) a bar is redrawn in place ("\r")
// every interval, labelled "warm-up" until the warm-up requests have settled. Otherwise it
// writes whole lines only: one when the warm-up ends, a heartbeat every HeartbeatInterval
// (requests done, errors, the P50 TTFT so far) and one when the level ends, so a log file
// shows a long level is alive without a redraw every 200 ms.
type progress struct {
	w        io.Writer
	tty      bool
	label    string
	total    int // expected recorded requests; 0 when unknown
	start    time.Time
	count    func() levelCounts
	p50TTFT  func() (ms float64, ok bool) // the level's P50 TTFT so far; nil: not reported
	now      func() time.Time             // time.Now; tests inject a clock
	stopCh   chan struct{}
	wg       sync.WaitGroup
	warmDone bool      // the warm-up line was written (non-tty)
	lastBeat time.Time // when the last heartbeat was written (non-tty), or start
}

const progressInterval = 200 * time.Millisecond

// HeartbeatInterval is how often a level in progress writes a heartbeat line when progress
// does not go to a terminal.
const HeartbeatInterval = 10 * time.Second

func startProgress(w io.Writer, tty bool, label string, total int, count func() levelCounts,
	p50TTFT func() (float64, bool)) *progress {
	now := time.Now()
	p := &progress{w: w, tty: tty, label: label, total: total, start: now, count: count, p50TTFT: p50TTFT,
		now: time.Now, lastBeat: now, stopCh: make(chan struct{})}
	if w == nil {
		return p
	}
	p.wg.Add(1)
	go func() {
		defer p.wg.Done()
		t := time.NewTicker(progressInterval)
		defer t.Stop()
		for {
			select {
			case <-t.C:
				p.tick()
			case <-p.stopCh:
				return
			}
		}
	}()
	return p
}

// tick redraws the bar (tty), or writes the warm-up line once the warm-up has settled and a
// heartbeat when one is due.
func (p *progress) tick() {
	c := p.count()
	if p.tty {
		p.draw(c)
		return
	}
	p.warmLine(c)
	if now := p.now(); now.Sub(p.lastBeat) >= HeartbeatInterval {
		p.lastBeat = now
		p.heartbeat(c, now)
	}
}

// heartbeat writes one line: "c16: 1200/5000 reqs  3 errs  P50 TTFT 45.2 ms  60s", or the
// warm-up's count while it lasts.
func (p *progress) heartbeat(c levelCounts, now time.Time) {
	elapsed := now.Sub(p.start).Round(time.Second)
	if c.warm < c.warmTotal && c.done == 0 {
		fmt.Fprintf(p.w, "%s warm-up: %d/%d requests  %v\n", p.label, c.warm, c.warmTotal, elapsed)
		return
	}
	done := fmt.Sprint(c.done)
	if p.total > 0 {
		done += "/" + fmt.Sprint(p.total)
	}
	ttft := "-"
	if p.p50TTFT != nil {
		if ms, ok := p.p50TTFT(); ok {
			ttft = fmt.Sprintf("%.1f ms", ms)
		}
	}
	fmt.Fprintf(p.w, "%s: %s reqs  %d errs  P50 TTFT %s  %v\n", p.label, done, c.errs, ttft, elapsed)
}

func (p *progress) warmLine(c levelCounts) {
	if p.warmDone || c.warmTotal == 0 || c.warm < c.warmTotal {
		return
	}
	p.warmDone = true
	fmt.Fprintf(p.w, "%s warm-up: %d requests done in %.1fs\n", p.label, c.warm, time.Since(p.start).Seconds())
}

func (p *progress) draw(c levelCounts) {
	const width = 30
	label, done, total := p.label, c.done, p.total
	if c.warm < c.warmTotal && c.done == 0 {
		label, done, total = p.label+" warm-up", c.warm, c.warmTotal
	}
	var bar string
	if total > 0 {
		filled := min(width, done*width/total)
		bar = "[" + strings.Repeat("=", filled) + strings.Repeat(" ", width-filled) + "] " +
			fmt.Sprintf("%d/%d", done, total)
	} else {
		bar = fmt.Sprintf("%d", done)
	}
	fmt.Fprintf(p.w, "\r\x1b[K%-6s %s reqs  %d errs  %5.1fs", label, bar, c.errs, time.Since(p.start).Seconds())
}

func (p *progress) stop() {
	if p.w == nil {
		return
	}
	close(p.stopCh)
	p.wg.Wait()
	c := p.count()
	if p.tty {
		p.draw(c)
		fmt.Fprintln(p.w)
		return
	}
	p.warmLine(c)
	fmt.Fprintf(p.w, "%s: %d reqs  %d errs  %.1fs\n", p.label, c.done, c.errs, time.Since(p.start).Seconds())
}
