package deps_test

import (
	"context"
	"crypto/rand"
	"testing"
	"testing/synctest"
	"time"

	"github.com/s3queue/s3queue/clock"
	"github.com/s3queue/s3queue/internal/deps"
	"github.com/s3queue/s3queue/internal/taskio"
	"github.com/s3queue/s3queue/producer"
	"github.com/s3queue/s3queue/s3store"
	"github.com/s3queue/s3queue/task"
)

// A parent's end deletes an edge whose child it does not find Grace after
// the edge's write. A submit writes its edges one parent after another and
// the child only after the last: if the edges take longer than Grace (100
// parents on a slow or throttled store, a paused producer), the first
// parent may end meanwhile, delete the edge of a child that has not landed
// yet, and leave no trail: the child lands blocked on a parent whose end
// it never learns, and nothing (the monitor checks only slot tasks and
// markers) ever releases it.
func TestAChildWhoseEdgesTookLongerThanGraceIsNotLeftBlocked(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := setup(t)
		a := f.submit("")
		b := f.submit("")
		f.faults.Inject(s3store.Fault{Op: s3store.OpPut, KeyPrefix: deps.EdgePrefix(b), Times: 1, Hook: func(string) {
			// The producer stalls between a's edge and b's; a ends, and
			// its settle finds an edge older than Grace with no child.
			time.Sleep(deps.Grace + 5*time.Second)
			f.finish(a, task.Succeeded)
		}})
		child, err := f.p.Submit(f.ctx, "t", nil, producer.Options{DependsOn: []string{a, b}})
		if err != nil {
			// Refusing is fine, as long as nothing is left blocked.
			if _, lerr := taskio.LoadID(f.ctx, f.mem, child, f.env.Counts); child != "" && lerr == nil {
				t.Fatalf("the submit failed (%v) but its child exists", err)
			}
			return
		}
		f.finish(b, task.Succeeded)
		f.repair()
		time.Sleep(deps.Grace)
		f.repair()
		if got := f.load(child).Task; got.Status != task.Pending {
			t.Fatalf("both parents succeeded, the child is %s, waiting on %v", got.Status, got.Waiting())
		}
	})
}

// The ended marker of a task is one key for all its ends: a task that died,
// was requeued and ended again writes the same marker. A pass-on of the
// first end that is still running (a big fan-out, a slow store) when the
// second end's worker writes the marker, ends the task and dies, deletes
// the second end's marker: a child submitted after the requeue then waits
// for an end nobody will pass on, and the repair has no trail to it.
func TestAMarkerOfAnEarlierEndIsNotDeletedOverALaterOne(t *testing.T) {
	f := setup(t)
	x := f.submit("")
	c1 := f.submit("", x)
	died := f.end(x, task.Dead) // its worker (W1) now passes the death on, slowly
	var c2 string
	f.faults.Inject(s3store.Fault{Op: s3store.OpDelete, KeyPrefix: deps.EndedPrefix, Times: 1, Hook: func(string) {
		// Before W1 deletes the marker: x is requeued, a child submitted
		// after it, and x runs and succeeds; its worker (W2) writes the
		// marker and the end, and dies before passing it on.
		if err := f.p.Requeue(f.ctx, x); err != nil {
			t.Errorf("requeue: %v", err)
		}
		c2 = f.submit("", x)
		f.end(x, task.Succeeded)
	}})
	if err := f.env.Settle(f.ctx, died); err != nil {
		t.Fatal(err)
	}
	f.want(c1, task.Canceled)
	f.want(x, task.Succeeded)
	f.repair()
	if got := f.status(c2); got != task.Pending {
		t.Fatalf("x succeeded after c2 was submitted; c2 is %s (the marker of x's success was deleted by the pass-on of its death)", got)
	}
}

// slotTask writes the task id of slot key as its submit would, admitted at
// turn (blocked: waiting).
func slotTask(t *testing.T, st s3store.Store, id, key string, turn int64) {
	t.Helper()
	tk, err := task.New(id, 0, task.Spec{Type: "job", Slot: key, SlotWait: true, SlotTurn: turn}, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	if _, err := taskio.Create(context.Background(), st, clock.System(), tk); err != nil {
		t.Fatal(err)
	}
}

// CheckWaiting admits again a task whose write landed after its slot
// passed it over, at a new turn, but grants it under its old one: the task
// runs with the old turn while the slot's holder names the new, so its end
// does not pass the slot on (Advance matches holder and turn), and the task
// waiting behind it stays blocked until Grace after the re-admission (and
// then until the monitor's next repair).
func TestASlotTaskAdmittedAgainPassesItsSlotOnAtItsEnd(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx := context.Background()
		p, e, st := slotSetup(t)
		h, err := p.Submit(ctx, "job", nil, producer.Options{Slot: "k"})
		if err != nil {
			t.Fatal(err)
		}
		// x's submit takes its place behind h; its task PUT is delayed.
		x, err := task.NewID(time.Now(), rand.Reader)
		if err != nil {
			t.Fatal(err)
		}
		adm, err := e.Admit(ctx, "k", deps.Member{ID: x, Shard: 0}, deps.AdmitQueue)
		if err != nil || !adm.Wait {
			t.Fatalf("admit x: %+v %v", adm, err)
		}
		end(t, p, h) // x has not landed: the slot waits for it
		time.Sleep(deps.Grace + 5*time.Second)
		if err := e.CheckHolders(ctx, map[string]string{}); err != nil {
			t.Fatal(err)
		}
		if s := readSlot(t, st, "k"); s.Holder != nil {
			t.Fatalf("x never landed, yet the slot is held by %+v", s.Holder)
		}
		slotTask(t, st, x, "k", adm.Turn) // x's delayed PUT lands
		time.Sleep(deps.Grace + 5*time.Second)
		v, err := taskio.Load(ctx, st, task.Key(0, x))
		if err != nil {
			t.Fatal(err)
		}
		if _, err := e.CheckWaiting(ctx, v.Task); err != nil {
			t.Fatal(err)
		}
		if got := status(t, p, x); got != task.Pending {
			t.Fatalf("x admitted again into its free slot is %s, want pending", got)
		}
		y, err := p.Submit(ctx, "job", nil, producer.Options{Slot: "k"})
		if err != nil {
			t.Fatal(err)
		}
		end(t, p, x)
		if got := status(t, p, y); got != task.Pending {
			s := readSlot(t, st, "k")
			t.Fatalf("x ended, y is %s; slot holder %+v (x's turn %d)", got, s.Holder, turnOf(t, p, x))
		}
	})
}

// CheckWaiting decides on a task read before the slot: if the task is
// granted and ends between the two reads, the slot no longer knows it, and
// it is admitted again, ended: the slot is then held by a task that ended,
// and the next task waits until the monitor's CheckHolders, Grace later.
func TestCheckWaitingDoesNotAdmitATaskThatEndedSinceItWasRead(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx := context.Background()
		p, e, st := slotSetup(t)
		h, err := p.Submit(ctx, "job", nil, producer.Options{Slot: "k"})
		if err != nil {
			t.Fatal(err)
		}
		x, err := p.Submit(ctx, "job", nil, producer.Options{Slot: "k"})
		if err != nil {
			t.Fatal(err)
		}
		time.Sleep(deps.Grace + 5*time.Second)
		v, err := taskio.Load(ctx, st, task.Key(0, x)) // the monitor's read: x blocked
		if err != nil {
			t.Fatal(err)
		}
		faults := s3store.NewFaults(st)
		e.Store = faults
		faults.Inject(s3store.Fault{Op: s3store.OpGet, KeyPrefix: deps.SlotsPrefix, Times: 1, Hook: func(string) {
			end(t, p, h) // x is granted
			end(t, p, x) // and ends: the slot is free
		}})
		if _, err := e.CheckWaiting(ctx, v.Task); err != nil {
			t.Fatal(err)
		}
		y, err := p.Submit(ctx, "job", nil, producer.Options{Slot: "k"})
		if err != nil {
			t.Fatal(err)
		}
		if got := status(t, p, y); got != task.Pending {
			s := readSlot(t, st, "k")
			t.Fatalf("every task of the slot before y ended, y is %s; slot holder %+v, queue %+v", got, s.Holder, s.Queue)
		}
	})
}

// turnOf is task id's slot turn (for messages).
func turnOf(t *testing.T, p *producer.Producer, id string) int64 {
	t.Helper()
	tk, err := p.Get(context.Background(), id)
	if err != nil {
		t.Fatal(err)
	}
	return tk.SlotTurn
}
