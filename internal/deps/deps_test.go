package deps_test

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/s3queue/s3queue/clock"
	"github.com/s3queue/s3queue/internal/deps"
	"github.com/s3queue/s3queue/internal/taskio"
	"github.com/s3queue/s3queue/producer"
	"github.com/s3queue/s3queue/s3store"
	"github.com/s3queue/s3queue/s3store/mem"
	"github.com/s3queue/s3queue/shards"
	"github.com/s3queue/s3queue/task"
)

// fixture is a queue in memory: a producer that submits, the dependency
// machinery driven directly, and this test playing the workers (claims and
// ends written with taskio, as a worker writes them). S3 time is the
// host's plus an offset the test moves forward.
type fixture struct {
	t      *testing.T
	ctx    context.Context
	mem    *mem.Store
	faults *s3store.Faults
	st     *s3store.Counter
	p      *producer.Producer
	env    deps.Env

	mu     sync.Mutex
	offset time.Duration
	ended  map[string][]task.Status // what Settle told of each child
}

func setup(t *testing.T) *fixture {
	t.Helper()
	f := &fixture{t: t, ctx: context.Background(), mem: mem.New(), ended: map[string][]task.Status{}}
	f.mem.SetNow(f.now)
	f.faults = s3store.NewFaults(f.mem)
	f.st = s3store.NewCounter(f.faults)
	p, err := producer.New(f.ctx, f.st, producer.Config{Shards: 4})
	if err != nil {
		t.Fatal(err)
	}
	f.p = p
	f.env = deps.Env{Store: f.st, Local: clock.System(), Counts: p.Manifest().Counts(),
		Now: func(context.Context) (clock.Interval, error) {
			n := f.now()
			return clock.Interval{Earliest: n, Latest: n}, nil
		},
		Ended: func(t *task.Task) {
			f.mu.Lock()
			f.ended[t.ID] = append(f.ended[t.ID], t.Status)
			f.mu.Unlock()
		}}
	return f
}

// now is S3 time.
func (f *fixture) now() time.Time {
	f.mu.Lock()
	defer f.mu.Unlock()
	return time.Now().UTC().Add(f.offset)
}

// advance moves S3 time forward by d.
func (f *fixture) advance(d time.Duration) {
	f.mu.Lock()
	f.offset += d
	f.mu.Unlock()
}

func (f *fixture) told(id string) []task.Status {
	f.mu.Lock()
	defer f.mu.Unlock()
	return slices.Clone(f.ended[id])
}

// submit creates a task that depends on parents (none: a plain task).
func (f *fixture) submit(onFailure task.DepFailure, parents ...string) string {
	f.t.Helper()
	id, err := f.p.Submit(f.ctx, "t", nil, producer.Options{DependsOn: parents, OnDepFailure: onFailure})
	if err != nil {
		f.t.Fatalf("submit after %v: %v", parents, err)
	}
	return id
}

func (f *fixture) load(id string) taskio.Versioned {
	f.t.Helper()
	v, err := taskio.LoadID(f.ctx, f.mem, id, f.env.Counts)
	if err != nil {
		f.t.Fatalf("load %s: %v", id, err)
	}
	return v
}

func (f *fixture) status(id string) task.Status { f.t.Helper(); return f.load(id).Task.Status }

// claim takes pending task id as a worker does: it is running after.
func (f *fixture) claim(id string) {
	f.t.Helper()
	v := f.load(id)
	t := v.Task.Clone()
	at := f.now()
	if t.AvailableAt.After(at) {
		at = t.AvailableAt // the producer's clock reads up to a Date's resolution ahead
	}
	if err := t.ClaimBy("w", "c-"+id, at); err != nil {
		f.t.Fatalf("claim %s: %v", id, err)
	}
	if _, err := taskio.Update(f.ctx, f.mem, clock.System(), t, v.ETag); err != nil {
		f.t.Fatalf("claim %s: %v", id, err)
	}
}

// end records the end of task id (claimed first if pending, for succeeded
// and dead) as a worker or a cancel does: the ended marker first if it has
// dependents, then the write. It does not settle; see finish.
func (f *fixture) end(id string, to task.Status) *task.Task {
	f.t.Helper()
	if to != task.Canceled && f.status(id) == task.Pending {
		f.claim(id)
	}
	v := f.load(id)
	t := v.Task.Clone()
	now := f.now()
	var err error
	switch to {
	case task.Succeeded:
		err = t.Succeed("c-"+id, nil, now)
	case task.Dead:
		err = t.Fail("c-"+id, "boom", true, now, nil)
	case task.Canceled:
		_, err = t.Cancel(now)
	}
	if err != nil {
		f.t.Fatalf("end %s %s: %v", id, to, err)
	}
	if t.Dependents {
		if err := f.env.Ending(f.ctx, t); err != nil {
			f.t.Fatalf("end %s: %v", id, err)
		}
	}
	nv, err := taskio.Update(f.ctx, f.mem, clock.System(), t, v.ETag)
	if err != nil {
		f.t.Fatalf("end %s: %v", id, err)
	}
	return nv.Task
}

// finish ends task id and settles its dependents, as a worker does.
func (f *fixture) finish(id string, to task.Status) {
	f.t.Helper()
	t := f.end(id, to)
	if !t.Dependents {
		return
	}
	if err := f.env.Settle(f.ctx, t); err != nil {
		f.t.Fatalf("settle %s: %v", id, err)
	}
}

func (f *fixture) repair() (found, settled int) {
	f.t.Helper()
	found, settled, err := f.env.Repair(f.ctx)
	if err != nil {
		f.t.Fatalf("repair: %v", err)
	}
	return found, settled
}

// repairLeft is a repair that is to leave work (a child not landed yet).
func (f *fixture) repairLeft() (found, settled int) {
	f.t.Helper()
	found, settled, err := f.env.Repair(f.ctx)
	if err == nil {
		f.t.Fatal("repair left nothing, want work left")
	}
	return found, settled
}

// keys lists what is stored under prefix.
func (f *fixture) keys(prefix string) []string {
	f.t.Helper()
	var out []string
	after := ""
	for {
		page, err := f.mem.List(f.ctx, prefix, s3store.ListOptions{StartAfter: after})
		if err != nil {
			f.t.Fatal(err)
		}
		for _, o := range page.Objects {
			out = append(out, o.Key)
		}
		if !page.Truncated || len(page.Objects) == 0 {
			return out
		}
		after = page.Objects[len(page.Objects)-1].Key
	}
}

// clean fails the test if an edge or a marker is left.
func (f *fixture) clean() {
	f.t.Helper()
	if left := append(f.keys("deps/"), f.keys(deps.EndedPrefix)...); len(left) > 0 {
		f.t.Fatalf("left behind: %v", left)
	}
}

func (f *fixture) want(id string, want task.Status) {
	f.t.Helper()
	if got := f.status(id); got != want {
		f.t.Fatalf("task %s is %s, want %s", id, got, want)
	}
}

// releases counts the task's moves from blocked to pending.
func releases(t *task.Task) int {
	n := 0
	for _, h := range t.History {
		if h.From == task.Blocked && h.To == task.Pending {
			n++
		}
	}
	return n
}

func TestAChainSettlesInOrder(t *testing.T) {
	f := setup(t)
	a := f.submit("")
	b := f.submit("", a)
	c := f.submit("", b)
	f.want(b, task.Blocked)
	f.want(c, task.Blocked)

	f.finish(a, task.Succeeded)
	f.want(b, task.Pending)
	f.want(c, task.Blocked)
	f.finish(b, task.Succeeded)
	f.want(c, task.Pending)
	f.finish(c, task.Succeeded)

	for _, id := range []string{b, c} {
		tk := f.load(id).Task
		if n := releases(tk); n != 1 {
			t.Fatalf("task %s released %d times", id, n)
		}
		if got := f.told(id); !slices.Equal(got, []task.Status{task.Pending}) {
			t.Fatalf("task %s: settle told %v, want one pending", id, got)
		}
	}
	f.clean()
}

func TestADiamondReleasesItsJoinOnlyAfterBothSides(t *testing.T) {
	f := setup(t)
	a := f.submit("")
	b := f.submit("", a)
	c := f.submit("", a)
	d := f.submit("", b, c)

	f.finish(a, task.Succeeded)
	f.want(b, task.Pending)
	f.want(c, task.Pending)
	f.want(d, task.Blocked)
	f.finish(c, task.Succeeded)
	f.want(d, task.Blocked)
	if w := f.load(d).Task.Waiting(); !slices.Equal(w, []string{b}) {
		t.Fatalf("join waits on %v, want [%s]", w, b)
	}
	f.finish(b, task.Succeeded)
	f.want(d, task.Pending)
	if n := releases(f.load(d).Task); n != 1 {
		t.Fatalf("join released %d times", n)
	}
	if got := f.told(d); !slices.Equal(got, []task.Status{task.Pending}) {
		t.Fatalf("settle told of the join %v, want only its release", got)
	}
	f.clean()
}

func TestAFailurePassesOnTransitively(t *testing.T) {
	for _, tc := range []struct {
		onFailure task.DepFailure
		parentEnd task.Status
		want      task.Status
	}{
		{"", task.Dead, task.Canceled},
		{task.DepCancel, task.Dead, task.Canceled},
		{task.DepFail, task.Dead, task.Dead},
		{task.DepCancel, task.Canceled, task.Canceled},
		{task.DepFail, task.Canceled, task.Dead},
	} {
		t.Run(fmt.Sprintf("%s on %q", tc.parentEnd, tc.onFailure), func(t *testing.T) {
			f := setup(t)
			a := f.submit("")
			b := f.submit(tc.onFailure, a)
			c := f.submit(tc.onFailure, b)
			other := f.submit("", a) // a sibling under the default
			f.finish(a, tc.parentEnd)
			f.want(b, tc.want)
			f.want(c, tc.want) // in the same Settle: b's end passed on to c
			f.want(other, task.Canceled)
			tc2 := f.load(c).Task
			if tc.want == task.Dead && !strings.Contains(tc2.LastError, b) {
				t.Fatalf("c's last error %q does not name b", tc2.LastError)
			}
			if got := f.told(c); !slices.Equal(got, []task.Status{tc.want}) {
				t.Fatalf("settle told of c %v", got)
			}
			f.clean()
		})
	}
}

func TestAChildOfAnEndedParentIsSettledAtSubmit(t *testing.T) {
	f := setup(t)
	ok := f.submit("")
	bad := f.submit("")
	f.finish(ok, task.Succeeded)
	f.finish(bad, task.Dead)
	before := f.st.Counts()
	c := f.submit("", ok)
	if d := f.st.Counts().Sub(before); d.Of(s3store.OpPut) != 1 {
		t.Fatalf("a child of a finished parent cost %s, want one PUT (the task)", d)
	}
	f.want(c, task.Pending)
	f.want(f.submit("", ok, bad), task.Canceled)
	f.want(f.submit(task.DepFail, bad), task.Dead)
	f.clean()
}

func TestUnknownParentWritesNothing(t *testing.T) {
	f := setup(t)
	known := f.submit("")
	for _, parents := range [][]string{
		{"01JDXYZ0000000000000000000"},
		{"not-an-id"},
		{known, "01JDXYZ0000000000000000000"}, // the known one first
	} {
		before := f.st.Counts()
		_, err := f.env.Prepare(f.ctx, "01JDXYZ0000000000000000001", 0, parents)
		if !errors.Is(err, deps.ErrUnknownParent) {
			t.Fatalf("prepare after %v: %v, want ErrUnknownParent", parents, err)
		}
		if d := f.st.Counts().Sub(before); d.Of(s3store.OpPut) != 0 || d.Of(s3store.OpDelete) != 0 {
			t.Fatalf("prepare after %v wrote: %s", parents, d)
		}
		_, err = f.p.Submit(f.ctx, "t", nil, producer.Options{DependsOn: parents})
		if !errors.Is(err, producer.ErrUnknownDependency) && !errors.Is(err, task.ErrInvalid) {
			t.Fatalf("submit after %v: %v, want ErrUnknownDependency (or ErrInvalid for a malformed id)", parents, err)
		}
	}
	if f.load(known).Task.Dependents {
		t.Fatal("a refused submit marked its known parent as having dependents")
	}
	f.clean()
}

// A parent that ends between the child's read of it and the child's edge
// write must not be missed: its end either sees the edge or the child sees
// the end.
func TestAParentEndingBetweenTheReadAndTheEdge(t *testing.T) {
	for _, tc := range []struct {
		name      string
		siblings  bool // the parent already has a dependent, so its end settles
		parentEnd task.Status
		want      task.Status
	}{
		{"first dependent, succeeded", false, task.Succeeded, task.Pending},
		{"first dependent, dead", false, task.Dead, task.Canceled},
		{"another dependent already, succeeded", true, task.Succeeded, task.Pending},
		{"another dependent already, dead", true, task.Dead, task.Canceled},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := setup(t)
			a := f.submit("")
			var sibling string
			if tc.siblings {
				sibling = f.submit("", a)
			}
			f.claim(a)
			f.faults.Inject(s3store.Fault{Op: s3store.OpPut, KeyPrefix: deps.EdgePrefix(a), Times: 1,
				Hook: func(string) { f.finish(a, tc.parentEnd) }})
			c := f.submit("", a)
			f.want(c, tc.want)
			if tc.siblings {
				f.want(sibling, tc.want)
			}
			f.clean()
		})
	}
}

// A parent that ends between the child's read of it and the mark: the
// mark's CAS fails, the read again sees the end, and no edge is written.
func TestAParentEndingBetweenTheReadAndTheMark(t *testing.T) {
	f := setup(t)
	a := f.submit("")
	f.claim(a)
	key := f.load(a).Task.Key()
	f.faults.Inject(s3store.Fault{Op: s3store.OpPut, KeyPrefix: key, Times: 1,
		Hook: func(string) { f.finish(a, task.Succeeded) }})
	before := f.st.Counts()
	c := f.submit("", a)
	if d := f.st.Counts().Sub(before); d[s3store.OpPut][s3store.OutcomePrecondition] != 1 {
		t.Fatalf("requests %s, want the mark to lose its race", d)
	}
	f.want(c, task.Pending)
	f.clean()
}

// A producer that dies anywhere in Prepare leaves nothing for good: what
// it wrote is found by the parent's end and gone once Grace has passed.
func TestAProducerDyingInPrepareLeavesNothingForGood(t *testing.T) {
	for _, tc := range []struct {
		name   string
		inject func(f *fixture, parent string)
	}{
		{"at the mark", func(f *fixture, parent string) {
			f.faults.Inject(s3store.Fault{Op: s3store.OpPut, KeyPrefix: f.load(parent).Task.Key(), Err: s3store.ErrInjected503, Times: 1})
		}},
		{"after the mark, at the edge", func(f *fixture, parent string) {
			f.faults.Inject(s3store.Fault{Op: s3store.OpPut, KeyPrefix: deps.EdgePrefix(parent), Err: s3store.ErrInjected503, Times: 1})
		}},
		{"after the edge, at the read again", func(f *fixture, parent string) {
			key := f.load(parent).Task.Key()
			f.faults.Inject(s3store.Fault{Op: s3store.OpPut, KeyPrefix: deps.EdgePrefix(parent), Times: 1, Hook: func(string) {
				f.faults.Inject(s3store.Fault{Op: s3store.OpGet, KeyPrefix: key, Err: s3store.ErrInjected503, Times: 1})
			}})
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := setup(t)
			a := f.submit("")
			tc.inject(f, a)
			if _, err := f.p.Submit(f.ctx, "t", nil, producer.Options{DependsOn: []string{a}}); err == nil {
				t.Fatal("submit survived the fault")
			}
			f.faults.Clear()
			t.Logf("left by the producer: %v", f.keys("deps/"))
			pt := f.end(a, task.Succeeded)
			if pt.Dependents {
				_ = f.env.Settle(f.ctx, pt) // the edge's child may still land: left to the repair
			}
			f.advance(deps.Grace + time.Second)
			f.repair()
			f.clean()
		})
	}
}

// The producer died after writing the edge, before the child: the edge is
// kept for a child that may still land until Grace, then deleted.
func TestAnEdgeWithoutItsChild(t *testing.T) {
	t.Run("a late child is still settled", func(t *testing.T) {
		f := setup(t)
		a := f.submit("")
		child := f.submit("", a) // gives a a dependent; the orphan below rides along
		id, spec := f.prepare(a)
		f.finish2(a, task.Succeeded, true)
		f.want(child, task.Pending)
		if n := len(f.keys(deps.EdgePrefix(a))); n != 1 {
			t.Fatalf("%d edges left, want the orphan's", n)
		}
		f.advance(deps.Grace / 2)
		if found, settled := f.repairLeft(); found != 1 || settled != 0 {
			t.Fatalf("repair before the child landed: found %d, settled %d", found, settled)
		}
		f.create(id, spec) // the delayed PUT lands
		f.want(id, task.Blocked)
		if found, settled := f.repair(); found != 1 || settled != 1 {
			t.Fatalf("repair after the child landed: found %d, settled %d", found, settled)
		}
		f.want(id, task.Pending)
		f.clean()
	})
	t.Run("after Grace the edge goes", func(t *testing.T) {
		f := setup(t)
		a := f.submit("")
		f.submit("", a)
		f.prepare(a)
		f.finish2(a, task.Succeeded, true)
		f.advance(deps.Grace - time.Second)
		f.repairLeft()
		if len(f.keys(deps.EdgePrefix(a))) != 1 {
			t.Fatal("the orphan edge went before Grace")
		}
		f.advance(2 * time.Second)
		if found, settled := f.repair(); found != 1 || settled != 1 {
			t.Fatalf("repair after Grace: found %d, settled %d", found, settled)
		}
		f.clean()
	})
}

// prepare readies the edges of a child of parents that is never written
// (its producer died), and returns its id and spec to write it later.
func (f *fixture) prepare(parents ...string) (string, task.Spec) {
	f.t.Helper()
	at := f.now().Truncate(time.Millisecond)
	id, err := task.NewID(at, rand.Reader)
	if err != nil {
		f.t.Fatal(err)
	}
	shard := task.ShardFor(id, f.env.Counts[0])
	ds, err := f.env.Prepare(f.ctx, id, shard, parents)
	if err != nil {
		f.t.Fatalf("prepare: %v", err)
	}
	return id, task.Spec{Type: "t", AvailableAt: at, Deps: ds}
}

func (f *fixture) create(id string, spec task.Spec) {
	f.t.Helper()
	tk, err := task.New(id, task.ShardFor(id, f.env.Counts[0]), spec, f.now())
	if err != nil {
		f.t.Fatal(err)
	}
	if _, err := taskio.Create(f.ctx, f.mem, clock.System(), tk); err != nil {
		f.t.Fatal(err)
	}
}

// finish2 is finish for a settle expected to leave work (wantLeft).
func (f *fixture) finish2(id string, to task.Status, wantLeft bool) {
	f.t.Helper()
	t := f.end(id, to)
	err := f.env.Settle(f.ctx, t)
	if wantLeft != (err != nil) {
		f.t.Fatalf("settle %s: %v, want left %v", id, err, wantLeft)
	}
}

// The writer of an end died after the marker, before the end: the marker
// stays while the parent lives, and its later end settles and removes it.
func TestAMarkerWithoutItsEnd(t *testing.T) {
	f := setup(t)
	a := f.submit("")
	c := f.submit("", a)
	f.claim(a)
	v := f.load(a)
	dying := v.Task.Clone()
	if err := dying.Succeed("c-"+a, nil, f.now()); err != nil {
		t.Fatal(err)
	}
	if err := f.env.Ending(f.ctx, dying); err != nil {
		t.Fatal(err)
	}
	// ... and the writer dies. Its lease expires; the task runs again.
	f.advance(deps.Grace + time.Minute)
	if found, settled := f.repair(); found != 1 || settled != 0 {
		t.Fatalf("repair: found %d, settled %d, want the marker found, nothing settled", found, settled)
	}
	f.want(c, task.Blocked)
	f.finish(a, task.Succeeded)
	f.want(c, task.Pending)
	f.clean()
}

// A stale marker (an end that never landed) must not be deleted from
// under an end that is landing now: if the repair deleted it between that
// end's marker and its write, and the ender then died before settling,
// nothing would be left to find the children.
func TestRepairNeverDropsTheMarkerOfAnEndInFlight(t *testing.T) {
	f := setup(t)
	a := f.submit("")
	c := f.submit("", a)
	f.claim(a)
	stale := f.load(a).Task.Clone()
	stale.Succeed("c-"+a, nil, f.now())
	if err := f.env.Ending(f.ctx, stale); err != nil { // an end that never landed
		t.Fatal(err)
	}
	f.advance(deps.Grace + time.Minute)
	// While the repair looks at the stale marker, the task ends for real
	// (marker, then the end) and its ender dies before it settles.
	f.faults.Inject(s3store.Fault{Op: s3store.OpDelete, KeyPrefix: deps.EndedPrefix, Times: 1,
		Hook: func(string) { f.end(a, task.Succeeded) }})
	f.repair()
	f.faults.Clear()
	if f.status(a) != task.Succeeded {
		f.end(a, task.Succeeded) // the repair deleted nothing: the end lands after it
	}
	f.repair()
	f.want(a, task.Succeeded)
	f.want(c, task.Pending)
	f.clean()
}

// The ender died after the end, before Settle: the repair settles.
func TestAnEndNotPassedOnIsRepaired(t *testing.T) {
	f := setup(t)
	a := f.submit("")
	b := f.submit("", a)
	c := f.submit("", b)
	d := f.submit(task.DepFail, a)
	f.end(a, task.Dead) // and dies
	f.want(b, task.Blocked)
	if found, settled := f.repair(); found != 1 || settled != 1 {
		t.Fatalf("repair: found %d, settled %d", found, settled)
	}
	f.want(b, task.Canceled)
	f.want(c, task.Canceled)
	f.want(d, task.Dead)
	f.clean()
	if found, settled := f.repair(); found != 0 || settled != 0 {
		t.Fatalf("a second repair found %d, settled %d", found, settled)
	}
}

// Settle died between a child's update and its edge's delete: settling
// again changes nothing but the edge.
func TestSettlingTwiceChangesNothing(t *testing.T) {
	f := setup(t)
	a := f.submit("")
	c := f.submit("", a)
	f.faults.Inject(s3store.Fault{Op: s3store.OpDelete, KeyPrefix: deps.EdgePrefix(a), Err: s3store.ErrInjected503, Times: 1})
	f.finish2(a, task.Succeeded, true)
	v := f.load(c)
	if v.Task.Status != task.Pending || len(f.keys(deps.EdgePrefix(a))) != 1 || len(f.keys(deps.EndedPrefix)) != 1 {
		t.Fatalf("after the failed delete: child %s, edges %v, markers %v", v.Task.Status, f.keys("deps/"), f.keys(deps.EndedPrefix))
	}
	before := f.st.Counts()
	if found, settled := f.repair(); found != 1 || settled != 1 {
		t.Fatalf("repair: found %d, settled %d", found, settled)
	}
	if d := f.st.Counts().Sub(before); d.Of(s3store.OpPut) != 0 {
		t.Fatalf("settling again wrote: %s", d)
	}
	if after := f.load(c); after.ETag != v.ETag {
		t.Fatalf("settling again changed the child: version %d -> %d", v.Task.Version, after.Task.Version)
	}
	if got := f.told(c); len(got) != 1 {
		t.Fatalf("settle told of the child %v, want once", got)
	}
	f.clean()
}

// Retention deleted a parent whose end was not passed on: its children are
// canceled.
func TestAParentDeletedWithEdgesLeftCancelsItsChildren(t *testing.T) {
	f := setup(t)
	a := f.submit("")
	c := f.submit("", a)
	d := f.submit(task.DepFail, a)
	pt := f.end(a, task.Succeeded) // and the ender dies
	if err := f.mem.Delete(f.ctx, pt.Key(), s3store.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	if found, settled := f.repair(); found != 1 || settled != 1 {
		t.Fatalf("repair: found %d, settled %d", found, settled)
	}
	f.want(c, task.Canceled)
	f.want(d, task.Dead)
	f.clean()
}

// A parent with 10,000 children: the cost of its end, per edge, is the one
// the comments state.
func TestFanOutOf10000(t *testing.T) {
	const n = 10_000
	f := setup(t)
	a := f.submit("")
	size := func() int {
		o, err := f.mem.Get(f.ctx, f.load(a).Task.Key())
		if err != nil {
			t.Fatal(err)
		}
		return len(o.Body)
	}
	before := f.st.Counts()
	f.submit("", a)
	first := f.st.Counts().Sub(before)
	sizeOne := size()
	before = f.st.Counts()
	for range n - 1 {
		f.submit("", a)
	}
	submits := f.st.Counts().Sub(before)
	if s := size(); s != sizeOne {
		t.Fatalf("the parent grew from %d to %d bytes with its children", sizeOne, s)
	}
	t.Logf("submit of the first child: %s", first)
	t.Logf("submit of each further child: %s (over %d)", per(submits, n-1), n-1)
	// The parent's GET, its mark, the edge, the parent's GET again, the child.
	if first.Of(s3store.OpGet) != 2 || first.Of(s3store.OpPut) != 3 {
		t.Fatalf("the first child's submit made %s, want 2 GETs and 3 PUTs", first)
	}
	// The same without the mark; and a fleet read now and then.
	if g, p := submits.Of(s3store.OpGet), submits.Of(s3store.OpPut); g < 2*(n-1) || g > 2*(n-1)+10 || p != 2*(n-1) {
		t.Fatalf("further submits made %s, want 2 GETs and 2 PUTs each", submits)
	}

	pt := f.end(a, task.Succeeded)
	before = f.st.Counts()
	if err := f.env.Settle(f.ctx, pt); err != nil {
		t.Fatal(err)
	}
	d := f.st.Counts().Sub(before)
	t.Logf("settle of %d edges: %s", n, d)
	t.Logf("settle per edge: %s", per(d, n))
	if got, want := d.Of(s3store.OpList), int64(n/1000); got < want || got > want+1 {
		t.Fatalf("%d LISTs for %d edges, want %d (one per 1,000)", got, n, want)
	}
	if d.Of(s3store.OpGet) != n {
		t.Fatalf("%d GETs, want one per edge", d.Of(s3store.OpGet))
	}
	if d.Of(s3store.OpPut) != 2*n {
		t.Fatalf("%d PUTs, want two per edge (the child, its ready pointer)", d.Of(s3store.OpPut))
	}
	if d.Of(s3store.OpDelete) != n+1 {
		t.Fatalf("%d DELETEs, want one per edge and the marker's", d.Of(s3store.OpDelete))
	}
	if other := d.Total() - d.Of(s3store.OpList) - d.Of(s3store.OpGet) - d.Of(s3store.OpPut) - d.Of(s3store.OpDelete); other != 0 {
		t.Fatalf("%d other requests: %s", other, d)
	}
	f.mu.Lock()
	released := len(f.ended)
	f.mu.Unlock()
	if released != n {
		t.Fatalf("%d children released, want %d", released, n)
	}
	pointers := 0
	for _, k := range f.keys("tasks/") {
		if shards.IsPointer(k) {
			pointers++
		}
	}
	if pointers != n {
		t.Fatalf("%d ready pointers, want one per released child", pointers)
	}
	f.clean()
}

// per renders counts divided by n.
func per(c s3store.Counts, n int) string {
	var parts []string
	for _, op := range s3store.Ops() {
		if v := c.Of(op); v > 0 {
			parts = append(parts, fmt.Sprintf("%s=%.3f", op, float64(v)/float64(n)))
		}
	}
	if v := c[s3store.OpPut][s3store.OutcomePrecondition]; v > 0 {
		parts = append(parts, fmt.Sprintf("412=%.3f", float64(v)/float64(n)))
	}
	return strings.Join(parts, " ")
}

// A child with 100 parents that all end at once: the child learns each
// end exactly once, and is released exactly once.
func TestFanInOf100FinishingAtOnce(t *testing.T) {
	for _, latency := range []time.Duration{0, 20 * time.Millisecond} {
		t.Run(fmt.Sprintf("latency %v", latency), func(t *testing.T) { fanIn(t, latency) })
	}
}

func fanIn(t *testing.T, latency time.Duration) {
	f := setup(t)
	parents := make([]string, task.MaxDeps)
	for i := range parents {
		parents[i] = f.submit("")
	}
	before := f.st.Counts()
	c := f.submit("", parents...)
	t.Logf("submit of a child of %d parents: %s", len(parents), f.st.Counts().Sub(before))
	ended := make([]*task.Task, len(parents))
	for _, p := range parents {
		f.claim(p)
	}
	start := make(chan struct{})
	var wg sync.WaitGroup
	errs := make([]error, len(parents))
	for i, p := range parents {
		ended[i] = f.end(p, task.Succeeded)
	}
	f.want(c, task.Blocked)
	if latency > 0 {
		// A round trip to S3 for every read and write of a task.
		f.faults.Inject(s3store.Fault{Op: s3store.OpGet, KeyPrefix: "tasks/", Latency: latency})
		f.faults.Inject(s3store.Fault{Op: s3store.OpPut, KeyPrefix: "tasks/", Latency: latency})
	}
	before = f.st.Counts()
	for i := range parents {
		wg.Go(func() {
			<-start
			errs[i] = f.env.Settle(f.ctx, ended[i])
		})
	}
	close(start)
	wg.Wait()
	d := f.st.Counts().Sub(before)
	failed := 0
	for _, err := range errs {
		if err != nil {
			failed++
			t.Logf("settle: %v", err)
		}
	}
	t.Logf("%d concurrent settles into one child: %s; %d left work for the repair", len(parents), d, failed)
	t.Logf("per edge: %s", per(d, len(parents)))
	// Per edge: the parent's LIST, the child's GET and PUT, the edge's and
	// the parent marker's DELETEs; once, the released child's pointer; per
	// lost race, the PUT that lost and two GETs (taskio's check that the
	// write did not land, and the read to try again).
	n, lost := int64(len(parents)), d[s3store.OpPut][s3store.OutcomePrecondition]
	if failed == 0 {
		if d.Of(s3store.OpList) != n || d.Of(s3store.OpDelete) != 2*n || d.Of(s3store.OpPut)-lost != n+1 || d.Of(s3store.OpGet) != n+2*lost {
			t.Fatalf("requests %s, want per edge LIST, GET, PUT, 2 DELETEs, a PUT for the pointer, and per lost race a PUT and 2 GETs", d)
		}
	}
	f.faults.Clear()
	if failed > 0 {
		f.repair()
	}
	v := f.load(c)
	if v.Task.Status != task.Pending || len(v.Task.Waiting()) != 0 {
		t.Fatalf("child %s, waiting on %d", v.Task.Status, len(v.Task.Waiting()))
	}
	if n := releases(v.Task); n != 1 {
		t.Fatalf("child released %d times", n)
	}
	if got := f.told(c); !slices.Equal(got, []task.Status{task.Pending}) {
		t.Fatalf("settle told of the child %v, want one pending", got)
	}
	if failed > 0 {
		t.Fatalf("%d of %d concurrent settles gave up on a contended child", failed, len(parents))
	}
	f.clean()
}
