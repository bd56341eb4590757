package sim_test

import (
	"fmt"
	"os"
	"strconv"
	"strings"
	"testing"
	"testing/synctest"

	"github.com/s3queue/s3queue/internal/sim"
)

// seeds returns the seeds to run: S3QUEUE_SIM_SEED=N replays one seed;
// S3QUEUE_SIM_SEEDS=K runs K seeds from S3QUEUE_SIM_FIRST (default 1), the
// soak; by default a short run for every `go test`.
func seeds(t *testing.T, short int) []uint64 {
	if s := os.Getenv("S3QUEUE_SIM_SEED"); s != "" {
		n, err := strconv.ParseUint(s, 10, 64)
		if err != nil {
			t.Fatalf("S3QUEUE_SIM_SEED=%q: %v", s, err)
		}
		return []uint64{n}
	}
	count, first := short, uint64(1)
	if s := os.Getenv("S3QUEUE_SIM_SEEDS"); s != "" {
		n, err := strconv.Atoi(s)
		if err != nil {
			t.Fatalf("S3QUEUE_SIM_SEEDS=%q: %v", s, err)
		}
		count = n
	}
	if s := os.Getenv("S3QUEUE_SIM_FIRST"); s != "" {
		n, err := strconv.ParseUint(s, 10, 64)
		if err != nil {
			t.Fatalf("S3QUEUE_SIM_FIRST=%q: %v", s, err)
		}
		first = n
	}
	out := make([]uint64, count)
	for i := range out {
		out[i] = first + uint64(i)
	}
	return out
}

// shortSeeds is how many seeds every `go test` runs.
const shortSeeds = 0

// Every seed's run keeps every invariant.
func TestSimulation(t *testing.T) {
	for _, seed := range seeds(t, shortSeeds) {
		t.Run(fmt.Sprint(seed), func(t *testing.T) {
			t.Parallel()
			synctest.Test(t, func(t *testing.T) {
				res := sim.Run(seed, sim.Options{})
				if len(res.Violations) > 0 {
					t.Errorf("%d violations\n%s", len(res.Violations), res.Report(30))
				}
				if testing.Verbose() {
					t.Logf("%s\ntasks %d, executions %d (duplicates %d), requests %v", res.Plan, res.Tasks, res.Executions, res.Duplicates, res.Counts)
				}
			})
		})
	}
}

// A seed replays exactly: two runs of one seed serve the same requests in
// the same order with the same fates. Anything else that decides what
// happens (a global random source, map order, a goroutine per poll) shows
// up here as a diverging trace.
func TestASeedReplaysExactly(t *testing.T) {
	if shortSeeds == 0 {
		return
	}
	for _, seed := range []uint64{1, 2, 3, 4, 5, 6, 7, 8} {
		t.Run(fmt.Sprint(seed), func(t *testing.T) {
			t.Parallel()
			var traces [2][]string
			for i := range traces {
				synctest.Test(t, func(t *testing.T) { traces[i] = sim.Run(seed, sim.Options{}).Trace })
			}
			a, b := traces[0], traces[1]
			for i := 0; i < len(a) && i < len(b); i++ {
				if a[i] != b[i] {
					lo := max(0, i-5)
					t.Fatalf("seed %d diverges at request %d of %d:\nfirst run:\n  %s\nsecond run:\n  %s", seed, i, len(a),
						strings.Join(a[lo:min(i+3, len(a))], "\n  "), strings.Join(b[lo:min(i+3, len(b))], "\n  "))
				}
			}
			if len(a) != len(b) {
				t.Fatalf("seed %d: %d requests, then %d", seed, len(a), len(b))
			}
		})
	}
}

// TestHunt runs seeds in order, one at a time, until one breaks an
// invariant, and says how many it took: S3QUEUE_SIM_HUNT=K tries up to K
// seeds from S3QUEUE_SIM_FIRST. scripts/sim-teeth.sh uses it to measure how
// fast the simulator catches each known defect put back.
func TestHunt(t *testing.T) {
	s := os.Getenv("S3QUEUE_SIM_HUNT")
	if s == "" {
		return
	}
	n, err := strconv.Atoi(s)
	if err != nil {
		t.Fatalf("S3QUEUE_SIM_HUNT=%q: %v", s, err)
	}
	first := uint64(1)
	if f := os.Getenv("S3QUEUE_SIM_FIRST"); f != "" {
		if first, err = strconv.ParseUint(f, 10, 64); err != nil {
			t.Fatalf("S3QUEUE_SIM_FIRST=%q: %v", f, err)
		}
	}
	for i := range n {
		seed := first + uint64(i)
		var res sim.Result
		synctest.Test(t, func(t *testing.T) { res = sim.Run(seed, sim.Options{}) })
		if len(res.Violations) > 0 {
			t.Logf("caught after %d seeds\n%s", i+1, res.Report(30))
			fmt.Printf("HUNT caught seed=%d seeds=%d invariant=%q\n", seed, i+1, res.Violations[0].Invariant)
			return
		}
	}
	fmt.Printf("HUNT none seeds=%d\n", n)
}
