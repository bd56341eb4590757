// Package s3queue is the Go API of s3queue, a work queue whose only
// infrastructure is an S3-compatible bucket.
//
// # Open a queue
//
// Open a Queue from a store URL (Open), from queue.toml and S3QUEUE_*
// environment variables (LoadConfig, then Open), or over a store you built
// yourself (OpenStore). Then, through that one value:
//
//   - submit tasks: SubmitArgs, Submit, SubmitBatch, SubmitEach,
//     NewSubmitter;
//   - run them: NewWorker, Handle (or Worker.Handle), Worker.Run;
//   - keep the queue healthy: NewMonitor, Monitor.Run;
//   - inspect and manage tasks: ResultOf, Get, History, Cancel, Requeue,
//     List, Tasks, Stats, Pause, AddSchedule;
//   - observe it: Config.Events, Config.TracerProvider, Config.Metrics,
//     Dashboard.
//
// Open creates the queue when the store has none; a tool that only inspects
// or manages tasks sets Config.MustExist instead, and gets ErrNoQueue. The
// s3queue command's submit, get, history, cancel, requeue, list and stats are
// built on this package.
//
// # Typed tasks
//
// A task's input is a Go value whose Kind method names its task type
// (Args); its handler gets a Job: the attempt's TaskInfo (ID, Type,
// Attempt, MaxAttempts, Snoozes, and the stored Task for the rest) and the
// input decoded as Args. What the handler returns is stored as the task's
// result, in JSON, and ResultOf decodes it:
//
//	type Resize struct{ Image string `json:"image"` }
//
//	func (Resize) Kind() string { return "resize" }
//
//	s3queue.Handle(w, func(ctx context.Context, j *s3queue.Job[Resize]) (Thumb, error) {
//		return makeThumb(ctx, j.Args.Image)
//	})
//	id, err := q.SubmitArgs(ctx, Resize{Image: "cat.png"}, s3queue.SubmitOptions{MaxAttempts: 5})
//	// ... once the task has succeeded:
//	thumb, err := s3queue.ResultOf[Thumb](ctx, q, id)
//
// An input that does not decode as Args ends its task dead at once (no
// retry can fix it), its last error naming the task type, the Go type and
// the decode error. HandleType registers a typed handler under a type name
// of your choosing, for inputs without a Kind method. Worker.Handle takes
// an untyped Handler, which gets the stored Task and returns JSON.
//
// A handler's error fails the attempt, retried by the task's policy;
// Permanent(err) ends the task dead at once; RetryAfter and RetryLater run
// it again later without using an attempt. Its context ends when the
// lease is lost, the task is canceled or the worker shuts down
// (context.Cause: ErrLeaseLost, ErrCanceled, ErrShutdown), and at the
// attempt's timeout or the task's deadline.
//
// # Middleware
//
// HandlerMiddleware (WorkerConfig.Middleware) wraps every handler
// invocation of a worker: it gets the context, the attempt's TaskInfo and
// next, and may act before and after, change the context, or return an
// outcome of its own. SubmitMiddleware (ProducerConfig.Middleware) wraps
// every submit of the queue, the schedules' ticks included: it gets the
// Request and may change it, or refuse it by returning an error. The first
// of a list is the outermost. The worker's own s3queue.run span is a
// handler middleware, outside those of the config.
//
// # Observe
//
// The producer, workers and monitors publish what happens on the Bus of
// Config.Events (docs/events.md); with Config.TracerProvider a submit's
// trace continues in the worker that runs the task (docs/tracing.md).
// Config.Metrics (NewMetrics) collects the Prometheus metrics the command
// exports (docs/operations.md): mount Metrics.Handler at /metrics, or
// gather Metrics.Gatherer in a registry of your own. Queue.Dashboard is
// the monitor's web dashboard (docs/dashboard.md) as an http.Handler.
//
// # How it fits together
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
// Stats only read. docs/go-api.md walks through the API.
package s3queue
