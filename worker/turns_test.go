package worker

import (
	"fmt"
	"testing"
	"time"

	"github.com/s3queue/s3queue/clock"
	"github.com/s3queue/s3queue/shards"
)

// turnsFleet is a fleet asleep with no member and a roster of n standbys,
// s00 to s(n-1), and a standby config with the default spacings.
func turnsFleet(n int, id string) (*Worker, shards.Fleet) {
	f := shards.Fleet{Asleep: true}
	for i := range n {
		f.Standbys = append(f.Standbys, shards.Standby{ID: fmt.Sprintf("s%02d", i), Until: time.Unix(1<<40, 0)})
	}
	w := &Worker{cfg: Config{ID: id, StandbyPoll: time.Second, BellPoll: 1500 * time.Millisecond, LeaseMargin: 2 * time.Second}}
	return w, f
}

func at(ns int64) clock.Interval {
	t := time.Unix(0, ns)
	return clock.Interval{Earliest: t.Add(-time.Second), Latest: t.Add(time.Second), Best: t}
}

// A standby that learns at its awake turn that the fleet sleeps takes its
// very next slot on the bell turns, however soon after that read it comes:
// skipping every slot within half a bell round of the last turn, as the
// turns once did, left those slots unread for a round after the fleet fell
// asleep (the standbys learn of it at their awake turns, over a round at
// standby_poll), and a ring there waited for the next read up to 3.5 s
// (TestAFleetJustAsleepAnswersItsDoorbellWithinABellPoll's fleet over 120
// sleeps: 24 pickups over 2 s).
func TestAStandbyTakesItsFirstBellTurnSoonAfterItsLastAwakeTurn(t *testing.T) {
	w, f := turnsFleet(49, "s27")
	s := int64(1500 * time.Millisecond)
	period := 49 * s
	slot := 20_000*period + 27*s // s27's bell slot
	for _, ahead := range []time.Duration{20 * time.Millisecond, 2 * time.Second, 30 * time.Second} {
		last := slot - int64(ahead) // the awake turn it just took, where it read the fleet asleep
		d, got, _ := w.nextTurn(f, at(last), last)
		if got != slot || d != ahead {
			t.Errorf("read %v before its bell slot: next turn in %v (at %d), want %v (at %d)", ahead, d, got, ahead, slot)
		}
	}
}

// On the same turns the turn just taken is not taken again, though the
// standby's estimate of S3 time moved back since it planned it: the next
// is a round later.
func TestAStandbyDoesNotTakeTheSameTurnTwice(t *testing.T) {
	w, f := turnsFleet(49, "s27")
	s := int64(1500 * time.Millisecond)
	period := 49 * s
	slot := 20_000*period + 27*s
	for _, back := range []time.Duration{0, 300 * time.Millisecond, time.Second, 30 * time.Second} {
		_, got, _ := w.nextTurn(f, at(slot-int64(back)), slot)
		if got != slot+period {
			t.Errorf("estimate %v before the turn just taken: next turn at %+d ns from it, want a round (%v) later", back, got-slot, time.Duration(period))
		}
	}
}
