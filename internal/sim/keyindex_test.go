package sim

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"sort"
	"strings"
	"testing"
)

// The key index lists what a scan of every key would: the keys under a
// prefix after a start, in order, through inserts and deletes that split
// and empty its chunks.
func TestKeyIndexListsLikeAFullScan(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	var x keyIndex
	set := make(map[string]bool)
	key := func() string { return fmt.Sprintf("tasks/%03d/%05d", rng.IntN(4), rng.IntN(3000)) }
	for i := range 20000 {
		k := key()
		switch {
		case set[k] && rng.IntN(3) == 0:
			x.remove(k)
			delete(set, k)
		case !set[k]:
			x.insert(k)
			set[k] = true
		}
		if i%500 != 0 {
			continue
		}
		prefix := fmt.Sprintf("tasks/%03d/", rng.IntN(5))
		after := []string{"", key(), prefix, "tasks/"}[rng.IntN(4)]
		n := 1 + rng.IntN(1200)
		var want []string
		for k := range set {
			if strings.HasPrefix(k, prefix) && k > after {
				want = append(want, k)
			}
		}
		sort.Strings(want)
		want = want[:min(n, len(want))]
		if got := x.list(prefix, after, n); !slices.Equal(got, want) {
			t.Fatalf("list(%q, %q, %d): %d keys, want %d", prefix, after, n, len(got), len(want))
		}
	}
}
