package worker

import (
	"testing"
	"time"
)

// A member at a light load is not saturated: a pass that filled its four
// free slots with the four tasks due, leaving nothing behind, then a pass
// two seconds later (the pace of about a task a second) whose listing
// returned all it asked for, are one pass behind, not two seconds behind.
// (Measured on MinIO, BenchmarkSeedWorkload/default: the member asked for
// a second member 114 ms after such a pair, and the fleet grew to 4.)
func TestAFullPassThatLeftNothingBehindStartsNoSaturation(t *testing.T) {
	t0 := time.Unix(1000, 0)
	var m membership
	m.noteBehind(t0, false, true)                   // 4 listed, 4 claimed, slots full
	m.noteBehind(t0.Add(2*time.Second), true, true) // 5 listed, 4 claimed, 1 left
	if now := t0.Add(2*time.Second + 114*time.Millisecond); m.saturated(now, 4, 0, 0) {
		t.Fatalf("saturated one pass after falling behind, %v after a full pass that left nothing behind", now.Sub(t0))
	}
	m.noteBehind(t0.Add(2*time.Second+115*time.Millisecond), false, false) // the one left claimed, slots free
	if m.saturated(t0.Add(3*time.Second), 4, 0, 0) {
		t.Fatal("saturated after a pass that left nothing behind with slots free")
	}
}

// A member stays saturated while every pass leaves due work behind, and
// while its slots stay busy after falling behind (long handlers: a full
// pass that peeks and finds nothing new does not end it).
func TestAMemberBehindForASecondIsSaturated(t *testing.T) {
	t0 := time.Unix(1000, 0)
	var m membership
	m.noteBehind(t0, true, false)
	m.noteBehind(t0.Add(500*time.Millisecond), true, false)
	m.noteBehind(t0.Add(900*time.Millisecond), false, true)
	if m.saturated(t0.Add(900*time.Millisecond), 4, 0, 0) {
		t.Fatal("saturated before saturatedAfter")
	}
	if !m.saturated(t0.Add(saturatedAfter), 4, 0, 0) {
		t.Fatalf("not saturated %v after falling behind, with every pass since behind or full", saturatedAfter)
	}
}

// A member whose pass leaves a backlog of two sets of slots or more behind
// asks at once, sized to it: waiting a second for such a backlog only
// delays the members it needs.
func TestABacklogOfTwoSetsOfSlotsIsSaturationAtOnce(t *testing.T) {
	t0 := time.Unix(1000, 0)
	var m membership
	m.noteBehind(t0, true, true)
	m.backlogSeen = 7
	if m.saturated(t0, 4, 0, 0) {
		t.Fatal("saturated at once behind 7 tasks with 4 slots: not two sets of slots")
	}
	m.backlogSeen = 8
	if !m.saturated(t0, 4, 0, 0) {
		t.Fatal("not saturated at once behind 8 tasks with 4 slots")
	}
	m.asked = t0
	if m.saturated(t0.Add(saturatedAfter/2), 4, 0, 0) {
		t.Fatal("asked again within saturatedAfter of its last ask")
	}
}

// Once handlers have run, a backlog is judged by how long the member's own
// slots take to clear it: a clump of nine short tasks for 4 slots of 100
// ms is cleared in a quarter of a second (no ask, however long the member
// was behind); the same nine of 2 s handlers take 4.5 s (an ask at once).
func TestABacklogIsJudgedByTheTimeItsSlotsTakeToClearIt(t *testing.T) {
	t0 := time.Unix(1000, 0)
	var m membership
	m.noteBehind(t0, true, true)
	m.backlogSeen = 9
	if m.saturated(t0.Add(2*saturatedAfter), 4, 100*time.Millisecond, 0) {
		t.Error("saturated by nine tasks of 100 ms for 4 slots")
	}
	if !m.saturated(t0, 4, 2*time.Second, 0) {
		t.Error("not saturated at once by nine tasks of 2 s for 4 slots")
	}
}
