package events

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"
)

const deadline = 10 * time.Second

// recorder is a slog handler that keeps its records and signals each one.
type recorder struct {
	mu      sync.Mutex
	records []slog.Record
	signal  chan string // each record's message, if not full
}

func newRecorder() *recorder { return &recorder{signal: make(chan string, 64)} }

func (r *recorder) Enabled(context.Context, slog.Level) bool { return true }
func (r *recorder) WithAttrs([]slog.Attr) slog.Handler       { return r }
func (r *recorder) WithGroup(string) slog.Handler            { return r }
func (r *recorder) Handle(_ context.Context, rec slog.Record) error {
	r.mu.Lock()
	r.records = append(r.records, rec)
	r.mu.Unlock()
	select {
	case r.signal <- rec.Message:
	default:
	}
	return nil
}

// count returns how many records' messages contain s.
func (r *recorder) count(s string) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	n := 0
	for _, rec := range r.records {
		if strings.Contains(rec.Message, s) {
			n++
		}
	}
	return n
}

// waitFor waits for a record whose message contains s.
func (r *recorder) waitFor(t *testing.T, s string) {
	t.Helper()
	timeout := time.After(deadline)
	for {
		select {
		case m := <-r.signal:
			if strings.Contains(m, s) {
				return
			}
		case <-timeout:
			t.Fatalf("no log record %q within %v", s, deadline)
		}
	}
}

func recv[T any](t *testing.T, ch <-chan T, what string) T {
	t.Helper()
	select {
	case v := <-ch:
		return v
	case <-time.After(deadline):
		t.Fatalf("no %s within %v", what, deadline)
		panic("unreachable")
	}
}

func ev(i int) Event { return Event{Kind: Claimed, TaskID: fmt.Sprint(i), Shard: -1} }

// blocker is a subscriber that reports each event it starts on got and
// then waits for a value on release before returning.
type blocker struct {
	got     chan Event
	release chan struct{}
}

func newBlocker() *blocker {
	return &blocker{got: make(chan Event, 1000), release: make(chan struct{}, 1000)}
}

func (b *blocker) fn(e Event) {
	b.got <- e
	<-b.release
}

// releaseAll lets every event through from now on.
func (b *blocker) releaseAll() { close(b.release) }

func TestSubscriberSeesEventsInPublishOrder(t *testing.T) {
	bus := NewBus()
	var got []string
	bus.Subscribe("order", 1000, func(e Event) { got = append(got, e.TaskID) })
	var want []string
	for i := range 1000 {
		bus.Publish(ev(i))
		want = append(want, fmt.Sprint(i))
	}
	bus.Close() // waits for the subscriber: got is safe to read after it
	if strings.Join(got, ",") != strings.Join(want, ",") {
		t.Errorf("got %d events out of order or lost: %v", len(got), got)
	}
}

func TestFullBufferDropsForThatSubscriberOnly(t *testing.T) {
	rec := newRecorder()
	bus := NewBus(WithLogger(slog.New(rec)))
	slow := newBlocker()
	s := bus.Subscribe("slow", 2, slow.fn)
	var fast []string
	f := bus.Subscribe("fast", 100, func(e Event) { fast = append(fast, e.TaskID) })

	bus.Publish(ev(0))
	recv(t, slow.got, "the first event") // the subscriber holds 0: its buffer is empty
	for i := 1; i <= 6; i++ {
		bus.Publish(ev(i)) // 1 and 2 fill the buffer; 3..6 are dropped
	}
	if got := s.Dropped(); got != 4 {
		t.Errorf("Dropped = %d, want 4", got)
	}
	stats := bus.Stats()
	if len(stats) != 2 || stats[0].Name != "slow" || stats[0].Dropped != 4 || stats[0].Buffered != 2 ||
		stats[1].Name != "fast" || stats[1].Dropped != 0 {
		t.Errorf("Stats = %+v", stats)
	}
	if n := rec.count("falling behind"); n != 1 {
		t.Errorf("%d drop warnings for one episode, want 1", n)
	}

	t.Run("the next episode warns again", func(t *testing.T) {
		slow.release <- struct{}{} // 0
		recv(t, slow.got, "event 1")
		slow.release <- struct{}{} // 1
		recv(t, slow.got, "event 2")
		slow.release <- struct{}{} // 2: the buffer is empty now
		rec.waitFor(t, "caught up")
		bus.Publish(ev(7))
		recv(t, slow.got, "event 7")
		for i := 8; i <= 10; i++ {
			bus.Publish(ev(i)) // 8 and 9 buffered, 10 dropped
		}
		if got := s.Dropped(); got != 5 {
			t.Errorf("Dropped = %d, want 5", got)
		}
		if n := rec.count("falling behind"); n != 2 {
			t.Errorf("%d drop warnings after two episodes, want 2", n)
		}
	})

	slow.releaseAll()
	bus.Close()
	var delivered []string
	for len(slow.got) > 0 {
		delivered = append(delivered, (<-slow.got).TaskID)
	}
	if got := strings.Join(delivered, ","); got != "8,9" {
		t.Errorf("slow subscriber got %s after the second episode, want 8,9", got)
	}
	if s.Delivered() != 6 {
		t.Errorf("slow Delivered = %d, want 6 (0, 1, 2, 7, 8, 9)", s.Delivered())
	}
	if len(fast) != 11 || f.Dropped() != 0 {
		t.Errorf("fast subscriber got %d events and dropped %d; want all 11, none dropped", len(fast), f.Dropped())
	}
}

func TestCloseDeliversWhatWasBuffered(t *testing.T) {
	t.Run("subscription", func(t *testing.T) {
		bus := NewBus()
		b := newBlocker()
		s := bus.Subscribe("s", 10, b.fn)
		for i := range 5 {
			bus.Publish(ev(i))
		}
		recv(t, b.got, "the first event")
		closed := make(chan struct{})
		go func() { s.Close(); close(closed) }()
		select {
		case <-closed:
			t.Fatal("Close returned while the subscriber was still busy with its buffer")
		default:
		}
		b.releaseAll()
		recv(t, closed, "Close to return")
		bus.Publish(ev(99)) // after Close: not delivered
		if len(bus.Stats()) != 0 {
			t.Errorf("a closed subscription is still listed: %+v", bus.Stats())
		}
		var got []string
		for len(b.got) > 0 {
			got = append(got, (<-b.got).TaskID)
		}
		if strings.Join(got, ",") != "1,2,3,4" || s.Delivered() != 5 {
			t.Errorf("after the first, the subscriber got %v (delivered %d), want 1..4 (5)", got, s.Delivered())
		}
		s.Close() // twice: harmless
		bus.Close()
	})
	t.Run("bus", func(t *testing.T) {
		bus := NewBus()
		var mu sync.Mutex
		counts := map[string]int{}
		for _, name := range []string{"a", "b", "c"} {
			bus.Subscribe(name, 100, func(Event) { mu.Lock(); counts[name]++; mu.Unlock() })
		}
		for i := range 50 {
			bus.Publish(ev(i))
		}
		bus.Close()
		bus.Publish(ev(50)) // after Close: nothing, no panic
		if counts["a"] != 50 || counts["b"] != 50 || counts["c"] != 50 {
			t.Errorf("after Close, counts = %v, want 50 each", counts)
		}
		s := bus.Subscribe("late", 1, func(Event) { t.Error("a subscriber of a closed bus ran") })
		bus.Publish(ev(51))
		s.Close()
	})
}

func TestNilBus(t *testing.T) {
	var bus *Bus
	bus.Publish(ev(0))
	s := bus.Subscribe("x", 1, func(Event) { t.Error("a subscriber of a nil bus ran") })
	if s != nil {
		t.Fatalf("Subscribe on a nil bus = %v, want nil", s)
	}
	s.Close()
	if s.Dropped() != 0 || s.Delivered() != 0 || s.Name() != "" || bus.Stats() != nil {
		t.Error("a nil bus or subscription reports something")
	}
	bus.Close()
}

func TestConcurrentPublish(t *testing.T) {
	const publishers, each = 8, 500
	bus := NewBus()
	type key struct{ sub, pub int }
	var mu sync.Mutex
	last := map[key]int{}
	disorder := 0
	sub := func(id int) func(Event) {
		return func(e Event) {
			var p, i int
			fmt.Sscanf(e.TaskID, "%d-%d", &p, &i)
			mu.Lock()
			defer mu.Unlock()
			if prev, ok := last[key{id, p}]; ok && i != prev+1 {
				disorder++
			}
			last[key{id, p}] = i
		}
	}
	subs := []*Subscription{
		bus.Subscribe("one", publishers*each, sub(1)),
		bus.Subscribe("two", publishers*each, sub(2)),
	}
	var wg sync.WaitGroup
	for p := range publishers {
		wg.Go(func() {
			for i := range each {
				bus.Publish(Event{Kind: Claimed, TaskID: fmt.Sprintf("%d-%d", p, i)})
			}
		})
	}
	// Subscriptions come and go meanwhile.
	wg.Go(func() {
		for range 50 {
			bus.Subscribe("churn", 1, func(Event) {}).Close()
			_ = bus.Stats()
		}
	})
	wg.Wait()
	bus.Close()
	for _, s := range subs {
		if s.Delivered() != publishers*each || s.Dropped() != 0 {
			t.Errorf("%s: delivered %d, dropped %d; want %d, 0", s.Name(), s.Delivered(), s.Dropped(), publishers*each)
		}
	}
	if disorder != 0 {
		t.Errorf("%d events out of their publisher's order", disorder)
	}
}

func TestPanickingSubscriberGoesOn(t *testing.T) {
	rec := newRecorder()
	bus := NewBus(WithLogger(slog.New(rec)))
	var got []string
	bus.Subscribe("p", 10, func(e Event) {
		if e.TaskID == "1" {
			panic("boom")
		}
		got = append(got, e.TaskID)
	})
	for i := range 3 {
		bus.Publish(ev(i))
	}
	bus.Close()
	if strings.Join(got, ",") != "0,2" || rec.count("panicked") != 1 {
		t.Errorf("got %v, %d panic logs; want 0,2 and 1", got, rec.count("panicked"))
	}
}

func TestJSONLines(t *testing.T) {
	at := time.Date(2026, 1, 2, 3, 4, 5, 6000000, time.UTC)
	var buf bytes.Buffer
	write := JSONLines(&buf)
	write(Event{Time: at, Source: SourceWorker, Origin: "w1", Kind: Failed, TaskID: "t1", Type: "resize",
		Attempt: 2, Shard: 0, Pool: "io", Phase: PhaseInFlight, Key: "tasks/000/t1.json", Err: errors.New("disk on fire"),
		Duration: 1500*time.Millisecond + 250*time.Microsecond})
	write(Event{Kind: FleetAsleep, Shard: -1})
	write(Event{Kind: ShardAcquired, Shard: 7})
	lines := strings.Split(strings.TrimSuffix(buf.String(), "\n"), "\n")
	want := []string{
		`{"time":"2026-01-02T03:04:05.006Z","source":"worker","origin":"w1","kind":"failed","task_id":"t1","type":"resize","attempt":2,"shard":0,"pool":"io","phase":"in-flight","key":"tasks/000/t1.json","err":"disk on fire","duration_ms":1500.25}`,
		`{"kind":"fleet_asleep"}`,
		`{"kind":"shard_acquired","shard":7}`,
	}
	if len(lines) != len(want) {
		t.Fatalf("%d lines, want %d:\n%s", len(lines), len(want), buf.String())
	}
	for i := range want {
		if lines[i] != want[i] {
			t.Errorf("line %d:\n got %s\nwant %s", i, lines[i], want[i])
		}
	}
	t.Run("round trip", func(t *testing.T) {
		var e Event
		if err := json.Unmarshal([]byte(lines[0]), &e); err != nil {
			t.Fatal(err)
		}
		if !e.Time.Equal(at) || e.Kind != Failed || e.Shard != 0 || e.Attempt != 2 || e.Err == nil || e.Err.Error() != "disk on fire" ||
			e.Origin != "w1" || e.Pool != "io" || e.Phase != PhaseInFlight || e.Key != "tasks/000/t1.json" ||
			e.Duration != 1500*time.Millisecond+250*time.Microsecond {
			t.Errorf("decoded %+v", e)
		}
		if err := json.Unmarshal([]byte(lines[1]), &e); err != nil || e.Shard != -1 || e.Err != nil {
			t.Errorf("decoded %+v (%v): want shard -1, no error", e, err)
		}
	})
	t.Run("a failed write warns once", func(t *testing.T) {
		rec := newRecorder()
		prev := slog.Default()
		slog.SetDefault(slog.New(rec))
		defer slog.SetDefault(prev)
		w := &flaky{fail: true}
		write := JSONLines(w)
		write(ev(1))
		write(ev(2))
		w.fail = false
		write(ev(3))
		if n := rec.count("write JSON lines"); n != 1 {
			t.Errorf("%d warnings for two failed writes, want 1", n)
		}
		if w.buf.String() != `{"kind":"claimed","task_id":"3"}`+"\n" {
			t.Errorf("wrote %q", w.buf.String())
		}
	})
}

type flaky struct {
	fail bool
	buf  bytes.Buffer
}

func (f *flaky) Write(b []byte) (int, error) {
	if f.fail {
		return 0, errors.New("disk full")
	}
	return f.buf.Write(b)
}

func TestLogLevels(t *testing.T) {
	at := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	for _, tc := range []struct {
		kind  Kind
		level string
		msg   string
	}{
		{Succeeded, "INFO", "task succeeded"},
		{Failed, "INFO", "task failed"},
		{Dead, "INFO", "task dead"},
		{Canceled, "INFO", "task canceled"},
		{Released, "INFO", "task released"},
		{Rejected, "INFO", "task rejected"},
		{Dropped, "INFO", "task dropped"},
		{LeaseLost, "WARN", "task lease lost"},
		{OutcomeRejected, "WARN", "task outcome rejected"},
		{Claimed, "DEBUG", "task claimed"},
		{Submitted, "DEBUG", "task submitted"},
		{Retried, "DEBUG", "task retried"},
		{Redispatched, "DEBUG", "task redispatched"},
		{ShardAcquired, "DEBUG", "shard acquired"},
		{FleetWoken, "DEBUG", "fleet woken"},
	} {
		t.Run(string(tc.kind), func(t *testing.T) {
			var buf bytes.Buffer
			log := Log(slog.New(slog.NewJSONHandler(&buf, &slog.HandlerOptions{Level: slog.LevelDebug})))
			log(Event{Time: at, Source: SourceWorker, Origin: "w1", Kind: tc.kind, TaskID: "t1", Type: "x", Attempt: 1,
				Shard: 3, Phase: PhasePending, Err: errors.New("oops")})
			var got map[string]any
			if err := json.Unmarshal(buf.Bytes(), &got); err != nil {
				t.Fatalf("%v: %q", err, buf.String())
			}
			if got["level"] != tc.level || !strings.HasPrefix(got["msg"].(string), tc.msg) {
				t.Errorf("level %v msg %v, want %s %q", got["level"], got["msg"], tc.level, tc.msg)
			}
			for k, v := range map[string]any{"time": "2026-01-02T03:04:05Z", "source": "worker", "origin": "w1", "task_id": "t1",
				"type": "x", "attempt": 1.0, "shard": 3.0, "phase": "pending", "err": "oops"} {
				if got[k] != v {
					t.Errorf("%s = %v, want %v", k, got[k], v)
				}
			}
		})
	}
	t.Run("info logger drops debug kinds", func(t *testing.T) {
		var buf bytes.Buffer
		log := Log(slog.New(slog.NewTextHandler(&buf, nil)))
		log(Event{Kind: Claimed, TaskID: "a", Shard: -1})
		log(Event{Kind: Succeeded, TaskID: "b", Shard: -1})
		if out := buf.String(); strings.Contains(out, "task_id=a") || !strings.Contains(out, "task_id=b") || strings.Contains(out, "shard=") {
			t.Errorf("log:\n%s", out)
		}
	})
}
