package sim

import (
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/s3queue/s3queue/s3store"
)

// The schedule's order compares heads first and hashes bodies only when
// it must; it is the order of the full sort keys, then of arrival.
func TestRequestOrderIsSortKeyOrder(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	procs := []*Handle{{proc: "w1"}, {proc: "w1|"}, {proc: "w10"}, {proc: "p1"}}
	keys := []string{"", "a", "a|", "a/b", "tasks/001/", "tasks/001/x", "fleet.json"}
	bodies := [][]byte{nil, []byte("x"), []byte("y"), []byte(`{"a":1}`)}
	var rs []*request
	for i := range 2000 {
		r := &request{h: procs[rng.IntN(len(procs))], op: s3store.Op(rng.IntN(5)), now: rng.IntN(8) == 0,
			key: keys[rng.IntN(len(keys))], body: bodies[rng.IntN(len(bodies))], seq: uint64(i)}
		if rng.IntN(3) == 0 {
			r.put.IfMatch = keys[rng.IntN(len(keys))]
		}
		if rng.IntN(3) == 0 {
			r.list.StartAfter = keys[rng.IntN(len(keys))]
		}
		if rng.IntN(20) == 0 {
			r.control, r.name = func() {}, keys[rng.IntN(len(keys))]
		}
		r.head = r.sortHead()
		rs = append(rs, r)
	}
	for range 20000 {
		a, b := rs[rng.IntN(len(rs))], rs[rng.IntN(len(rs))]
		ka, kb := a.sortKey(), b.sortKey()
		want := ka < kb || ka == kb && a.seq < b.seq
		if got := a.less(b, false); got != want {
			t.Fatalf("less(%q #%d, %q #%d) = %v, want %v", ka, a.seq, kb, b.seq, got, want)
		}
	}
	sorted := slices.Clone(rs)
	slices.SortFunc(sorted, func(a, b *request) int {
		if a.less(b, false) {
			return -1
		}
		if b.less(a, false) {
			return 1
		}
		return 0
	})
	for i := 1; i < len(sorted); i++ {
		if ka, kb := sorted[i-1].sortKey(), sorted[i].sortKey(); ka > kb {
			t.Fatalf("out of order: %q before %q", ka, kb)
		}
	}
}
