// Package lifecycletest is the end-to-end suite of the task lifecycle:
// producer, workers and monitor against one store. It runs on the embedded
// stores on every `go test` and against MinIO in integration/.
package lifecycletest

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"sync"
	"testing"
	"time"

	"github.com/s3queue/s3queue/monitor"
	"github.com/s3queue/s3queue/producer"
	"github.com/s3queue/s3queue/s3store"
	"github.com/s3queue/s3queue/task"
	"github.com/s3queue/s3queue/worker"
)

// env is one queue under test.
type env struct {
	t       *testing.T
	ctx     context.Context
	st      *s3store.Counter
	prod    *producer.Producer
	log     *slog.Logger
	runsMu  sync.Mutex
	runs    map[string]int // executions per task id
	started chan string    // task ids as handlers start
}

func setup(t *testing.T, newStore func(t *testing.T) s3store.Store) *env {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	t.Cleanup(cancel)
	st := s3store.NewCounter(newStore(t))
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	if testing.Verbose() {
		log = slog.New(slog.NewTextHandler(testWriter{t}, &slog.HandlerOptions{Level: slog.LevelWarn}))
	}
	prod, err := producer.New(ctx, st, producer.Config{Shards: 4, Logger: log, LeaseMargin: 300 * time.Millisecond}) // the workers' margin
	if err != nil {
		t.Fatalf("producer: %v", err)
	}
	return &env{t: t, ctx: ctx, st: st, prod: prod, log: log, runs: map[string]int{}, started: make(chan string, 1000)}
}

type testWriter struct{ t *testing.T }

func (w testWriter) Write(p []byte) (int, error) { w.t.Log(string(p)); return len(p), nil }

// workerConfig is a worker tuned for tests: fast polling, short margins.
func (e *env) workerConfig(id string) worker.Config {
	return worker.Config{ID: id, Shards: 4, Concurrency: 4, PollMin: 10 * time.Millisecond, PollMax: 50 * time.Millisecond,
		LeaseMargin: 300 * time.Millisecond, ShutdownGrace: 5 * time.Second, Logger: e.log, Dedicated: true, MemberTTL: 3 * time.Second}
}

// startWorker runs a worker on st (the env's store unless given) until the
// test ends.
func (e *env) startWorker(cfg worker.Config, st s3store.Store, handlers map[string]worker.Handler) *worker.Worker {
	e.t.Helper()
	if st == nil {
		st = e.st
	}
	w, err := worker.New(e.ctx, st, cfg)
	if err != nil {
		e.t.Fatalf("worker: %v", err)
	}
	for typ, h := range handlers {
		w.Handle(typ, e.counting(h))
	}
	ctx, cancel := context.WithCancel(e.ctx)
	done := make(chan struct{})
	go func() { w.Run(ctx); close(done) }()
	e.t.Cleanup(func() { cancel(); <-done })
	return w
}

// counting wraps h to record executions.
func (e *env) counting(h worker.Handler) worker.Handler {
	return func(ctx context.Context, t *task.Task) (json.RawMessage, error) {
		e.runsMu.Lock()
		e.runs[t.ID]++
		e.runsMu.Unlock()
		select {
		case e.started <- t.ID:
		default:
		}
		return h(ctx, t)
	}
}

func (e *env) executions(id string) int {
	e.runsMu.Lock()
	defer e.runsMu.Unlock()
	return e.runs[id]
}

// monitor runs a monitor tuned for tests (fast ticks, short margins) on
// the env's store until the test ends.
func (e *env) monitor(cfg monitor.Config) *monitor.Monitor {
	e.t.Helper()
	cfg.Shards = 4
	cfg.Logger = e.log
	if cfg.LeaseMargin == 0 {
		cfg.LeaseMargin = 300 * time.Millisecond
	}
	if cfg.StaleAfter == 0 {
		cfg.StaleAfter = 500 * time.Millisecond
	}
	if cfg.Interval == 0 {
		cfg.Interval = 100 * time.Millisecond
	}
	m, err := monitor.New(e.ctx, e.st, cfg)
	if err != nil {
		e.t.Fatalf("monitor: %v", err)
	}
	ctx, cancel := context.WithCancel(e.ctx)
	done := make(chan struct{})
	go func() { m.Run(ctx); close(done) }()
	e.t.Cleanup(func() { cancel(); <-done })
	return m
}

// waitTicks waits until every monitor in mons has ended n more ticks.
func (e *env) waitTicks(n int, mons ...*monitor.Monitor) {
	e.t.Helper()
	from := make([]int, len(mons))
	for i, m := range mons {
		from[i] = m.Stats().Ticks
	}
	e.waitFor(fmt.Sprintf("%d more ticks of the monitors", n), 10*time.Second, nil, func() bool {
		for i, m := range mons {
			if m.Stats().Ticks < from[i]+n {
				return false
			}
		}
		return true
	})
}

func (e *env) submit(typ string, input any, opts producer.Options) string {
	e.t.Helper()
	id, err := e.prod.Submit(e.ctx, typ, input, opts)
	if err != nil {
		e.t.Fatalf("submit: %v", err)
	}
	return id
}

func (e *env) get(id string) *task.Task {
	e.t.Helper()
	t, err := e.prod.Get(e.ctx, id)
	if err != nil {
		e.t.Fatalf("get %s: %v", id, err)
	}
	return t
}

// waitFor polls cond until it holds or the deadline passes. tick, if set,
// runs before each check (a monitor tick, say).
func (e *env) waitFor(what string, within time.Duration, tick func(), cond func() bool) {
	e.t.Helper()
	deadline := time.Now().Add(within)
	for {
		if tick != nil {
			tick()
		}
		if cond() {
			return
		}
		if time.Now().After(deadline) {
			e.t.Fatalf("timed out after %v waiting for %s", within, what)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// waitStatus waits until task id has status s and returns it.
func (e *env) waitStatus(id string, s task.Status, within time.Duration, tick func()) *task.Task {
	e.t.Helper()
	var last *task.Task
	e.waitFor("task "+id+" to be "+string(s), within, tick, func() bool {
		last = e.get(id)
		return last.Status == s
	})
	return last
}

func (e *env) waitStarted(id string, within time.Duration) {
	e.t.Helper()
	timer := time.NewTimer(within)
	defer timer.Stop()
	for {
		select {
		case got := <-e.started:
			if got == id {
				return
			}
		case <-timer.C:
			e.t.Fatalf("handler for %s did not start within %v", id, within)
		}
	}
}
