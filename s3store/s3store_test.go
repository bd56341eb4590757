package s3store_test

import (
	"context"
	"errors"
	"testing"

	"github.com/s3queue/s3queue/s3store"
	"github.com/s3queue/s3queue/s3store/mem"
)

func TestCounterCountsByTypeAndOutcome(t *testing.T) {
	ctx := context.Background()
	c := s3store.NewCounter(mem.New())
	etag, _ := c.Put(ctx, "a", []byte("1"), s3store.PutOptions{})
	c.Put(ctx, "a", []byte("2"), s3store.PutOptions{IfNoneMatch: true})
	c.Put(ctx, "a", []byte("3"), s3store.PutOptions{IfMatch: etag})
	c.Get(ctx, "missing")
	c.List(ctx, "", s3store.ListOptions{})
	c.Now(ctx)
	c.Delete(ctx, "a", s3store.DeleteOptions{})
	got := c.Counts()
	for _, want := range []struct {
		op      s3store.Op
		outcome s3store.Outcome
		n       int64
	}{
		{s3store.OpPut, s3store.OutcomeOK, 2},
		{s3store.OpPut, s3store.OutcomePrecondition, 1},
		{s3store.OpGet, s3store.OutcomeNotFound, 1},
		{s3store.OpList, s3store.OutcomeOK, 1},
		{s3store.OpHead, s3store.OutcomeOK, 1},
		{s3store.OpDelete, s3store.OutcomeOK, 1},
	} {
		if got[want.op][want.outcome] != want.n {
			t.Errorf("%s %s = %d, want %d", want.op, want.outcome, got[want.op][want.outcome], want.n)
		}
	}
	if got.Total() != 7 {
		t.Errorf("total = %d, want 7 (%s)", got.Total(), got)
	}
}

func TestFaultsInjectAndExpire(t *testing.T) {
	ctx := context.Background()
	st := mem.New()
	f := s3store.NewFaults(st)
	f.Inject(s3store.Fault{Op: s3store.OpPut, KeyPrefix: "tasks/", Err: s3store.ErrInjected503, AfterWrite: true, Times: 1})
	if _, err := f.Put(ctx, "tasks/x", []byte("1"), s3store.PutOptions{}); !errors.Is(err, s3store.ErrInjected) {
		t.Fatalf("want injected error, got %v", err)
	}
	if _, err := st.Get(ctx, "tasks/x"); err != nil {
		t.Fatalf("lost-response fault must still write: %v", err)
	}
	if _, err := f.Put(ctx, "tasks/x", []byte("2"), s3store.PutOptions{}); err != nil {
		t.Fatalf("rule with Times=1 fired twice: %v", err)
	}
	f.Inject(s3store.Fault{Op: s3store.OpGet, Err: s3store.ErrConflict})
	for i := 0; i < 3; i++ {
		if _, err := f.Get(ctx, "tasks/x"); !errors.Is(err, s3store.ErrConflict) {
			t.Fatalf("rule with Times=0 must fire every time, got %v", err)
		}
	}
}

// ignoring is a store that ignores If-Match and If-None-Match, as some S3
// clones do.
type ignoring struct{ s3store.Store }

func (s ignoring) Put(ctx context.Context, key string, body []byte, _ s3store.PutOptions) (string, error) {
	return s.Store.Put(ctx, key, body, s3store.PutOptions{})
}

func TestCheckProvider(t *testing.T) {
	ctx := context.Background()
	t.Run("mem honours conditions", func(t *testing.T) {
		st := mem.New()
		r, err := s3store.CheckProvider(ctx, st, "doctor/")
		if err != nil {
			t.Fatal(err)
		}
		if err := r.Supported(); err != nil {
			t.Fatalf("mem reported unsupported: %v", err)
		}
		if r.ConditionalDelete != s3store.DeleteHonoured {
			t.Fatalf("conditional delete = %q", r.ConditionalDelete)
		}
		if st.Len() != 0 {
			t.Fatalf("check left %d scratch objects", st.Len())
		}
	})
	t.Run("a provider ignoring If-Match is refused with a message that says so", func(t *testing.T) {
		r, err := s3store.CheckProvider(ctx, ignoring{mem.New()}, "doctor/")
		if err != nil {
			t.Fatal(err)
		}
		err = r.Supported()
		if !errors.Is(err, s3store.ErrUnsupportedProvider) {
			t.Fatalf("want ErrUnsupportedProvider, got %v", err)
		}
		t.Log(err)
	})
}
