package s3store_test

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/s3queue/s3queue/s3store"
	"github.com/s3queue/s3queue/s3store/mem"
	"github.com/s3queue/s3queue/s3store/storetest/fakes3"
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
	t.Run("gofakes3's 412 on If-Match of a missing key is accepted: nothing is created", func(t *testing.T) {
		st := fakes3.Start(t).Store(t, "q")
		r, err := s3store.CheckProvider(ctx, st, "doctor/")
		if err != nil {
			t.Fatal(err)
		}
		if err := r.Supported(); err != nil {
			t.Fatalf("gofakes3 reported unsupported: %v", err)
		}
		if !r.IfMatchMissingKey || r.IfMatchMissing != s3store.MissingPrecondition || r.ConditionalDelete != s3store.DeleteIgnored {
			t.Errorf("report = %+v, want If-Match on a missing key refused with 412 and conditional DELETE ignored", r)
		}
		if page, err := st.List(ctx, "", s3store.ListOptions{}); err != nil || len(page.Objects) != 0 {
			t.Errorf("check left %v (%v)", page.Objects, err)
		}
	})
	for _, tc := range []struct {
		name  string
		store s3store.Store
		want  string
	}{
		{"a 412 that created the key is refused, and the message says so", missing412{mem.New(), true},
			"it honours conditional PUT on existing keys, but not on a missing one: a PUT with If-Match on a missing key failed with 412 but created the key"},
		{"an If-Match on a missing key that creates it is refused, and the message says so", createsMissing{mem.New()},
			"it honours conditional PUT on existing keys, but not on a missing one: a PUT with If-Match on a missing key created the key instead"},
		{"a provider ignoring every condition is said not to honour conditional PUT", ignoring{mem.New()},
			"it does not honour conditional PUT: a second PUT with If-None-Match: * overwrote the object"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r, err := s3store.CheckProvider(ctx, tc.store, "doctor/")
			if err != nil {
				t.Fatal(err)
			}
			err = r.Supported()
			if !errors.Is(err, s3store.ErrUnsupportedProvider) || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("Supported() = %v, want ErrUnsupportedProvider saying %q", err, tc.want)
			}
		})
	}
	t.Run("a 412 without creating the key is accepted", func(t *testing.T) {
		r, err := s3store.CheckProvider(ctx, missing412{mem.New(), false}, "doctor/")
		if err != nil {
			t.Fatal(err)
		}
		if err := r.Supported(); err != nil || r.IfMatchMissing != s3store.MissingPrecondition {
			t.Fatalf("Supported() = %v, IfMatchMissing %q", err, r.IfMatchMissing)
		}
	})
}

// missing412 answers a PUT with If-Match on a missing key with 412, as
// gofakes3 does, creating the key first if create is set.
type missing412 struct {
	*mem.Store
	create bool
}

func (s missing412) Put(ctx context.Context, key string, body []byte, opts s3store.PutOptions) (string, error) {
	if opts.IfMatch != "" {
		if _, err := s.Store.Head(ctx, key); errors.Is(err, s3store.ErrNotFound) {
			if s.create {
				s.Store.Put(ctx, key, body, s3store.PutOptions{})
			}
			return "", s3store.ErrPreconditionFailed
		}
	}
	return s.Store.Put(ctx, key, body, opts)
}

// createsMissing writes a PUT with If-Match on a missing key.
type createsMissing struct{ *mem.Store }

func (s createsMissing) Put(ctx context.Context, key string, body []byte, opts s3store.PutOptions) (string, error) {
	if opts.IfMatch != "" {
		if _, err := s.Store.Head(ctx, key); errors.Is(err, s3store.ErrNotFound) {
			opts.IfMatch = ""
		}
	}
	return s.Store.Put(ctx, key, body, opts)
}
