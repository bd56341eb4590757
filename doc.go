// Package s3queue is the Go API of s3queue, a work queue whose only
// infrastructure is an S3-compatible bucket.
//
// Open a Queue from a store URL (Open), from queue.toml and S3QUEUE_*
// environment variables (LoadConfig, then Open), or over a store you built
// yourself (OpenStore). Then, through that one value:
//
//   - submit tasks: Submit, SubmitBatch;
//   - run them: NewWorker, Worker.Handle, Worker.Run;
//   - keep the queue healthy: NewMonitor, Monitor.Run;
//   - inspect and manage tasks: Get, History, Cancel, Requeue, List, Tasks,
//     Stats.
//
// Open creates the queue when the store has none; a tool that only inspects
// or manages tasks sets Config.MustExist instead, and gets ErrNoQueue. The
// s3queue command's submit, get, history, cancel, requeue, list and stats are
// built on this package.
//
// A Queue shares one store and one authoritative clock (S3 server time, read
// from the Date header of responses) between its producer, its workers and
// its monitors, so a process needs no other wiring. The machinery lives in
// the packages behind it (producer, worker, monitor, task, s3store); the
// types a user meets are aliases of theirs, so a value from one is a value of
// the other.
//
// The package holds no queue logic of its own: every change to a task goes
// through the producer, worker and monitor packages, and List, Tasks and
// Stats only read.
package s3queue
