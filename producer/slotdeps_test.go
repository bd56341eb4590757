package producer_test

import (
	"context"
	"errors"
	"testing"

	"github.com/s3queue/s3queue/producer"
	"github.com/s3queue/s3queue/s3store"
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
