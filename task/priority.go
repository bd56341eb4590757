package task

import (
	"fmt"
	"strings"
)

// Priority orders due tasks within a worker's window of a shard's listing
// (docs/scheduling.md#priorities): high first, then default, then low,
// ties oldest first. It never delays a task's due time and never changes
// what a task may do; it only decides which of the due tasks a member
// claims first.
//
// The default priority is stored as the absent field, so a default task's
// object is what it was before priorities existed. A binary that does not
// know the field rewrites a task as default priority: the priority is a
// hint for order only.
type Priority string

const (
	// PriorityHigh is claimed before default and low tasks of the same
	// window.
	PriorityHigh Priority = "high"
	// PriorityDefault is every task's priority unless set; stored as "".
	PriorityDefault Priority = ""
	// PriorityLow is claimed after the window's high and default tasks.
	PriorityLow Priority = "low"
)

// Priorities lists the priorities, highest first, by the names ParsePriority
// accepts.
var Priorities = []string{"high", "default", "low"}

// ParsePriority reads a priority by name: "high", "default" (or ""), "low".
func ParsePriority(s string) (Priority, error) {
	switch strings.ToLower(strings.TrimSpace(s)) {
	case "high":
		return PriorityHigh, nil
	case "", "default":
		return PriorityDefault, nil
	case "low":
		return PriorityLow, nil
	}
	return "", fmt.Errorf("%w: priority %q: want one of high, default, low", ErrInvalid, s)
}

// Valid reports whether p is one of the priorities.
func (p Priority) Valid() bool {
	return p == PriorityHigh || p == PriorityDefault || p == PriorityLow
}

// String is p's name: "high", "default" or "low".
func (p Priority) String() string {
	if p == PriorityDefault {
		return "default"
	}
	return string(p)
}

// Rank is p's place in the claim order: 0 for high, 1 for default (and for
// a value this package does not know), 2 for low.
func (p Priority) Rank() int {
	switch p {
	case PriorityHigh:
		return 0
	case PriorityLow:
		return 2
	}
	return 1
}
