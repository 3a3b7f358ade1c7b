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
// writes whole lines only: one when the warm-up ends and one when the level ends, so a log
// file gets a line per level instead of a redraw every 200 ms.
type progress struct {
	w        io.Writer
	tty      bool
	label    string
	total    int // expected recorded requests; 0 when unknown
	start    time.Time
	count    func() levelCounts
	stopCh   chan struct{}
	wg       sync.WaitGroup
	warmDone bool // the warm-up line was written (non-tty)
}

const progressInterval = 200 * time.Millisecond

func startProgress(w io.Writer, tty bool, label string, total int, count func() levelCounts) *progress {
	p := &progress{w: w, tty: tty, label: label, total: total, start: time.Now(), count: count, stopCh: make(chan struct{})}
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

// tick redraws the bar (tty) or writes the warm-up line once the warm-up has settled.
func (p *progress) tick() {
	c := p.count()
	if p.tty {
		p.draw(c)
		return
	}
	p.warmLine(c)
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
