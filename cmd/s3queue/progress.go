package main

import (
	"fmt"
	"io"
	"strings"
	"sync"
	"time"
)

// progressEvery is how often a progress line is redrawn.
const progressEvery = 100 * time.Millisecond

// progress draws a line on stderr, redrawn in place every progressEvery
// while a long operation runs (batch submit, bulk requeue and cancel,
// purge), only when stderr is a terminal: logs and scripts never see it.
type progress struct {
	w    io.Writer
	line func() string
	done chan struct{}
	wg   sync.WaitGroup
	once sync.Once
}

// startProgress starts drawing line() on stderr if stderr is a terminal;
// stop the returned progress when the operation ends. It is safe to call
// stop on a progress that draws nothing.
func (a *app) startProgress(line func() string) *progress {
	p := &progress{w: a.stderr, line: line, done: make(chan struct{})}
	if !isTerminal(a.stderr) {
		close(p.done)
		p.w = nil
		return p
	}
	p.wg.Go(func() {
		t := time.NewTicker(progressEvery)
		defer t.Stop()
		for {
			select {
			case <-p.done:
				p.draw()
				fmt.Fprintln(p.w)
				return
			case <-t.C:
				p.draw()
			}
		}
	})
	return p
}

func (p *progress) draw() {
	// \r and "erase to end of line" redraw the line in place.
	fmt.Fprintf(p.w, "\r%s \x1b[K", p.line())
}

// stop draws the last state, ends the line and waits for the drawer.
func (p *progress) stop() {
	if p.w == nil {
		return
	}
	p.once.Do(func() { close(p.done) })
	p.wg.Wait()
}

// bar is a text progress bar of done out of total, width characters wide.
func bar(done, total, width int) string {
	if total <= 0 {
		return "[" + strings.Repeat(" ", width) + "]"
	}
	n := min(done*width/total, width)
	return "[" + strings.Repeat("#", n) + strings.Repeat(".", width-n) + "]"
}
