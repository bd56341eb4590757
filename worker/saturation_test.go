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
	if now := t0.Add(2*time.Second + 114*time.Millisecond); m.saturated(now) {
		t.Fatalf("saturated one pass after falling behind, %v after a full pass that left nothing behind", now.Sub(t0))
	}
	m.noteBehind(t0.Add(2*time.Second+115*time.Millisecond), false, false) // the one left claimed, slots free
	if m.saturated(t0.Add(3 * time.Second)) {
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
	if m.saturated(t0.Add(900 * time.Millisecond)) {
		t.Fatal("saturated before saturatedAfter")
	}
	if !m.saturated(t0.Add(saturatedAfter)) {
		t.Fatalf("not saturated %v after falling behind, with every pass since behind or full", saturatedAfter)
	}
}
