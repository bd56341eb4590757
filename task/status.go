package task

import "fmt"

// Status is the state of a task.
//
//	pending → running → succeeded
//	                  → pending (retry, snooze, lease expired)
//	                  → dead (attempts exhausted or permanent error)
//	                  → canceled (cooperative cancel)
//	pending → canceled
//	dead, canceled → pending (requeue)
//	blocked → pending (its dependencies succeeded)
//	        → canceled, dead (a dependency ended dead or canceled; or a cancel)
type Status string

const (
	Pending   Status = "pending"
	Running   Status = "running"
	Succeeded Status = "succeeded"
	Dead      Status = "dead"
	Canceled  Status = "canceled"
	// Blocked: waiting for its dependencies (Task.Deps); never claimed.
	Blocked Status = "blocked"
)

// Terminal reports whether no worker will ever run the task again without an
// operator's requeue.
func (s Status) Terminal() bool {
	return s == Succeeded || s == Dead || s == Canceled
}

// Valid reports whether s is one of the known statuses.
func (s Status) Valid() bool {
	switch s {
	case Pending, Running, Succeeded, Dead, Canceled, Blocked:
		return true
	}
	return false
}

// ParseStatus parses a status name as written in a task object or typed by a
// user (exact, lower case).
func ParseStatus(s string) (Status, error) {
	st := Status(s)
	if !st.Valid() {
		return "", fmt.Errorf("parse status %q: want one of pending, blocked, running, succeeded, dead, canceled", s)
	}
	return st, nil
}
