package sim

import (
	"context"
	"fmt"
	"math/rand/v2"
	"strings"
	"time"

	"github.com/s3queue/s3queue/internal/pause"
	"github.com/s3queue/s3queue/shards"
	"github.com/s3queue/s3queue/task"
)

// PausePlan is one operator's pause and resume during the chaos phase: at
// At, the task type (or, with All, the whole queue) is paused, by a CAS
// write of the pause object under the seed's faults; For later it is
// resumed. Every task is of one type, so both stop every claim; the type's
// pause goes through the workers' hold-and-announce path, the whole
// queue's through discovery stopping.
type PausePlan struct {
	At, For time.Duration
	All     bool
}

func (p PausePlan) String() string {
	what := "type " + taskType
	if p.All {
		what = "the whole queue"
	}
	return fmt.Sprintf("pause of %s at %v for %v", what, p.At.Round(time.Second), p.For.Round(time.Second))
}

// planPause draws a quarter of the seeds' pause, from a source of its own
// (the other seeds' plans stay as they were). The resume lands at least a
// minute before the quiet tail, whose liveness checks then prove that
// every paused task still runs.
func planPause(plan *Plan, opts Options) {
	rng := rand.New(rand.NewPCG(plan.Seed, 0x9a05e))
	if rng.IntN(4) != 0 {
		return
	}
	d := 4*time.Minute + time.Duration(rng.Int64N(int64(3*time.Minute)))
	latest := opts.Chaos - d - time.Minute
	if latest <= time.Minute {
		return
	}
	plan.Pause = &PausePlan{At: time.Minute + time.Duration(rng.Int64N(int64(latest-time.Minute))), For: d, All: rng.IntN(2) == 0}
}

// pause runs the plan's pause and resume as an operator would (s3queue
// pause, s3queue resume), each tried again until it succeeds.
func (w *world) pause() {
	pp := w.plan.Pause
	start := time.Now()
	p := w.spawn("p", "ppause", func(ctx context.Context, p *proc) {
		var types []string
		if !pp.All {
			types = []string{taskType}
		}
		// It stamps the pause object with S3 time, as Queue.Pause does.
		clk := w.clockFor(p)
		change := func(c func(*pause.State) bool) {
			for ctx.Err() == nil {
				if iv, err := clk.Now(ctx); err == nil {
					if _, err := pause.Change(ctx, p.h, iv.Latest, "sim", "", c); err == nil {
						return
					}
				}
				time.Sleep(time.Second)
			}
		}
		time.Sleep(time.Until(start.Add(pp.At)))
		change(pause.Pausing(types...))
		// A worker started during the pause, beyond its slack, while the
		// store fails its first reads of the pause object: it must claim
		// nothing until one answers (blind defect B3 took a failed read
		// for an answer, and claimed the paused type at once).
		time.Sleep(time.Until(start.Add(pp.At + pauseSlack(w.plan.Faults.MaxDelay) + 5*time.Second)))
		if ctx.Err() == nil {
			w.mu.Lock()
			w.flakyStart = 2
			w.mu.Unlock()
			w.startWorker()
		}
		time.Sleep(time.Until(start.Add(pp.At + pp.For)))
		change(pause.Resuming())
	})
	<-p.done
}

// pauseSlack is how long after the pause object's write a worker's claim
// may still land: its check interval, then the requests of a step under
// way (three held requests: the pause object's read, the task's read,
// the claim), with two seconds of room.
func pauseSlack(maxDelay time.Duration) time.Duration {
	return pause.DefaultInterval + 3*maxDelay + 2*time.Second
}

// checkPause proves that no task is claimed while its type has been paused
// for longer than pauseSlack (a claim applied as a zombie, after its
// caller gave up, was decided before and is not counted), and that the
// pause ended: the quiet tail's liveness checks then prove that every
// paused task still ran after the resume.
//
// A worker none of whose reads of the pause object has answered claims
// nothing, until a whole pause_check_interval has passed since the first
// of them: then it claims as if nothing were paused, as docs/pause.md
// says (a policy that refuses the object must not stop a fleet
// silently). Such a claim is not counted (blind); one sent before the
// interval has passed is.
func (w *world) checkPause(log []Entry, add func(inv, id, format string, args ...any)) {
	slack := pauseSlack(w.plan.Faults.MaxDelay)
	// Per process, when it first asked for the pause object, and when a
	// read of it first answered.
	asked, answered := make(map[string]time.Time), make(map[string]time.Time)
	for _, r := range w.srv.Reads() {
		if a, ok := asked[r.Proc]; !ok || r.At.Before(a) {
			asked[r.Proc] = r.At
		}
		if a, ok := answered[r.Proc]; r.Answered && (!ok || r.At.Before(a)) {
			answered[r.Proc] = r.At
		}
	}
	blind := func(e Entry) bool {
		first, ok := asked[e.Proc]
		a, known := answered[e.Proc]
		// The interval is on the worker's clock, which drifts by up to
		// 100 ppm: 1 ms of 10 s, and room.
		return ok && (!known || a.After(e.Sent)) && !e.Sent.Before(first.Add(pause.DefaultInterval-10*time.Millisecond))
	}
	var since time.Time // when the task type became paused; zero while not
	var cur pause.State // the pause object's last state
	for _, e := range log {
		if e.Key == pause.Key {
			s := pause.State{}
			if e.New != nil {
				var err error
				if s, err = pause.Decode(e.New); err != nil {
					add(InvPaused, "", "%s wrote a malformed pause object at %s: %v", e.Proc, e.At.Format("15:04:05.000"), err)
					continue
				}
			}
			cur = s
			switch {
			case !s.Paused(taskType):
				since = time.Time{}
			case since.IsZero():
				since = e.At
			}
			continue
		}
		if since.IsZero() || e.Fault == "zombie" || !strings.HasPrefix(e.Key, "tasks/") || shards.IsPointer(e.Key) || e.New == nil || !strings.HasPrefix(e.Proc, "w") {
			continue
		}
		next, err := task.Decode(e.New)
		if err != nil || next.Status != task.Running || next.Claim == nil || !cur.Paused(next.Type) {
			continue // not a claim, or of a type the pause leaves (the schedules' ticks)
		}
		if prev, err := task.Decode(e.Old); err == nil && prev.Claim != nil && prev.Claim.ID == next.Claim.ID {
			continue // a renewal, not a claim
		}
		if e.At.Sub(since) > slack && !blind(e) {
			add(InvPaused, next.ID, "%s claimed it at %s, %v after its type was paused at %s (slack %v)",
				e.Proc, e.At.Format("15:04:05.000"), e.At.Sub(since).Round(time.Millisecond), since.Format("15:04:05.000"), slack)
		}
	}
	if !since.IsZero() {
		add(InvPaused, "", "the pause of %s at %s was never lifted", taskType, since.Format("15:04:05.000"))
	}
}
