package task

// The size of a stored task object encodes its status, so that a LIST,
// which carries sizes, tells scans and sweeps which tasks are finished or
// pending without a GET per task. Writers pad the JSON with trailing
// newlines (SizePadding) to keep it true. It is a hint for cost only: every
// decision re-reads the object.

// FinishedBySize reports what a task object's size says: odd sizes are
// finished tasks (succeeded, dead, canceled), even sizes are not.
func FinishedBySize(size int64) bool { return size%2 == 1 }

// PendingBySize reports whether a task object's size says pending: a
// multiple of 4 bytes; a running task's size is 2 more than one.
func PendingBySize(size int64) bool { return size%4 == 0 }

// SizePadding is how many bytes of padding (trailing newlines) a task
// object of n bytes with status s needs to keep FinishedBySize and
// PendingBySize true.
func SizePadding(n int, s Status) int {
	switch {
	case s.Terminal():
		return 1 - n%2
	case s == Pending:
		return (4 - n%4) % 4
	default:
		return (6 - n%4) % 4
	}
}
