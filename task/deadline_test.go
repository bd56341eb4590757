package task

import (
	"errors"
	"strings"
	"testing"
	"time"
)

// A deadline is stored in S3 time, survives encoding, and is omitted (the
// object as before the field existed) when there is none.
func TestDeadlineEncodes(t *testing.T) {
	tk := newTask(t, func(s *Spec) { s.Deadline = t0.Add(time.Hour) })
	b, err := Marshal(tk)
	must(t, err)
	got, err := Decode(b)
	must(t, err)
	if !got.Deadline.Equal(t0.Add(time.Hour)) || got.Format != 1 {
		t.Fatalf("decoded deadline %s format %d, want %s format 1", got.Deadline, got.Format, t0.Add(time.Hour))
	}
	b, err = Marshal(newTask(t, nil))
	must(t, err)
	if strings.Contains(string(b), "deadline") {
		t.Fatalf("a task without a deadline encodes one: %s", b)
	}
}

// A deadline must lie after the submit and after the task's availability.
func TestDeadlineValidated(t *testing.T) {
	for _, c := range []struct {
		name string
		mod  func(*Spec)
	}{
		{"at submit", func(s *Spec) { s.Deadline = t0 }},
		{"before submit", func(s *Spec) { s.Deadline = t0.Add(-time.Minute) }},
		{"before available", func(s *Spec) { s.AvailableAt, s.Deadline = t0.Add(time.Hour), t0.Add(time.Minute) }},
	} {
		if _, err := New(testID, 0, Spec{Type: "x", Deadline: time.Time{}}, t0); err != nil {
			t.Fatal(err)
		}
		spec := Spec{Type: "x"}
		c.mod(&spec)
		if _, err := New(testID, 0, spec, t0); !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), "deadline") {
			t.Errorf("%s: New = %v, want ErrInvalid about the deadline", c.name, err)
		}
	}
}

// A pending task past its deadline ends dead, never started, with a clear
// reason; before the deadline it cannot.
func TestMissDeadline(t *testing.T) {
	dl := t0.Add(time.Minute)
	tk := newTask(t, func(s *Spec) { s.Deadline = dl })
	if tk.DeadlinePassed(dl) {
		t.Fatal("the deadline itself counts as passed")
	}
	if err := tk.MissDeadline(dl); !errors.Is(err, ErrNotDue) {
		t.Fatalf("MissDeadline at the deadline = %v, want ErrNotDue", err)
	}
	now := dl.Add(time.Second)
	if !tk.DeadlinePassed(now) {
		t.Fatal("DeadlinePassed after the deadline = false")
	}
	must(t, tk.MissDeadline(now))
	want := "deadline passed at 2026-03-01T12:01:00Z, not started"
	if tk.Status != Dead || tk.Attempt != 0 || tk.LastError != want || tk.Version != 2 {
		t.Fatalf("after MissDeadline: status %s attempt %d version %d last error %q, want dead 0 2 %q", tk.Status, tk.Attempt, tk.Version, tk.LastError, want)
	}
	if h := tk.History[len(tk.History)-1]; h.From != Pending || h.To != Dead || h.Reason != want {
		t.Fatalf("history entry %+v", h)
	}
	if err := tk.MissDeadline(now); !errors.Is(err, ErrNotPending) {
		t.Fatalf("MissDeadline of a dead task = %v, want ErrNotPending", err)
	}
	if err := newTask(t, nil).MissDeadline(now.Add(time.Hour)); !errors.Is(err, ErrNotDue) {
		t.Fatalf("MissDeadline without a deadline = %v, want ErrNotDue", err)
	}
}

// A failed attempt whose retry would be due after the deadline ends dead;
// one due before it retries.
func TestRetryPastDeadlineEndsDead(t *testing.T) {
	policy := &RetryPolicy{InitialDelay: Duration(10 * time.Second), MaxDelay: Duration(time.Minute), Multiplier: 2}
	tk := running(t, func(s *Spec) { s.Deadline = t0.Add(30 * time.Second); s.Retry = policy })
	must(t, tk.Fail("c1", "boom", false, t0.Add(time.Second), nil))
	if tk.Status != Pending {
		t.Fatalf("a retry due before the deadline: status %s, want pending", tk.Status)
	}
	must(t, tk.ClaimBy("w1", "c2", tk.AvailableAt))
	must(t, tk.Fail("c2", "boom", false, tk.AvailableAt.Add(5*time.Second), nil))
	if tk.Status != Dead || !strings.Contains(tk.LastError, "deadline passed at") || !strings.HasPrefix(tk.LastError, "boom") {
		t.Fatalf("a retry due after the deadline: status %s last error %q, want dead with the deadline", tk.Status, tk.LastError)
	}
}

// A running attempt its deadline stopped ends dead, with attempts left,
// the deadline and the handler's error in its last error; a cancel
// requested meanwhile wins; only the current claim may write it.
func TestFailPastDeadline(t *testing.T) {
	dl := t0.Add(30 * time.Second)
	tk := running(t, func(s *Spec) { s.Deadline = dl; s.MaxAttempts = 5 })
	if err := tk.FailPastDeadline("other", "", dl); !errors.Is(err, ErrClaimMismatch) {
		t.Fatalf("FailPastDeadline under another claim = %v, want ErrClaimMismatch", err)
	}
	must(t, tk.FailPastDeadline("c1", "stopped: context deadline exceeded", dl))
	want := "deadline passed at 2026-03-01T12:00:30Z while running: stopped: context deadline exceeded"
	if tk.Status != Dead || tk.Attempt != 1 || tk.LastError != want || tk.Claim != nil {
		t.Fatalf("status %s attempt %d last error %q, want dead 1 %q", tk.Status, tk.Attempt, tk.LastError, want)
	}
	if h := tk.History[len(tk.History)-1]; h.From != Running || h.To != Dead || h.Reason != want {
		t.Fatalf("history entry %+v", h)
	}

	tk = running(t, func(s *Spec) { s.Deadline = dl })
	tk.CancelRequested = true
	must(t, tk.FailPastDeadline("c1", "", dl))
	if tk.Status != Canceled || tk.LastError != "deadline passed at 2026-03-01T12:00:30Z while running" {
		t.Fatalf("with a cancel requested: status %s last error %q, want canceled", tk.Status, tk.LastError)
	}

	if err := running(t, nil).FailPastDeadline("c1", "", dl); !errors.Is(err, ErrNotDue) {
		t.Fatalf("FailPastDeadline of a task without a deadline = %v, want ErrNotDue", err)
	}
}
