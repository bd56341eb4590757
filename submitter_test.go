package s3queue_test

import (
	"context"
	"errors"
	"slices"
	"strings"
	"testing"

	"github.com/s3queue/s3queue"
)

func TestSubmitterTakesDefaults(t *testing.T) {
	f := setup(t, s3queue.Config{Submit: s3queue.SubmitDefaults{MaxAttempts: 4}, Producer: s3queue.ProducerConfig{BatchParallelism: 2}})
	ctx := context.Background()
	outcomes := make(chan s3queue.SubmitOutcome, 10)
	s, err := f.q.NewSubmitter(s3queue.SubmitterConfig{OnResult: func(o s3queue.SubmitOutcome) { outcomes <- o }})
	if err != nil {
		t.Fatal(err)
	}
	if st := s.State(); st.Parallel != 2 || st.MaxQueueDepth != 4 || st.Policy != s3queue.SubmitBlock {
		t.Errorf("settings %+v, want Config.Producer's", st)
	}
	for i, r := range []s3queue.Request{
		{Type: "resize", Input: 1},
		{Type: "", Input: 2},
		{Type: "resize", Input: 3, Options: s3queue.SubmitOptions{MaxAttempts: 2}},
	} {
		if err := s.Add(ctx, r, i); err != nil {
			t.Fatal(err)
		}
	}
	if err := s.Close(ctx); err != nil {
		t.Fatal(err)
	}
	if err := s.Add(ctx, s3queue.Request{Type: "resize"}, 3); !errors.Is(err, s3queue.ErrClosed) {
		t.Errorf("add after close: %v, want ErrClosed", err)
	}
	close(outcomes)
	got := map[any]s3queue.SubmitOutcome{}
	for o := range outcomes {
		got[o.Tag] = o
	}
	if len(got) != 3 {
		t.Fatalf("%d outcomes, want 3", len(got))
	}
	if err := got[1].Err; err == nil || !strings.Contains(err.Error(), "s3queue: task type") {
		t.Errorf("a request without a type: %v, want an error naming the task type", err)
	}
	for tag, want := range map[int]int{0: 4, 2: 2} {
		o := got[tag]
		if o.Err != nil {
			t.Fatalf("request %d: %v", tag, o.Err)
		}
		if got := f.get(t, o.ID).MaxAttempts; got != want {
			t.Errorf("request %d: %d attempts, want %d", tag, got, want)
		}
	}
}

func TestSubmitEachTakesDefaults(t *testing.T) {
	f := setup(t, s3queue.Config{Submit: s3queue.SubmitDefaults{MaxAttempts: 4}})
	ctx := context.Background()
	bad := errors.New("no such file")
	var ok []int
	for i, res := range s3queue.SubmitEach(ctx, f.q, 2, slices.Values([]int{0, 1, 2}), func(_ context.Context, i int) (s3queue.Request, error) {
		if i == 1 {
			return s3queue.Request{}, bad
		}
		return s3queue.Request{Type: "resize", Input: i}, nil
	}) {
		if i == 1 {
			if !errors.Is(res.Err, bad) {
				t.Errorf("item 1: %v, want the build error", res.Err)
			}
			continue
		}
		if res.Err != nil {
			t.Fatalf("item %d: %v", i, res.Err)
		}
		if got := f.get(t, res.ID).MaxAttempts; got != 4 {
			t.Errorf("item %d: %d attempts, want the default 4", i, got)
		}
		ok = append(ok, i)
	}
	if slices.Sort(ok); !slices.Equal(ok, []int{0, 2}) {
		t.Errorf("submitted %v, want [0 2]", ok)
	}
}
