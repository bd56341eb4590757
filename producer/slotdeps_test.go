package producer_test

import (
	"context"
	"testing"

	"github.com/s3queue/s3queue/producer"
	"github.com/s3queue/s3queue/s3store"
)

// Audit of issue 12: a Go submit with both DependsOn and Slot is refused
// ("a task may have dependencies or a slot, not both"), but only after the
// edges were written and the parent marked as having dependents: a refused
// submit should write nothing (the CLI's checkSpec refuses it first; the
// Go API does not).
func TestAudit12SlotAndDepsRefusedWritesNothing(t *testing.T) {
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
	if puts := st.Counts().Of(s3store.OpPut) - before; puts != 0 {
		tk, _ := p.Get(ctx, parent)
		t.Fatalf("the refused submit wrote %d objects first (the parent's dependents flag now %v)", puts, tk.Dependents)
	}
}
