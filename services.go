package s3queue

import (
	"context"
	"fmt"
	"time"

	"github.com/s3queue/s3queue/monitor"
	"github.com/s3queue/s3queue/producer"
	"github.com/s3queue/s3queue/worker"
)

// ProducerConfig tunes the queue's producer (see producer.Config). Its
// Shards and Clock are the queue's.
type ProducerConfig = producer.Config

// WorkerConfig configures a worker: concurrency, polling, fleet membership,
// shutdown grace, events (see worker.Config). Zero fields take the defaults.
// Its Shards and Clock are the queue's.
type WorkerConfig = worker.Config

// MonitorConfig configures a monitor: sweep interval, retention, leader
// election (see monitor.Config). Zero fields take the defaults. Its Shards
// and Clock are the queue's.
type MonitorConfig = monitor.Config

// Worker claims tasks and runs the handlers registered with Handle, with
// bounded concurrency, until the context given to Run ends. Run then stops
// claiming, waits up to ShutdownGrace for running handlers, cancels the rest
// (context.Cause is ErrShutdown) and hands their tasks back to the queue
// without using up an attempt.
type Worker = worker.Worker

// Handler runs one attempt of a task. It returns the result (JSON, may be
// nil) or an error: a plain error is a failed attempt, retried by the task's
// policy; Permanent(err) makes the task dead at once; RetryAfter(d, err)
// runs it again after d without using an attempt. ctx is canceled when the
// lease is lost, the task is canceled or the worker shuts down
// (context.Cause is ErrLeaseLost, ErrCanceled or ErrShutdown).
type Handler = worker.Handler

// Event is something that happened to a task in a worker, reported to
// WorkerConfig.OnEvent: claimed, succeeded, failed, dead, snoozed, canceled,
// lease_lost, rejected, released, corrupt.
type Event = worker.Event

// Monitor keeps the queue healthy until the context given to Run ends: it
// re-dispatches tasks whose worker died, repairs pending tasks that lost
// their way to a worker, and deletes finished tasks after their retention.
// Several may run at once.
type Monitor = monitor.Monitor

// Causes of a handler's context cancellation, read with context.Cause.
var (
	// ErrCanceled: the task was canceled while it ran.
	ErrCanceled = worker.ErrCanceled
	// ErrLeaseLost: the worker lost the task's lease; another worker may
	// run it now.
	ErrLeaseLost = worker.ErrLeaseLost
	// ErrShutdown: the worker stopped before the handler did; the task goes
	// back to the queue without using up an attempt.
	ErrShutdown = worker.ErrShutdown
)

// Permanent marks a handler's err as not worth retrying: the task is dead
// at once.
func Permanent(err error) error { return worker.Permanent(err) }

// RetryAfter asks for the task to run again after delay without using up
// an attempt.
func RetryAfter(delay time.Duration, err error) error { return worker.RetryAfter(delay, err) }

// NewWorker returns a worker on the queue configured by Config.Worker.
// Register its handlers with Handle, then call Run; a worker never claims a
// task of a type it has no handler for. A process may run several; each
// needs its own id, so a Config.Worker.ID set by hand serves one worker of
// the Queue only (leave it empty and each gets a unique one).
func (q *Queue) NewWorker(ctx context.Context) (*Worker, error) {
	c := q.cfg.Worker
	if c.ID != "" {
		q.mu.Lock()
		taken := q.workerIDs[c.ID]
		q.workerIDs[c.ID] = true
		q.mu.Unlock()
		if taken {
			return nil, fmt.Errorf("s3queue: new worker on %s: worker id %q is already in use by another worker of this queue; leave Config.Worker.ID empty to give each worker its own", q.where, c.ID)
		}
	}
	c.Shards, c.Clock = q.cfg.Shards, q.clock
	if c.Logger == nil {
		c.Logger = q.cfg.Logger
	}
	if c.Local == nil {
		c.Local = q.cfg.Local
	}
	w, err := worker.New(ctx, q.store, c)
	if err != nil {
		return nil, fmt.Errorf("s3queue: new worker on %s: %w", q.where, err)
	}
	return w, nil
}

// NewMonitor returns a monitor on the queue configured by Config.Monitor.
// Call Run to sweep until its context ends.
func (q *Queue) NewMonitor(ctx context.Context) (*Monitor, error) {
	c := q.cfg.Monitor
	c.Shards, c.Clock = q.cfg.Shards, q.clock
	if c.Logger == nil {
		c.Logger = q.cfg.Logger
	}
	if c.Local == nil {
		c.Local = q.cfg.Local
	}
	m, err := monitor.New(ctx, q.store, c)
	if err != nil {
		return nil, fmt.Errorf("s3queue: new monitor on %s: %w", q.where, err)
	}
	return m, nil
}
