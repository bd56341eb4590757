package task

import (
	"bytes"
	crand "crypto/rand"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"
)

func TestStatus(t *testing.T) {
	tests := []struct {
		s               Status
		valid, terminal bool
	}{
		{Pending, true, false},
		{Running, true, false},
		{Succeeded, true, true},
		{Dead, true, true},
		{Canceled, true, true},
		{"failed", false, false},
		{"", false, false},
		{"Pending", false, false},
	}
	for _, tt := range tests {
		t.Run(string(tt.s), func(t *testing.T) {
			if got := tt.s.Valid(); got != tt.valid {
				t.Errorf("Valid = %v, want %v", got, tt.valid)
			}
			if got := tt.s.Terminal(); got != tt.terminal {
				t.Errorf("Terminal = %v, want %v", got, tt.terminal)
			}
			got, err := ParseStatus(string(tt.s))
			if tt.valid && (err != nil || got != tt.s) {
				t.Errorf("ParseStatus = %q, %v", got, err)
			}
			if !tt.valid && err == nil {
				t.Errorf("ParseStatus(%q) accepted an unknown status", tt.s)
			}
		})
	}
}

func TestNew(t *testing.T) {
	t.Run("fills defaults and starts pending with version 1", func(t *testing.T) {
		tk := newTask(t, nil)
		if tk.Format != 1 || tk.Status != Pending || tk.Version != 1 || tk.Attempt != 0 {
			t.Errorf("got format %d status %s version %d attempt %d", tk.Format, tk.Status, tk.Version, tk.Attempt)
		}
		if tk.MaxAttempts != DefaultMaxAttempts || tk.Timeout.D() != DefaultTimeout || tk.Retry != DefaultRetryPolicy() {
			t.Errorf("defaults not applied: max %d timeout %s retry %+v", tk.MaxAttempts, tk.Timeout, tk.Retry)
		}
		if !tk.AvailableAt.Equal(t0) || !tk.CreatedAt.Equal(t0) || !tk.UpdatedAt.Equal(t0) {
			t.Errorf("times: available %s created %s updated %s", tk.AvailableAt, tk.CreatedAt, tk.UpdatedAt)
		}
		if len(tk.History) != 1 || tk.History[0].To != Pending || tk.History[0].Reason != "submitted" || !tk.History[0].At.Equal(t0) {
			t.Errorf("history = %+v", tk.History)
		}
		if tk.Key() != "tasks/003/"+testID+".json" {
			t.Errorf("Key = %s", tk.Key())
		}
		if !tk.Due(t0) {
			t.Error("new task is not due at submit time")
		}
	})
	t.Run("stores times in UTC", func(t *testing.T) {
		local := t0.In(time.FixedZone("X", 3600))
		tk, err := New(testID, 0, Spec{Type: "x"}, local)
		must(t, err)
		if tk.CreatedAt.Location() != time.UTC || !tk.CreatedAt.Equal(t0) {
			t.Errorf("CreatedAt = %s", tk.CreatedAt)
		}
	})
	t.Run("future available_at delays the task", func(t *testing.T) {
		tk := newTask(t, func(s *Spec) { s.AvailableAt = t0.Add(time.Hour) })
		if tk.Due(t0) || !tk.Due(t0.Add(time.Hour)) {
			t.Error("Due ignores available_at")
		}
	})
	t.Run("empty input is stored as absent", func(t *testing.T) {
		for _, in := range []string{"", "  \n"} {
			tk := newTask(t, func(s *Spec) { s.Input = []byte(in) })
			if tk.Input != nil {
				t.Errorf("input %q stored as %q", in, tk.Input)
			}
			if bytes.Contains(mustMarshal(t, tk), []byte(`"input"`)) {
				t.Errorf("input %q marshalled", in)
			}
		}
	})
	t.Run("input is compacted and not aliased", func(t *testing.T) {
		in := []byte(`{ "a" : [1, 2] }`)
		tk := newTask(t, func(s *Spec) { s.Input = in })
		in[3] = 'X'
		if string(tk.Input) != `{"a":[1,2]}` {
			t.Errorf("input = %s", tk.Input)
		}
	})
	t.Run("partial retry policy takes defaults for zero fields", func(t *testing.T) {
		tk := newTask(t, func(s *Spec) { s.Retry = &RetryPolicy{InitialDelay: Duration(10 * time.Minute)} })
		want := RetryPolicy{InitialDelay: Duration(10 * time.Minute), MaxDelay: Duration(10 * time.Minute), Multiplier: 2}
		if tk.Retry != want {
			t.Errorf("retry = %+v, want %+v", tk.Retry, want)
		}
	})
	t.Run("priority is stored, and absent for the default", func(t *testing.T) {
		if b := mustMarshal(t, newTask(t, nil)); bytes.Contains(b, []byte(`"priority"`)) {
			t.Errorf("default priority marshalled: %s", b)
		}
		tk := newTask(t, func(s *Spec) { s.Priority = PriorityHigh })
		if tk.Priority != PriorityHigh || !bytes.Contains(mustMarshal(t, tk), []byte(`"priority":"high"`)) {
			t.Errorf("priority = %q", tk.Priority)
		}
	})
	t.Run("input at the size limit is accepted", func(t *testing.T) {
		in := `"` + strings.Repeat("a", MaxInputBytes-2) + `"`
		newTask(t, func(s *Spec) { s.Input = []byte(in) })
	})

	invalid := []struct {
		name  string
		id    string
		shard int
		mod   func(*Spec)
	}{
		{"empty type", testID, 0, func(s *Spec) { s.Type = "" }},
		{"unknown priority", testID, 0, func(s *Spec) { s.Priority = "urgent" }},
		{"type too long", testID, 0, func(s *Spec) { s.Type = strings.Repeat("a", MaxTypeLen+1) }},
		{"type with a slash", testID, 0, func(s *Spec) { s.Type = "a/b" }},
		{"type with a space", testID, 0, func(s *Spec) { s.Type = "a b" }},
		{"input not JSON", testID, 0, func(s *Spec) { s.Input = []byte(`{oops`) }},
		{"input two values", testID, 0, func(s *Spec) { s.Input = []byte(`1 2`) }},
		{"input over the limit", testID, 0, func(s *Spec) { s.Input = []byte(`"` + strings.Repeat("a", MaxInputBytes) + `"`) }},
		{"negative max attempts", testID, 0, func(s *Spec) { s.MaxAttempts = -1 }},
		{"too many max attempts", testID, 0, func(s *Spec) { s.MaxAttempts = MaxAttemptsLimit + 1 }},
		{"timeout below 1s", testID, 0, func(s *Spec) { s.Timeout = 500 * time.Millisecond }},
		{"negative timeout", testID, 0, func(s *Spec) { s.Timeout = -time.Second }},
		{"timeout above 24h", testID, 0, func(s *Spec) { s.Timeout = 25 * time.Hour }},
		{"jitter above 1", testID, 0, func(s *Spec) { s.Retry = &RetryPolicy{Jitter: 2} }},
		{"multiplier below 1", testID, 0, func(s *Spec) { s.Retry = &RetryPolicy{Multiplier: 0.5} }},
		{"max delay below initial", testID, 0, func(s *Spec) {
			s.Retry = &RetryPolicy{InitialDelay: Duration(time.Minute), MaxDelay: Duration(time.Second)}
		}},
		{"idempotency key too long", testID, 0, func(s *Spec) { s.IdempotencyKey = strings.Repeat("k", MaxKeyBytes+1) }},
		{"shard key not UTF-8", testID, 0, func(s *Spec) { s.ShardKey = "\xff" }},
		{"bad id", "not-an-id", 0, nil},
		{"lower-case id", strings.ToLower(testID), 0, nil},
		{"negative shard", testID, -1, nil},
	}
	for _, tt := range invalid {
		t.Run("rejects "+tt.name, func(t *testing.T) {
			spec := Spec{Type: "email.send"}
			if tt.mod != nil {
				tt.mod(&spec)
			}
			tk, err := New(tt.id, tt.shard, spec, t0)
			if !errors.Is(err, ErrInvalid) || tk != nil {
				t.Errorf("New = %v, %v; want ErrInvalid", tk, err)
			}
		})
	}
	t.Run("accepts every allowed type character", func(t *testing.T) {
		newTask(t, func(s *Spec) { s.Type = "Az09._:-" })
	})
}

func TestClaimBy(t *testing.T) {
	t.Run("starts an attempt under a lease of Timeout", func(t *testing.T) {
		tk := newTask(t, func(s *Spec) { s.Timeout = time.Minute })
		now := t0.Add(5 * time.Second)
		must(t, tk.ClaimBy("w1", "c1", now))
		if tk.Status != Running || tk.Attempt != 1 || tk.Version != 2 || !tk.UpdatedAt.Equal(now) {
			t.Errorf("status %s attempt %d version %d updated %s", tk.Status, tk.Attempt, tk.Version, tk.UpdatedAt)
		}
		want := Claim{Worker: "w1", ID: "c1", ExpiresAt: now.Add(time.Minute)}
		if tk.Claim == nil || *tk.Claim != want {
			t.Errorf("claim = %+v, want %+v", tk.Claim, want)
		}
		last := tk.History[len(tk.History)-1]
		if last != (Transition{At: now, From: Pending, To: Running, Worker: "w1", Reason: "claimed", Attempt: 1}) {
			t.Errorf("history entry = %+v", last)
		}
	})
	t.Run("refuses a task that is not due", func(t *testing.T) {
		tk := newTask(t, func(s *Spec) { s.AvailableAt = t0.Add(time.Second) })
		wantErrUnchanged(t, tk, func(tk *Task) error { return tk.ClaimBy("w1", "c1", t0) }, ErrNotDue)
	})
	t.Run("refuses a running task", func(t *testing.T) {
		wantErrUnchanged(t, inState(t, Running), func(tk *Task) error { return tk.ClaimBy("w2", "c2", t0) }, ErrNotPending)
	})
	for _, s := range []Status{Succeeded, Dead, Canceled} {
		t.Run("refuses a "+string(s)+" task", func(t *testing.T) {
			wantErrUnchanged(t, inState(t, s), func(tk *Task) error { return tk.ClaimBy("w2", "c2", t0.Add(time.Hour)) }, ErrNotPending, ErrTerminal)
		})
	}
	t.Run("refuses an empty claim id", func(t *testing.T) {
		wantErrUnchanged(t, newTask(t, nil), func(tk *Task) error { return tk.ClaimBy("w1", "", t0) }, ErrInvalid)
	})
	t.Run("refuses an empty worker", func(t *testing.T) {
		wantErrUnchanged(t, newTask(t, nil), func(tk *Task) error { return tk.ClaimBy("", "c1", t0) }, ErrInvalid)
	})
}

func TestRenew(t *testing.T) {
	t.Run("extends the lease without adding history", func(t *testing.T) {
		tk := running(t, nil)
		hist := len(tk.History)
		now := t0.Add(20 * time.Second)
		must(t, tk.Renew("c1", now))
		if !tk.Claim.ExpiresAt.Equal(now.Add(DefaultTimeout)) {
			t.Errorf("expires at %s", tk.Claim.ExpiresAt)
		}
		if tk.Version != 3 || !tk.UpdatedAt.Equal(now) || len(tk.History) != hist {
			t.Errorf("version %d updated %s history %d", tk.Version, tk.UpdatedAt, len(tk.History))
		}
	})
	t.Run("works past expiry while nobody took the task back", func(t *testing.T) {
		tk := running(t, nil)
		must(t, tk.Renew("c1", t0.Add(time.Hour)))
	})
	t.Run("refuses another claim", func(t *testing.T) {
		wantErrUnchanged(t, running(t, nil), func(tk *Task) error { return tk.Renew("c2", t0) }, ErrClaimMismatch)
	})
	t.Run("refuses an empty claim id", func(t *testing.T) {
		wantErrUnchanged(t, running(t, nil), func(tk *Task) error { return tk.Renew("", t0) }, ErrClaimMismatch)
	})
	t.Run("refuses a pending task", func(t *testing.T) {
		wantErrUnchanged(t, newTask(t, nil), func(tk *Task) error { return tk.Renew("c1", t0) }, ErrClaimMismatch, ErrNotRunning)
	})
}

func TestSucceed(t *testing.T) {
	t.Run("stores the result and drops the claim", func(t *testing.T) {
		tk := running(t, nil)
		now := t0.Add(3 * time.Second)
		must(t, tk.Succeed("c1", []byte(` {"n": 1} `), now))
		if tk.Status != Succeeded || tk.Claim != nil || string(tk.Result) != `{"n":1}` || tk.Version != 3 {
			t.Errorf("status %s claim %v result %s version %d", tk.Status, tk.Claim, tk.Result, tk.Version)
		}
		last := tk.History[len(tk.History)-1]
		if last != (Transition{At: now, From: Running, To: Succeeded, Worker: "w1", Reason: "succeeded", Attempt: 1}) {
			t.Errorf("history entry = %+v", last)
		}
	})
	t.Run("empty result is absent", func(t *testing.T) {
		tk := running(t, nil)
		must(t, tk.Succeed("c1", nil, t0))
		if tk.Result != nil {
			t.Errorf("result = %q", tk.Result)
		}
	})
	t.Run("outcome wins over a requested cancel", func(t *testing.T) {
		tk := running(t, nil)
		_, err := tk.Cancel(t0)
		must(t, err)
		must(t, tk.Succeed("c1", nil, t0))
		if tk.Status != Succeeded || tk.CancelRequested {
			t.Errorf("status %s cancel requested %v", tk.Status, tk.CancelRequested)
		}
	})
	t.Run("refuses invalid result JSON", func(t *testing.T) {
		wantErrUnchanged(t, running(t, nil), func(tk *Task) error { return tk.Succeed("c1", []byte("{"), t0) }, ErrInvalid)
	})
	t.Run("refuses an oversized result", func(t *testing.T) {
		big := []byte(`"` + strings.Repeat("a", MaxResultBytes) + `"`)
		wantErrUnchanged(t, running(t, nil), func(tk *Task) error { return tk.Succeed("c1", big, t0) }, ErrInvalid)
	})
	t.Run("refuses a second completion", func(t *testing.T) {
		wantErrUnchanged(t, inState(t, Succeeded), func(tk *Task) error { return tk.Succeed("c1", nil, t0) }, ErrClaimMismatch, ErrTerminal)
	})
}

func TestFail(t *testing.T) {
	noJitter := func(s *Spec) {
		s.Retry = &RetryPolicy{InitialDelay: Duration(time.Second), MaxDelay: Duration(time.Minute), Multiplier: 2}
	}
	t.Run("retries after the backoff delay", func(t *testing.T) {
		tk := running(t, noJitter)
		now := t0.Add(10 * time.Second)
		must(t, tk.Fail("c1", "timeout talking to smtp", false, now, nil))
		if tk.Status != Pending || tk.Claim != nil || tk.Attempt != 1 || tk.LastError != "timeout talking to smtp" {
			t.Errorf("status %s claim %v attempt %d last error %q", tk.Status, tk.Claim, tk.Attempt, tk.LastError)
		}
		if !tk.AvailableAt.Equal(now.Add(time.Second)) {
			t.Errorf("available at %s, want %s", tk.AvailableAt, now.Add(time.Second))
		}
		last := tk.History[len(tk.History)-1]
		if last.From != Running || last.To != Pending || last.Attempt != 1 || last.Worker != "w1" || last.Reason != "failed: timeout talking to smtp" {
			t.Errorf("history entry = %+v", last)
		}
		// The second failure waits twice as long.
		now = tk.AvailableAt
		must(t, tk.ClaimBy("w2", "c2", now))
		must(t, tk.Fail("c2", "again", false, now, nil))
		if got := tk.AvailableAt.Sub(now); got != 2*time.Second {
			t.Errorf("second delay %s, want 2s", got)
		}
	})
	t.Run("jitter shortens the delay", func(t *testing.T) {
		tk := running(t, func(s *Spec) { s.Retry = &RetryPolicy{Jitter: 0.5} })
		must(t, tk.Fail("c1", "x", false, t0, fixedRand(0.5)))
		if got := tk.AvailableAt.Sub(t0); got != 750*time.Millisecond {
			t.Errorf("delay %s, want 750ms", got)
		}
	})
	t.Run("goes dead when attempts are used up", func(t *testing.T) {
		tk := newTask(t, func(s *Spec) { s.MaxAttempts = 2 })
		now := t0
		for i, c := range []string{"c1", "c2"} {
			must(t, tk.ClaimBy("w", c, now))
			must(t, tk.Fail(c, "boom", false, now, nil))
			now = tk.AvailableAt
			if want := []Status{Pending, Dead}[i]; tk.Status != want {
				t.Fatalf("after failure %d status %s, want %s", i+1, tk.Status, want)
			}
		}
		if tk.Attempt != 2 || !strings.HasPrefix(tk.History[len(tk.History)-1].Reason, "attempts exhausted") {
			t.Errorf("attempt %d history %+v", tk.Attempt, tk.History[len(tk.History)-1])
		}
	})
	t.Run("permanent failure goes dead at once", func(t *testing.T) {
		tk := running(t, nil)
		must(t, tk.Fail("c1", "bad input", true, t0, nil))
		if tk.Status != Dead || tk.Claim != nil || tk.LastError != "bad input" {
			t.Errorf("status %s claim %v last error %q", tk.Status, tk.Claim, tk.LastError)
		}
	})
	t.Run("requested cancel wins", func(t *testing.T) {
		tk := running(t, nil)
		_, err := tk.Cancel(t0)
		must(t, err)
		must(t, tk.Fail("c1", "interrupted", false, t0, nil))
		if tk.Status != Canceled || tk.CancelRequested || tk.LastError != "interrupted" {
			t.Errorf("status %s requested %v last error %q", tk.Status, tk.CancelRequested, tk.LastError)
		}
	})
	t.Run("truncates a long error on a rune boundary", func(t *testing.T) {
		tk := running(t, nil)
		msg := "x" + strings.Repeat("é", MaxErrorBytes) // 2-byte runes, offset by one
		must(t, tk.Fail("c1", msg, false, t0, nil))
		if len(tk.LastError) > MaxErrorBytes || len(tk.LastError) < MaxErrorBytes-1 || !strings.HasPrefix(msg, tk.LastError) {
			t.Errorf("last error is %d bytes", len(tk.LastError))
		}
		if !utf8Valid(tk.LastError) || !utf8Valid(tk.History[len(tk.History)-1].Reason) {
			t.Error("truncation split a rune")
		}
		if r := tk.History[len(tk.History)-1].Reason; len(r) > MaxReasonBytes {
			t.Errorf("history reason is %d bytes", len(r))
		}
	})
	t.Run("refuses another claim", func(t *testing.T) {
		wantErrUnchanged(t, running(t, nil), func(tk *Task) error { return tk.Fail("c2", "x", false, t0, nil) }, ErrClaimMismatch)
	})
}

func TestSnooze(t *testing.T) {
	t.Run("gives the attempt back and delays", func(t *testing.T) {
		tk := running(t, nil)
		now := t0.Add(time.Second)
		must(t, tk.Snooze("c1", time.Minute, "rate limited", now))
		if tk.Status != Pending || tk.Attempt != 0 || tk.Claim != nil || !tk.AvailableAt.Equal(now.Add(time.Minute)) {
			t.Errorf("status %s attempt %d claim %v available %s", tk.Status, tk.Attempt, tk.Claim, tk.AvailableAt)
		}
		last := tk.History[len(tk.History)-1]
		if last.Reason != "snoozed: rate limited" || last.Attempt != 1 || last.To != Pending {
			t.Errorf("history entry = %+v", last)
		}
	})
	t.Run("backs off by the retry policy, snooze after snooze", func(t *testing.T) {
		tk := newTask(t, func(s *Spec) {
			s.Retry = &RetryPolicy{InitialDelay: Duration(time.Second), MaxDelay: Duration(5 * time.Second), Multiplier: 2}
		})
		var got []time.Duration
		for i := range 5 {
			got = append(got, tk.SnoozeDelay(nil))
			c := fmt.Sprint("c", i)
			must(t, tk.ClaimBy("w", c, tk.AvailableAt))
			must(t, tk.Snooze(c, got[i], "", tk.AvailableAt))
		}
		if fmt.Sprint(got) != "[1s 2s 4s 5s 5s]" {
			t.Errorf("snooze delays %v, want the policy's backoff, capped", got)
		}
		if d := tk.SnoozeDelay(func() float64 { return 1 }); d != 5*time.Second {
			t.Errorf("without jitter in the policy, jitter changed the delay to %v", d)
		}
	})
	t.Run("gives attempts back up to MaxSnoozes, counted", func(t *testing.T) {
		tk := newTask(t, func(s *Spec) { s.MaxAttempts = 1 })
		now := t0
		for i := range 10 {
			c := string(rune('a' + i))
			must(t, tk.ClaimBy("w", c, now))
			must(t, tk.Snooze(c, 0, "", now))
		}
		if tk.Status != Pending || tk.Attempt != 0 || tk.Snoozes != 10 {
			t.Errorf("status %s attempt %d snoozes %d", tk.Status, tk.Attempt, tk.Snoozes)
		}
	})
	t.Run("past MaxSnoozes a snooze is a failed attempt, so the task dies", func(t *testing.T) {
		tk := newTask(t, func(s *Spec) { s.MaxAttempts = 3 })
		now := t0
		for i := 0; tk.Status == Pending; i++ {
			if i > MaxSnoozes+3 {
				t.Fatalf("still pending after %d snoozes (attempt %d)", i, tk.Attempt)
			}
			c := fmt.Sprint("c", i)
			must(t, tk.ClaimBy("w", c, now))
			must(t, tk.Snooze(c, time.Second, "busy", now))
			now = tk.AvailableAt
			if i < MaxSnoozes && tk.Attempt != 0 {
				t.Fatalf("snooze %d used up an attempt", i+1)
			}
		}
		if tk.Status != Dead || tk.Snoozes != MaxSnoozes+3 || tk.Attempt != 3 {
			t.Fatalf("status %s snoozes %d attempt %d, want dead after %d snoozes", tk.Status, tk.Snoozes, tk.Attempt, MaxSnoozes+3)
		}
		if last := tk.History[len(tk.History)-1]; !strings.Contains(last.Reason, "attempts exhausted: snoozed more than 50 times: busy") {
			t.Errorf("history entry = %+v", last)
		}
		must(t, tk.Requeue(now))
		if tk.Snoozes != 0 || tk.Attempt != 0 {
			t.Errorf("requeue kept snoozes %d attempt %d", tk.Snoozes, tk.Attempt)
		}
	})
	t.Run("a release at shutdown is not counted", func(t *testing.T) {
		tk := newTask(t, func(s *Spec) { s.MaxAttempts = 1 })
		for i := range MaxSnoozes + 5 {
			c := fmt.Sprint("c", i)
			must(t, tk.ClaimBy("w", c, t0))
			must(t, tk.Release(c, "worker shut down", t0))
		}
		if tk.Status != Pending || tk.Attempt != 0 || tk.Snoozes != 0 {
			t.Errorf("status %s attempt %d snoozes %d", tk.Status, tk.Attempt, tk.Snoozes)
		}
	})
	t.Run("requested cancel wins", func(t *testing.T) {
		tk := running(t, nil)
		_, err := tk.Cancel(t0)
		must(t, err)
		must(t, tk.Snooze("c1", time.Minute, "", t0))
		if tk.Status != Canceled || tk.CancelRequested {
			t.Errorf("status %s requested %v", tk.Status, tk.CancelRequested)
		}
	})
	t.Run("refuses a negative delay", func(t *testing.T) {
		wantErrUnchanged(t, running(t, nil), func(tk *Task) error { return tk.Snooze("c1", -time.Second, "", t0) }, ErrInvalid)
	})
	t.Run("refuses another claim", func(t *testing.T) {
		wantErrUnchanged(t, running(t, nil), func(tk *Task) error { return tk.Snooze("c2", 0, "", t0) }, ErrClaimMismatch)
	})
}

func TestExpire(t *testing.T) {
	t.Run("takes back an expired claim as a failed attempt", func(t *testing.T) {
		tk := running(t, func(s *Spec) { s.Retry = &RetryPolicy{Jitter: 0} })
		now := tk.Claim.ExpiresAt.Add(time.Nanosecond)
		if !tk.ClaimExpired(now) {
			t.Fatal("ClaimExpired = false after expiry")
		}
		must(t, tk.Expire(now, nil))
		if tk.Status != Pending || tk.Attempt != 1 || tk.Claim != nil || tk.LastError != "lease expired" {
			t.Errorf("status %s attempt %d claim %v last error %q", tk.Status, tk.Attempt, tk.Claim, tk.LastError)
		}
		if !tk.AvailableAt.Equal(now.Add(time.Second)) {
			t.Errorf("available at %s", tk.AvailableAt)
		}
		if last := tk.History[len(tk.History)-1]; last.Worker != "w1" || last.Reason != "failed: lease expired" {
			t.Errorf("history entry = %+v", last)
		}
	})
	t.Run("on the last attempt goes dead", func(t *testing.T) {
		tk := running(t, func(s *Spec) { s.MaxAttempts = 1 })
		must(t, tk.Expire(t0.Add(time.Hour), nil))
		if tk.Status != Dead {
			t.Errorf("status %s", tk.Status)
		}
	})
	t.Run("with a requested cancel goes canceled", func(t *testing.T) {
		tk := running(t, nil)
		_, err := tk.Cancel(t0)
		must(t, err)
		must(t, tk.Expire(t0.Add(time.Hour), nil))
		if tk.Status != Canceled {
			t.Errorf("status %s", tk.Status)
		}
	})
	t.Run("refuses at exactly the expiry", func(t *testing.T) {
		tk := running(t, nil)
		if tk.ClaimExpired(tk.Claim.ExpiresAt) {
			t.Error("ClaimExpired at ExpiresAt")
		}
		wantErrUnchanged(t, tk, func(tk *Task) error { return tk.Expire(tk.Claim.ExpiresAt, nil) }, ErrNotExpired)
	})
	t.Run("refuses a pending task", func(t *testing.T) {
		tk := newTask(t, nil)
		if tk.ClaimExpired(t0.Add(time.Hour)) {
			t.Error("ClaimExpired on a pending task")
		}
		wantErrUnchanged(t, tk, func(tk *Task) error { return tk.Expire(t0.Add(time.Hour), nil) }, ErrNotRunning)
	})
	t.Run("refuses a finished task", func(t *testing.T) {
		wantErrUnchanged(t, inState(t, Succeeded), func(tk *Task) error { return tk.Expire(t0.Add(time.Hour), nil) }, ErrNotRunning, ErrTerminal)
	})
}

func TestCancel(t *testing.T) {
	t.Run("pending goes canceled at once", func(t *testing.T) {
		tk := newTask(t, nil)
		requested, err := tk.Cancel(t0)
		must(t, err)
		if requested || tk.Status != Canceled || tk.Version != 2 {
			t.Errorf("requested %v status %s version %d", requested, tk.Status, tk.Version)
		}
	})
	t.Run("running is asked to stop and stays running", func(t *testing.T) {
		tk := running(t, nil)
		requested, err := tk.Cancel(t0.Add(time.Second))
		must(t, err)
		if !requested || tk.Status != Running || !tk.CancelRequested || tk.Claim == nil || tk.Version != 3 {
			t.Errorf("requested %v status %s flag %v claim %v version %d", requested, tk.Status, tk.CancelRequested, tk.Claim, tk.Version)
		}
		last := tk.History[len(tk.History)-1]
		if last.From != Running || last.To != Running || last.Reason != "cancel requested" {
			t.Errorf("history entry = %+v", last)
		}
	})
	t.Run("a second request changes nothing", func(t *testing.T) {
		tk := running(t, nil)
		_, err := tk.Cancel(t0)
		must(t, err)
		var requested bool
		wantErrUnchanged(t, tk, func(tk *Task) error {
			var err error
			requested, err = tk.Cancel(t0)
			return err
		}, ErrCancelAlreadyRequested)
		if !requested {
			t.Error("requested = false for a task whose cancel is pending")
		}
	})
	t.Run("a snoozed attempt counts once canceled", func(t *testing.T) {
		// Attempt 1 ran and asked to retry later; canceled before it runs
		// again, the task says it ran once, not 0/2 as if it never had.
		tk := running(t, nil)
		must(t, tk.Snooze("c1", time.Minute, "busy", t0.Add(time.Second)))
		_, err := tk.Cancel(t0.Add(2 * time.Second))
		must(t, err)
		if last := tk.History[len(tk.History)-1]; tk.Attempt != 1 || last.From != Pending || last.To != Canceled || last.Attempt != 1 {
			t.Errorf("attempt %d, last transition %+v: want attempt 1 kept", tk.Attempt, last)
		}
	})
	t.Run("a failed attempt counts once canceled", func(t *testing.T) {
		tk := running(t, nil)
		must(t, tk.Fail("c1", "boom", false, t0.Add(time.Second), nil))
		_, err := tk.Cancel(t0.Add(2 * time.Second))
		must(t, err)
		if tk.Attempt != 1 {
			t.Errorf("attempt %d, want 1", tk.Attempt)
		}
	})
	t.Run("a snooze a cancel overtook counts", func(t *testing.T) {
		tk := running(t, nil)
		_, err := tk.Cancel(t0.Add(time.Second))
		must(t, err)
		must(t, tk.Snooze("c1", time.Minute, "busy", t0.Add(2*time.Second)))
		if tk.Status != Canceled || tk.Attempt != 1 {
			t.Errorf("status %s attempt %d, want canceled at attempt 1", tk.Status, tk.Attempt)
		}
	})
	t.Run("a release that never ran does not count", func(t *testing.T) {
		tk := running(t, nil)
		must(t, tk.Release("c1", "dropped", t0.Add(time.Second)))
		_, err := tk.Cancel(t0.Add(2 * time.Second))
		must(t, err)
		if tk.Attempt != 0 {
			t.Errorf("attempt %d, want 0: the released run may never have started", tk.Attempt)
		}
	})
	for _, s := range []Status{Succeeded, Dead, Canceled} {
		t.Run(string(s)+" is refused", func(t *testing.T) {
			wantErrUnchanged(t, inState(t, s), func(tk *Task) error { _, err := tk.Cancel(t0); return err }, ErrTerminal)
		})
	}
}

func TestRequeue(t *testing.T) {
	for _, s := range []Status{Dead, Canceled} {
		t.Run(string(s)+" goes back to pending with a fresh attempt count", func(t *testing.T) {
			tk := inState(t, s)
			lastErr := tk.LastError
			now := t0.Add(time.Hour)
			must(t, tk.Requeue(now))
			if tk.Status != Pending || tk.Attempt != 0 || !tk.AvailableAt.Equal(now) || tk.Claim != nil || tk.CancelRequested {
				t.Errorf("status %s attempt %d available %s", tk.Status, tk.Attempt, tk.AvailableAt)
			}
			if tk.LastError != lastErr {
				t.Errorf("last error %q, want %q kept", tk.LastError, lastErr)
			}
			if last := tk.History[len(tk.History)-1]; last.From != s || last.To != Pending || last.Reason != "requeued" {
				t.Errorf("history entry = %+v", last)
			}
			must(t, tk.ClaimBy("w9", "c9", now))
		})
	}
	for _, s := range []Status{Pending, Running, Succeeded} {
		t.Run(string(s)+" is refused", func(t *testing.T) {
			wantErrUnchanged(t, inState(t, s), func(tk *Task) error { return tk.Requeue(t0) }, ErrNotRequeueable)
		})
	}
}

// TestFencingAfterReclaim is invariant 3: a worker whose claim expired and
// was re-dispatched cannot touch the task, even though the status it sees is
// still "running".
func TestFencingAfterReclaim(t *testing.T) {
	reclaimed := func(t *testing.T) *Task {
		tk := running(t, func(s *Spec) { s.Retry = &RetryPolicy{Jitter: 0} })
		now := tk.Claim.ExpiresAt.Add(time.Second)
		must(t, tk.Expire(now, nil))
		must(t, tk.ClaimBy("w2", "c2", tk.AvailableAt))
		if tk.Status != Running || tk.Claim.ID != "c2" {
			t.Fatalf("setup: status %s claim %+v", tk.Status, tk.Claim)
		}
		return tk
	}
	stale := map[string]func(*Task) error{
		"renew":          func(tk *Task) error { return tk.Renew("c1", t0) },
		"succeed":        func(tk *Task) error { return tk.Succeed("c1", []byte(`1`), t0) },
		"fail":           func(tk *Task) error { return tk.Fail("c1", "x", false, t0, nil) },
		"fail permanent": func(tk *Task) error { return tk.Fail("c1", "x", true, t0, nil) },
		"snooze":         func(tk *Task) error { return tk.Snooze("c1", 0, "", t0) },
	}
	for name, op := range stale {
		t.Run("stale "+name+" is refused", func(t *testing.T) {
			tk := reclaimed(t)
			if name == "cancel running" {
				_, err := tk.Cancel(t0)
				must(t, err)
			}
			wantErrUnchanged(t, tk, op, ErrClaimMismatch)
			if errors.Is(op(tk), ErrNotRunning) {
				t.Error("fencing error claims the task is not running; it is, under another claim")
			}
		})
	}
	t.Run("the current claim still completes", func(t *testing.T) {
		tk := reclaimed(t)
		must(t, tk.Succeed("c2", nil, t0.Add(time.Hour)))
	})
	t.Run("stale outcome after the task finished is refused", func(t *testing.T) {
		tk := reclaimed(t)
		must(t, tk.Succeed("c2", nil, t0.Add(time.Hour)))
		wantErrUnchanged(t, tk, func(tk *Task) error { return tk.Fail("c1", "late", false, t0, nil) }, ErrClaimMismatch, ErrTerminal)
	})
}

// TestVersionOnEveryWrite is invariant 2: each successful transition bumps
// Version by one and changes the encoded bytes, even a renewal at the same
// instant that would otherwise write identical content.
func TestVersionOnEveryWrite(t *testing.T) {
	tk := newTask(t, func(s *Spec) { s.MaxAttempts = 10 })
	steps := []struct {
		name string
		op   func(*Task) error
	}{
		{"claim", func(tk *Task) error { return tk.ClaimBy("w", "c1", t0) }},
		{"renew", func(tk *Task) error { return tk.Renew("c1", t0) }},
		{"renew again at the same instant", func(tk *Task) error { return tk.Renew("c1", t0) }},
		{"snooze", func(tk *Task) error { return tk.Snooze("c1", 0, "", t0) }},
		{"claim again", func(tk *Task) error { return tk.ClaimBy("w", "c2", t0) }},
		{"fail", func(tk *Task) error { return tk.Fail("c2", "x", false, t0, nil) }},
		{"claim after retry", func(tk *Task) error { return tk.ClaimBy("w", "c3", t0.Add(time.Hour)) }},
		{"request cancel", func(tk *Task) error { _, err := tk.Cancel(t0); return err }},
		{"fail after the cancel request", func(tk *Task) error { return tk.Fail("c3", "canceled", false, t0, nil) }},
		{"requeue", func(tk *Task) error { return tk.Requeue(t0) }},
		{"expire", func(tk *Task) error {
			if err := tk.ClaimBy("w", "c4", t0); err != nil {
				return err
			}
			return tk.Expire(t0.Add(time.Hour), nil)
		}},
		{"cancel pending", func(tk *Task) error { _, err := tk.Cancel(t0); return err }},
	}
	prev := mustMarshal(t, tk)
	for _, st := range steps {
		t.Run(st.name, func(t *testing.T) {
			v := tk.Version
			claims := 0
			if strings.HasPrefix(st.name, "expire") {
				claims = 1
			}
			must(t, st.op(tk))
			if tk.Version != v+1+int64(claims) {
				t.Errorf("version %d → %d", v, tk.Version)
			}
			cur := mustMarshal(t, tk)
			if bytes.Equal(cur, prev) {
				t.Error("write produced identical bytes")
			}
			prev = cur
		})
	}
}

func TestHistoryBounded(t *testing.T) {
	tk := newTask(t, nil)
	cycles := 40 // two entries each
	for i := range cycles {
		c := "c" + string(rune('A'+i))
		must(t, tk.ClaimBy("w", c, t0))
		must(t, tk.Snooze(c, 0, c, t0))
	}
	total := 1 + 2*cycles
	if len(tk.History) != MaxHistory {
		t.Fatalf("history has %d entries, want %d", len(tk.History), MaxHistory)
	}
	if tk.HistoryDropped != total-MaxHistory {
		t.Errorf("HistoryDropped = %d, want %d", tk.HistoryDropped, total-MaxHistory)
	}
	if tk.History[0].Reason != "submitted" {
		t.Errorf("first entry %+v, want the submit entry", tk.History[0])
	}
	last := tk.History[MaxHistory-1]
	if want := "snoozed: c" + string(rune('A'+cycles-1)); last.Reason != want {
		t.Errorf("last entry %q, want %q", last.Reason, want)
	}
	// The entries after the first are the newest ones, in order: overall
	// entry k is a claim for odd k and the snooze of cycle (k-2)/2 for even k.
	for i := 1; i < MaxHistory; i++ {
		k := total - MaxHistory + i
		want := "claimed"
		if k%2 == 0 {
			want = "snoozed: c" + string(rune('A'+(k-2)/2))
		}
		if tk.History[i].Reason != want {
			t.Errorf("entry %d (overall %d) = %q, want %q", i, k, tk.History[i].Reason, want)
		}
	}
}

func TestCloneIsDeep(t *testing.T) {
	tk := running(t, nil)
	c := tk.Clone()
	must(t, c.Renew("c1", t0.Add(time.Minute)))
	c.Input[0] = 'X'
	c.History[0].Reason = "changed"
	if tk.Claim.ExpiresAt.Equal(c.Claim.ExpiresAt) || tk.Input[0] == 'X' || tk.History[0].Reason == "changed" {
		t.Error("clone shares state with the original")
	}
}

// A shallow copy taken before a transition keeps its own history: commit
// never writes into a shared backing array.
func TestShallowCopyKeepsHistory(t *testing.T) {
	tk := newTask(t, nil)
	snapshot := *tk
	must(t, tk.ClaimBy("w", "c1", t0))
	other := snapshot
	_, err := other.Cancel(t0)
	must(t, err)
	if tk.History[1].To != Running || other.History[1].To != Canceled {
		t.Errorf("histories interfere: %+v / %+v", tk.History, other.History)
	}
}

func utf8Valid(s string) bool { return strings.ToValidUTF8(s, "\uFFFD") == s }

func TestRetire(t *testing.T) {
	for _, s := range []Status{Succeeded, Dead, Canceled} {
		t.Run(string(s)+" is tombstoned and then refuses every transition", func(t *testing.T) {
			tk := inState(t, s)
			v := tk.Version
			must(t, tk.Retire(t0.Add(time.Hour)))
			if !tk.Retired || tk.Status != s || tk.Version != v+1 {
				t.Fatalf("retired %v status %s version %d", tk.Retired, tk.Status, tk.Version)
			}
			if last := tk.History[len(tk.History)-1]; last.From != s || last.To != s || last.Reason != "retention" {
				t.Errorf("history entry = %+v", last)
			}
			wantErrUnchanged(t, tk, func(tk *Task) error { return tk.Requeue(t0) }, ErrRetired)
			wantErrUnchanged(t, tk, func(tk *Task) error { _, err := tk.Cancel(t0); return err }, ErrRetired)
			wantErrUnchanged(t, tk, func(tk *Task) error { return tk.Retire(t0) }, ErrRetired)
			b, err := Marshal(tk)
			must(t, err)
			if d, err := Decode(b); err != nil || !d.Retired {
				t.Fatalf("round trip: %+v %v", d, err)
			}
		})
	}
	for _, s := range []Status{Pending, Running} {
		t.Run(string(s)+" is refused", func(t *testing.T) {
			wantErrUnchanged(t, inState(t, s), func(tk *Task) error { return tk.Retire(t0) }, ErrNotFinished)
		})
	}
}

func TestDependencies(t *testing.T) {
	now := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	newID := func(at time.Time) string {
		id, err := NewID(at, crand.Reader)
		if err != nil {
			t.Fatal(err)
		}
		return id
	}
	p1, p2, id := newID(now.Add(-time.Hour)), newID(now.Add(-time.Minute)), newID(now)
	spec := func(deps ...Dep) Spec { return Spec{Type: "t", Deps: deps} }

	t.Run("blocked until every parent succeeded", func(t *testing.T) {
		tk, err := New(id, 0, spec(Dep{ID: p1}, Dep{ID: p2}), now)
		if err != nil || tk.Status != Blocked || tk.Version != 1 {
			t.Fatalf("new: %v %+v", err, tk)
		}
		if w := tk.Waiting(); len(w) != 2 {
			t.Errorf("waiting on %v, want both parents", w)
		}
		if err := tk.SettleDep(p1, Succeeded, "", now.Add(time.Second)); err != nil || tk.Status != Blocked || tk.Version != 2 {
			t.Fatalf("first parent: %v, %s v%d", err, tk.Status, tk.Version)
		}
		if err := tk.SettleDep(p1, Succeeded, "", now.Add(2*time.Second)); !errors.Is(err, ErrNoChange) {
			t.Errorf("settling a parent twice: %v, want ErrNoChange", err)
		}
		if err := tk.SettleDep(p2, Succeeded, "", now.Add(3*time.Second)); err != nil || tk.Status != Pending {
			t.Fatalf("last parent: %v, %s", err, tk.Status)
		}
		if !tk.AvailableAt.Equal(now.Add(3 * time.Second)) {
			t.Errorf("available at %v, want when the last parent settled", tk.AvailableAt)
		}
		if err := tk.check(); err != nil {
			t.Error(err)
		}
	})
	t.Run("a failed parent cancels, or fails under DepFail", func(t *testing.T) {
		for _, tc := range []struct {
			policy DepFailure
			want   Status
		}{{"", Canceled}, {DepCancel, Canceled}, {DepFail, Dead}} {
			s := spec(Dep{ID: p1}, Dep{ID: p2})
			s.OnDepFailure = tc.policy
			tk, err := New(id, 0, s, now)
			if err != nil {
				t.Fatal(err)
			}
			if err := tk.SettleDep(p2, Dead, "", now); err != nil || tk.Status != tc.want {
				t.Errorf("policy %q: %v, %s, want %s", tc.policy, err, tk.Status, tc.want)
			}
		}
	})
	t.Run("parents already ended at submit", func(t *testing.T) {
		tk, err := New(id, 0, spec(Dep{ID: p1, Ended: Succeeded}), now)
		if err != nil || tk.Status != Pending || tk.Version != 1 {
			t.Errorf("all succeeded: %v, %s v%d, want pending v1", err, tk.Status, tk.Version)
		}
		tk, err = New(id, 0, spec(Dep{ID: p1, Ended: Succeeded}, Dep{ID: p2, Ended: Canceled}), now)
		if err != nil || tk.Status != Canceled {
			t.Errorf("one canceled: %v, %s, want canceled", err, tk.Status)
		}
	})
	t.Run("bad dependencies", func(t *testing.T) {
		for _, deps := range [][]Dep{{{ID: id}}, {{ID: p1}, {ID: p1}}, {{ID: "nope"}}, {{ID: p1, Ended: Running}}} {
			if _, err := New(id, 0, spec(deps...), now); !errors.Is(err, ErrInvalid) {
				t.Errorf("deps %+v: %v, want ErrInvalid", deps, err)
			}
		}
	})
	t.Run("a blocked task can be canceled", func(t *testing.T) {
		tk, _ := New(id, 0, spec(Dep{ID: p1}), now)
		if _, err := tk.Cancel(now); err != nil || tk.Status != Canceled {
			t.Errorf("cancel: %v %s", err, tk.Status)
		}
		if err := tk.SettleDep(p1, Succeeded, "", now); !errors.Is(err, ErrNoChange) {
			t.Errorf("settling a canceled task: %v, want ErrNoChange", err)
		}
	})
}

// A task with dependencies or a slot is written as format 2, which older
// binaries refuse rather than rewrite without its fields; others stay 1.
func TestFormatOfDependenciesAndSlots(t *testing.T) {
	now := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	id, _ := NewID(now, crand.Reader)
	parent, _ := NewID(now.Add(-time.Hour), crand.Reader)
	for _, tc := range []struct {
		name string
		spec Spec
		want int
	}{
		{"plain", Spec{Type: "t"}, 1},
		{"dependencies", Spec{Type: "t", Deps: []Dep{{ID: parent}}}, 2},
		{"slot", Spec{Type: "t", Slot: "k"}, 2},
	} {
		tk, err := New(id, 0, tc.spec, now)
		if err != nil {
			t.Fatal(err)
		}
		b, err := Marshal(tk)
		if err != nil {
			t.Fatal(err)
		}
		back, err := Decode(b)
		if err != nil || back.Format != tc.want {
			t.Errorf("%s: format %d (%v), want %d", tc.name, back.Format, err, tc.want)
		}
	}
}
