package producer_test

import (
	"context"
	"testing"
	"time"

	"github.com/s3queue/s3queue/clock"
	"github.com/s3queue/s3queue/internal/events"
	"github.com/s3queue/s3queue/internal/taskio"
	"github.com/s3queue/s3queue/producer"
	"github.com/s3queue/s3queue/s3store/mem"
)

// The producer publishes submitted for each task it creates (once per
// idempotency key), and what Cancel and Requeue did.
func TestProducerPublishesEvents(t *testing.T) {
	ctx := context.Background()
	st := mem.New()
	bus := events.NewBus()
	var got []events.Event
	bus.Subscribe("test", 100, func(e events.Event) { got = append(got, e) })
	p, err := producer.New(ctx, st, producer.Config{Shards: 4, Events: bus})
	if err != nil {
		t.Fatal(err)
	}
	plain, err := p.Submit(ctx, "t", nil, producer.Options{})
	if err != nil {
		t.Fatal(err)
	}
	keyed, err := p.Submit(ctx, "t", nil, producer.Options{IdempotencyKey: "k"})
	if err != nil {
		t.Fatal(err)
	}
	if again, err := p.Submit(ctx, "t", nil, producer.Options{IdempotencyKey: "k"}); err != nil || again != keyed {
		t.Fatalf("repeat submit: %s %v", again, err)
	}
	if _, err := p.Cancel(ctx, plain); err != nil {
		t.Fatal(err)
	}
	if err := p.Requeue(ctx, plain); err != nil {
		t.Fatal(err)
	}
	// A running task: its cancel is only requested.
	v, err := taskio.LoadID(ctx, st, keyed, []int{4})
	if err != nil {
		t.Fatal(err)
	}
	if err := v.Task.ClaimBy("w", "c1", time.Now().Add(time.Minute)); err != nil {
		t.Fatal(err)
	}
	if _, err := taskio.Update(ctx, st, clock.System(), v.Task, v.ETag); err != nil {
		t.Fatal(err)
	}
	if requested, err := p.Cancel(ctx, keyed); err != nil || !requested {
		t.Fatalf("cancel running: %v %v", requested, err)
	}
	bus.Close()

	want := []struct {
		kind events.Kind
		id   string
	}{
		{events.Submitted, plain}, {events.Submitted, keyed}, // not the repeat
		{events.Canceled, plain}, {events.Requeued, plain}, {events.CancelRequested, keyed},
	}
	if len(got) != len(want) {
		t.Fatalf("events %+v, want %v", got, want)
	}
	for i, w := range want {
		e := got[i]
		if e.Kind != w.kind || e.TaskID != w.id || e.Source != events.SourceProducer || e.Origin != "" || e.Type != "t" ||
			e.Time.IsZero() || e.Shard < 0 || e.Shard >= 4 {
			t.Errorf("event %d: %+v, want %s of %s", i, e, w.kind, w.id)
		}
	}
}
