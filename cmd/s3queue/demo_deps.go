package main

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/s3queue/s3queue/producer"
	"github.com/s3queue/s3queue/task"
)

// modeFatal: the task fails for good on its first attempt (a permanent
// error), so the tasks that depend on it are canceled.
const modeFatal = "fatal"

// demoGraph is the demo's dependency graph: a build pipeline in which
// test, lint and docs wait for build and package waits for all three, and
// a chain whose first task fails for good, so that its dependent is
// canceled without ever running (docs/dependencies.md).
var demoGraph = []struct {
	step  string
	mode  string
	after []string
	want  task.Status
}{
	{"build", modeOK, nil, task.Succeeded},
	{"test", modeOK, []string{"build"}, task.Succeeded},
	{"lint", modeOK, []string{"build"}, task.Succeeded},
	{"docs", modeOK, []string{"build"}, task.Succeeded},
	{"package", modeOK, []string{"test", "lint", "docs"}, task.Succeeded},
	{"fetch", modeFatal, nil, task.Dead},
	{"deploy", modeOK, []string{"fetch"}, task.Canceled},
}

// submitGraph submits the graph, each step after the ones it depends on,
// numbering its inputs from n. It returns the id of each step.
func (d *demo) submitGraph(ctx context.Context, p *producer.Producer, opts producer.Options, n int) (map[string]string, error) {
	ids := make(map[string]string, len(demoGraph))
	for i, g := range demoGraph {
		o := opts
		for _, s := range g.after {
			o.DependsOn = append(o.DependsOn, ids[s])
		}
		id, err := p.Submit(ctx, demoType, demoInput{N: n + i, Mode: g.mode, Step: g.step}, o)
		if err != nil {
			return nil, fmt.Errorf("demo: submit step %s: %w", g.step, err)
		}
		ids[g.step] = id
		if len(g.after) == 0 {
			continue
		}
		// A step whose parent had already failed is created canceled: no
		// worker reports it, so look.
		t, err := p.Get(ctx, id)
		if err != nil {
			return nil, fmt.Errorf("demo: read step %s: %w", g.step, err)
		}
		if t.Status.Terminal() {
			d.mu.Lock()
			d.finished[id] = t.Status
			d.mu.Unlock()
		}
	}
	return ids, nil
}

// startAfterDeps records that the handler of t starts, and whether every
// task t depends on had already finished its handler: the demo's own,
// in-process check that no dependent starts early. Call with d.mu held.
func (d *demo) startAfterDeps(t *task.Task) {
	for _, dep := range t.Deps {
		if !d.completed[dep.ID] {
			d.early = append(d.early, fmt.Sprintf("%s started before its dependency %s finished", t.ID, dep.ID))
		}
	}
}

// checkGraph reads the graph's tasks back and returns what is wrong with
// them beyond their status (which the summary checks with the others):
// a dependent that started before its parents finished, a join that does
// not record its parents' success, a canceled task that ran.
func (d *demo) checkGraph(ctx context.Context, p *producer.Producer, ids map[string]string) []string {
	d.mu.Lock()
	problems := append([]string(nil), d.early...)
	ran := make(map[string]int, len(ids))
	for _, id := range ids {
		ran[id] = d.execs[id]
	}
	d.mu.Unlock()
	for _, g := range demoGraph {
		id := ids[g.step]
		t, err := p.Get(ctx, id)
		if err != nil {
			problems = append(problems, fmt.Sprintf("%s (%s): %v", g.step, id, err))
			continue
		}
		switch g.want {
		case task.Succeeded:
			for _, dep := range t.Deps {
				if dep.Ended != task.Succeeded {
					problems = append(problems, fmt.Sprintf("%s ran, but its dependency %s is %s", g.step, dep.ID, orNone(dep.Ended)))
				}
			}
		case task.Canceled:
			if ran[id] > 0 {
				problems = append(problems, fmt.Sprintf("%s ran %d times, though its dependency failed", g.step, ran[id]))
			}
			if last := t.History[len(t.History)-1]; !strings.Contains(last.Reason, "dependency "+ids[g.after[0]]+" ended dead") {
				problems = append(problems, fmt.Sprintf("%s: last transition %q, want its dependency's death", g.step, last.Reason))
			}
		}
	}
	return problems
}

// graphLines describes the graph's outcome for the summary.
func (d *demo) graphLines(final map[string]task.Status, ids map[string]string) [][2]string {
	d.mu.Lock()
	defer d.mu.Unlock()
	ok := 0
	for _, s := range []string{"build", "test", "lint", "docs", "package"} {
		if final[ids[s]] == task.Succeeded {
			ok++
		}
	}
	deploy := "without running"
	if n := d.execs[ids["deploy"]]; n > 0 {
		deploy = fmt.Sprintf("after running %d times", n)
	}
	return [][2]string{
		{"build → test, lint, docs → package", fmt.Sprintf("%d of 5 succeeded", ok)},
		{"fetch (fails for good) → deploy", fmt.Sprintf("fetch %s, deploy %s %s", orNone(final[ids["fetch"]]), orNone(final[ids["deploy"]]), deploy)},
		{"started early (before a dependency finished, or beside its slot's holder)", fmt.Sprint(len(d.early))},
	}
}

// demoSlot is the slot key of the demo's serial tasks: three tasks of one
// customer that must run one at a time (docs/slots.md).
const demoSlot = "customer-42"

// submitSlot submits three tasks of demoSlot, queued behind each other,
// and a fourth with drop-if-running, which the busy slot refuses. It
// returns the ids of the three.
func (d *demo) submitSlot(ctx context.Context, p *producer.Producer, opts producer.Options, n int) ([]string, error) {
	var ids []string
	o := opts
	o.Slot = demoSlot
	for i := range 3 {
		id, err := p.Submit(ctx, demoType, demoInput{N: n + i, Mode: modeOK, Step: fmt.Sprintf("sync %d", i+1)}, o)
		if err != nil {
			return nil, fmt.Errorf("demo: submit slot task: %w", err)
		}
		ids = append(ids, id)
	}
	o.Admission = "drop-if-running"
	_, err := p.Submit(ctx, demoType, demoInput{N: n + 3, Mode: modeOK, Step: "sync, if idle"}, o)
	d.mu.Lock()
	d.slotRefused = errors.Is(err, producer.ErrSlotBusy)
	d.mu.Unlock()
	if err != nil && !errors.Is(err, producer.ErrSlotBusy) {
		return nil, fmt.Errorf("demo: submit drop-if-running: %w", err)
	}
	return ids, nil
}

// demoReplaceSlot is the slot key of the demo's replace step: renders of
// one document, where only the latest matters (admission replace).
const demoReplaceSlot = "doc-7"

// demoReplace is the replace step's tasks: the holder of the slot, the
// task waiting behind it, and the replace submit that takes its place.
type demoReplace struct {
	holder, replaced, latest string
}

// submitReplace submits three renders to demoReplaceSlot: the first takes
// the slot but is due only in a minute (so it is still pending when the
// third comes), the second waits behind it, and the third, with admission
// replace, takes the second's place (canceled: replaced) and has the
// holder canceled, pending, at once: the third runs, the first two never
// do.
func (d *demo) submitReplace(ctx context.Context, p *producer.Producer, opts producer.Options, n int) (demoReplace, error) {
	var r demoReplace
	o := opts
	o.Slot = demoReplaceSlot
	for i, id := range []*string{&r.holder, &r.replaced, &r.latest} {
		o.Delay = 0
		switch i {
		case 0:
			o.Delay = time.Minute
		case 2:
			o.Admission = "replace"
		}
		var err error
		if *id, err = p.Submit(ctx, demoType, demoInput{N: n + i, Mode: modeOK, Step: fmt.Sprintf("render %d", i+1)}, o); err != nil {
			return r, fmt.Errorf("demo: submit render %d: %w", i+1, err)
		}
	}
	// The replace submit ended the first two (no worker reports them):
	// look.
	for _, id := range []string{r.holder, r.replaced} {
		t, err := p.Lookup(ctx, id)
		if err != nil {
			return r, fmt.Errorf("demo: read render %s: %w", id, err)
		}
		if t.Status.Terminal() {
			d.mu.Lock()
			d.finished[id] = t.Status
			d.mu.Unlock()
		}
	}
	return r, nil
}

// checkReplace reads the replace step back: the replaced task records
// what replaced it, and neither it nor the holder ran.
func (d *demo) checkReplace(ctx context.Context, p *producer.Producer, r demoReplace) []string {
	var problems []string
	d.mu.Lock()
	for _, id := range []string{r.holder, r.replaced} {
		if n := d.execs[id]; n > 0 {
			problems = append(problems, fmt.Sprintf("slot %s: %s ran %d times, though a replace canceled it", demoReplaceSlot, id, n))
		}
	}
	d.mu.Unlock()
	t, err := p.Lookup(ctx, r.replaced)
	if err != nil {
		return append(problems, fmt.Sprintf("slot %s: %s: %v", demoReplaceSlot, r.replaced, err))
	}
	want := "replaced in slot " + demoReplaceSlot + " by " + r.latest
	if last := t.History[len(t.History)-1]; last.Reason != want {
		problems = append(problems, fmt.Sprintf("slot %s: %s's last transition %q, want %q", demoReplaceSlot, r.replaced, last.Reason, want))
	}
	return problems
}

// startInSlot records that t's handler starts in its slot. Call with d.mu
// held.
func (d *demo) startInSlot(t *task.Task) {
	if t.Slot == "" {
		return
	}
	if other := d.slotRunning[t.Slot]; other != "" {
		d.early = append(d.early, fmt.Sprintf("%s started while %s of slot %s ran", t.ID, other, t.Slot))
	}
	if d.slotRunning == nil {
		d.slotRunning = make(map[string]string)
	}
	d.slotRunning[t.Slot] = t.ID
}

// endInSlot records that t's handler returned.
func (d *demo) endInSlot(t *task.Task) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.slotRunning[t.Slot] == t.ID {
		delete(d.slotRunning, t.Slot)
	}
}

// slotLines describes the slots' outcome for the summary.
func (d *demo) slotLines(final map[string]task.Status, ids []string, r demoReplace) [][2]string {
	d.mu.Lock()
	defer d.mu.Unlock()
	ok := 0
	for _, id := range ids {
		if final[id] == task.Succeeded {
			ok++
		}
	}
	refused := "refused: slot busy, nothing created"
	if !d.slotRefused {
		refused = "NOT refused"
	}
	return [][2]string{
		{"slot " + demoSlot + ": 3 tasks, one at a time", fmt.Sprintf("%d of 3 succeeded", ok)},
		{"slot " + demoSlot + ": drop-if-running", refused},
		{"slot " + demoReplaceSlot + ": replace (latest wins)", fmt.Sprintf("render 3 %s; render 2 %s, render 1 %s, neither ran",
			orNone(final[r.latest]), orNone(final[r.replaced]), orNone(final[r.holder]))},
	}
}
