package ratelimit_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/s3queue/s3queue/internal/ratelimit"
	"github.com/s3queue/s3queue/s3store"
	"github.com/s3queue/s3queue/s3store/mem"
)

func TestParse(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want ratelimit.Limit
	}{
		{"100/1m", ratelimit.Limit{N: 100, Interval: time.Minute}},
		{"5/s", ratelimit.Limit{N: 5, Interval: time.Second}},
		{" 3 / 2s ", ratelimit.Limit{N: 3, Interval: 2 * time.Second}},
		{"1/h", ratelimit.Limit{N: 1, Interval: time.Hour}},
		{"10/1m30s", ratelimit.Limit{N: 10, Interval: 90 * time.Second}},
	} {
		got, err := ratelimit.Parse(tc.in)
		if err != nil || got != tc.want {
			t.Errorf("Parse(%q) = %v, %v; want %v", tc.in, got, err, tc.want)
		}
		if back, err := ratelimit.Parse(got.String()); err != nil || back != got {
			t.Errorf("Parse(%q.String()) = %v, %v", tc.in, back, err)
		}
	}
	for _, tc := range []struct{ in, want string }{
		{"100", "want N/INTERVAL"},
		{"0/1m", "at least 1 start"},
		{"-3/1m", "at least 1 start"},
		{"x/1m", "not a whole number"},
		{"5/500ms", "at least 1s"},
		{"5/1500us", "at least 1s"},
		{"5/1.0000005s", "whole number of milliseconds"},
		{"5/tomorrow", "want a duration"},
		{"", "want N/INTERVAL"},
	} {
		if _, err := ratelimit.Parse(tc.in); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("Parse(%q): error %v, want %q", tc.in, err, tc.want)
		}
	}
}

func TestWindow(t *testing.T) {
	at := time.Date(2026, 1, 1, 10, 0, 3, 500, time.UTC)
	start, end := ratelimit.Window(at, 2*time.Second)
	if !start.Equal(time.Date(2026, 1, 1, 10, 0, 2, 0, time.UTC)) || end.Sub(start) != 2*time.Second {
		t.Errorf("Window(%v, 2s) = %v, %v", at, start, end)
	}
	if s, _ := ratelimit.Window(start, 2*time.Second); !s.Equal(start) {
		t.Errorf("a window's start is in that window: got %v", s)
	}
}

// Reservations in one window add up to the limit and no more; a later
// window starts the count again; a writer whose clock lags the counter's
// window gets nothing; a malformed counter is replaced, its window full.
func TestReserve(t *testing.T) {
	ctx := context.Background()
	st := mem.New()
	l := ratelimit.Limit{N: 5, Interval: 10 * time.Second}
	w0 := time.Date(2026, 1, 1, 10, 0, 0, 0, time.UTC)
	reserve := func(window time.Time, want int) ratelimit.Grant {
		t.Helper()
		g, err := ratelimit.Reserve(ctx, st, s3store.CAS{}, "api", l, window, want, "w1")
		if err != nil {
			t.Fatal(err)
		}
		return g
	}
	if g := reserve(w0, 3); g.Tokens != 3 || g.Full {
		t.Errorf("first: %+v", g)
	}
	if g := reserve(w0, 3); g.Tokens != 2 || !g.Full {
		t.Errorf("second: %+v, want the 2 left, full", g)
	}
	if g := reserve(w0, 1); g.Tokens != 0 || !g.Full {
		t.Errorf("third: %+v, want none, full", g)
	}
	w1 := w0.Add(l.Interval)
	if g := reserve(w1, 4); g.Tokens != 4 || g.Full || !g.Window.Equal(w1) {
		t.Errorf("next window: %+v", g)
	}
	if g := reserve(w0, 1); g.Tokens != 0 || !g.Ahead {
		t.Errorf("a lagging clock: %+v, want none, ahead", g)
	}
	c, _, err := ratelimit.Read(ctx, st, "api")
	if err != nil || c.Used != 4 || !c.Window.Equal(w1) || c.Version != 3 || c.Limit != "5/10s" || c.UpdatedBy != "w1" {
		t.Errorf("counter %+v, %v", c, err)
	}
	if _, err := st.Put(ctx, ratelimit.Key("api"), []byte("{not json"), s3store.PutOptions{}); err != nil {
		t.Fatal(err)
	}
	if g := reserve(w1, 1); g.Tokens != 0 || !g.Full || !g.Malformed {
		t.Errorf("malformed: %+v, want none, full, malformed", g)
	}
	if g := reserve(w1.Add(l.Interval), 2); g.Tokens != 2 {
		t.Errorf("after a malformed counter: %+v, want the next window's tokens", g)
	}
}
