package sim

import (
	"fmt"
	"math"
	"math/rand/v2"
	"sort"
	"time"
)

// Partitions: the per-request faults of Faults are independent, but a
// real outage is correlated: one process cut off from S3 for seconds to
// minutes (a broken route, a NAT table full, a host whose network stack
// hangs), every one of its requests failing meanwhile, or the endpoint
// unreachable for everyone (a regional incident, a DNS failure). Half the
// seeds draw one to three of them in the chaos phase, from a source of
// their own. An outage begins at an instant, not between requests: what
// is in flight then lands or not, as the seed decides, and its caller
// hears nothing (Server.Outage). A process's partition begins with one of
// its writes in flight (Server.Arm): the one the process learns of the
// outage by, which is what tests a write's read-back. One that began
// while it was idle, or reading, would be one of these shortened.
type Partition struct {
	At, For time.Duration // into the chaos phase
	// Kind of the process cut off: "w" (a worker), "m" (a monitor), "p"
	// (a producer, the racer and the operator's processes among them),
	// chosen among the live ones when it begins; "" the server, for
	// everyone.
	Kind string
}

func (p Partition) String() string {
	who := map[string]string{"w": "a worker", "m": "a monitor", "p": "a producer", "": "the server for everyone"}[p.Kind]
	return fmt.Sprintf("partition of %s at %v for %v", who, p.At.Round(time.Second), p.For.Round(time.Millisecond))
}

// Partition lengths: a process is cut off for partitionMin to
// partitionMax, the server for everyone for up to outageMax, drawn
// log-uniformly (as many outages of a second or two as of a minute or
// two).
const (
	partitionMin = time.Second
	partitionMax = 4 * time.Minute
	outageMax    = 2 * time.Minute
)

// planPartitions draws the seed's partitions (see Partition): each ends
// at least a minute before the quiet tail.
func planPartitions(plan *Plan, opts Options) {
	rng := rand.New(rand.NewPCG(plan.Seed, 0x9a2717))
	if rng.IntN(2) != 0 {
		return
	}
	for range 1 + rng.IntN(3) {
		p := Partition{Kind: []string{"w", "m", "p", ""}[rng.IntN(4)]}
		longest := partitionMax
		if p.Kind == "" {
			longest = outageMax
		}
		p.For = logUniform(rng, partitionMin, longest)
		latest := opts.Chaos - p.For - time.Minute
		if latest <= 30*time.Second {
			continue
		}
		p.At = 30*time.Second + time.Duration(rng.Int64N(int64(latest-30*time.Second)))
		plan.Partitions = append(plan.Partitions, p)
	}
	sort.Slice(plan.Partitions, func(i, j int) bool { return plan.Partitions[i].At < plan.Partitions[j].At })
}

// logUniform draws a duration between lo and hi whose logarithm is
// uniform, to the millisecond.
func logUniform(rng *rand.Rand, lo, hi time.Duration) time.Duration {
	x := math.Log(float64(lo)) + rng.Float64()*(math.Log(float64(hi))-math.Log(float64(lo)))
	return time.Duration(math.Exp(x)).Round(time.Millisecond)
}

// partitions cuts off the planned processes, or the server, at their
// times. The process cut off is drawn among the live ones of its kind,
// in name order, from the partitions' own source.
func (w *world) partitions() {
	rng := rand.New(rand.NewPCG(w.plan.Seed, 0x9a2718))
	start := time.Now()
	for _, pt := range w.plan.Partitions {
		time.Sleep(time.Until(start.Add(pt.At)))
		if pt.Kind == "" {
			w.srv.Outage(time.Now().Add(pt.For))
			continue
		}
		w.mu.Lock()
		var live []*proc
		for _, p := range w.procs {
			select {
			case <-p.done:
				continue
			default:
			}
			if p.kind == pt.Kind && p.h.state.Load() == stateAlive {
				live = append(live, p)
			}
		}
		w.mu.Unlock()
		if len(live) == 0 {
			continue
		}
		sort.Slice(live, func(i, j int) bool { return live[i].name < live[j].name })
		victim := live[rng.IntN(len(live))]
		w.srv.Arm(victim.h, pt.For)
	}
}
