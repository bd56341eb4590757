package lease_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/s3queue/s3queue/clock"
	"github.com/s3queue/s3queue/lease"
	"github.com/s3queue/s3queue/s3store"
	"github.com/s3queue/s3queue/s3store/mem"
)

// setup returns a store whose server time the test moves, and a function
// making a lease handle for a holder whose local wall clock is skewed.
func setup(t *testing.T) (*mem.Store, *time.Time, func(holder string, skew time.Duration) *lease.Lease) {
	st := mem.New()
	server := time.Date(2030, 1, 1, 12, 0, 0, 0, time.UTC)
	st.SetNow(func() time.Time { return server })
	mk := func(holder string, skew time.Duration) *lease.Lease {
		c := clock.New(st, clock.Config{Local: clock.LocalFunc(func() time.Time { return time.Now().Add(skew) })})
		return lease.New(st, c, "shard-leases/000.json", holder, lease.Config{TTL: 30 * time.Second, Margin: 2 * time.Second})
	}
	return st, &server, mk
}

func TestTakeoverOnlyAfterExpiryByS3Time(t *testing.T) {
	ctx := context.Background()
	for _, skew := range []time.Duration{0, -10 * time.Minute, 10 * time.Minute} {
		t.Run(skew.String(), func(t *testing.T) {
			_, server, mk := setup(t)
			a, b := mk("a", 0), mk("b", skew)
			if err := a.Acquire(ctx); err != nil {
				t.Fatal(err)
			}
			if a.Epoch() != 1 {
				t.Fatalf("epoch %d, want 1", a.Epoch())
			}
			for _, at := range []time.Duration{0, 29 * time.Second, 31 * time.Second, 32 * time.Second} {
				*server = server.Add(at - elapsed(server))
				if err := b.Acquire(ctx); !errors.Is(err, lease.ErrHeld) {
					t.Fatalf("%v after acquire: b took the lease (%v); takeover only after expiry+margin", at, err)
				}
			}
			*server = server.Add(35*time.Second - elapsed(server))
			if a.Valid(ctx) {
				t.Fatal("holder still thinks it holds an expired lease")
			}
			if err := b.Acquire(ctx); err != nil {
				t.Fatalf("takeover after expiry+margin: %v", err)
			}
			if b.Epoch() != 2 {
				t.Fatalf("takeover: epoch %d, want 2", b.Epoch())
			}
			if err := a.Renew(ctx); !errors.Is(err, lease.ErrLost) {
				t.Fatalf("old holder renewed a lease taken over: %v", err)
			}
		})
	}
}

var start = time.Date(2030, 1, 1, 12, 0, 0, 0, time.UTC)

func elapsed(server *time.Time) time.Duration { return server.Sub(start) }

func TestRenewKeepsTheLease(t *testing.T) {
	ctx := context.Background()
	_, server, mk := setup(t)
	a, b := mk("a", 0), mk("b", 0)
	if err := a.Acquire(ctx); err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 5; i++ {
		*server = server.Add(20 * time.Second)
		if err := a.Renew(ctx); err != nil {
			t.Fatalf("renew %d: %v", i, err)
		}
		if err := b.Acquire(ctx); !errors.Is(err, lease.ErrHeld) {
			t.Fatalf("renewed lease taken over: %v", err)
		}
	}
	if !a.Valid(ctx) {
		t.Fatal("renewed lease not valid")
	}
}

// Held and Expired leave a gap of two margins plus the clock's uncertainty
// between the moment the holder stops and the moment others may start.
func TestHeldAndExpiredKeepTheMarginsApart(t *testing.T) {
	expires := start.Add(time.Minute)
	const margin = 2 * time.Second
	for _, tc := range []struct {
		name            string
		at, uncertainty time.Duration // S3 time since start, and the clock's spread
		held, expired   bool
	}{
		{"well before expiry", 30 * time.Second, 0, true, false},
		{"within the margin before expiry", 59 * time.Second, 0, false, false},
		{"before the margin by the earliest S3 time only", 59 * time.Second, 3 * time.Second, false, false},
		{"at expiry", time.Minute, 0, false, false},
		{"within the margin after expiry", 61 * time.Second, 0, false, false},
		{"past expiry and margin", 63 * time.Second, 0, false, true},
		{"past expiry and margin but unsure", 63 * time.Second, 2 * time.Second, false, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			now := clock.Interval{Earliest: start.Add(tc.at - tc.uncertainty), Latest: start.Add(tc.at)}
			if got := lease.Held(expires, now, margin); got != tc.held {
				t.Errorf("Held = %v, want %v", got, tc.held)
			}
			if got := lease.Expired(expires, now, margin); got != tc.expired {
				t.Errorf("Expired = %v, want %v", got, tc.expired)
			}
		})
	}
}

func TestRacingAcquirersOneWins(t *testing.T) {
	ctx := context.Background()
	_, _, mk := setup(t)
	errs := make(chan error, 8)
	for i := 0; i < 8; i++ {
		l := mk(string(rune('a'+i)), 0)
		go func() { errs <- l.Acquire(ctx) }()
	}
	wins := 0
	for i := 0; i < 8; i++ {
		if err := <-errs; err == nil {
			wins++
		} else if !errors.Is(err, lease.ErrHeld) {
			t.Fatalf("unexpected error %v", err)
		}
	}
	if wins != 1 {
		t.Fatalf("%d acquirers won, want 1", wins)
	}
}

func TestCorruptLeaseIsTakenOver(t *testing.T) {
	ctx := context.Background()
	st, _, mk := setup(t)
	st.Put(ctx, "shard-leases/000.json", []byte("not json"), s3store.PutOptions{})
	a := mk("a", 0)
	if err := a.Acquire(ctx); err != nil {
		t.Fatalf("corrupt lease: %v", err)
	}
}

// The holder's record rides in the lease: Peek reads it, a takeover finds
// the last holder's in Previous. Release writes the lease expired, so
// another holder takes it over at once, whatever its expiry was.
func TestDataAndRelease(t *testing.T) {
	ctx := context.Background()
	st, _, mk := setup(t)
	a := mk("a", 0)
	a.SetData([]byte(`{"cursor":"20300101-1200"}`))
	if err := a.Acquire(ctx); err != nil {
		t.Fatal(err)
	}
	a.SetData([]byte(`{"cursor":"20300101-1201"}`))
	if err := a.Renew(ctx); err != nil {
		t.Fatal(err)
	}
	info, err := lease.Peek(ctx, st, "shard-leases/000.json")
	if err != nil || info.Holder != "a" || string(info.Data) != `{"cursor":"20300101-1201"}` {
		t.Fatalf("Peek = %+v, %v", info, err)
	}
	b := mk("b", 0)
	if err := b.Acquire(ctx); !errors.Is(err, lease.ErrHeld) {
		t.Fatalf("b acquired a held lease: %v", err)
	}
	if err := a.Release(ctx); err != nil {
		t.Fatal(err)
	}
	if a.Valid(ctx) {
		t.Error("a still counts the lease valid after releasing it")
	}
	if err := b.Acquire(ctx); err != nil {
		t.Fatalf("b could not take over a released lease: %v", err)
	}
	if got := string(b.Previous()); got != `{"cursor":"20300101-1201"}` {
		t.Errorf("b found %q of the last holder's record", got)
	}
	if _, err := lease.Peek(ctx, mem.New(), "nope"); !errors.Is(err, s3store.ErrNotFound) {
		t.Errorf("Peek of a missing lease: %v", err)
	}
}

// A retired lease (being forgotten: its DELETE follows) is not taken over
// for RetiredGrace, however long ago it expired; after that (its
// forgetter failed or died) it is, and its holder cannot reclaim it.
func TestARetiredLeaseIsNotTakenOverWithinItsGrace(t *testing.T) {
	ctx := context.Background()
	st, server, mk := setup(t)
	a := mk("a", 0)
	if err := a.Acquire(ctx); err != nil {
		t.Fatal(err)
	}
	*server = server.Add(time.Hour)
	info, err := lease.Peek(ctx, st, "shard-leases/000.json")
	if err != nil {
		t.Fatal(err)
	}
	if err := lease.Retire(ctx, st, "shard-leases/000.json", info); err != nil {
		t.Fatal(err)
	}
	if err := lease.Retire(ctx, st, "shard-leases/000.json", info); !s3store.LostRace(err) {
		t.Fatalf("a second retirement from the same read: %v, want a lost race", err)
	}
	if got, _ := lease.Peek(ctx, st, "shard-leases/000.json"); !got.Retired || !got.Modified.Equal(*server) {
		t.Fatalf("after Retire: %+v, want retired at %v", got, *server)
	}
	b := mk("b", 0)
	*server = server.Add(lease.RetiredGrace - time.Second)
	if err := b.Acquire(ctx); !errors.Is(err, lease.ErrHeld) {
		t.Fatalf("acquire within the grace: %v, want ErrHeld", err)
	}
	if err := a.Reclaim(ctx); !errors.Is(err, lease.ErrLost) {
		t.Fatalf("the old holder reclaimed a retired lease: %v", err)
	}
	*server = server.Add(3 * time.Second)
	if err := b.Acquire(ctx); err != nil {
		t.Fatalf("acquire after the grace: %v", err)
	}
	if got, _ := lease.Peek(ctx, st, "shard-leases/000.json"); got.Retired || got.Holder != "b" {
		t.Fatalf("after the takeover: %+v", got)
	}
}

// An Acquire whose write landed with its response lost (the store's retry
// then meets it: 412) holds the lease: it reads the object back and finds
// its own write. (Before, it reported the lease held by another, its own
// holding: a direct-dispatch worker refused to start under its id until
// the lease it had just written expired.)
func TestAnAcquireWhoseResponseWasLostHoldsTheLease(t *testing.T) {
	ctx := context.Background()
	for _, takeover := range []bool{false, true} {
		t.Run(map[bool]string{false: "a new lease", true: "a takeover"}[takeover], func(t *testing.T) {
			st, server, _ := setup(t)
			faulty := s3store.NewFaults(st)
			c := clock.New(st, clock.Config{})
			if takeover {
				old := lease.New(st, c, "shard-leases/000.json", "old", lease.Config{TTL: 30 * time.Second, Margin: 2 * time.Second})
				if err := old.Acquire(ctx); err != nil {
					t.Fatal(err)
				}
				*server = server.Add(time.Minute)
			}
			l := lease.New(faulty, c, "shard-leases/000.json", "a", lease.Config{TTL: 30 * time.Second, Margin: 2 * time.Second})
			faulty.Inject(s3store.Fault{Op: s3store.OpPut, Err: s3store.ErrPreconditionFailed, AfterWrite: true, Times: 1})
			if err := l.Acquire(ctx); err != nil {
				t.Fatalf("acquire whose write landed: %v", err)
			}
			if !l.Valid(ctx) {
				t.Fatal("the lease is not held")
			}
			if err := l.Renew(ctx); err != nil {
				t.Fatalf("renew: %v", err)
			}
		})
	}
}
