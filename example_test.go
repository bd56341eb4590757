package s3queue_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log"
	"os"
	"path/filepath"

	"github.com/s3queue/s3queue"
)

// A queue in a local directory: submit a task, run a worker until it has
// run the task, read the outcome.
func Example() {
	ctx := context.Background()
	dir, err := os.MkdirTemp("", "s3queue-example")
	if err != nil {
		log.Fatal(err)
	}
	defer os.RemoveAll(dir)

	q, err := s3queue.Open(ctx, s3queue.Config{
		Store:  "file://" + dir, // or s3://BUCKET/PREFIX?endpoint=...
		Worker: s3queue.WorkerConfig{Concurrency: 8},
	})
	if err != nil {
		log.Fatal(err)
	}

	id, err := q.Submit(ctx, "resize", map[string]string{"image": "cat.png"},
		s3queue.SubmitOptions{MaxAttempts: 5, IdempotencyKey: "upload-42"})
	if err != nil {
		log.Fatal(err)
	}

	w, err := q.NewWorker(ctx)
	if err != nil {
		log.Fatal(err)
	}
	run, stop := context.WithCancel(ctx)
	w.Handle("resize", func(ctx context.Context, t *s3queue.Task) (json.RawMessage, error) {
		defer stop() // one task is all this example runs
		var in struct{ Image string }
		if err := json.Unmarshal(t.Input, &in); err != nil {
			return nil, s3queue.Permanent(err) // retrying cannot help
		}
		return json.Marshal("small-" + in.Image)
	})
	// Run returns once run ends and the handler's outcome is committed.
	if err := w.Run(run); err != nil {
		log.Fatal(err)
	}

	t, err := q.Get(ctx, id)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println(t.Status, string(t.Result))
	h, err := q.History(ctx, id)
	if err != nil {
		log.Fatal(err)
	}
	for _, tr := range h {
		from := string(tr.From)
		if from == "" {
			from = "(new)"
		}
		fmt.Printf("%s → %s\n", from, tr.To)
	}
	// Output:
	// succeeded "small-cat.png"
	// (new) → pending
	// pending → running
	// running → succeeded
}

// A queue described by queue.toml, with an environment variable overriding
// one of its keys.
func ExampleLoadConfig() {
	dir, err := os.MkdirTemp("", "s3queue-example")
	if err != nil {
		log.Fatal(err)
	}
	defer os.RemoveAll(dir)
	path := filepath.Join(dir, "queue.toml")
	toml := fmt.Sprintf("store = %q\n\n[worker]\nconcurrency = 8\n\n[submit]\nmax_attempts = 5\n", "file://"+dir)
	if err := os.WriteFile(path, []byte(toml), 0o644); err != nil {
		log.Fatal(err)
	}
	env := []string{"S3QUEUE_WORKER_CONCURRENCY=2"} // os.Environ() in production

	cfg, err := s3queue.LoadConfig(path, env)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("concurrency", cfg.Worker.Concurrency)
	fmt.Println("max attempts", cfg.Submit.MaxAttempts)

	q, err := s3queue.Open(context.Background(), cfg)
	if err != nil {
		log.Fatal(err)
	}
	id, err := q.Submit(context.Background(), "resize", nil, s3queue.SubmitOptions{})
	if err != nil {
		log.Fatal(err)
	}
	t, err := q.Get(context.Background(), id)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("task", t.Status, "with", t.MaxAttempts, "attempts")
	// Output:
	// concurrency 2
	// max attempts 5
	// task pending with 5 attempts
}

// A pending task is canceled at once; a finished one cannot be.
func ExampleQueue_Cancel() {
	ctx := context.Background()
	q, err := s3queue.Open(ctx, s3queue.Config{Store: "mem://example-cancel"})
	if err != nil {
		log.Fatal(err)
	}
	id, err := q.Submit(ctx, "report", json.RawMessage(`{"month":"2026-11"}`), s3queue.SubmitOptions{})
	if err != nil {
		log.Fatal(err)
	}
	running, err := q.Cancel(ctx, id)
	fmt.Println(running, err)
	_, err = q.Cancel(ctx, id)
	fmt.Println(errors.Is(err, s3queue.ErrTerminal))
	// Output:
	// false <nil>
	// true
}

// An event bus: a subscriber of its own, and the JSON lines subscriber. In a
// real program the bus goes to Config.Events, and the queue's producer,
// workers and monitors publish on it.
func ExampleBus() {
	bus := s3queue.NewBus()
	bus.Subscribe("print", 0, func(e s3queue.Event) { fmt.Println("seen:", e.Kind, e.TaskID) })
	bus.Subscribe("json", 0, s3queue.EventJSONLines(os.Stdout))
	bus.Publish(s3queue.Event{Source: "worker", Kind: s3queue.EventSucceeded, TaskID: "t1", Type: "resize", Attempt: 1, Shard: 0})
	bus.Close() // waits until both subscribers have handled the event
	// Unordered output:
	// seen: succeeded t1
	// {"source":"worker","kind":"succeeded","task_id":"t1","type":"resize","attempt":1,"shard":0}
}
