package worker_test

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/s3queue/s3queue/internal/events"
	"github.com/s3queue/s3queue/producer"
	"github.com/s3queue/s3queue/s3store/mem"
	"github.com/s3queue/s3queue/task"
	"github.com/s3queue/s3queue/worker"
)

// collected subscribes to bus and keeps what it delivers.
type collected struct {
	mu     sync.Mutex
	events []events.Event
	signal chan events.Event
}

func collect(bus *events.Bus) *collected {
	c := &collected{signal: make(chan events.Event, 1024)}
	bus.Subscribe("test", 1024, func(e events.Event) {
		c.mu.Lock()
		c.events = append(c.events, e)
		c.mu.Unlock()
		select {
		case c.signal <- e:
		default:
		}
	})
	return c
}

// wait waits for an event of kind about task id ("" for any), delivered
// before the call or after.
func (c *collected) wait(t *testing.T, kind events.Kind, id string) events.Event {
	t.Helper()
	timeout := time.After(10 * time.Second)
	for {
		c.mu.Lock()
		for _, e := range c.events {
			if e.Kind == kind && (id == "" || e.TaskID == id) {
				c.mu.Unlock()
				return e
			}
		}
		c.mu.Unlock()
		select {
		case <-c.signal:
		case <-timeout:
			t.Fatalf("no %s event for task %q within 10s", kind, id)
		}
	}
}

// shards returns the shards of the kind's events, in order, from origin.
func (c *collected) shards(kind events.Kind, origin string) []int {
	c.mu.Lock()
	defer c.mu.Unlock()
	var out []int
	for _, e := range c.events {
		if e.Kind == kind && e.Origin == origin {
			out = append(out, e.Shard)
		}
	}
	return out
}

func (c *collected) count(kind events.Kind) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	n := 0
	for _, e := range c.events {
		if e.Kind == kind {
			n++
		}
	}
	return n
}

// A worker publishes its task events on Config.Events, stamped with its
// id, and logs each outcome at info whether or not it has a bus.
func TestWorkerPublishesEventsAndLogsOutcomes(t *testing.T) {
	ctx := context.Background()
	st := mem.New()
	p, err := producer.New(ctx, st, producer.Config{Shards: 1})
	if err != nil {
		t.Fatal(err)
	}
	ok, err := p.Submit(ctx, "job", nil, producer.Options{})
	if err != nil {
		t.Fatal(err)
	}
	bad, err := p.Submit(ctx, "job", "fail", producer.Options{MaxAttempts: 1})
	if err != nil {
		t.Fatal(err)
	}
	for _, shared := range []bool{true, false} {
		t.Run(fmt.Sprintf("shared bus %v", shared), func(t *testing.T) {
			var bus *events.Bus
			var got *collected
			if shared {
				bus = events.NewBus()
				got = collect(bus)
			}
			var logs syncBuffer
			w, err := worker.New(ctx, st, worker.Config{ID: "w-events", Shards: 1, OwnShards: []int{0}, Events: bus,
				PollMin: 10 * time.Millisecond, PollMax: 50 * time.Millisecond,
				Logger: slog.New(slog.NewJSONHandler(&logs, nil))})
			if err != nil {
				t.Fatal(err)
			}
			w.Handle("job", func(_ context.Context, tk *task.Task) (json.RawMessage, error) {
				if string(tk.Input) == `"fail"` {
					return nil, worker.Permanent(fmt.Errorf("bad input"))
				}
				return nil, nil
			})
			if !shared {
				// The tasks are finished: a task for this run.
				ok, err = p.Submit(ctx, "job", nil, producer.Options{})
				if err != nil {
					t.Fatal(err)
				}
			}
			runCtx, cancel := context.WithCancel(ctx)
			done := make(chan error, 1)
			go func() { done <- w.Run(runCtx) }()
			if shared {
				claimed := got.wait(t, events.Claimed, ok)
				if claimed.Source != events.SourceWorker || claimed.Origin != "w-events" || claimed.Time.IsZero() || claimed.Type != "job" || claimed.Attempt != 1 {
					t.Errorf("claimed event %+v", claimed)
				}
				succeeded := got.wait(t, events.Succeeded, ok)
				dead := got.wait(t, events.Dead, bad)
				if dead.Err == nil || !strings.Contains(dead.Err.Error(), "bad input") {
					t.Errorf("dead event %+v lacks the handler's error", dead)
				}
				// An outcome carries how long its handler ran (the
				// handler-duration histogram of /metrics); a claim does not.
				if succeeded.Duration <= 0 || dead.Duration <= 0 || claimed.Duration != 0 {
					t.Errorf("durations: succeeded %v, dead %v, claimed %v; want outcomes > 0, the claim 0",
						succeeded.Duration, dead.Duration, claimed.Duration)
				}
			} else {
				waitStatus(t, p, ok, task.Succeeded)
			}
			cancel()
			if err := <-done; err != nil {
				t.Fatal(err)
			}
			// The worker logs its outcomes as they happen, bus or none.
			var outcomes []string
			for _, line := range strings.Split(strings.TrimSpace(logs.String()), "\n") {
				var rec map[string]any
				if err := json.Unmarshal([]byte(line), &rec); err != nil {
					t.Fatalf("log line %q: %v", line, err)
				}
				if msg, _ := rec["msg"].(string); strings.HasPrefix(msg, "task ") {
					g, _ := rec["worker"].(map[string]any)
					if rec["level"] != "INFO" || g["worker_id"] != "w-events" || g["origin"] != "w-events" {
						t.Errorf("outcome log %s", line)
					}
					outcomes = append(outcomes, msg+" "+fmt.Sprint(g["task_id"]))
				}
			}
			if !slices.Contains(outcomes, "task succeeded "+ok) {
				t.Errorf("no info log of the success of %s; outcomes logged: %v", ok, outcomes)
			}
			if shared && !slices.Contains(outcomes, "task dead "+bad) {
				t.Errorf("no info log of the death of %s; outcomes logged: %v", bad, outcomes)
			}
			if slices.ContainsFunc(outcomes, func(s string) bool { return strings.HasPrefix(s, "task claimed") }) {
				t.Errorf("a claim was logged at info: %v", outcomes)
			}
		})
	}
}

func waitStatus(t *testing.T, p *producer.Producer, id string, want task.Status) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		tk, err := p.Get(context.Background(), id)
		if err == nil && tk.Status == want {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("task %s: %v (%v), want %s", id, tk, err, want)
		}
		time.Sleep(10 * time.Millisecond) // polling the store's state, as a user would
	}
}

// Members publish the shards they gain and lose, and the doorbell's
// changes: shard_acquired when a member takes a shard, shard_released when
// it leaves, fleet_asleep and fleet_woken at the doorbell.
func TestFleetEvents(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		st := mem.New()
		f := newFleet(t, st, 4)
		bus := events.NewBus()
		t.Cleanup(bus.Close)
		got := collect(bus)
		a := f.fast("a")
		a.Events, a.Dedicated = bus, true
		a.SleepAfter, a.BellPoll, a.AwakeGrace = 300*time.Millisecond, 50*time.Millisecond, 2100*time.Millisecond
		f.start(a, nil, nil)
		// Alone, a member owns one active shard and drains the rest.
		waitFor(t, "a to own a shard", 10*time.Second, func() bool { return len(got.shards(events.ShardAcquired, "a")) == 1 })

		waitFor(t, "the idle fleet to sleep", 10*time.Second, func() bool { return got.count(events.FleetAsleep) == 1 })
		p := f.producer(st)
		f.submit(p)
		waitFor(t, "the ring to wake it", 10*time.Second, func() bool { return got.count(events.FleetWoken) == 1 })

		b := f.fast("b")
		b.Events, b.Dedicated = bus, true
		f.start(b, nil, nil)
		waitFor(t, "b to own a shard", 10*time.Second, func() bool { return len(got.shards(events.ShardAcquired, "b")) == 1 })
		f.stop("b")
		f.stop("a")
		bus.Close() // delivers what the bus holds
		ownA, ownB := got.shards(events.ShardAcquired, "a"), got.shards(events.ShardAcquired, "b")
		if len(ownA) != 1 || len(ownB) != 1 || ownA[0] == ownB[0] {
			t.Errorf("a acquired %v, b acquired %v: want one shard each, not the same", ownA, ownB)
		}
		if r := got.shards(events.ShardReleased, "a"); !slices.Equal(r, ownA) {
			t.Errorf("a released %v on leaving, want %v", r, ownA)
		}
		if r := got.shards(events.ShardReleased, "b"); !slices.Equal(r, ownB) {
			t.Errorf("b released %v on leaving, want %v", r, ownB)
		}
	})
}
