package sim

import (
	"fmt"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"
)

// TestMembershipScale measures membership traffic as the fleet grows
// (issue 10, item 3): fleets of S3QUEUE_SCALE_MEMBERS workers (default
// 10,100,1000), one shard each, at a light load of 2 tasks/s per worker so
// that the fleet's own traffic shows, with the default root_members (16)
// and with every member renewing in fleet.json (root_members 1,000, the
// design before leased members). It prints, per fleet, the workers'
// requests on fleet.json and fleet/leases/ per member-hour and the 412s per
// successful fleet write.
//
//	S3QUEUE_SCALE=1 go test ./internal/sim -run TestMembershipScale -timeout 60m -v | grep ^MEMBERS
func TestMembershipScale(t *testing.T) {
	if os.Getenv("S3QUEUE_SCALE") == "" {
		t.Skip("set S3QUEUE_SCALE=1 to measure membership traffic (tens of minutes on 2 cores)")
	}
	sizes := []int{10, 100, 1000}
	if s := os.Getenv("S3QUEUE_SCALE_MEMBERS"); s != "" {
		sizes = nil
		for _, f := range strings.Split(s, ",") {
			n, err := strconv.Atoi(f)
			if err != nil {
				t.Fatalf("S3QUEUE_SCALE_MEMBERS=%q: %v", s, err)
			}
			sizes = append(sizes, n)
		}
	}
	roots := []int{0, 1000}
	if s := os.Getenv("S3QUEUE_SCALE_ROOT"); s != "" {
		n, err := strconv.Atoi(s)
		if err != nil {
			t.Fatalf("S3QUEUE_SCALE_ROOT=%q: %v", s, err)
		}
		roots = []int{n}
	}
	fmt.Println("MEMBERS | workers | root_members | members | fleet GET | PUT | LIST | 412 | req/member-h | 412/fleet write | done/s | all joined after | join: fleet PUTs | 412s | wall")
	for _, n := range sizes {
		for _, root := range roots {
			opts := reportOptions(n, min(n, 1000))
			opts.TasksPerSecond = 2 * float64(n)
			opts.RootMembers = root
			opts.Warmup, opts.Window, opts.Tail = 60*time.Second, 30*time.Second, 5*time.Second
			began := time.Now()
			res := runScale(t, opts)
			label := fmt.Sprint(root)
			if root == 0 {
				label = "16 (default)"
			}
			fmt.Printf("MEMBERS | %d | %s | %d | %d | %d | %d | %d | %.0f | %.2f | %.0f | %v | %d | %d | %.0fs\n",
				n, label, res.Members, res.FleetGets, res.FleetPuts, res.FleetLists, res.Fleet412s,
				res.FleetRequestsPerMemberHour(), res.ConflictsPerFleetWrite(), res.Throughput,
				joined(res.Joined), res.JoinFleetPuts, res.Join412s, time.Since(began).Seconds())
		}
	}
}

func joined(d time.Duration) string {
	if d == 0 {
		return "not in the warm-up"
	}
	return d.String()
}
