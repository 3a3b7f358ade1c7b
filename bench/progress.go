package bench

import (
	"fmt"
	"io"
	"strings"
	"sync"
	"time"
)

// progress draws one line per level on a terminal-like writer, redrawn in place ("\r") every
// interval until stop, then finished with a newline.
type progress struct {
	w      io.Writer
	label  string
	total  int // expected requests; 0 when unknown
	start  time.Time
	count  func() (done, errs int)
	stopCh chan struct{}
	wg     sync.WaitGroup
}

const progressInterval = 200 * time.Millisecond

func startProgress(w io.Writer, label string, total int, count func() (int, int)) *progress {
	p := &progress{w: w, label: label, total: total, start: time.Now(), count: count, stopCh: make(chan struct{})}
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
				p.draw()
			case <-p.stopCh:
				return
			}
		}
	}()
	return p
}

func (p *progress) draw() {
	done, errs := p.count()
	const width = 30
	var bar string
	if p.total > 0 {
		filled := min(width, done*width/p.total)
		bar = "[" + strings.Repeat("=", filled) + strings.Repeat(" ", width-filled) + "] " +
			fmt.Sprintf("%d/%d", done, p.total)
	} else {
		bar = fmt.Sprintf("%d", done)
	}
	fmt.Fprintf(p.w, "\r%-6s %s reqs  %d errs  %5.1fs ", p.label, bar, errs, time.Since(p.start).Seconds())
}

func (p *progress) stop() {
	if p.w == nil {
		return
	}
	close(p.stopCh)
	p.wg.Wait()
	p.draw()
	fmt.Fprintln(p.w)
}
