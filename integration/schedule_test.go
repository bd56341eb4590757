package integration

import (
	"slices"
	"sort"
	"testing"
	"time"

	"github.com/s3queue/s3queue/internal/schedule"
	"github.com/s3queue/s3queue/task"
)

// Periodic tasks through the binary, on MinIO: two monitor processes both
// schedule, two workers run the tasks. Every tick gets exactly one task
// (told by its idempotency key, schedule:NAME:TICK), with no gap while the
// monitors run; pause stops a schedule's ticks and resume does not catch
// them up; remove stops them; after both monitors were down, catch_up
// "one" submits exactly one task for the ticks missed and "none" none.
// Waits are on observable state (tasks of another schedule that keeps
// ticking, the server's time), never on sleeps.
func TestSchedulesThroughTheBinaryWithTwoMonitors(t *testing.T) {
	q := newMinIOQueue(t, 2, 4*time.Minute)
	ctx := q.ctx
	bin := buildCLI(t)
	env := []string{"S3QUEUE_STORE=" + q.url, "S3QUEUE_MONITOR_SCHEDULE_REFRESH=1s", "S3QUEUE_WORKER_POLL_MAX=1s"}
	for _, args := range [][]string{
		{"schedule", "add", "beat", "--every", "2s", "--type", "beat", "--input", `{"n":1}`},
		{"schedule", "add", "probe", "--every", "2s", "--type", "beat"},
		{"schedule", "add", "quiet", "--every", "2s", "--type", "beat", "--catch-up", "none"},
	} {
		runCLI(t, ctx, bin, env, args...)
	}
	monitors := map[string]*cliProcess{}
	startMonitors := func() {
		for _, id := range []string{"m1", "m2"} {
			monitors[id] = startCLI(t, bin, append(slices.Clone(env), "S3QUEUE_MONITOR_INTERVAL=1s"), "monitor")
		}
	}
	startMonitors()
	var workers []*cliProcess
	for _, id := range []string{"A", "B"} {
		workers = append(workers, startCLI(t, bin, append(slices.Clone(env), "S3QUEUE_WORKER_ID="+id), "worker", "--exec", "beat=cat"))
	}

	// ticks reads every scheduled task, by schedule and tick; a tick with
	// two tasks fails the test.
	ticks := func() map[string]map[time.Time]task.Task {
		out := map[string]map[time.Time]task.Task{}
		for _, tk := range listCLI(t, ctx, bin, env) {
			name, at, ok := schedule.ParseIdempotencyKey(tk.IdempotencyKey)
			if !ok {
				continue
			}
			if out[name] == nil {
				out[name] = map[time.Time]task.Task{}
			}
			if prev, dup := out[name][at]; dup && prev.ID != tk.ID {
				t.Fatalf("tick %s of %s has two tasks: %s and %s", at, name, prev.ID, tk.ID)
			}
			out[name][at] = tk
		}
		return out
	}
	sorted := func(m map[time.Time]task.Task) []time.Time {
		var out []time.Time
		for at := range m {
			out = append(out, at)
		}
		sort.Slice(out, func(i, j int) bool { return out[i].Before(out[j]) })
		return out
	}
	// probeBeyond waits for the probe schedule to have a task for a tick
	// after at: the schedulers ran past it.
	probeBeyond := func(what string, at time.Time) map[string]map[time.Time]task.Task {
		var got map[string]map[time.Time]task.Task
		waitUntil(t, ctx, what, time.Minute, func() bool {
			got = ticks()
			p := sorted(got["probe"])
			return len(p) > 0 && p[len(p)-1].After(at)
		})
		return got
	}
	serverTime := func() time.Time {
		now, err := q.st.Now(ctx)
		if err != nil {
			t.Fatal(err)
		}
		return now
	}

	// Both monitors schedule: six ticks in a row, one task each, and the
	// workers run them.
	var got map[string]map[time.Time]task.Task
	waitUntil(t, ctx, "six ticks of beat", time.Minute, func() bool {
		got = ticks()
		return len(got["beat"]) >= 6
	})
	beat := sorted(got["beat"])
	for i, at := range beat {
		if at.Unix()%2 != 0 || i > 0 && at.Sub(beat[i-1]) != 2*time.Second {
			t.Fatalf("beat's ticks %v: want every 2s on even seconds, with no gap", beat)
		}
		if tk := got["beat"][at]; tk.CreatedAt.Before(at) {
			t.Errorf("the task of tick %s was created at %s, before its tick", at, tk.CreatedAt)
		}
	}
	waitUntil(t, ctx, "the workers to run beat's first task", time.Minute, func() bool {
		return getCLI(t, ctx, bin, env, got["beat"][beat[0]].ID).Status == task.Succeeded
	})

	// Pause: no beat task while probe goes on ticking; resume: no catch-up.
	runCLI(t, ctx, bin, env, "schedule", "pause", "beat")
	pausedAt := serverTime()
	got = probeBeyond("probe to tick 6s after beat's pause", pausedAt.Add(6*time.Second))
	resumedAt := serverTime()
	runCLI(t, ctx, bin, env, "schedule", "resume", "beat")
	for _, at := range sorted(got["beat"]) {
		if at.After(pausedAt.Add(2 * time.Second)) {
			t.Errorf("beat ticked at %s, after its pause at %s", at, pausedAt)
		}
	}
	waitUntil(t, ctx, "beat to tick again after the resume", time.Minute, func() bool {
		b := sorted(ticks()["beat"])
		return b[len(b)-1].After(resumedAt)
	})
	got = ticks()
	for _, at := range sorted(got["beat"]) {
		if at.After(pausedAt.Add(2*time.Second)) && at.Before(resumedAt) {
			t.Errorf("beat's tick %s, missed while paused (%s to %s), was submitted after the resume", at, pausedAt, resumedAt)
		}
	}

	// Remove: no beat task after it while probe goes on.
	runCLI(t, ctx, bin, env, "schedule", "remove", "beat")
	removedAt := serverTime()
	got = probeBeyond("probe to tick 6s after beat's removal", removedAt.Add(6*time.Second))
	for _, at := range sorted(got["beat"]) {
		if at.After(removedAt.Add(2 * time.Second)) {
			t.Errorf("beat ticked at %s, after its removal at %s", at, removedAt)
		}
	}

	// Both monitors down for several ticks, then one back.
	for _, m := range monitors {
		m.stop(t)
	}
	got = ticks()
	lastProbe, lastQuiet := sorted(got["probe"]), sorted(got["quiet"])
	downFrom := lastProbe[len(lastProbe)-1]
	if q := lastQuiet[len(lastQuiet)-1]; q.After(downFrom) {
		downFrom = q
	}
	waitUntil(t, ctx, "four ticks to pass with no monitor", time.Minute, func() bool {
		return serverTime().After(downFrom.Add(9 * time.Second))
	})
	backAt := serverTime()
	monitors["m1"] = startCLI(t, bin, append(slices.Clone(env), "S3QUEUE_MONITOR_INTERVAL=1s"), "monitor")
	got = probeBeyond("probe to tick after the monitor came back", backAt.Add(2*time.Second))
	var after []time.Time
	for _, at := range sorted(got["probe"]) {
		if at.After(lastProbe[len(lastProbe)-1]) {
			after = append(after, at)
		}
	}
	if len(after) < 2 || after[0].Before(downFrom.Add(8*time.Second)) || after[1].Sub(after[0]) != 2*time.Second {
		t.Errorf("probe (catch_up one) ticked %v after its last tick %s before the monitors stopped and came back at %s: "+
			"want one task for the latest missed tick, then every tick", after, lastProbe[len(lastProbe)-1], backAt)
	}
	for _, at := range sorted(got["quiet"]) {
		if at.After(lastQuiet[len(lastQuiet)-1]) && !at.After(downFrom.Add(8*time.Second)) {
			t.Errorf("quiet (catch_up none) has a task for tick %s, missed while no monitor ran", at)
		}
	}
	monitors["m1"].stop(t)
	for _, w := range workers {
		w.stop(t)
	}
}
