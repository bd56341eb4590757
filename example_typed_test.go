package s3queue_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log"
	"sync/atomic"

	"github.com/s3queue/s3queue"
)

// Resize is the input of a "resize" task: its Kind is the task type.
type Resize struct {
	Image string `json:"image"`
	Width int    `json:"width"`
}

func (Resize) Kind() string { return "resize" }

// Thumb is the result of a "resize" task.
type Thumb struct {
	URL string `json:"url"`
}

// A typed handler: the worker decodes each task's input into Job.Args and
// stores the handler's result as JSON. SubmitArgs takes the task type
// from Kind; ResultOf decodes the result.
func ExampleHandle() {
	ctx := context.Background()
	q, err := s3queue.Open(ctx, s3queue.Config{Store: "mem://example-handle"})
	if err != nil {
		log.Fatal(err)
	}
	id, err := q.SubmitArgs(ctx, Resize{Image: "cat.png", Width: 64})
	if err != nil {
		log.Fatal(err)
	}

	w, err := q.NewWorker(ctx)
	if err != nil {
		log.Fatal(err)
	}
	run, stop := context.WithCancel(ctx)
	s3queue.Handle(w, func(ctx context.Context, j *s3queue.Job[Resize]) (Thumb, error) {
		defer stop() // one task is all this example runs
		fmt.Println("attempt", j.Attempt, "of", j.MaxAttempts, "for", j.Type, j.Args.Image)
		return Thumb{URL: fmt.Sprintf("%d/%s", j.Args.Width, j.Args.Image)}, nil
	})
	if err := w.Run(run); err != nil {
		log.Fatal(err)
	}

	thumb, err := s3queue.ResultOf[Thumb](ctx, q, id)
	fmt.Println(thumb.URL, err)
	// Output:
	// attempt 1 of 3 for resize cat.png
	// 64/cat.png <nil>
}

// Submitting typed tasks: options as Submit's, and ResultOf of a task
// that has not run yet.
func ExampleQueue_SubmitArgs() {
	ctx := context.Background()
	q, err := s3queue.Open(ctx, s3queue.Config{Store: "mem://example-submit-args"})
	if err != nil {
		log.Fatal(err)
	}
	id, err := q.SubmitArgs(ctx, Resize{Image: "dog.png"}, s3queue.SubmitOptions{MaxAttempts: 5, IdempotencyKey: "upload-7"})
	if err != nil {
		log.Fatal(err)
	}
	t, err := q.Get(ctx, id)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println(t.Type, t.Status, t.MaxAttempts, string(t.Input))

	_, err = s3queue.ResultOf[Thumb](ctx, q, id)
	fmt.Println(errors.Is(err, s3queue.ErrNotSucceeded))
	// Output:
	// resize pending 5 {"image":"dog.png","width":0}
	// true
}

// Handler middleware runs around every handler invocation of the worker:
// here it reports panics before the worker's crash handling takes over,
// and logs each attempt's outcome.
func ExampleHandlerMiddleware() {
	ctx := context.Background()
	run, stop := context.WithCancel(ctx)
	var seen atomic.Int32
	observe := func(ctx context.Context, t *s3queue.TaskInfo, next func(context.Context) (json.RawMessage, error)) (res json.RawMessage, err error) {
		defer func() {
			p := recover()
			if p != nil {
				fmt.Printf("%s attempt %d panicked: %v\n", t.Type, t.Attempt, p)
			} else {
				fmt.Printf("%s attempt %d: result %s, error %v\n", t.Type, t.Attempt, res, err)
			}
			if seen.Add(1) == 2 {
				stop() // two tasks are all this example runs
			}
			if p != nil {
				panic(p) // the worker records a crash, as without the middleware
			}
		}()
		return next(ctx)
	}
	q, err := s3queue.Open(ctx, s3queue.Config{
		Store:  "mem://example-handler-middleware",
		Worker: s3queue.WorkerConfig{Concurrency: 1, Middleware: []s3queue.HandlerMiddleware{observe}},
	})
	if err != nil {
		log.Fatal(err)
	}
	for _, img := range []string{"cat.png", ""} {
		if _, err := q.SubmitArgs(ctx, Resize{Image: img}, s3queue.SubmitOptions{MaxAttempts: 1}); err != nil {
			log.Fatal(err)
		}
	}
	w, err := q.NewWorker(ctx)
	if err != nil {
		log.Fatal(err)
	}
	s3queue.Handle(w, func(ctx context.Context, j *s3queue.Job[Resize]) (string, error) {
		if j.Args.Image == "" {
			panic("no image")
		}
		return "small-" + j.Args.Image, nil
	})
	if err := w.Run(run); err != nil {
		log.Fatal(err)
	}
	// Unordered output:
	// resize attempt 1: result "small-cat.png", error <nil>
	// resize attempt 1 panicked: no image
}

// Submit middleware runs around every submit of the queue: here it
// refuses tasks of types the service does not know, and gives reports a
// single attempt.
func ExampleSubmitMiddleware() {
	ctx := context.Background()
	known := map[string]bool{"resize": true, "report": true}
	check := func(ctx context.Context, req s3queue.Request, next func(context.Context, s3queue.Request) (string, error)) (string, error) {
		if !known[req.Type] {
			return "", fmt.Errorf("unknown task type")
		}
		if req.Type == "report" {
			req.Options.MaxAttempts = 1
		}
		return next(ctx, req)
	}
	q, err := s3queue.Open(ctx, s3queue.Config{
		Store:    "mem://example-submit-middleware",
		Producer: s3queue.ProducerConfig{Middleware: []s3queue.SubmitMiddleware{check}},
	})
	if err != nil {
		log.Fatal(err)
	}
	_, err = q.Submit(ctx, "resise", nil, s3queue.SubmitOptions{})
	fmt.Println(err)
	id, err := q.Submit(ctx, "report", nil, s3queue.SubmitOptions{})
	if err != nil {
		log.Fatal(err)
	}
	t, err := q.Get(ctx, id)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println(t.Type, t.MaxAttempts)
	// Output:
	// s3queue: task type "resise": unknown task type
	// report 1
}
