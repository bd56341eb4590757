package clock_test

import (
	"context"
	"testing"
	"time"

	"github.com/s3queue/s3queue/clock"
	"github.com/s3queue/s3queue/s3store"
	"github.com/s3queue/s3queue/s3store/mem"
)

// serverAt returns a mem store whose server clock is offset from this
// machine's by off and truncated to whole seconds, like a Date header.
func serverAt(off time.Duration) (*mem.Store, func() time.Time) {
	st := mem.New()
	now := func() time.Time { return time.Now().Add(off).Truncate(time.Second) }
	st.SetNow(now)
	return st, func() time.Time { return time.Now().Add(off) }
}

func TestSkewedLocalClocksMakeTheSameDecisions(t *testing.T) {
	ctx := context.Background()
	st, truth := serverAt(3 * time.Hour)
	skews := []time.Duration{-10 * time.Minute, 0, 10 * time.Minute}
	var clocks []*clock.Authoritative
	for _, skew := range skews {
		local := func() time.Time { return time.Now().Add(skew) }
		clocks = append(clocks, clock.New(st, clock.Config{Local: clock.LocalFunc(local)}))
	}
	if _, err := st.Get(ctx, "anything"); err == nil {
		t.Fatal("expected not found")
	}
	for i, c := range clocks {
		iv, err := c.Now(ctx)
		if err != nil {
			t.Fatal(err)
		}
		real := truth()
		if real.Before(iv.Earliest.Add(-10*time.Millisecond)) || real.After(iv.Latest.Add(10*time.Millisecond)) {
			t.Errorf("skew %v: server time %v outside [%v, %v]", skews[i], real, iv.Earliest, iv.Latest)
		}
		if iv.Uncertainty() > 1100*time.Millisecond {
			t.Errorf("skew %v: uncertainty %v, want about the Date resolution", skews[i], iv.Uncertainty())
		}
		for _, probe := range []struct {
			at        time.Duration
			wantAfter bool
			wantBefor bool
		}{{-5 * time.Second, true, false}, {5 * time.Second, false, true}, {-11 * time.Minute, true, false}, {11 * time.Minute, false, true}} {
			at := real.Add(probe.at)
			after, _ := c.CertainlyAfter(ctx, at)
			before, _ := c.CertainlyBefore(ctx, at)
			if after != probe.wantAfter || before != probe.wantBefor {
				t.Errorf("skew %v: at server%+v: after=%v before=%v, want %v %v", skews[i], probe.at, after, before, probe.wantAfter, probe.wantBefor)
			}
		}
	}
}

func TestSyncsFromResponsesWithoutRequestsOfItsOwn(t *testing.T) {
	ctx := context.Background()
	st := mem.New()
	counter := s3store.NewCounter(st)
	c := clock.New(counter, clock.Config{})
	if _, err := counter.Put(ctx, "k", []byte("x"), s3store.PutOptions{}); err != nil {
		t.Fatal(err)
	}
	before := counter.Counts()
	for i := 0; i < 10; i++ {
		if _, err := c.Now(ctx); err != nil {
			t.Fatal(err)
		}
	}
	if got := counter.Counts().Sub(before).Total(); got != 0 {
		t.Fatalf("clock issued %d requests although a response had just synced it", got)
	}
	if _, req := c.Stats(); req != 0 {
		t.Fatalf("clock counted %d own requests, want 0", req)
	}
}

func TestRequestsTimeWhenItHasNoRecentSample(t *testing.T) {
	ctx := context.Background()
	st := mem.New()
	counter := s3store.NewCounter(st)
	local := time.Now()
	c := clock.New(counter, clock.Config{MaxAge: 30 * time.Second, Local: clock.LocalFunc(func() time.Time { return local })})
	if _, err := c.Now(ctx); err != nil {
		t.Fatal(err)
	}
	if got := counter.Counts().Of(s3store.OpHead); got != 1 {
		t.Fatalf("first Now issued %d HEADs, want 1", got)
	}
	local = local.Add(10 * time.Second)
	c.Now(ctx)
	if got := counter.Counts().Of(s3store.OpHead); got != 1 {
		t.Fatalf("Now within MaxAge issued a request (%d HEADs)", got)
	}
	local = local.Add(31 * time.Second)
	c.Now(ctx)
	if got := counter.Counts().Of(s3store.OpHead); got != 2 {
		t.Fatalf("Now after MaxAge without responses: %d HEADs, want 2", got)
	}
}

func TestServerClockStepReplacesTheEstimate(t *testing.T) {
	ctx := context.Background()
	st := mem.New()
	server := time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)
	st.SetNow(func() time.Time { return server })
	c := clock.New(st, clock.Config{})
	st.Now(ctx)
	server = server.Add(time.Hour)
	st.Now(ctx)
	iv, err := c.Now(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if iv.Earliest.Before(server) || iv.Latest.After(server.Add(2*time.Second)) {
		t.Fatalf("after a 1h step the clock says [%v, %v], want about %v", iv.Earliest, iv.Latest, server)
	}
}

func TestElapsedTimeComesFromTheLocalMonotonicClock(t *testing.T) {
	ctx := context.Background()
	st := mem.New()
	server := time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)
	st.SetNow(func() time.Time { return server })
	local := time.Now()
	c := clock.New(st, clock.Config{Local: clock.LocalFunc(func() time.Time { return local }), MaxAge: time.Hour})
	c.Sync(ctx)
	local = local.Add(20 * time.Second)
	iv, _ := c.Now(ctx)
	want := server.Add(20 * time.Second)
	if iv.Earliest.After(want) || iv.Latest.Before(want) || iv.Uncertainty() > 1100*time.Millisecond {
		t.Fatalf("20s later the clock says [%v, %v], want an interval around %v", iv.Earliest, iv.Latest, want)
	}
}

// The estimate a writer records (Mid) is the true time within half the
// Date's resolution for an HTTP server, whose Date is whole seconds, and
// the true time for an embedded store, whose Date is exact: never the
// upper bound, which runs up to a second ahead. The bounds stay as wide.
func TestMidIsTheBestEstimate(t *testing.T) {
	ctx := context.Background()
	t.Run("whole-second Dates: the middle", func(t *testing.T) {
		st, truth := serverAt(time.Hour)
		c := clock.New(st, clock.Config{})
		iv, err := c.Now(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if d := iv.Mid().Sub(truth()); d < -600*time.Millisecond || d > 600*time.Millisecond {
			t.Errorf("Mid is %v off the true time, want within half a second", d)
		}
		if !iv.Best.IsZero() || !iv.Mid().Equal(iv.Earliest.Add(iv.Uncertainty()/2)) {
			t.Errorf("Mid %v of [%v, %v] with Best %v, want the middle", iv.Mid(), iv.Earliest, iv.Latest, iv.Best)
		}
	})
	t.Run("exact Dates: the Date", func(t *testing.T) {
		st := mem.New()
		off := 2 * time.Hour
		st.SetNow(func() time.Time { return time.Now().Add(off) })
		c := clock.New(st, clock.Config{})
		iv, err := c.Now(ctx)
		if err != nil {
			t.Fatal(err)
		}
		truth := time.Now().Add(off)
		if d := iv.Mid().Sub(truth); d < -50*time.Millisecond || d > 50*time.Millisecond {
			t.Errorf("Mid is %v off the exact time, want it (interval [%v, %v])", d, iv.Earliest, iv.Latest)
		}
		if iv.Uncertainty() < 900*time.Millisecond {
			t.Errorf("the bounds narrowed to %v: decisions must keep the Date's assumed resolution", iv.Uncertainty())
		}
	})
}

// Held answers from the samples it has, however old, and never asks: the
// bounds a worker cut off from the server judges its leases by.
func TestHeldBoundsWithoutARequest(t *testing.T) {
	ctx := context.Background()
	st := mem.New()
	counter := s3store.NewCounter(st)
	local := time.Now()
	c := clock.New(counter, clock.Config{MaxAge: 30 * time.Second, Local: clock.LocalFunc(func() time.Time { return local })})
	if _, ok := c.Held(); ok {
		t.Fatal("Held answered before any sample")
	}
	fresh, err := c.Now(ctx)
	if err != nil {
		t.Fatal(err)
	}
	local = local.Add(10 * time.Minute) // far past MaxAge
	held, ok := c.Held()
	if !ok {
		t.Fatal("Held has no bounds after a sample")
	}
	if got := counter.Counts().Of(s3store.OpHead); got != 1 {
		t.Fatalf("Held issued a request (%d HEADs, want the first Now's 1)", got)
	}
	if want := fresh.Latest.Add(10 * time.Minute); held.Latest.Before(want) {
		t.Errorf("held latest %v, want at least %v: ten local minutes passed", held.Latest, want)
	}
	if want := fresh.Earliest.Add(10 * time.Minute); held.Earliest.After(want) {
		t.Errorf("held earliest %v, want at most %v", held.Earliest, want)
	}
	if held.Uncertainty() <= fresh.Uncertainty() {
		t.Errorf("held uncertainty %v, want wider than the fresh %v by the drift", held.Uncertainty(), fresh.Uncertainty())
	}
}
