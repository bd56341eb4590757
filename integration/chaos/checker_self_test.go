package chaos

import (
	"testing"
	"time"
)

// The checker's slot and dependency rules find what they look for: a
// checker that cannot fail proves nothing.
func TestCheckerFindsSlotOverlapsAndEarlyDependents(t *testing.T) {
	at := func(s float64) time.Time { return time.Unix(1000, 0).Add(time.Duration(s * float64(time.Second))) }
	run := func(task, worker string, from, to float64) *execution {
		e := &execution{task: task, attempt: 1, worker: worker, pid: "1", start: at(from), endKind: "ok"}
		if to > 0 {
			e.end = at(to)
		}
		return e
	}
	died := map[string]time.Time{"w9": at(7)}
	endOf := func(e *execution) time.Time {
		if !e.end.IsZero() {
			return e.end
		}
		return died[e.worker]
	}

	t.Run("slots", func(t *testing.T) {
		for _, c := range []struct {
			name  string
			runs  []*execution
			clash int
		}{
			{"one after another", []*execution{run("a", "w1", 0, 1), run("b", "w2", 1.5, 2), run("c", "w1", 3, 4)}, 0},
			{"overlapping", []*execution{run("a", "w1", 0, 2), run("b", "w2", 1.5, 3)}, 1},
			{"inside a long run, after a short one", []*execution{run("a", "w1", 0, 10), run("b", "w2", 1, 2), run("c", "w2", 3, 4)}, 2},
			{"a killed worker's run lasts until it died", []*execution{run("a", "w9", 0, 0), run("b", "w2", 5, 6)}, 1},
			{"a killed worker's run ends when it died", []*execution{run("a", "w9", 0, 0), run("b", "w2", 8, 9)}, 0},
		} {
			if got := slotOverlaps(map[string][]*execution{"s": c.runs}, endOf); len(got) != c.clash {
				t.Errorf("%s: %d overlaps %q; want %d", c.name, len(got), got, c.clash)
			}
		}
	})

	t.Run("dependencies", func(t *testing.T) {
		committed := map[string]*execution{"p": run("p", "w1", 0, 2)}
		if got := earlyStarts("c", []string{"p"}, []*execution{run("c", "w2", 2.5, 3)}, committed); len(got) != 0 {
			t.Errorf("a child started after its parent's run: %q", got)
		}
		if got := earlyStarts("c", []string{"p"}, []*execution{run("c", "w2", 1.9, 3)}, committed); len(got) != 1 {
			t.Errorf("a child started before its parent's run ended: %q; want 1", got)
		}
		if got := earlyStarts("c", []string{"p", "dead"}, []*execution{run("c", "w2", 5, 6)}, committed); len(got) != 1 {
			t.Errorf("a child of a parent that never succeeded ran: %q; want 1", got)
		}
	})
}
