package producer_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/s3queue/s3queue/producer"
	"github.com/s3queue/s3queue/s3store"
	"github.com/s3queue/s3queue/shards"
	"github.com/s3queue/s3queue/task"
)

// A Go submit with both DependsOn and Slot is refused ("a task may have
// dependencies or a slot, not both") before anything is written: no edge,
// and no dependents flag on the parent (the CLI's checkSpec refuses it
// first; the Go API checks it in Submit).
func TestASubmitWithDependenciesAndASlotIsRefusedBeforeAnyWrite(t *testing.T) {
	ctx := context.Background()
	p, st := setup(t)
	parent, err := p.Submit(ctx, "t", nil, producer.Options{})
	if err != nil {
		t.Fatal(err)
	}
	before := st.Counts().Of(s3store.OpPut)
	_, err = p.Submit(ctx, "t", nil, producer.Options{DependsOn: []string{parent}, Slot: "k"})
	if err == nil {
		t.Fatal("a submit with dependencies and a slot was accepted")
	}
	t.Logf("refused: %v", err)
	if !errors.Is(err, task.ErrInvalid) {
		t.Fatalf("refused with %v, want task.ErrInvalid", err)
	}
	if puts := st.Counts().Of(s3store.OpPut) - before; puts != 0 {
		tk, _ := p.Get(ctx, parent)
		t.Fatalf("the refused submit wrote %d objects first (the parent's dependents flag now %v)", puts, tk.Dependents)
	}
}

// A task created blocked (waiting for a dependency or its slot) or ended at
// submit (a dependency had already failed) is not announced: no worker
// may claim it, and whoever makes it pending announces it then. A pointer
// to it cost a PUT, and the worker that read it a GET and a DELETE. The
// producer knows no live member here, so only shard 0 counts as served:
// each child lies in another shard, where a pending task would be
// announced.
func TestATaskNotPendingAtSubmitIsNotAnnounced(t *testing.T) {
	ctx := context.Background()
	p, st := setup(t)
	running, err := p.Submit(ctx, "t", nil, producer.Options{ShardKey: "s0"})
	if err != nil {
		t.Fatal(err)
	}
	failed, err := p.Submit(ctx, "t", nil, producer.Options{ShardKey: "s0"})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := p.Cancel(ctx, failed); err != nil {
		t.Fatal(err)
	}
	if _, err := p.Submit(ctx, "t", nil, producer.Options{Slot: "k", ShardKey: "s0"}); err != nil {
		t.Fatal(err)
	}
	key := "s1"
	for i := 0; task.ShardFor(key, 4) == 0; i++ {
		key = fmt.Sprintf("s%d", i+2)
	}
	for _, tc := range []struct {
		name string
		opts producer.Options
		want task.Status
	}{
		{"blocked on a dependency", producer.Options{DependsOn: []string{running}}, task.Blocked},
		{"canceled at submit", producer.Options{DependsOn: []string{failed}}, task.Canceled},
		{"blocked behind its slot's holder", producer.Options{Slot: "k"}, task.Blocked},
	} {
		tc.opts.ShardKey = key
		id, err := p.Submit(ctx, "t", nil, tc.opts)
		if err != nil {
			t.Fatal(err)
		}
		tk, err := p.Get(ctx, id)
		if err != nil || tk.Status != tc.want {
			t.Fatalf("%s: the child is %v (%v), want %s", tc.name, tk.Status, err, tc.want)
		}
		page, err := st.List(ctx, "tasks/", s3store.ListOptions{})
		if err != nil {
			t.Fatal(err)
		}
		for _, o := range page.Objects {
			if shards.IsPointer(o.Key) && strings.Contains(o.Key, id) {
				t.Errorf("%s: a ready pointer announces a task no worker may claim: %s", tc.name, o.Key)
			}
		}
	}
}

// What a replace costs through the producer (docs/slots.md, "What it
// costs"), with a holder that is still pending and a task waiting behind
// it: run with -v to print the counts. Besides its own submit (the slot's
// GET and conditional PUT, the task's PUT), the replace cancels the
// waiting task (CancelReplaced) and asks the holder to stop: a pending
// holder is canceled at once, which ends it and passes its slot on to the
// replacing task.
func TestTheCostOfAReplace(t *testing.T) {
	ctx := context.Background()
	p, st := setup(t)
	holder, err := p.Submit(ctx, "t", nil, producer.Options{Slot: "k"})
	if err != nil {
		t.Fatal(err)
	}
	waiting, err := p.Submit(ctx, "t", nil, producer.Options{Slot: "k"})
	if err != nil {
		t.Fatal(err)
	}
	before := st.Counts()
	id, err := p.Submit(ctx, "t", nil, producer.Options{Slot: "k", Admission: "replace"})
	if err != nil {
		t.Fatal(err)
	}
	c := st.Counts().Sub(before)
	t.Logf("replace with a pending holder and one task waiting: PUT %d GET %d DELETE %d LIST %d HEAD %d (%s)",
		c.Of(s3store.OpPut), c.Of(s3store.OpGet), c.Of(s3store.OpDelete), c.Of(s3store.OpList), c.Of(s3store.OpHead), c)
	for _, w := range []struct {
		id   string
		want task.Status
	}{{holder, task.Canceled}, {waiting, task.Canceled}, {id, task.Pending}} {
		if tk, err := p.Get(ctx, w.id); err != nil || tk.Status != w.want {
			t.Fatalf("task %s is %v (%v), want %s", w.id, tk.Status, err, w.want)
		}
	}
	// As measured: keep docs/slots.md in step if these change.
	if c.Of(s3store.OpPut) != 9 || c.Of(s3store.OpGet) != 7 || c.Of(s3store.OpDelete) != 2 {
		t.Errorf("a replace made %s, want PUT 9, GET 7, DELETE 2 (docs/slots.md)", c)
	}
}
