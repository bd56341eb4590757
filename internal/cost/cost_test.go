package cost

import (
	"math"
	"strings"
	"testing"

	"github.com/s3queue/s3queue/s3store"
)

func near(t *testing.T, what string, got, want float64) {
	t.Helper()
	if math.Abs(got-want) > 0.005 {
		t.Errorf("%s = %.4f, want %.4f", what, got, want)
	}
}

// The figures of docs/performance.md#cost-arithmetic.
func TestCostArithmetic(t *testing.T) {
	tasks := func(perTask Requests) float64 {
		return Monthly(Workload{TasksPerDay: 100_000, Rates: Rates{PerTask: perTask}}).Total
	}
	near(t, "1 PUT per task at 100K/day", tasks(Requests{PUT: 1}), 15)
	near(t, "3 PUT + 1 GET per task at 100K/day", tasks(Requests{PUT: 3, GET: 1}), 46.20)
	near(t, "4 PUT + 1 GET per task at 100K/day", tasks(Requests{PUT: 4, GET: 1}), 61.20)

	// 50 holders renewing every 20 s: 180 PUTs per worker-hour.
	holders := Monthly(Workload{Workers: 50, Rates: Rates{PerWorkerHour: Requests{PUT: 3600 / 20}}})
	near(t, "50 holders renewing every 20 s", holders.Total, 32.40)
	near(t, "  as liveness: workers", holders.Source(SourceWorkers), 32.40)
	near(t, "  tasks part", holders.Source(SourceTasks), 0)

	fleet := func(r Requests) float64 { return Monthly(Workload{Rates: Rates{PerFleetHour: r}}).Total }
	near(t, "one LIST per second, fleet-wide", fleet(Requests{LIST: 3600}), 12.96)
	near(t, "one GET per second, fleet-wide", fleet(Requests{GET: 3600}), 1.0368)
	near(t, "16 shards listed every second", fleet(Requests{LIST: 16 * 3600}), 207.36)
	// 1 GET per poll per worker at 500 ms = $2.08 per worker-month; 1 LIST = $26.
	near(t, "GET poll at 500 ms, one worker", Monthly(Workload{Workers: 1, Rates: Rates{PerWorkerHour: Requests{GET: 7200}}}).Total, 2.0736)
	near(t, "LIST poll at 500 ms, one worker", Monthly(Workload{Workers: 1, Rates: Rates{PerWorkerHour: Requests{LIST: 7200}}}).Total, 25.92)
	near(t, "DELETE is free", tasks(Requests{DELETE: 100}), 0)
	near(t, "HEAD is priced as GET", tasks(Requests{HEAD: 1}), tasks(Requests{GET: 1}))
}

func TestBillBreakdown(t *testing.T) {
	b := Monthly(Workload{TasksPerDay: 100_000, Workers: 50, Rates: Rates{
		PerTask:       Requests{PUT: 3, GET: 1, LIST: 0.5},
		PerWorkerHour: Requests{GET: 144},
		PerFleetHour:  Requests{PUT: 360},
	}})
	// tasks: 3M x (3.5 x 0.005 + 1 x 0.0004)/1000 = 53.70
	near(t, "tasks", b.Source(SourceTasks), 53.70)
	// workers: 50 x 144 x 720 x 0.0004/1000 = 2.0736
	near(t, "workers", b.Source(SourceWorkers), 2.0736)
	// fleet: 360 x 720 x 0.005/1000 = 1.296
	near(t, "fleet", b.Source(SourceFleet), 1.296)
	near(t, "liveness", b.Source(SourceLiveness), 2.0736+1.296)
	near(t, "total", b.Total, 53.70+2.0736+1.296)
	var byOp float64
	for _, op := range s3store.Ops() {
		byOp += b.Op(op)
	}
	near(t, "sum by type", byOp, b.Total)
	near(t, "LIST", b.Op(s3store.OpList), 3e6*0.5*0.005/1000)
	if got, want := b.Requests.PUT, 3e6*3+360*720.0; got != want {
		t.Errorf("PUT requests = %v, want %v", got, want)
	}
	near(t, "per task ($ per million)", b.PerTask()*1e6, b.Total/3)

	var sb strings.Builder
	b.Print(&sb)
	for _, want := range []string{"100,000 tasks/day", "50 workers", "per task: PUT=3.00,GET=1.00,LIST=0.500", "liveness: workers", "total: $57.07/month"} {
		if !strings.Contains(sb.String(), want) {
			t.Errorf("bill lacks %q:\n%s", want, sb.String())
		}
	}
}

func TestCustomPrices(t *testing.T) {
	b := Monthly(Workload{TasksPerDay: 1000, Rates: Rates{PerTask: Requests{PUT: 1, GET: 1}}, Prices: Prices{PutClass: 1, GetClass: 2}})
	near(t, "custom prices", b.Total, 30*1000*(1+2)/1000.0)
}

func TestFromCounts(t *testing.T) {
	var c s3store.Counts
	c[s3store.OpPut][s3store.OutcomeOK] = 3
	c[s3store.OpPut][s3store.OutcomePrecondition] = 1 // refused writes are billed too
	c[s3store.OpGet][s3store.OutcomeNotFound] = 2
	c[s3store.OpList][s3store.OutcomeOK] = 5
	r := FromCounts(c)
	if r != (Requests{PUT: 4, GET: 2, LIST: 5}) {
		t.Fatalf("FromCounts = %+v", r)
	}
	if r.PutClass() != 9 || r.GetClass() != 2 || r.Total() != 11 {
		t.Fatalf("classes: put %v get %v total %v", r.PutClass(), r.GetClass(), r.Total())
	}
}

func TestParseRequests(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want Requests
	}{
		{"PUT=3.1,GET=1.2,LIST=0.05", Requests{PUT: 3.1, GET: 1.2, LIST: 0.05}},
		{" put=3 head=0.5 ", Requests{PUT: 3, HEAD: 0.5}},
		{"DELETE=1,", Requests{DELETE: 1}},
		{"", Requests{}},
		{"none", Requests{}},
	} {
		got, err := ParseRequests(tc.in)
		if err != nil || got != tc.want {
			t.Errorf("ParseRequests(%q) = %+v, %v; want %+v", tc.in, got, err, tc.want)
		}
		if err == nil {
			back, err := ParseRequests(got.String())
			if err != nil || back != got {
				t.Errorf("round trip of %q through %q = %+v, %v", tc.in, got.String(), back, err)
			}
		}
	}
	for _, bad := range []string{"PUT", "POST=1", "PUT=x", "PUT=-1", "PUT=1,PUT=2", "GET=Inf", "GET=NaN"} {
		if _, err := ParseRequests(bad); err == nil {
			t.Errorf("ParseRequests(%q) accepted", bad)
		}
	}
}

func TestProfiles(t *testing.T) {
	for _, name := range []string{"default", "economy", "heavy"} {
		p, ok := LookupProfile(name)
		if !ok {
			t.Fatalf("no profile %q", name)
		}
		if p.About == "" || p.Rates.PerTask.PUT < 3 || p.Rates.PerTask.GET < 1 {
			t.Errorf("profile %q looks unmeasured: %+v", name, p)
		}
	}
	if _, ok := LookupProfile("nope"); ok {
		t.Error("unknown profile found")
	}
}
