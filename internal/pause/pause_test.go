package pause_test

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/s3queue/s3queue/clock"
	"github.com/s3queue/s3queue/internal/pause"
	"github.com/s3queue/s3queue/s3store"
	"github.com/s3queue/s3queue/s3store/mem"
)

var t0 = time.Date(2026, 11, 26, 12, 0, 0, 0, time.UTC)

func TestConcurrentPausesAndResumesLoseNoChange(t *testing.T) {
	ctx := context.Background()
	st := mem.New()
	var wg sync.WaitGroup
	for i := range 16 {
		wg.Go(func() {
			if _, err := pause.Change(ctx, st, t0, "t", "", pause.Pausing(fmt.Sprintf("type%02d", i))); err != nil {
				t.Error(err)
			}
		})
	}
	wg.Wait()
	s, _, err := pause.Read(ctx, st)
	if err != nil {
		t.Fatal(err)
	}
	if len(s.Types) != 16 || s.All {
		t.Fatalf("after 16 concurrent pauses the object holds %v (all %v)", s.Types, s.All)
	}
	for i := range 8 {
		wg.Go(func() {
			if _, err := pause.Change(ctx, st, t0, "t", "", pause.Resuming(fmt.Sprintf("type%02d", 2*i))); err != nil {
				t.Error(err)
			}
		})
	}
	wg.Wait()
	s, _, _ = pause.Read(ctx, st)
	for i := range 16 {
		typ := fmt.Sprintf("type%02d", i)
		if s.Paused(typ) != (i%2 == 1) {
			t.Errorf("%s paused = %v after resuming the even types", typ, s.Paused(typ))
		}
	}
	if s.Version != 24 {
		t.Errorf("version %d after 24 changes, want 24 (every write changes the bytes)", s.Version)
	}
}

func TestWholeQueuePauseAndResumeAll(t *testing.T) {
	ctx := context.Background()
	st := mem.New()
	s, _ := pause.Change(ctx, st, t0, "ops", "deploy", pause.Pausing())
	if !s.All || !s.Paused("anything") {
		t.Fatalf("whole-queue pause: %+v", s)
	}
	pause.Change(ctx, st, t0, "ops", "", pause.Pausing("email"))
	s, _ = pause.Change(ctx, st, t0, "ops", "", pause.Resuming("email"))
	if !s.Paused("email") {
		t.Fatal("a type resumed while the whole queue is paused must stay paused")
	}
	v := s.Version
	s, _ = pause.Change(ctx, st, t0, "ops", "", pause.Resuming())
	if s.Any() || s.Version != v+1 {
		t.Fatalf("resume all: %+v", s)
	}
	// Nothing to change: nothing written.
	s, _ = pause.Change(ctx, st, t0, "ops", "", pause.Resuming())
	if s.Version != v+1 {
		t.Fatalf("a resume with nothing paused wrote version %d", s.Version)
	}
}

func TestWatchReadsOncePerIntervalAndKeepsTheLastGoodState(t *testing.T) {
	ctx := context.Background()
	st := s3store.NewCounter(mem.New())
	local := clock.NewManual(t0)
	w := &pause.Watch{St: st, Local: local, Interval: 10 * time.Second, Log: slog.New(slog.NewTextHandler(io.Discard, nil))}
	w.Refresh(ctx)
	if w.State().Any() {
		t.Fatal("a missing object must read as nothing paused")
	}
	pause.Change(ctx, st, t0, "ops", "", pause.Pausing("email"))
	for range 5 {
		w.Refresh(ctx) // within the interval: no read
	}
	if w.State().Paused("email") || w.Reads() != 1 {
		t.Fatalf("reads %d within one interval, want 1", w.Reads())
	}
	local.Advance(10 * time.Second)
	if !w.Refresh(ctx) || !w.State().Paused("email") {
		t.Fatal("the pause was not seen after the interval")
	}
	if _, err := st.Put(ctx, pause.Key, []byte("{not json"), s3store.PutOptions{}); err != nil {
		t.Fatal(err)
	}
	local.Advance(10 * time.Second)
	w.Refresh(ctx)
	if !w.State().Paused("email") {
		t.Fatal("a malformed object must keep the last good state")
	}
	// An operator's next change replaces the malformed object.
	s, err := pause.Change(ctx, st, t0, "ops", "", pause.Pausing("sms"))
	if err != nil || !slices.Equal(s.Types, []string{"sms"}) {
		t.Fatalf("change over a malformed object: %+v, %v", s, err)
	}
	local.Advance(10 * time.Second)
	w.Refresh(ctx)
	if w.State().Paused("email") || !w.State().Paused("sms") {
		t.Fatalf("state after the rewrite: %+v", w.State())
	}
}
