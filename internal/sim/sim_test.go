package sim_test

import (
	"crypto/sha256"
	"fmt"
	"io"
	"os"
	"sort"
	"strconv"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

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
	n, ok := envCount(t, "S3QUEUE_SIM_SEEDS")
	if !ok {
		return append(seedRange(t, short), foundSeeds...)
	}
	return seedRange(t, n)
}

// envCount reads the count in variable name, and whether it is set.
func envCount(t *testing.T, name string) (int, bool) {
	s := os.Getenv(name)
	if s == "" {
		return 0, false
	}
	n, err := strconv.Atoi(s)
	if err != nil {
		t.Fatalf("%s=%q: %v", name, s, err)
	}
	return n, true
}

// seedRange returns n seeds in order from S3QUEUE_SIM_FIRST (default 1).
func seedRange(t *testing.T, n int) []uint64 {
	first := uint64(1)
	if f := os.Getenv("S3QUEUE_SIM_FIRST"); f != "" {
		var err error
		if first, err = strconv.ParseUint(f, 10, 64); err != nil {
			t.Fatalf("S3QUEUE_SIM_FIRST=%q: %v", f, err)
		}
	}
	out := make([]uint64, n)
	for i := range out {
		out[i] = first + uint64(i)
	}
	return out
}

// foundSeeds are seeds past the short run that once broke an invariant,
// run by every `go test` too: 280, a handler started 29 s after its lease
// expired (a partitioned worker's clock could not be read, and its lease
// was assumed a third of the timeout long).
var foundSeeds = []uint64{280}

// shortSeeds is how many seeds every `go test` runs (about a minute on two
// cores with the race detector).
const shortSeeds = 150

// Every seed's run keeps every invariant.
func TestSimulation(t *testing.T) {
	var sum summary
	t.Cleanup(func() {
		line := sum.String()
		t.Log(line)
		if os.Getenv("S3QUEUE_SIM_SEEDS") != "" {
			fmt.Println(line) // the soak's figures, for docs/reliability.md
		}
	})
	for _, seed := range seeds(t, shortSeeds) {
		t.Run(fmt.Sprint(seed), func(t *testing.T) {
			t.Parallel()
			var res sim.Result
			synctest.Test(t, func(t *testing.T) { res = sim.Run(seed, sim.Options{}) })
			if f := os.Getenv("S3QUEUE_SIM_TRACE"); f != "" {
				// The whole trace of the run, one request a line, for a
				// replayed seed: S3QUEUE_SIM_SEED=N S3QUEUE_SIM_TRACE=FILE.
				if err := os.WriteFile(fmt.Sprintf("%s.%d", f, seed), []byte(strings.Join(res.Trace, "\n")+"\n"), 0o644); err != nil {
					t.Error(err)
				}
			}
			if len(res.Violations) > 0 {
				// Say whether the seed replays the same break (see
				// TestASeedReplaysExactly on why one may not). The second
				// run gets a bubble of its own: in the first one's, virtual
				// time would start where the first run ended, and every
				// timestamp, task id and ETag would differ.
				var again sim.Result
				synctest.Test(t, func(t *testing.T) { again = sim.Run(seed, sim.Options{}) })
				same := len(again.Violations) > 0 && again.Violations[0] == res.Violations[0]
				t.Errorf("%d violations (a second run of the seed: same first violation %v)\n%s", len(res.Violations), same, res.Report(30))
			}
			sum.add(res)
			if testing.Verbose() {
				t.Logf("%s\ntasks %d, executions %d (duplicates %d), reshards %d, requests %v", res.Plan, res.Tasks, res.Executions, res.Duplicates, res.Reshards, res.Counts)
				if res.QuietReleases > 0 {
					t.Logf("RELEASES %d in the quiet tail, the longest wait for a claim %v", res.QuietReleases, res.ReleaseWait.Round(time.Millisecond))
				}
				if res.Plan.Direct {
					t.Logf("direct dispatch: %d inbox entries, %d moved to the overflow, %d worker leases lost, %d taken over", res.Routed, res.Moved, res.LeaseLosses, res.Takeovers)
				}
			}
		})
	}
}

// summary adds up what the seeds of a run did.
type summary struct {
	mu                                            sync.Mutex
	seeds, failed, tasks, executions, duplicates  int
	reshards, releases, unblocked, deadlineEnds   int
	timedOut, schedSeeds, scheduled               int
	chainSeeds, quietReleases                     int
	releaseWait                                   time.Duration
	direct, routed, moved, leaseLosses, takeovers int
	requests                                      int
	resultsApart, resultsExpired, orphans         int
	faults                                        map[string]int
}

func (s *summary) add(r sim.Result) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.faults == nil {
		s.faults = make(map[string]int)
	}
	s.seeds++
	if len(r.Violations) > 0 {
		s.failed++
	}
	s.tasks += r.Tasks
	s.executions += r.Executions
	s.duplicates += r.Duplicates
	s.reshards += r.Reshards
	s.releases += r.Releases
	s.deadlineEnds += r.DeadlineEnds
	s.timedOut += r.TimedOut
	s.unblocked += r.Unblocked
	if len(r.Plan.Schedules) > 0 {
		s.schedSeeds++
	}
	s.scheduled += r.Scheduled
	if r.Plan.Chains {
		s.chainSeeds++
	}
	s.quietReleases += r.QuietReleases
	s.releaseWait = max(s.releaseWait, r.ReleaseWait)
	if r.Plan.Direct {
		s.direct++
	}
	s.routed += r.Routed
	s.moved += r.Moved
	s.leaseLosses += r.LeaseLosses
	s.takeovers += r.Takeovers
	s.resultsApart += r.ResultsApart
	s.resultsExpired += r.ResultsExpired
	s.orphans += r.OrphansCollected
	for _, op := range []string{"PUT", "GET", "HEAD", "LIST", "DELETE"} {
		s.requests += r.Counts[op]
	}
	for k, v := range r.Faults() {
		s.faults[k] += v
	}
}

func (s *summary) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	keys := make([]string, 0, len(s.faults))
	for k := range s.faults {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	var f []string
	for _, k := range keys {
		f = append(f, fmt.Sprintf("%s %d", k, s.faults[k]))
	}
	return fmt.Sprintf("SIM seeds %d (with violations %d), tasks acknowledged %d, handler runs %d (duplicates after a lost lease %d), reshards %d, releases %d, unblocked %d, requests served %d, faults: %s; direct dispatch: %d seeds, %d inbox entries, %d moved to the overflow, %d worker leases lost, %d taken over; results: %d stored apart, %d expired, %d orphans collected; schedules: %d seeds, %d ticks with a task; ended by their deadline %d, attempts timed out %d; chains: %d seeds, %d dependents released in the quiet tail, claimed within %v",
		s.seeds, s.failed, s.tasks, s.executions, s.duplicates, s.reshards, s.releases, s.unblocked, s.requests, strings.Join(f, ", "),
		s.direct, s.routed, s.moved, s.leaseLosses, s.takeovers, s.resultsApart, s.resultsExpired, s.orphans, s.schedSeeds, s.scheduled, s.deadlineEnds, s.timedOut, s.chainSeeds, s.quietReleases, s.releaseWait.Round(time.Millisecond))
}

// A seed replays exactly: two runs of one seed serve the same requests in
// the same order with the same fates. Anything that decides what happens
// outside the seed (a global random source, map order, draws from one
// source by several goroutines, a select whose ready cases race) shows up
// as a diverging trace. Every seed must replay: by default seeds 1 to 12;
// S3QUEUE_SIM_REPLAY=K hunts over K seeds from S3QUEUE_SIM_FIRST, in
// parallel. A diverging seed prints the trace lines around its first
// difference in both runs.
func TestASeedReplaysExactly(t *testing.T) {
	n, ok := envCount(t, "S3QUEUE_SIM_REPLAY")
	if !ok {
		n = 12
	}
	for _, seed := range seedRange(t, n) {
		t.Run(fmt.Sprint(seed), func(t *testing.T) {
			if ok {
				t.Parallel() // a hunt over many seeds (S3QUEUE_SIM_REPLAY=K)
			}
			var traces [2][]string
			for i := range traces {
				// The second run breaks ties between identical requests
				// the other way: what the Go scheduler decides shows.
				synctest.Test(t, func(t *testing.T) { traces[i] = sim.Run(seed, sim.Options{FlipTies: i == 1}).Trace })
			}
			a, b := traces[0], traces[1]
			i := 0
			for i < len(a) && i < len(b) && a[i] == b[i] {
				i++
			}
			if i == len(a) && i == len(b) {
				return
			}
			lo := max(0, i-3)
			t.Errorf("seed %d diverges at request %d of %d:\nfirst run:\n  %s\nsecond run:\n  %s", seed, i, len(a),
				strings.Join(a[lo:min(i+3, len(a))], "\n  "), strings.Join(b[lo:min(i+3, len(b))], "\n  "))
		})
	}
}

// TestHunt is the teeth of the simulator, for a tree with a known defect
// put back (scripts/sim-teeth.sh, which sets S3QUEUE_SIM_HUNT): it runs
// seeds in order, one at a time, until one breaks an invariant, and says
// how many it took; it fails when none of the K seeds from
// S3QUEUE_SIM_FIRST does (the defect goes unseen: a gap in the
// simulator). Without S3QUEUE_SIM_HUNT it is skipped: on a sound tree
// there is nothing to hunt (TestSimulation checks the seeds keep every
// invariant).
func TestHunt(t *testing.T) {
	n, ok := envCount(t, "S3QUEUE_SIM_HUNT")
	if !ok {
		t.Skip("S3QUEUE_SIM_HUNT=K hunts over K seeds for a defect put back (scripts/sim-teeth.sh)")
	}
	for i, seed := range seedRange(t, n) {
		var res sim.Result
		synctest.Test(t, func(t *testing.T) { res = sim.Run(seed, sim.Options{}) })
		if len(res.Violations) > 0 {
			t.Logf("caught after %d seeds\n%s", i+1, res.Report(30))
			fmt.Printf("HUNT caught seed=%d seeds=%d invariant=%q\n", seed, i+1, res.Violations[0].Invariant)
			return
		}
	}
	fmt.Printf("HUNT none seeds=%d\n", n)
	t.Errorf("none of %d seeds broke an invariant", n)
}

// TestFingerprint prints one digest of the request trace per seed:
// S3QUEUE_SIM_FINGERPRINT=K runs K seeds from S3QUEUE_SIM_FIRST. A refactor
// that must not change behaviour keeps every line identical (compare the
// output before and after with diff).
func TestFingerprint(t *testing.T) {
	n, ok := envCount(t, "S3QUEUE_SIM_FINGERPRINT")
	if !ok {
		t.Skip("S3QUEUE_SIM_FINGERPRINT=K prints the trace digests of K seeds")
	}
	for _, seed := range seedRange(t, n) {
		var res sim.Result
		synctest.Test(t, func(t *testing.T) { res = sim.Run(seed, sim.Options{}) })
		h := sha256.New()
		for _, line := range res.Trace {
			io.WriteString(h, line)
			h.Write([]byte{'\n'})
		}
		fmt.Printf("FINGERPRINT seed=%d requests=%d violations=%d sha256=%x\n", seed, len(res.Trace), len(res.Violations), h.Sum(nil)[:8])
	}
}
