package sim

import (
	"context"
	"encoding/json"
	"fmt"
	"math"
	"math/rand/v2"
	"sort"
	"strings"
	"time"

	"github.com/s3queue/s3queue/clock"
	"github.com/s3queue/s3queue/producer"
	"github.com/s3queue/s3queue/shards"
	"github.com/s3queue/s3queue/task"
)

// The busy backlog (issue 24): in the quiet tail of a fraction of the
// seeds, with the fleet asleep on some and awake on others, a producer
// submits a backlog of short tasks (busyTaskMin to twice that each), as
// fast as it can, enough for every slot of the live workers to run them
// for busyLast times the bound even if every one ran from the first
// submit (so that a worker that joins at the bound still finds work
// left); every live worker that can serve (no more than the shards: a
// shard has one member) must be busy within Plan.busyBound of the first
// submit (InvBusy).
const (
	busyTaskMin = 3 * time.Second
	busyLast    = 1.5
	// busySettle: the backlog comes this long into the quiet tail, once
	// the chaos phase's leftovers are worked off (as the chains').
	busySettle = 4 * time.Minute
	// busyAsleepWait: on BusyAsleep seeds the producer waits, up to this
	// long into the quiet tail, for the fleet to sleep with no member (a
	// fleet with a dedicated worker sleeps with it as its member; one
	// kept awake by schedules never sleeps): the bound is the fleet's as
	// the backlog meets it, whatever it is.
	busyAsleepWait = 8 * time.Minute
)

// planBusy draws the busy backlog: on half of the seeds that have neither
// a burst nor chains in their quiet tail, under shared dispatch (direct
// dispatch routes to inboxes, not shards) and no rate limit (which paces
// the starts by design); on half of those the fleet sleeps first. From a
// source of its own.
func planBusy(plan *Plan) {
	rng := rand.New(rand.NewPCG(plan.Seed, 0xb0541))
	plan.Busy = !plan.Burst && !plan.Chains && !plan.Direct && plan.RateLimit == nil && rng.IntN(2) == 0
	plan.BusyAsleep = plan.Busy && rng.IntN(2) == 0
}

// slotsOf is how many handlers of the simulator's type worker process
// name runs at once (as startWorkerAs draws it, capped by the queue's
// plan).
func (w *world) slotsOf(name string) int {
	n := 1 + w.procRand(name).IntN(3)
	if q := w.plan.Queue.InFlight; q > 0 {
		n = min(n, q)
	}
	return n
}

// busy submits the busy backlog (see planBusy): on awake seeds it first
// submits one task and waits for its claim, so that the fleet meets the
// backlog awake with a member; on BusyAsleep seeds it waits for the fleet
// to sleep.
func (w *world) busy() {
	w.spawn("p", "pbusy", func(ctx context.Context, p *proc) {
		prod, ok := retry(ctx, func() (*producer.Producer, error) {
			return producer.New(ctx, p.h, w.producerConfig(p))
		})
		if !ok {
			return
		}
		time.Sleep(time.Until(w.quietAt.Add(busySettle)))
		submit := func(k int) string {
			o := op{proc: p.name, kind: "submit", from: w.logLen()}
			o.id, o.err = prod.Submit(ctx, taskType, json.RawMessage(fmt.Sprintf(`{"busy":%d}`, k)),
				producer.Options{MaxAttempts: 1, Timeout: 30 * time.Second, Priority: task.PriorityHigh})
			o.to = w.logLen()
			w.record(o)
			if o.err != nil {
				return ""
			}
			w.mu.Lock()
			w.acked[o.id] = ack{proc: p.name}
			w.mu.Unlock()
			return o.id
		}
		if w.plan.BusyAsleep {
			for ctx.Err() == nil && time.Now().Before(w.quietAt.Add(busyAsleepWait)) {
				if f, _, err := shards.ReadFleet(ctx, p.h); err == nil && f.Asleep && len(f.Members) == 0 {
					break
				}
				time.Sleep(chainFleetPoll)
			}
		} else if id := submit(-1); id != "" {
			for ctx.Err() == nil {
				if t, err := prod.Get(ctx, id); err == nil && t.Status != task.Pending {
					break
				}
				time.Sleep(time.Second)
			}
			time.Sleep(2 * time.Second)
		}
		// The live workers as the backlog meets them, their slots, and
		// the bound for the fleet as the producer reads it.
		var f shards.Fleet
		for ctx.Err() == nil {
			var err error
			if f, _, err = shards.ReadFleet(ctx, p.h); err == nil {
				break
			}
		}
		var live []string
		slots := 0
		w.mu.Lock()
		for _, q := range w.procs {
			if q.kind == "w" && q.wk != nil && q.h.state.Load() == stateAlive {
				live = append(live, q.name)
				slots += w.slotsOf(q.name)
			}
		}
		sort.Strings(live)
		bound, _ := w.plan.busyBound(f, time.Now(), len(live))
		n := slots * int(math.Ceil(busyLast*float64(bound)/float64(busyTaskMin)))
		w.busyLive, w.busyAt, w.busyTasks = live, time.Now(), n
		w.mu.Unlock()
		for k := range n {
			submit(k)
		}
	})
}

// busyTask reports whether a task's input marks it as the busy backlog's:
// its handler runs busyTaskMin to twice that.
func busyTask(input []byte) bool {
	return strings.Contains(string(input), `"busy"`)
}

// The worker and fleet settings the simulator runs with (the defaults,
// worker/keys.go, worker/fleet.go, shards/fleet.go) that bound how soon a
// standby joins and a member gets work.
const (
	standbyPoll   = time.Second             // standby_poll: an awake fleet's standbys read once per this, fleet-wide
	bellPoll      = 1500 * time.Millisecond // bell_poll: a sleeping fleet's turns, and a dedicated sleeper's doorbell reads
	asleepStandby = 5                       // while a dedicated member sleeps, the turns are asleepStandby × standby_poll apart
	memberTTL     = 30 * time.Second        // member_ttl: renewals every third, re-reads every sixth
	handoffLook   = time.Second             // a member behind a backlog looks at it, and re-reads the fleet while its ask is out, once a second
)

// busyBound is how long after the backlog's first submit every live
// worker that can serve must be busy (InvBusy), for fleet f as the backlog
// met it (its last write before) with n live workers. Each term is a step
// of the design, at its slowest:
//
//   - a member lists the backlog (A): awake, within poll_max (an idle
//     member's back-off); asleep with no member, the producer's view of
//     the fleet object is at most shards.FleetCacheTTL old when it rings,
//     the first standby's turn comes within bell_poll of the ring, and it
//     joins and lists shard 0 at once (a second for those requests);
//     asleep with a dedicated member, that member reads the doorbell
//     itself every bell_poll;
//   - it asks for members sized to what it sees at once if that is two
//     sets of its slots, else after staying behind for a second (1 s);
//   - every standby reads the ask at its turn (N·s): the turns come once
//     per spacing s fleet-wide as planned at f (bell_poll asleep with no
//     member, asleepStandby × standby_poll with a dedicated sleeper,
//     standby_poll awake), for the N standbys of f's roster (dead ones
//     keep their places until their entries lapse) and one more place
//     for a worker not yet in it; each turn is placed by the standby's
//     estimate of S3 time, off by up to a second (1 s);
//   - its join is a CAS of the fleet object, which other joins race:
//     a 412 is read again and retried after poll_min, doubling (2 s);
//     beyond the root members (RootMembers), a join is an application
//     the keeper admits in its next write, a renewal (member_ttl / 3)
//     away, which the applicant reads at its next re-read (member_ttl /
//     6): 15 s more;
//   - the busy member sees the new member at its next re-read and hands
//     it a share at its next look, each once a second (2 s);
//   - the new member's next listing finds the share's pointers within
//     poll_max, and claims (a GET and a PUT, and the latencies of the
//     requests above: 1 s).
//
// With 3 standbys asleep: 2 + 1.5 + 1 + 1 + 4 × 1.5 + 1 + 2 + 2 + 5 + 1 =
// 22.5 s; awake: 5 + 1 + 4 × 1 + 1 + 2 + 2 + 5 + 1 = 21 s.
func (p Plan) busyBound(f shards.Fleet, at time.Time, n int) (time.Duration, string) {
	iv := clock.Interval{Earliest: at, Latest: at}
	serving := f.Serving(iv, leaseMargin)
	dedicated := false
	for _, m := range serving {
		dedicated = dedicated || m.Dedicated
	}
	var first, spacing time.Duration
	state := "awake"
	switch {
	case f.Asleep && len(serving) == 0:
		first, spacing, state = shards.FleetCacheTTL+bellPoll+time.Second, bellPoll, "asleep"
	case f.Asleep && dedicated:
		first, spacing, state = shards.FleetCacheTTL+bellPoll, asleepStandby*standbyPoll, "asleep with a dedicated member"
	case f.Asleep:
		// An elastic member in its grace, about to leave: the turns are
		// the doorbell, and it scans still.
		first, spacing, state = max(shards.FleetCacheTTL+bellPoll+time.Second, workerPollMax), bellPoll, "falling asleep"
	default:
		first, spacing = workerPollMax, standbyPoll
	}
	turns := time.Duration(len(f.Standbys)+1) * spacing
	join := 2 * time.Second
	if p.RootMembers > 0 && n > p.RootMembers {
		join += memberTTL/3 + memberTTL/6
	}
	b := first + time.Second + turns + time.Second + join + 2*handoffLook + workerPollMax + time.Second
	return b, fmt.Sprintf("%s, %d serving, %d in the roster", state, len(serving), len(f.Standbys))
}

// checkBusy proves InvBusy: every live worker, when the backlog came, that
// can serve (all of them if there are no more than the fleet's shards,
// else as many as there are shards) is busy within busyBound of the
// backlog's first submit: it claims a task of the simulator's type in
// that time, or runs one already when the backlog comes.
func (w *world) checkBusy(log []Entry, add func(inv, id, format string, args ...any)) {
	if w.busyAt.IsZero() {
		return
	}
	var f shards.Fleet
	for _, e := range log {
		if e.At.After(w.busyAt) {
			break
		}
		if e.Key == shards.FleetKey && e.New != nil {
			var g shards.Fleet
			if json.Unmarshal(e.New, &g) == nil {
				f = g
			}
		}
	}
	bound, why := w.plan.busyBound(f, w.busyAt, len(w.busyLive))
	until := w.busyAt.Add(bound)
	running := make(map[string]string) // task id -> the process running it, before the backlog
	busy := make(map[string]time.Time) // process -> when it was first busy
	for _, e := range log {
		if e.At.After(until) {
			break
		}
		if !strings.HasPrefix(e.Key, "tasks/") || shards.IsPointer(e.Key) {
			continue
		}
		_, id, err := task.ParseKey(e.Key)
		if err != nil {
			continue
		}
		t, err := task.Decode(e.New)
		if e.New == nil || err != nil || t.Type != taskType || t.Status != task.Running || t.Claim == nil {
			if e.At.Before(w.busyAt) {
				delete(running, id)
			}
			continue
		}
		if prev, err := task.Decode(e.Old); err == nil && prev.Claim != nil && prev.Claim.ID == t.Claim.ID {
			continue // a renewal
		}
		if e.At.Before(w.busyAt) {
			running[id] = e.Proc
		} else if _, ok := busy[e.Proc]; !ok {
			busy[e.Proc] = e.At
		}
	}
	for _, proc := range running {
		busy[proc] = w.busyAt
	}
	need := min(len(w.busyLive), f.ShardCount(w.plan.Shards))
	var idle []string
	for _, name := range w.busyLive {
		if _, ok := busy[name]; !ok {
			idle = append(idle, name)
		}
	}
	if len(w.busyLive)-len(idle) < need {
		add(InvBusy, "", "a backlog of %d tasks came at %s (the fleet %s): %d of %d live workers busy within %v, want %d (%d shards); idle: %s",
			w.busyTasks, w.busyAt.Format("15:04:05.000"), why, len(w.busyLive)-len(idle), len(w.busyLive), bound, need, f.ShardCount(w.plan.Shards), strings.Join(idle, ", "))
	}
}
