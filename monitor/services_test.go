package monitor

import (
	"context"
	"io"
	"log/slog"
	"testing"
	"time"

	"github.com/s3queue/s3queue/clock"
	"github.com/s3queue/s3queue/internal/deps"
	"github.com/s3queue/s3queue/s3store"
	"github.com/s3queue/s3queue/s3store/mem"
)

// The services below are stepped directly, without a Monitor: a local
// clock the test moves, and a store that counts LISTs.

func serviceSetup(t *testing.T) (*s3store.Counter, *clock.Authoritative, clock.Local, *time.Time) {
	t.Helper()
	st := s3store.NewCounter(mem.New())
	now := time.Now()
	local := clock.LocalFunc(func() time.Time { return now })
	return st, clock.New(st, clock.Config{Local: local}), local, &now
}

// lists steps the service at local time and reports whether it listed.
func lists(t *testing.T, st *s3store.Counter, step func() error) bool {
	t.Helper()
	before := st.Counts()
	if err := step(); err != nil {
		t.Fatal(err)
	}
	return st.Counts().Sub(before).Of(s3store.OpList) > 0
}

func TestDepRepairBacksOffWhileItFindsNothing(t *testing.T) {
	ctx := context.Background()
	st, c, local, now := serviceSetup(t)
	r := depRepair{local: local, log: slog.New(slog.NewTextHandler(io.Discard, nil)),
		repairAfter: time.Minute, sweepMax: 4 * time.Minute}
	env := func() deps.Env { return deps.Env{Store: st, Local: local, Now: c.Now, Counts: []int{1}} }
	step := func(asleep bool) func() error {
		return func() error { var ts TickStats; return r.step(ctx, env, asleep, &ts) }
	}
	if lists(t, st, step(false)) {
		t.Fatal("the first tick repaired; a crash's leftovers wait a RepairAfter")
	}
	// Due after RepairAfter, then after 2, 4, 4 minutes (the ceiling).
	for i, wait := range []time.Duration{time.Minute, time.Minute, 2 * time.Minute, 4 * time.Minute, 4 * time.Minute} {
		*now = now.Add(wait - time.Second)
		if lists(t, st, step(false)) {
			t.Fatalf("repair %d ran a second before its back-off of %v ended", i, wait)
		}
		*now = now.Add(time.Second)
		if !lists(t, st, step(false)) {
			t.Fatalf("repair %d did not run after its back-off of %v", i, wait)
		}
	}
	// While the fleet sleeps the back-off grows past SweepMax.
	*now = now.Add(4 * time.Minute)
	lists(t, st, step(true))
	if r.every != 8*time.Minute {
		t.Fatalf("asleep, the back-off is %v, want 8m", r.every)
	}
}

func TestInboxRecoveryRunsEveryRepairAfter(t *testing.T) {
	ctx := context.Background()
	st, c, local, now := serviceSetup(t)
	r := inboxRecovery{st: st, clock: c, local: local, log: slog.New(slog.NewTextHandler(io.Discard, nil)), every: time.Minute}
	step := func() error { var ts TickStats; return r.step(ctx, true, &ts) }
	if !lists(t, st, step) {
		t.Fatal("the first step did not list the workers")
	}
	*now = now.Add(time.Minute - time.Second)
	if lists(t, st, step) {
		t.Fatal("listed again before RepairAfter")
	}
	*now = now.Add(time.Second)
	if !lists(t, st, step) {
		t.Fatal("did not list again after RepairAfter")
	}
}
