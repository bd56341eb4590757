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
			if pad < 0 || pad > 7 {
				t.Fatalf("%s, %d bytes: padding %d", s, n, pad)
			}
			if s == task.Pending && pad > 3 {
				t.Fatalf("%s, %d bytes: padding %d, want at most 3 for the most common status", s, n, pad)
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
