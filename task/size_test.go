package task_test

import (
	"testing"

	"github.com/s3queue/s3queue/task"
)

// Padding any length to any status gives a size that says that status, and
// keeps the coarser hints (finished, pending) true; the padding is never
// more than the modulus needs.
func TestSizeSaysTheStatus(t *testing.T) {
	statuses := []task.Status{task.Pending, task.Running, task.Succeeded, task.Dead, task.Canceled, task.Blocked}
	for _, s := range statuses {
		for n := 1; n <= 64; n++ {
			pad := task.SizePadding(n, s)
			if pad < 0 || pad > 7 && s != task.Pending {
				t.Fatalf("%s, %d bytes: padding %d", s, n, pad)
			}
			if s == task.Pending && pad > 11 {
				t.Fatalf("%s, %d bytes: padding %d, want at most 11 for a default pending task", s, n, pad)
			}
			size := int64(n + pad)
			got, ok := task.StatusBySize(size)
			if !ok || got != s {
				t.Fatalf("%s padded from %d to %d bytes reads as %q (ok %v)", s, n, size, got, ok)
			}
			if task.FinishedBySize(size) != s.Terminal() {
				t.Fatalf("%s of %d bytes: FinishedBySize = %v", s, size, task.FinishedBySize(size))
			}
			if task.PendingBySize(size) != (s == task.Pending) {
				t.Fatalf("%s of %d bytes: PendingBySize = %v", s, size, task.PendingBySize(size))
			}
		}
	}
	// A succeeded task's size says whether it holds a result, for the
	// monitor's result TTL.
	for n := 1; n <= 64; n++ {
		for _, holds := range []bool{false, true} {
			tk := &task.Task{Status: task.Succeeded}
			if holds {
				tk.Result = []byte(`1`)
			}
			size := int64(n + task.PaddingOf(n, tk))
			if s, _ := task.StatusBySize(size); s != task.Succeeded || task.HoldsResultBySize(size) != holds {
				t.Fatalf("succeeded, holds a result %v, padded from %d to %d bytes: reads as %s, holds %v", holds, n, size, s, task.HoldsResultBySize(size))
			}
		}
	}
	if _, ok := task.StatusBySize(0); ok {
		t.Fatal("an empty object must not read as a task status")
	}
}

// A pending task's size says its priority as well as its status, and the
// other statuses are padded as before whatever the priority.
func TestSizeSaysThePriority(t *testing.T) {
	prios := []task.Priority{task.PriorityHigh, task.PriorityDefault, task.PriorityLow}
	statuses := []task.Status{task.Pending, task.Running, task.Succeeded, task.Dead, task.Canceled, task.Blocked}
	for _, p := range prios {
		for _, s := range statuses {
			for n := 1; n <= 96; n++ {
				pad := task.SizePaddingFor(n, s, p)
				if s != task.Pending {
					if pad != task.SizePadding(n, s) {
						t.Fatalf("%s %s, %d bytes: padding %d, want %d as without a priority", p, s, n, pad, task.SizePadding(n, s))
					}
					if _, ok := task.PriorityBySize(int64(n + pad)); ok {
						t.Fatalf("%s %s of %d bytes reads as pending", p, s, n+pad)
					}
					continue
				}
				if pad < 0 || pad > 27 {
					t.Fatalf("%s pending, %d bytes: padding %d", p, n, pad)
				}
				size := int64(n + pad)
				if st, ok := task.StatusBySize(size); !ok || st != task.Pending {
					t.Fatalf("%s pending of %d bytes reads as %q", p, size, st)
				}
				got, ok := task.PriorityBySize(size)
				if !ok || got != p {
					t.Fatalf("%s pending padded from %d to %d bytes reads as %q (ok %v)", p, n, size, got, ok)
				}
			}
		}
	}
}

func TestParsePriority(t *testing.T) {
	for in, want := range map[string]task.Priority{"high": task.PriorityHigh, "HIGH": task.PriorityHigh, "": task.PriorityDefault,
		"default": task.PriorityDefault, "low": task.PriorityLow} {
		got, err := task.ParsePriority(in)
		if err != nil || got != want {
			t.Errorf("ParsePriority(%q) = %q, %v; want %q", in, got, err, want)
		}
	}
	for _, bad := range []string{"urgent", "1", "hi"} {
		if _, err := task.ParsePriority(bad); err == nil {
			t.Errorf("ParsePriority(%q) accepted", bad)
		}
	}
	if task.PriorityHigh.Rank() >= task.PriorityDefault.Rank() || task.PriorityDefault.Rank() >= task.PriorityLow.Rank() {
		t.Fatal("ranks out of order")
	}
}
