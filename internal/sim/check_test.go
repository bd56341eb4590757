package sim

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/s3queue/s3queue/internal/pause"
	"github.com/s3queue/s3queue/task"
)

// TestOnlyTheClaimHolderChangesARunningTask: a process that does not hold
// a running task's claim may ask for its cancel and mark it as having
// dependents at any time, and take it back from its lease only once the
// server's clock is past the lease's expiry by the lease margin, and only
// as the lease's expiry; any other write over the claim breaks the fence.
func TestOnlyTheClaimHolderChangesARunningTask(t *testing.T) {
	t0 := time.Date(2000, 1, 1, 0, 10, 0, 0, time.UTC)
	id, err := task.NewID(t0, strings.NewReader(strings.Repeat("x", 64)))
	if err != nil {
		t.Fatal(err)
	}
	running := func() *task.Task {
		tk, err := task.New(id, 0, task.Spec{Type: "sim", Timeout: 10 * time.Second}, t0)
		if err != nil {
			t.Fatal(err)
		}
		if err := tk.ClaimBy("w1", "c1", t0.Add(time.Second)); err != nil {
			t.Fatal(err)
		}
		return tk
	}
	expires := running().Claim.ExpiresAt
	after := func(d time.Duration) time.Time { return expires.Add(d) }
	for _, c := range []struct {
		name   string
		change func(*task.Task) error
		at     time.Time
		broken string // what the reason says, "" if the write is allowed
	}{
		{"a cancel request while the lease runs", func(tk *task.Task) error { _, err := tk.Cancel(t0.Add(2 * time.Second)); return err },
			t0.Add(2 * time.Second), ""},
		{"marking dependents while the lease runs", func(tk *task.Task) error { tk.MarkDependents(t0.Add(2 * time.Second)); return nil },
			t0.Add(2 * time.Second), ""},
		{"a cancel request that also changes the timeout", func(tk *task.Task) error {
			_, err := tk.Cancel(t0.Add(2 * time.Second))
			tk.Timeout = task.Duration(time.Minute)
			return err
		}, t0.Add(2 * time.Second), "lease expires"},
		{"an expiry within the margin", func(tk *task.Task) error { return tk.Expire(after(time.Second), nil) },
			after(leaseMargin), "lease expires"},
		{"an expiry past the margin", func(tk *task.Task) error { return tk.Expire(after(time.Second), nil) },
			after(leaseMargin + time.Millisecond), ""},
		{"a success under the holder's claim while the lease runs", func(tk *task.Task) error { return tk.Succeed("c1", nil, t0.Add(3*time.Second)) },
			t0.Add(3 * time.Second), "lease expires"},
		{"a success under the holder's claim after the lease expired", func(tk *task.Task) error { return tk.Succeed("c1", nil, after(time.Minute)) },
			after(time.Minute), "not as the lease's expiry"},
		{"a release after the lease expired", func(tk *task.Task) error { return tk.Release("c1", "", after(time.Minute)) },
			after(time.Minute), "not as the lease's expiry"},
	} {
		t.Run(c.name, func(t *testing.T) {
			prev := running()
			next := prev.Clone()
			if err := c.change(next); err != nil {
				t.Fatal(err)
			}
			why := notHoldersWrite(prev, next, c.at)
			switch {
			case c.broken == "" && why != "":
				t.Errorf("refused: %s", why)
			case c.broken != "" && !strings.Contains(why, c.broken):
				t.Errorf("got %q, want a reason containing %q", why, c.broken)
			}
		})
	}
}

// TestAWorkerThatNeverReadThePauseClaimsAfterAnInterval: a worker started
// while its type is paused, none of whose reads of the pause object
// answered, claims as if nothing were paused once a whole
// pause_check_interval has passed since its first read (docs/pause.md);
// a claim sent before that, or by a worker that read the pause, breaks
// the pause.
func TestAWorkerThatNeverReadThePauseClaimsAfterAnInterval(t *testing.T) {
	t0 := time.Date(2000, 1, 1, 0, 5, 0, 0, time.UTC)
	paused, err := json.Marshal(pause.State{Version: 1, Types: []string{taskType}})
	if err != nil {
		t.Fatal(err)
	}
	resumed, err := json.Marshal(pause.State{Version: 2, Types: []string{}})
	if err != nil {
		t.Fatal(err)
	}
	id, err := task.NewID(t0, strings.NewReader(strings.Repeat("y", 64)))
	if err != nil {
		t.Fatal(err)
	}
	pending, err := task.New(id, 0, task.Spec{Type: taskType}, t0)
	if err != nil {
		t.Fatal(err)
	}
	claim := func(proc string, sent time.Time) Entry {
		running := pending.Clone()
		if err := running.ClaimBy(proc, "c-"+proc, sent); err != nil {
			t.Fatal(err)
		}
		old, _ := task.Marshal(pending)
		next, _ := task.Marshal(running)
		return Entry{At: sent.Add(time.Millisecond), Sent: sent, Proc: proc, Key: pending.Key(), Old: old, New: next, Existed: true}
	}
	at := func(s float64) time.Time { return t0.Add(time.Duration(s * float64(time.Second))) }
	w := &world{plan: Plan{Pause: &PausePlan{}, Faults: Faults{MaxDelay: time.Second}}, srv: NewServer(Providers[0], nil, 0)}
	// w1 read the pause; w2's and w3's reads, from 60 s on, all failed.
	w.srv.reads = []Read{{Proc: "w1", At: at(1), Answered: true},
		{Proc: "w2", At: at(60), Answered: false}, {Proc: "w2", At: at(61), Answered: false},
		{Proc: "w3", At: at(60), Answered: false}}
	log := []Entry{{At: at(0), Proc: "ppause", Key: pause.Key, New: paused},
		claim("w2", at(70)), // an interval after its first failed read: as if nothing were paused
		claim("w3", at(65)), // before: it had no state to claim on
		claim("w1", at(70)), // it read the pause
		{At: at(100), Proc: "ppause", Key: pause.Key, New: resumed},
	}
	var got []string
	w.checkPause(log, func(inv, id, format string, args ...any) { got = append(got, fmt.Sprintf(format, args...)) })
	if len(got) != 2 || !strings.HasPrefix(got[0], "w3 ") || !strings.HasPrefix(got[1], "w1 ") {
		t.Errorf("got %q, want the claims of w3 and w1 reported", got)
	}
}
