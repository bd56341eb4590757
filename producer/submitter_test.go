package producer_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/s3queue/s3queue/producer"
	"github.com/s3queue/s3queue/s3store"
	"github.com/s3queue/s3queue/s3store/mem"
)

// deadline bounds every wait for background work.
const deadline = 10 * time.Second

// gate holds each task PUT until the test releases it, and tells the test
// when one arrives.
type gate struct {
	s3store.Store
	entered chan string
	release chan struct{}
}

func newGate() *gate {
	return &gate{Store: mem.New(), entered: make(chan string, 1000), release: make(chan struct{}, 1000)}
}

func (g *gate) Put(ctx context.Context, key string, body []byte, opts s3store.PutOptions) (string, error) {
	if strings.HasPrefix(key, "tasks/") {
		g.entered <- key
		select {
		case <-g.release:
		case <-ctx.Done():
			return "", ctx.Err()
		}
	}
	return g.Store.Put(ctx, key, body, opts)
}

// waitEntered waits for a task PUT to reach the gate.
func (g *gate) waitEntered(t *testing.T) {
	t.Helper()
	select {
	case <-g.entered:
	case <-time.After(deadline):
		t.Fatal("no task PUT reached the store")
	}
}

// open lets n task PUTs through.
func (g *gate) open(n int) {
	for range n {
		g.release <- struct{}{}
	}
}

// outcomes records what a submitter reports.
type outcomes struct {
	ch chan producer.Outcome
}

func newOutcomes() *outcomes { return &outcomes{ch: make(chan producer.Outcome, 10000)} }

func (o *outcomes) add(x producer.Outcome) { o.ch <- x }

// next waits for the next outcome.
func (o *outcomes) next(t *testing.T) producer.Outcome {
	t.Helper()
	select {
	case x := <-o.ch:
		return x
	case <-time.After(deadline):
		t.Fatal("no outcome reported")
		return producer.Outcome{}
	}
}

// rest returns the outcomes reported and not read yet (after Close, all).
func (o *outcomes) rest() []producer.Outcome {
	var out []producer.Outcome
	for {
		select {
		case x := <-o.ch:
			out = append(out, x)
		default:
			return out
		}
	}
}

// waitState waits until the submitter's state satisfies cond.
func waitState(t *testing.T, s *producer.Submitter, what string, cond func(producer.SubmitterState) bool) {
	t.Helper()
	end := time.Now().Add(deadline)
	for !cond(s.State()) {
		if time.Now().After(end) {
			t.Fatalf("%s: state %+v", what, s.State())
		}
		time.Sleep(time.Millisecond) // polling the state, not waiting for time to pass
	}
}

// checkBalance checks that every accepted submission is accounted for.
func checkBalance(t *testing.T, st producer.SubmitterState) {
	t.Helper()
	if st.Accepted != int64(st.Pending+st.InFlight)+st.Submitted+st.Failed+st.Dropped {
		t.Errorf("state does not balance: %+v", st)
	}
}

func req(i int) producer.Request {
	return producer.Request{Type: "t", Input: map[string]int{"i": i}}
}

// With one goroutine and room for two, submission 0 is in flight and 1, 2
// wait in the buffer; what becomes of 3 (and 4) is the policy's.
func TestSubmitterPolicies(t *testing.T) {
	for _, tc := range []struct {
		policy producer.Policy
		// addErr: what Add of submission 3 returns.
		addErr []error
		// dropped: the tag reported dropped before any PUT completes.
		dropped int
		// submitted: the tags submitted, in order.
		submitted []int
		refused   int64
	}{
		{producer.Block, nil, -1, []int{0, 1, 2, 3, 4}, 0},
		{producer.Reject, []error{producer.ErrQueueFull}, -1, []int{0, 1, 2}, 1},
		{producer.DropLatest, []error{producer.ErrDropped, producer.ErrQueueFull}, -1, []int{0, 1, 2}, 1},
		{producer.DropOldest, nil, 1, []int{0, 2, 3}, 0},
	} {
		t.Run(string(tc.policy), func(t *testing.T) {
			ctx := context.Background()
			g := newGate()
			p, err := producer.New(ctx, g, producer.Config{Shards: 4})
			if err != nil {
				t.Fatal(err)
			}
			out := newOutcomes()
			s, err := p.NewSubmitter(producer.SubmitterConfig{Parallel: 1, MaxQueueDepth: 2, Policy: tc.policy, OnResult: out.add})
			if err != nil {
				t.Fatal(err)
			}
			if err := s.Add(ctx, req(0), 0); err != nil {
				t.Fatal(err)
			}
			g.waitEntered(t)
			for i := 1; i <= 2; i++ {
				if err := s.Add(ctx, req(i), i); err != nil {
					t.Fatal(err)
				}
			}
			if st := s.State(); st.InFlight != 1 || st.Pending != 2 || st.Waiting != 0 {
				t.Fatalf("before the buffer overflows: %+v", st)
			}

			var added sync.WaitGroup
			if tc.policy == producer.Block {
				// 3 and then 4 wait for room, in that order.
				for i := 3; i <= 4; i++ {
					added.Go(func() {
						if err := s.Add(ctx, req(i), i); err != nil {
							t.Errorf("add %d: %v", i, err)
						}
					})
					waitState(t, s, fmt.Sprintf("add %d waits", i), func(st producer.SubmitterState) bool { return st.Waiting == i-2 })
				}
				if st := s.State(); st.Pending != 2 || st.Accepted != 3 {
					t.Fatalf("waiting Adds were accepted: %+v", st)
				}
			} else {
				err := s.Add(ctx, req(3), 3)
				for _, want := range tc.addErr {
					if !errors.Is(err, want) {
						t.Errorf("add 3: %v, want an error wrapping %v", err, want)
					}
				}
				if len(tc.addErr) == 0 && err != nil {
					t.Errorf("add 3: %v", err)
				}
			}
			if tc.dropped >= 0 {
				o := out.next(t)
				if o.Tag != tc.dropped || !o.Dropped() || o.ID != "" {
					t.Fatalf("drop reported as %+v, want tag %d dropped", o, tc.dropped)
				}
			}

			g.open(len(tc.submitted))
			var got []int
			for range tc.submitted {
				o := out.next(t)
				if o.Err != nil || o.ID == "" {
					t.Fatalf("outcome %+v", o)
				}
				got = append(got, o.Tag.(int))
			}
			if !slices.Equal(got, tc.submitted) {
				t.Errorf("submitted %v, want %v in that order", got, tc.submitted)
			}
			added.Wait()
			if err := s.Close(ctx); err != nil {
				t.Fatal(err)
			}
			if extra := out.rest(); len(extra) != 0 {
				t.Errorf("more outcomes than submissions: %+v", extra)
			}
			st := s.State()
			checkBalance(t, st)
			if st.Refused != tc.refused || st.Submitted != int64(len(tc.submitted)) || st.InFlight+st.Pending+st.Waiting != 0 {
				t.Errorf("final state %+v", st)
			}
		})
	}
}

func TestAWaitingAddHonoursItsContext(t *testing.T) {
	ctx := context.Background()
	g := newGate()
	p, err := producer.New(ctx, g, producer.Config{Shards: 4})
	if err != nil {
		t.Fatal(err)
	}
	out := newOutcomes()
	s, err := p.NewSubmitter(producer.SubmitterConfig{Parallel: 1, MaxQueueDepth: 1, OnResult: out.add})
	if err != nil {
		t.Fatal(err)
	}
	s.Add(ctx, req(0), 0)
	g.waitEntered(t)
	s.Add(ctx, req(1), 1)

	wctx, cancel := context.WithCancel(ctx)
	errc := make(chan error, 1)
	go func() { errc <- s.Add(wctx, req(2), 2) }()
	waitState(t, s, "add 2 waits", func(st producer.SubmitterState) bool { return st.Waiting == 1 })
	cancel()
	select {
	case err := <-errc:
		if !errors.Is(err, context.Canceled) {
			t.Fatalf("add canceled while waiting: %v", err)
		}
	case <-time.After(deadline):
		t.Fatal("a canceled Add kept waiting")
	}
	if st := s.State(); st.Waiting != 0 || st.Refused != 1 || st.Accepted != 2 {
		t.Fatalf("after the cancel: %+v", st)
	}
	g.open(2)
	waitState(t, s, "the buffer drains", func(st producer.SubmitterState) bool { return st.Submitted == 2 })
	// An Add whose context has ended is refused, even with room.
	if err := s.Add(wctx, req(3), 3); !errors.Is(err, context.Canceled) {
		t.Fatalf("add with a canceled context: %v", err)
	}
	if err := s.Close(ctx); err != nil {
		t.Fatal(err)
	}
	tags := map[any]int{}
	for _, o := range out.rest() {
		if o.Err != nil {
			t.Errorf("outcome %+v", o)
		}
		tags[o.Tag]++
	}
	if len(tags) != 2 || tags[0] != 1 || tags[1] != 1 {
		t.Errorf("outcomes by tag %v, want 0 and 1 once each", tags)
	}
}

func TestCloseDrainsTheBufferAndRefusesNewWork(t *testing.T) {
	ctx := context.Background()
	g := newGate()
	p, err := producer.New(ctx, g, producer.Config{Shards: 4})
	if err != nil {
		t.Fatal(err)
	}
	out := newOutcomes()
	s, err := p.NewSubmitter(producer.SubmitterConfig{Parallel: 2, MaxQueueDepth: 3, OnResult: out.add})
	if err != nil {
		t.Fatal(err)
	}
	for i := range 5 {
		if err := s.Add(ctx, req(i), i); err != nil {
			t.Fatal(err)
		}
	}
	g.waitEntered(t)
	g.waitEntered(t)
	waiting := make(chan error, 1)
	go func() { waiting <- s.Add(ctx, req(5), 5) }()
	waitState(t, s, "add 5 waits", func(st producer.SubmitterState) bool { return st.Waiting == 1 })

	closed := make(chan error, 1)
	go func() { closed <- s.Close(ctx) }()
	if err := <-waiting; !errors.Is(err, producer.ErrClosed) {
		t.Fatalf("add waiting at Close: %v, want ErrClosed", err)
	}
	if err := s.Add(ctx, req(6), 6); !errors.Is(err, producer.ErrClosed) {
		t.Fatalf("add after Close: %v, want ErrClosed", err)
	}
	select {
	case err := <-closed:
		t.Fatalf("Close returned (%v) before the buffer was drained", err)
	default:
	}
	g.open(5)
	if err := <-closed; err != nil {
		t.Fatal(err)
	}
	seen := map[any]bool{}
	for _, o := range out.rest() {
		if o.Err != nil || seen[o.Tag] {
			t.Fatalf("outcome %+v (seen before: %v)", o, seen[o.Tag])
		}
		if _, err := p.Get(ctx, o.ID); err != nil {
			t.Errorf("task %s of submission %v: %v", o.ID, o.Tag, err)
		}
		seen[o.Tag] = true
	}
	if len(seen) != 5 {
		t.Errorf("%d outcomes, want 5", len(seen))
	}
	st := s.State()
	checkBalance(t, st)
	if !st.Closed || st.Refused != 2 || st.Submitted != 5 {
		t.Errorf("state %+v", st)
	}
}

// Close whose context ends cancels what is in flight and reports what
// never started: nothing accepted goes unreported.
func TestCloseThatGivesUpReportsEverySubmission(t *testing.T) {
	ctx := context.Background()
	g := newGate()
	p, err := producer.New(ctx, g, producer.Config{Shards: 4})
	if err != nil {
		t.Fatal(err)
	}
	out := newOutcomes()
	s, err := p.NewSubmitter(producer.SubmitterConfig{Parallel: 1, MaxQueueDepth: 3, OnResult: out.add})
	if err != nil {
		t.Fatal(err)
	}
	for i := range 4 {
		s.Add(ctx, req(i), i)
	}
	g.waitEntered(t)
	cctx, cancel := context.WithCancel(ctx)
	cancel()
	if err := s.Close(cctx); !errors.Is(err, context.Canceled) {
		t.Fatalf("close: %v, want context.Canceled", err)
	}
	got := out.rest()
	if len(got) != 4 {
		t.Fatalf("%d outcomes, want 4: %+v", len(got), got)
	}
	for _, o := range got {
		switch {
		case o.Tag == 0 && !errors.Is(o.Err, context.Canceled):
			t.Errorf("the submission in flight: %v, want it canceled", o.Err)
		case o.Tag != 0 && !errors.Is(o.Err, producer.ErrClosed):
			t.Errorf("submission %v never started: %v, want ErrClosed", o.Tag, o.Err)
		}
	}
	st := s.State()
	checkBalance(t, st)
	if st.Failed != 4 {
		t.Errorf("state %+v", st)
	}
}

// A submission costs what Submit costs: one PUT, and a fleet read per
// cache period.
func TestSubmitterCostsWhatSubmitCosts(t *testing.T) {
	ctx := context.Background()
	p, st := setup(t)
	before := st.Counts()
	s, err := p.NewSubmitter(producer.SubmitterConfig{Parallel: 4})
	if err != nil {
		t.Fatal(err)
	}
	for i := range 20 {
		if err := s.Add(ctx, req(i), i); err != nil {
			t.Fatal(err)
		}
	}
	if err := s.Close(ctx); err != nil {
		t.Fatal(err)
	}
	d := st.Counts().Sub(before)
	if d.Of(s3store.OpPut) != 20 || d.Of(s3store.OpGet) > 2 || d.Total() > 22 {
		t.Fatalf("20 submissions made %s, want 20 PUTs and at most a fleet read per cache period", d)
	}
	if s := s.State(); s.Submitted != 20 {
		t.Fatalf("state %+v", s)
	}
}

func TestSubmitterSettings(t *testing.T) {
	ctx := context.Background()
	p, err := producer.New(ctx, mem.New(), producer.Config{Shards: 4, BatchParallelism: 3, QueuePolicy: producer.DropOldest})
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		cfg  producer.SubmitterConfig
		want producer.SubmitterState
		err  string
	}{
		{producer.SubmitterConfig{}, producer.SubmitterState{Parallel: 3, MaxQueueDepth: 6, Policy: producer.DropOldest}, ""},
		{producer.SubmitterConfig{Parallel: 5, MaxQueueDepth: producer.Unbounded, Policy: producer.Reject},
			producer.SubmitterState{Parallel: 5, MaxQueueDepth: producer.Unbounded, Policy: producer.Reject}, ""},
		{producer.SubmitterConfig{Parallel: -1}, producer.SubmitterState{}, "parallel -1 out of range"},
		{producer.SubmitterConfig{MaxQueueDepth: -2}, producer.SubmitterState{}, "max queue depth -2 out of range"},
		{producer.SubmitterConfig{Policy: "drop-newest"}, producer.SubmitterState{}, `invalid queue policy "drop-newest"`},
	} {
		s, err := p.NewSubmitter(tc.cfg)
		if tc.err != "" {
			if err == nil || !strings.Contains(err.Error(), tc.err) {
				t.Errorf("%+v: %v, want an error containing %q", tc.cfg, err, tc.err)
			}
			continue
		}
		if err != nil {
			t.Fatal(err)
		}
		if got := s.State(); got != tc.want {
			t.Errorf("%+v: state %+v, want %+v", tc.cfg, got, tc.want)
		}
		s.Close(ctx)
	}

	// The producer's own defaults.
	p, err = producer.New(ctx, mem.New(), producer.Config{Shards: 4})
	if err != nil {
		t.Fatal(err)
	}
	s, err := p.NewSubmitter(producer.SubmitterConfig{})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close(ctx)
	if got, want := s.State(), (producer.SubmitterState{Parallel: 8, MaxQueueDepth: 16, Policy: producer.Block}); got != want {
		t.Errorf("default state %+v, want %+v", got, want)
	}
	if _, err := producer.New(ctx, mem.New(), producer.Config{QueuePolicy: "later"}); err == nil || !strings.Contains(err.Error(), "producer.queue_policy") {
		t.Errorf("New with a bad policy: %v", err)
	}
}
