// Package worker claims tasks by CAS and runs registered handlers with
// bounded concurrency. It renews each task's lease while its handler runs,
// commits outcomes fenced on its claim (invariant 3), retries by policy and
// dead-letters when attempts run out. It never claims a type it has no
// handler for.
//
// The worker must not decide anything by the local wall clock: lease and
// availability decisions use the authoritative S3 clock.
package worker

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"github.com/s3queue/s3queue/clock"
	"github.com/s3queue/s3queue/internal/taskio"
	"github.com/s3queue/s3queue/s3store"
	"github.com/s3queue/s3queue/shards"
	"github.com/s3queue/s3queue/task"
)

// Handler runs one attempt of a task. It returns the result (JSON, may be
// nil) or an error: a plain error is a failed attempt (retried by policy),
// Permanent(err) dead-letters the task, RetryAfter(d, err) runs it again
// later without using an attempt. ctx is canceled when the lease is lost,
// the task is canceled, or the worker shuts down (context.Cause says which).
type Handler func(ctx context.Context, t *task.Task) (json.RawMessage, error)

// Config configures a Worker. Zero fields take the defaults.
type Config struct {
	// ID names the worker in claims and logs (default host-pid-random).
	ID string
	// Concurrency is how many handlers run at once (default 4).
	Concurrency int
	// Shards must match the queue's manifest; 0 accepts the queue's count.
	Shards int
	// OwnShards limits polling to these shards (nil: all shards).
	OwnShards []int
	// PollMin, PollMax and PollMultiplier shape adaptive polling: the
	// interval resets to PollMin when a poll finds work and grows by
	// PollMultiplier per empty poll up to PollMax (defaults 100ms, 5s, 2).
	PollMin, PollMax time.Duration
	PollMultiplier   float64
	// ScanLag is how far behind its cursor a shard scan starts (default 5s).
	ScanLag time.Duration
	// ScanLookback is how far back a new worker's scans start (default 1h);
	// older pending tasks reach it through the ready index.
	ScanLookback time.Duration
	// LeaseMargin: the worker stops a handler this long before its lease
	// expires by S3 time if it could not renew (default 2s).
	LeaseMargin time.Duration
	// ShutdownGrace is how long Run waits for in-flight handlers after its
	// context ends before canceling them and handing their tasks back
	// (default 30s).
	ShutdownGrace time.Duration
	Logger        *slog.Logger
	// Clock, if set, is shared with other components of this process.
	Clock *clock.Authoritative
	// OnEvent, if set, is called for every task event (observability).
	OnEvent func(Event)
}

// Event describes something that happened to a task in this worker.
type Event struct {
	Kind    string // claimed, succeeded, failed, dead, snoozed, canceled, lease_lost, rejected, released, corrupt
	TaskID  string
	Type    string
	Attempt int
	Err     error
}

// Stats counts what the worker did.
type Stats struct {
	Claimed, Succeeded, Failed, Dead, Snoozed, Canceled, LeaseLost, Rejected, Released, Corrupt, Panics int64
}

// Worker runs handlers for claimed tasks.
type Worker struct {
	st       s3store.Store
	cfg      Config
	clock    *clock.Authoritative
	manifest shards.Manifest
	log      *slog.Logger

	pollMu sync.Mutex // one discovery pass at a time (Run and Poll)

	mu       sync.Mutex
	handlers map[string]Handler
	scans    map[int]*shards.Scan
	rotate   int

	slots    chan struct{}
	freed    chan struct{}
	inflight sync.WaitGroup
	running  sync.Map // claim id -> *run
	stopping atomic.Bool

	stats struct {
		claimed, succeeded, failed, dead, snoozed, canceled, leaseLost, rejected, released, corrupt, panics atomic.Int64
	}
}

// New opens the queue in st for a worker.
func New(ctx context.Context, st s3store.Store, cfg Config) (*Worker, error) {
	if err := cfg.fill(); err != nil {
		return nil, err
	}
	// The clock exists before the first request, so every response syncs it.
	c := cfg.Clock
	if c == nil {
		c = clock.New(st, clock.Config{})
	}
	m, err := shards.Open(ctx, st, cfg.Shards)
	if err != nil {
		return nil, err
	}
	for _, s := range cfg.OwnShards {
		if s < 0 || s >= m.Shards {
			return nil, fmt.Errorf("worker: shard %d out of range 0..%d", s, m.Shards-1)
		}
	}
	w := &Worker{
		st: st, cfg: cfg, clock: c, manifest: m,
		log:      cfg.Logger.WithGroup("worker").With("worker_id", cfg.ID),
		handlers: make(map[string]Handler),
		scans:    make(map[int]*shards.Scan),
		slots:    make(chan struct{}, cfg.Concurrency),
		freed:    make(chan struct{}, 1),
	}
	return w, nil
}

func (c *Config) fill() error {
	if c.ID == "" {
		host, _ := os.Hostname()
		var b [3]byte
		rand.Read(b[:])
		c.ID = fmt.Sprintf("%s-%d-%s", host, os.Getpid(), hex.EncodeToString(b[:]))
	}
	if c.Concurrency == 0 {
		c.Concurrency = 4
	}
	if c.PollMin == 0 {
		c.PollMin = 100 * time.Millisecond
	}
	if c.PollMax == 0 {
		c.PollMax = 5 * time.Second
	}
	if c.PollMultiplier == 0 {
		c.PollMultiplier = 2
	}
	if c.ScanLag == 0 {
		c.ScanLag = 5 * time.Second
	}
	if c.ScanLookback == 0 {
		c.ScanLookback = time.Hour
	}
	if c.LeaseMargin == 0 {
		c.LeaseMargin = 2 * time.Second
	}
	if c.ShutdownGrace == 0 {
		c.ShutdownGrace = 30 * time.Second
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	return c.validate()
}

func (c *Config) validate() error {
	switch {
	case c.Concurrency < 1 || c.Concurrency > 10000:
		return fmt.Errorf("worker: concurrency %d out of range 1..10000", c.Concurrency)
	case c.PollMin <= 0 || c.PollMax < c.PollMin:
		return fmt.Errorf("worker: poll interval min %v must be positive and at most max %v", c.PollMin, c.PollMax)
	case c.PollMultiplier < 1:
		return fmt.Errorf("worker: poll multiplier %v must be at least 1", c.PollMultiplier)
	case c.ScanLag < 0 || c.ScanLookback < 0 || c.LeaseMargin < 0 || c.ShutdownGrace < 0:
		return fmt.Errorf("worker: durations must not be negative")
	}
	return nil
}

// ID returns the worker's id.
func (w *Worker) ID() string { return w.cfg.ID }

// Handle registers h for tasks of type typ. Register handlers before Run.
func (w *Worker) Handle(typ string, h Handler) {
	w.mu.Lock()
	w.handlers[typ] = h
	w.mu.Unlock()
}

func (w *Worker) handler(typ string) Handler {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.handlers[typ]
}

// Stats returns a snapshot of the worker's counters.
func (w *Worker) Stats() Stats {
	s := &w.stats
	return Stats{s.claimed.Load(), s.succeeded.Load(), s.failed.Load(), s.dead.Load(), s.snoozed.Load(),
		s.canceled.Load(), s.leaseLost.Load(), s.rejected.Load(), s.released.Load(), s.corrupt.Load(), s.panics.Load()}
}

func (w *Worker) emit(e Event) {
	if w.cfg.OnEvent != nil {
		w.cfg.OnEvent(e)
	}
}

// Run polls and runs tasks until ctx ends, then stops claiming and drains:
// it waits up to ShutdownGrace for running handlers, then cancels the rest
// and hands their tasks back to the queue.
func (w *Worker) Run(ctx context.Context) error {
	interval := w.cfg.PollMin
	timer := time.NewTimer(0)
	defer timer.Stop()
	for {
		select {
		case <-ctx.Done():
			return w.drain()
		case <-timer.C:
		case <-w.freed:
			// A slot freed up: look for more work now if the last poll
			// stopped for lack of slots.
		}
		n, full, err := w.poll(ctx)
		switch {
		case err != nil && ctx.Err() == nil:
			w.log.Warn("poll", "err", err)
			interval = w.grow(interval)
		case n > 0:
			interval = w.cfg.PollMin
		default:
			interval = w.grow(interval)
		}
		if full {
			// Wait for a slot rather than polling at all.
			timer.Reset(w.cfg.PollMax)
			continue
		}
		timer.Reset(interval)
	}
}

func (w *Worker) grow(d time.Duration) time.Duration {
	d = time.Duration(float64(d) * w.cfg.PollMultiplier)
	if d > w.cfg.PollMax {
		d = w.cfg.PollMax
	}
	return d
}

// drain waits for in-flight handlers within the grace period, then cancels
// them with ErrShutdown; their tasks are handed back by their runners.
func (w *Worker) drain() error {
	w.stopping.Store(true)
	done := make(chan struct{})
	go func() { w.inflight.Wait(); close(done) }()
	grace := time.NewTimer(w.cfg.ShutdownGrace)
	defer grace.Stop()
	select {
	case <-done:
		return nil
	case <-grace.C:
	}
	w.running.Range(func(_, v any) bool {
		v.(*run).cancel(ErrShutdown)
		return true
	})
	// Handlers that ignore their context are not waited for forever: their
	// leases expire and the monitor re-dispatches the tasks.
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		w.log.Warn("handlers still running after shutdown; their leases will expire")
	}
	return nil
}

// Wait blocks until no handler is running.
func (w *Worker) Wait() { w.inflight.Wait() }

// Poll runs one discovery pass over the worker's shards and starts handlers
// for what it claims. It returns how many tasks it claimed. Tests drive it
// directly instead of Run.
func (w *Worker) Poll(ctx context.Context) (int, error) {
	n, _, err := w.poll(ctx)
	return n, err
}

func (w *Worker) shardList() []int {
	if w.cfg.OwnShards != nil {
		return w.cfg.OwnShards
	}
	all := make([]int, w.manifest.Shards)
	for i := range all {
		all[i] = i
	}
	return all
}

// poll returns how many tasks it claimed and whether it stopped because
// every slot was busy.
func (w *Worker) poll(ctx context.Context) (claimed int, full bool, err error) {
	w.pollMu.Lock()
	defer w.pollMu.Unlock()
	if w.stopping.Load() {
		return 0, false, nil
	}
	if w.free() == 0 {
		return 0, true, nil
	}
	iv, err := w.clock.Now(ctx)
	if err != nil {
		return 0, false, err
	}
	list := w.shardList()
	// Rotate the starting shard so that no shard starves when slots run
	// out part way through a pass.
	w.rotate++
	for i := range list {
		if w.free() == 0 {
			return claimed, true, nil
		}
		shard := list[(w.rotate+i)%len(list)]
		n, perr := w.pollShard(ctx, shard, iv)
		claimed += n
		if perr != nil {
			err = errors.Join(err, perr)
		}
	}
	return claimed, w.free() == 0, err
}

func (w *Worker) free() int { return cap(w.slots) - len(w.slots) }

func (w *Worker) scan(shard int, iv clock.Interval) *shards.Scan {
	s, ok := w.scans[shard]
	if !ok {
		s = shards.NewScan(shard, iv.Earliest.Add(-w.cfg.ScanLookback), w.cfg.ScanLag)
		w.scans[shard] = s
	}
	return s
}

func (w *Worker) pollShard(ctx context.Context, shard int, iv clock.Interval) (int, error) {
	claimed := 0
	s := w.scan(shard, iv)
	cands, err := s.Next(ctx, w.st, iv.Latest, w.free())
	if err != nil {
		return 0, err
	}
	for _, c := range cands {
		if w.free() == 0 {
			break
		}
		key := c.Key
		if c.Pointer {
			key = task.Key(task.ShardFor(c.ID, w.manifest.Shards), c.ID)
		}
		v, err := taskio.Load(ctx, w.st, key)
		if err != nil {
			if w.reportLoad(key, err) {
				w.settle(ctx, s, c, c.ETag, true)
			}
			continue
		}
		ok, settledAt := w.tryClaim(ctx, v, iv)
		if ok {
			claimed++
		}
		if settledAt != "" {
			// A pointer has done its job once its task is claimed or no
			// longer pending; one to a task we cannot run stays for a
			// worker that can.
			done := ok || v.Task.Status != task.Pending
			if c.Pointer {
				settledAt = c.ETag
			} else {
				settledAt = shards.Settled
			}
			w.settle(ctx, s, c, settledAt, done)
		}
	}
	return claimed, nil
}

// settle marks a candidate handled, deleting a pointer that is done with.
func (w *Worker) settle(ctx context.Context, s *shards.Scan, c shards.Candidate, etag string, done bool) {
	s.Seen(c, etag)
	if c.Pointer && done {
		// Deleting is free, and the task object decides, not the pointer.
		if err := w.st.Delete(ctx, c.Key, s3store.DeleteOptions{}); err != nil {
			w.log.Warn("delete ready pointer", "key", c.Key, "err", err)
		}
	}
}

// reportLoad logs a failed load and reports whether the object is settled
// as unusable (corrupt, gone) rather than unreadable for now.
func (w *Worker) reportLoad(key string, err error) bool {
	switch {
	case errors.Is(err, s3store.ErrNotFound):
		return true
	case errors.Is(err, task.ErrCorrupt), errors.Is(err, task.ErrUnsupportedFormat):
		w.stats.corrupt.Add(1)
		w.log.Error("skipping corrupt task object", "key", key, "err", err)
		w.emit(Event{Kind: "corrupt", Err: err})
		return true
	}
	w.log.Warn("load task", "key", key, "err", err)
	return false
}

// dueNow reports whether t may be claimed now. A task meant to run at once
// is claimed when it may already be due; a delayed one only once it
// certainly is, so delays are never cut short by clock uncertainty.
func dueNow(t *task.Task, iv clock.Interval) bool {
	if t.AvailableAt.After(t.CreatedAt) {
		return t.Due(iv.Earliest)
	}
	return t.Due(iv.Latest)
}

// tryClaim claims v if it is pending, due and of a handled type. settledAt
// is the ETag of the object's version that needs no second look (the one it
// wrote when it claimed), or "" when a later poll should look again.
func (w *Worker) tryClaim(ctx context.Context, v taskio.Versioned, iv clock.Interval) (claimed bool, settledAt string) {
	t := v.Task
	if t.Status != task.Pending {
		return false, v.ETag
	}
	h := w.handler(t.Type)
	if h == nil {
		return false, v.ETag
	}
	if !dueNow(t, iv) || w.stopping.Load() {
		return false, ""
	}
	select {
	case w.slots <- struct{}{}:
	default:
		return false, ""
	}
	var b [12]byte
	rand.Read(b[:])
	claimID := hex.EncodeToString(b[:])
	if err := t.ClaimBy(w.cfg.ID, claimID, iv.Latest); err != nil {
		<-w.slots
		return false, ""
	}
	nv, err := taskio.Update(ctx, w.st, t, v.ETag)
	if err != nil {
		<-w.slots
		if !errors.Is(err, s3store.ErrPreconditionFailed) && !errors.Is(err, s3store.ErrConflict) {
			w.log.Warn("claim", "task_id", t.ID, "err", err)
		}
		return false, ""
	}
	w.stats.claimed.Add(1)
	w.emit(Event{Kind: "claimed", TaskID: t.ID, Type: t.Type, Attempt: t.Attempt})
	r := &run{w: w, v: nv, claimID: claimID, handler: h}
	w.inflight.Add(1)
	go r.execute()
	return true, nv.ETag
}
