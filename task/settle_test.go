package task

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"
)

// Settle decides every ending of an attempt without I/O: each branch of the
// worker's commit, from the task as read to the transition it writes (or
// the error that makes it write nothing).
func TestSettle(t *testing.T) {
	now := t0.Add(10 * time.Second)
	boom := errors.New("boom")
	deadline := func(at time.Time) func(*Spec) { return func(s *Spec) { s.Deadline = at } }
	cancelRequested := func(tk *Task) { tk.CancelRequested = true }
	retryLater := func(d time.Duration) string { return fmt.Sprintf("retry after %v: busy", d) }
	ref := RefFor(ResultKey(3, testID, "c1"), []byte(`"big"`))
	tests := []struct {
		name  string
		spec  func(*Spec) // of the task, claimed by w1 under c1 at t0
		setup func(*Task) // then, to the task as read
		o     Outcome     // ClaimID c1 and Attempt 1 unless set
		want  Settlement
		// Then the task's status, its last error and its last history
		// reason contain these; a pending task is due at due.
		status         Status
		lastErr, entry string
		due            time.Time
		// Or the error Settle returns, leaving the task as read.
		err error
	}{
		{name: "released", o: Outcome{Release: "dropped"},
			want: Settlement{Kind: "released"}, status: Pending, entry: "released: dropped", due: now},
		{name: "released while a cancel was requested", setup: cancelRequested, o: Outcome{Release: "dropped"},
			want: Settlement{Kind: "canceled"}, status: Canceled, entry: "canceled instead of released: dropped"},
		{name: "released past its deadline ends dead unstarted", spec: deadline(t0.Add(5 * time.Second)), o: Outcome{Release: "dropped", MissedDeadline: true},
			want: Settlement{Kind: "dead"}, status: Dead, entry: "deadline passed"},
		{name: "released past its deadline, a cancel wins", spec: deadline(t0.Add(5 * time.Second)), setup: cancelRequested, o: Outcome{Release: "dropped", MissedDeadline: true},
			want: Settlement{Kind: "canceled"}, status: Canceled},
		{name: "released whatever the handler did", o: Outcome{Release: "dropped", Err: boom, Permanent: true},
			want: Settlement{Kind: "released"}, status: Pending, due: now},
		{name: "released under another claim", o: Outcome{ClaimID: "c2", Release: "dropped"}, err: ErrClaimMismatch},
		{name: "shut down with an error", o: Outcome{ShutDown: true, Err: boom},
			want: Settlement{Kind: "released"}, status: Pending, entry: "released: worker shut down", due: now},
		{name: "shut down with an error while a cancel was requested is named released", setup: cancelRequested, o: Outcome{ShutDown: true, Err: boom},
			want: Settlement{Kind: "released"}, status: Canceled},
		{name: "shut down after a success succeeds", o: Outcome{ShutDown: true, Result: []byte(`1`)},
			want: Settlement{Kind: "succeeded"}, status: Succeeded},
		{name: "shut down under another claim", o: Outcome{ClaimID: "c2", ShutDown: true, Err: boom}, err: ErrClaimMismatch},
		{name: "timed out with the context's error", o: Outcome{TimedOut: true, Err: context.DeadlineExceeded},
			want: Settlement{Kind: "failed"}, status: Pending, lastErr: "timed out after 30s", entry: "failed: timed out after 30s", due: now.Add(900 * time.Millisecond)},
		{name: "timed out with the handler's error", o: Outcome{TimedOut: true, Err: boom},
			want: Settlement{Kind: "failed"}, status: Pending, lastErr: "timed out after 30s: boom", due: now.Add(900 * time.Millisecond)},
		{name: "timed out with a permanent error", o: Outcome{TimedOut: true, Err: boom, Permanent: true},
			want: Settlement{Kind: "dead"}, status: Dead, lastErr: "timed out after 30s: boom", entry: "permanent failure"},
		{name: "timed out, attempts used up", spec: func(s *Spec) { s.MaxAttempts = 1 }, o: Outcome{TimedOut: true, Err: boom},
			want: Settlement{Kind: "dead"}, status: Dead, entry: "attempts exhausted"},
		{name: "timed out while a cancel was requested", setup: cancelRequested, o: Outcome{TimedOut: true, Err: boom},
			want: Settlement{Kind: "canceled"}, status: Canceled},
		{name: "timed out without an error succeeds", o: Outcome{TimedOut: true, Result: []byte(`1`)},
			want: Settlement{Kind: "succeeded"}, status: Succeeded},
		{name: "stopped by the deadline", spec: deadline(t0.Add(time.Hour)), o: Outcome{PastDeadline: true, Err: context.DeadlineExceeded},
			want: Settlement{Kind: "dead"}, status: Dead, lastErr: "while running", entry: "deadline passed at"},
		{name: "stopped by the deadline with the handler's error", spec: deadline(t0.Add(time.Hour)), o: Outcome{PastDeadline: true, Err: boom},
			want: Settlement{Kind: "dead"}, status: Dead, lastErr: "while running: boom"},
		{name: "stopped by the deadline while a cancel was requested", spec: deadline(t0.Add(time.Hour)), setup: cancelRequested, o: Outcome{PastDeadline: true, Err: boom},
			want: Settlement{Kind: "canceled"}, status: Canceled},
		{name: "stopped by a deadline it does not have", o: Outcome{PastDeadline: true, Err: boom}, err: ErrNotDue},
		{name: "stopped under another claim", spec: deadline(t0.Add(time.Hour)), o: Outcome{ClaimID: "c2", PastDeadline: true, Err: boom}, err: ErrClaimMismatch},
		{name: "result not stored apart", o: Outcome{StoreErr: errors.New("store the result: 503")},
			want: Settlement{Kind: "failed"}, status: Pending, lastErr: "store the result: 503", due: now.Add(900 * time.Millisecond)},
		{name: "result not stored apart, attempts used up", spec: func(s *Spec) { s.MaxAttempts = 1 }, o: Outcome{StoreErr: errors.New("store the result: 503")},
			want: Settlement{Kind: "dead"}, status: Dead},
		{name: "succeeded", o: Outcome{Result: []byte(` {"n": 1} `)},
			want: Settlement{Kind: "succeeded"}, status: Succeeded, entry: "succeeded"},
		{name: "succeeded without a result", want: Settlement{Kind: "succeeded"}, status: Succeeded},
		{name: "succeeded while a cancel was requested", setup: cancelRequested,
			want: Settlement{Kind: "succeeded"}, status: Succeeded},
		{name: "succeeded with a result stored apart", o: Outcome{ResultRef: &ref},
			want: Settlement{Kind: "succeeded"}, status: Succeeded},
		{name: "result refused before the commit", o: Outcome{ResultErr: fmt.Errorf("%w: result too large", ErrInvalid)},
			want: Settlement{Kind: "dead"}, status: Dead, lastErr: "handler result refused: " + ErrInvalid.Error() + ": result too large", entry: "permanent failure"},
		{name: "result refused by the task", o: Outcome{Result: []byte(`{not json`)},
			want: Settlement{Kind: "dead"}, status: Dead, lastErr: "handler result refused"},
		{name: "result refused while a cancel was requested is named dead", setup: cancelRequested, o: Outcome{Result: []byte(`{not json`)},
			want: Settlement{Kind: "dead"}, status: Canceled},
		{name: "result error of another kind", o: Outcome{ResultErr: boom}, err: boom},
		{name: "succeeded under another claim", o: Outcome{ClaimID: "c2"}, err: ErrClaimMismatch},
		{name: "succeeded on a task no longer running", setup: func(tk *Task) { must(t, tk.Fail("c1", "x", true, now, nil)) }, err: ErrNotRunning},
		{name: "snoozed", o: Outcome{Err: errors.New("retry after 1m0s: busy"), Snooze: &Snooze{Delay: time.Minute}},
			want: Settlement{Kind: "snoozed"}, status: Pending, entry: "snoozed: retry after 1m0s: busy", due: now.Add(time.Minute)},
		{name: "snoozed with the task's backoff", o: Outcome{Err: errors.New("retry later: busy"), Snooze: &Snooze{Backoff: true, Reason: retryLater}},
			want: Settlement{Kind: "snoozed", Backoff: true, Delay: 900 * time.Millisecond}, status: Pending, entry: "snoozed: retry after 900ms: busy", due: now.Add(900 * time.Millisecond)},
		{name: "snoozed with the backoff of its snoozes so far", setup: func(tk *Task) { tk.Snoozes = 3 }, o: Outcome{Err: boom, Snooze: &Snooze{Backoff: true, Reason: retryLater}},
			want: Settlement{Kind: "snoozed", Backoff: true, Delay: 7200 * time.Millisecond}, status: Pending, due: now.Add(7200 * time.Millisecond)},
		{name: "snoozed past the most snoozes fails the attempt", setup: func(tk *Task) { tk.Snoozes = MaxSnoozes }, o: Outcome{Err: boom, Snooze: &Snooze{Delay: time.Minute}},
			want: Settlement{Kind: "failed"}, status: Pending, lastErr: "snoozed more than 50 times: boom", due: now.Add(time.Minute)},
		{name: "snoozed past the most snoozes, attempts used up", spec: func(s *Spec) { s.MaxAttempts = 1 }, setup: func(tk *Task) { tk.Snoozes = MaxSnoozes }, o: Outcome{Err: boom, Snooze: &Snooze{Delay: time.Minute}},
			want: Settlement{Kind: "dead"}, status: Dead},
		{name: "snoozed while a cancel was requested", setup: cancelRequested, o: Outcome{Err: boom, Snooze: &Snooze{Delay: time.Minute}},
			want: Settlement{Kind: "canceled"}, status: Canceled, entry: "canceled instead of snoozed: boom"},
		{name: "snoozed with a negative delay", o: Outcome{Err: boom, Snooze: &Snooze{Delay: -time.Second}}, err: ErrInvalid},
		{name: "snoozed under another claim", o: Outcome{ClaimID: "c2", Err: boom, Snooze: &Snooze{Backoff: true}}, err: ErrClaimMismatch},
		{name: "failed", o: Outcome{Err: boom},
			want: Settlement{Kind: "failed"}, status: Pending, lastErr: "boom", entry: "failed: boom", due: now.Add(900 * time.Millisecond)},
		{name: "failed for good", o: Outcome{Err: boom, Permanent: true},
			want: Settlement{Kind: "dead"}, status: Dead, entry: "permanent failure: boom"},
		{name: "failed, attempts used up", spec: func(s *Spec) { s.MaxAttempts = 1 }, o: Outcome{Err: boom},
			want: Settlement{Kind: "dead"}, status: Dead, entry: "attempts exhausted: boom"},
		{name: "failed, its retry due after its deadline", spec: deadline(t0.Add(10*time.Second + 500*time.Millisecond)), o: Outcome{Err: boom},
			want: Settlement{Kind: "dead"}, status: Dead, entry: "deadline passed: boom"},
		{name: "failed while a cancel was requested", setup: cancelRequested, o: Outcome{Err: boom},
			want: Settlement{Kind: "canceled"}, status: Canceled, entry: "canceled after failure: boom"},
		{name: "failed under another claim", o: Outcome{ClaimID: "c2", Err: boom}, err: ErrClaimMismatch},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			tk := running(t, tt.spec)
			if tt.setup != nil {
				tt.setup(tk)
			}
			o := tt.o
			if o.ClaimID == "" {
				o.ClaimID = "c1"
			}
			if o.Attempt == 0 {
				o.Attempt = tk.Attempt
			}
			if tt.err != nil {
				wantErrUnchanged(t, tk, func(tk *Task) error {
					s, err := tk.Settle(o, now, fixedRand(0.5))
					if err == nil {
						t.Errorf("settled %+v", s)
					}
					return err
				}, tt.err)
				return
			}
			version := tk.Version
			got, err := tk.Settle(o, now, fixedRand(0.5))
			if err != nil {
				t.Fatalf("Settle: %v", err)
			}
			if got != tt.want {
				t.Errorf("Settle = %+v, want %+v", got, tt.want)
			}
			if tk.Status != tt.status {
				t.Errorf("status %s, want %s", tk.Status, tt.status)
			}
			if tk.Version <= version {
				t.Errorf("version %d after %d: the write would not change the bytes", tk.Version, version)
			}
			if tk.Claim != nil {
				t.Errorf("claim %+v kept", tk.Claim)
			}
			if !strings.Contains(tk.LastError, tt.lastErr) {
				t.Errorf("last error %q, want it to contain %q", tk.LastError, tt.lastErr)
			}
			if last := tk.History[len(tk.History)-1]; !strings.Contains(last.Reason, tt.entry) {
				t.Errorf("history %q, want it to contain %q", last.Reason, tt.entry)
			}
			if tt.status == Pending && !tk.AvailableAt.Equal(tt.due) {
				t.Errorf("due at %s, want %s", tk.AvailableAt, tt.due)
			}
		})
	}
}

// The attempt a snooze hands back is not used up; a release's never is;
// a failure's is.
func TestSettleCountsAttempts(t *testing.T) {
	now := t0.Add(time.Second)
	for _, c := range []struct {
		name             string
		o                Outcome
		attempt, snoozes int
	}{
		{"released", Outcome{Release: "dropped"}, 0, 0},
		{"snoozed", Outcome{Err: errors.New("later"), Snooze: &Snooze{Delay: time.Second}}, 0, 1},
		{"failed", Outcome{Err: errors.New("boom")}, 1, 0},
	} {
		tk := running(t, nil)
		c.o.ClaimID, c.o.Attempt = "c1", tk.Attempt
		if _, err := tk.Settle(c.o, now, nil); err != nil {
			t.Fatalf("%s: %v", c.name, err)
		}
		if tk.Attempt != c.attempt || tk.Snoozes != c.snoozes {
			t.Errorf("%s: attempt %d snoozes %d, want %d and %d", c.name, tk.Attempt, tk.Snoozes, c.attempt, c.snoozes)
		}
	}
}
