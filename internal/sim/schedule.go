package sim

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/s3queue/s3queue/clock"
	"github.com/s3queue/s3queue/internal/schedule"
	"github.com/s3queue/s3queue/monitor"
	"github.com/s3queue/s3queue/producer"
	"github.com/s3queue/s3queue/shards"
	"github.com/s3queue/s3queue/task"
	"github.com/s3queue/s3queue/worker"
)

// planSchedules gives a quarter of the seeds periodic tasks, from a source
// of its own (the other seeds' plans stay as they were): an interval of a
// few seconds with catch_up "one", a longer one with "none", and a cron
// expression in a time zone with a half-hour offset. They exist from the
// start; every monitor schedules them (the leader alone under Leader),
// with its local clock off by minutes, through the crashes of the chaos
// phase.
func planSchedules(plan *Plan) {
	rng := rand.New(rand.NewPCG(plan.Seed, 0x5c4ed))
	if rng.IntN(4) != 0 {
		return
	}
	plan.Schedules = []schedule.Definition{
		{Name: "fast", Every: task.Duration(time.Duration(5+rng.IntN(6)) * time.Second), CatchUp: schedule.CatchUpOne},
		{Name: "slow", Every: task.Duration(time.Duration(12+rng.IntN(10)) * time.Second), CatchUp: schedule.CatchUpNone},
		{Name: "cron", Cron: "*/2 * * * *", Timezone: "Asia/Kolkata", CatchUp: schedule.CatchUpOne},
	}
	for i := range plan.Schedules {
		d := &plan.Schedules[i]
		d.Type = tickType
		d.Input = json.RawMessage(fmt.Sprintf(`{"scheduled":%q}`, d.Name))
		d.MaxAttempts = 3
	}
}

// tickType is the schedules' task type. The workers run it in a pool of
// its own under the default policy: a steady stream of ticks in the pool
// of the other tasks would starve them under drop-oldest, by design of
// that policy.
const tickType = "tick"

// tickPool is the workers' pool of the schedules' tasks.
var tickPool = worker.Pool{Name: "ticks", Types: []string{tickType}, MaxInFlight: 1}

// scheduledTask reports whether a task's input marks it as a schedule's:
// its handler succeeds at once, so the ticks add no backlog.
func scheduledTask(input []byte) bool {
	return strings.Contains(string(input), `"scheduled"`)
}

// writeSchedules writes the plan's schedule objects at the start, as
// `s3queue schedule add` would: their first tick is the first after now.
func (w *world) writeSchedules() {
	now := time.Now().UTC()
	for _, d := range w.plan.Schedules {
		s := schedule.Schedule{Definition: d, Version: 1, Cursor: now, CreatedAt: now, UpdatedAt: now, UpdatedBy: "sim"}
		w.srv.Put(schedule.Key(d.Name), s.Encode())
	}
	w.schedAt = now
}

// scheduleSubmit is a scheduling monitor's SubmitFunc: a producer of its
// own on the monitor's handle, opened at the first tick, sharing its clock.
func (w *world) scheduleSubmit(p *proc, clk *clock.Authoritative) monitor.SubmitFunc {
	var mu sync.Mutex
	var prod *producer.Producer
	return func(ctx context.Context, s monitor.Submission) (string, error) {
		mu.Lock()
		defer mu.Unlock()
		if prod == nil {
			cfg := w.producerConfig(p)
			cfg.Rand, cfg.Clock = w.seeded(p.name+"/schedule"), clk
			var err error
			if prod, err = producer.New(ctx, p.h, cfg); err != nil {
				prod = nil
				return "", err
			}
		}
		id, err := prod.Submit(ctx, s.Type, s.Input, producer.Options{IdempotencyKey: s.IdempotencyKey, MaxAttempts: s.MaxAttempts, Timeout: s.Timeout})
		if errors.Is(err, producer.ErrIdempotencyConflict) && id != "" {
			return id, nil
		}
		return id, err
	}
}

// scheduleQuiet: in the quiet tail, once every crashed monitor has been
// replaced and a leader has had time to take its lease over, every tick
// has its task within scheduleLate.
const (
	scheduleQuiet = 90 * time.Second
	scheduleLate  = 30 * time.Second
)

// checkSchedules proves the periodic tasks' rules over the log:
//   - one task per tick: no two tasks are ever created for one tick of a
//     schedule (told by their idempotency key, schedule:{name}:{tick});
//   - on S3 time: no tick's task is created before the tick (server time of
//     the write), and every tick is one of the schedule's, after its
//     creation;
//   - nothing missed while schedulers run: every tick from scheduleQuiet
//     into the quiet tail (all monitors alive, no faults) up to
//     scheduleLate before the end has its task, whatever its catch_up.
func (w *world) checkSchedules(log []Entry, end time.Time, add func(inv, id, format string, args ...any)) int {
	specs := make(map[string]schedule.Spec)
	for _, d := range w.plan.Schedules {
		spec, err := d.Compile()
		if err != nil {
			add(InvSchedule, "", "schedule %s does not compile: %v", d.Name, err)
			return 0
		}
		specs[d.Name] = spec
	}
	type tick struct {
		name string
		at   time.Time
	}
	tasks := make(map[tick][]string)
	for _, e := range log {
		if e.Old != nil || e.New == nil || !strings.HasPrefix(e.Key, "tasks/") || shards.IsPointer(e.Key) {
			continue
		}
		t, err := task.Decode(e.New)
		if err != nil {
			continue
		}
		name, at, ok := schedule.ParseIdempotencyKey(t.IdempotencyKey)
		if !ok {
			if t.Type == tickType {
				// Only the schedulers submit this type: a task of it
				// without a tick's key is one that one task per tick
				// could not see.
				add(InvSchedule, t.ID, "%s created a task of the schedules' type without a tick's idempotency key (%q)", e.Proc, t.IdempotencyKey)
			}
			continue
		}
		spec, known := specs[name]
		switch {
		case !known:
			add(InvSchedule, t.ID, "created by %s for tick %s of unknown schedule %q", e.Proc, at.Format(time.RFC3339), name)
			continue
		case e.At.Before(at):
			add(InvSchedule, t.ID, "%s created the task of tick %s of %s at %s, %v before the tick by S3 time",
				e.Proc, at.Format(time.RFC3339), name, e.At.Format("15:04:05.000"), at.Sub(e.At).Round(time.Millisecond))
		case !at.After(w.schedAt) || !spec.Next(at.Add(-time.Second)).Equal(at):
			add(InvSchedule, t.ID, "%s created a task for %s, which is not a tick of %s after its creation at %s",
				e.Proc, at.Format(time.RFC3339), name, w.schedAt.Format(time.RFC3339))
		}
		k := tick{name, at}
		if len(tasks[k]) == 0 || tasks[k][0] != t.ID {
			tasks[k] = append(tasks[k], t.ID)
		}
		if len(tasks[k]) == 2 {
			add(InvSchedule, t.ID, "%s created a second task for tick %s of %s at %s (the first: %s)",
				e.Proc, at.Format(time.RFC3339), name, e.At.Format("15:04:05.000"), tasks[k][0])
		}
	}
	from, to := w.quietAt.Add(scheduleQuiet), end.Add(-scheduleLate)
	names := make([]string, 0, len(specs))
	for n := range specs {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, name := range names {
		spec := specs[name]
		for at := spec.Next(from); !at.IsZero() && !at.After(to); at = spec.Next(at) {
			if len(tasks[tick{name, at}]) == 0 {
				add(InvSchedule, "", "tick %s of %s (catch_up %s) has no task, though every monitor ran since %s",
					at.Format(time.RFC3339), name, w.plan.scheduleCatchUp(name), w.quietAt.Format("15:04:05"))
				break
			}
		}
	}
	return len(tasks)
}

func (p Plan) scheduleCatchUp(name string) string {
	for _, d := range p.Schedules {
		if d.Name == name {
			return d.CatchUpMode()
		}
	}
	return ""
}

func schedulesString(ds []schedule.Definition) string {
	var parts []string
	for _, d := range ds {
		when := "every " + d.Every.String()
		if d.Cron != "" {
			when = fmt.Sprintf("cron %q in %s", d.Cron, d.Timezone)
		}
		parts = append(parts, fmt.Sprintf("%s (%s, catch_up %s)", d.Name, when, d.CatchUpMode()))
	}
	return "schedules " + strings.Join(parts, ", ")
}
