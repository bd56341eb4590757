// Package cost turns counted S3 requests into a monthly bill at S3 Standard
// list prices. It is the arithmetic behind `s3queue cost` and the
// benchmarks' dollar figures (integration/bench_*_test.go, docs/performance.md):
// the requests themselves always come from an s3store.Counter in a real run,
// never from an estimate.
//
// The model is linear in three sources:
//
//   - tasks: requests per task, times tasks per month;
//   - liveness per worker: requests every worker makes per hour whatever
//     the load (a standby's reads of the fleet object and its clock check);
//   - liveness per fleet: requests the fleet makes per hour whatever its
//     size (the anchor member's renewals, its doorbell reads and slow scans,
//     the monitor's sweeps).
//
// Per-task rates are measured at a given load and are valid near it: at a
// light load they carry the discovery LISTs of polling between tasks, at a
// heavy load those amortize to almost nothing (see docs/performance.md).
package cost

import (
	"fmt"
	"io"
	"math"
	"sort"
	"strconv"
	"strings"
	"text/tabwriter"

	"github.com/s3queue/s3queue/s3store"
)

// Prices are dollars per 1,000 requests of each class.
type Prices struct {
	PutClass float64 `json:"put_class"` // PUT, COPY, POST, LIST
	GetClass float64 `json:"get_class"` // GET, HEAD (and SELECT, not used)
}

// S3Standard is the S3 Standard list price (us-east-1): PUT/COPY/POST/LIST
// $0.005 per 1,000, GET/HEAD $0.0004 per 1,000. DELETE is free.
var S3Standard = Prices{PutClass: 0.005, GetClass: 0.0004}

// HoursPerMonth and DaysPerMonth: the bill's month is 30 days, as in
// docs/performance.md#cost-arithmetic.
const (
	DaysPerMonth  = 30
	HoursPerMonth = DaysPerMonth * 24
)

// Per returns the price of one request of type op.
func (p Prices) Per(op s3store.Op) float64 {
	switch op {
	case s3store.OpPut, s3store.OpList:
		return p.PutClass / 1000
	case s3store.OpGet, s3store.OpHead:
		return p.GetClass / 1000
	}
	return 0 // DELETE is free
}

// Requests is a number of requests of each type. Fractions are allowed:
// rates per task or per hour are averages.
type Requests struct {
	PUT, GET, HEAD, LIST, DELETE float64
}

// FromCounts converts a counter snapshot (every outcome counts: S3 bills
// refused conditional writes and 404s too).
func FromCounts(c s3store.Counts) Requests {
	var r Requests
	for _, op := range s3store.Ops() {
		r.set(op, float64(c.Of(op)))
	}
	return r
}

// Of returns the requests of type op.
func (r Requests) Of(op s3store.Op) float64 {
	switch op {
	case s3store.OpPut:
		return r.PUT
	case s3store.OpGet:
		return r.GET
	case s3store.OpHead:
		return r.HEAD
	case s3store.OpList:
		return r.LIST
	case s3store.OpDelete:
		return r.DELETE
	}
	return 0
}

func (r *Requests) set(op s3store.Op, v float64) {
	switch op {
	case s3store.OpPut:
		r.PUT = v
	case s3store.OpGet:
		r.GET = v
	case s3store.OpHead:
		r.HEAD = v
	case s3store.OpList:
		r.LIST = v
	case s3store.OpDelete:
		r.DELETE = v
	}
}

// Scale returns r times k.
func (r Requests) Scale(k float64) Requests {
	return Requests{r.PUT * k, r.GET * k, r.HEAD * k, r.LIST * k, r.DELETE * k}
}

// Add returns r plus o.
func (r Requests) Add(o Requests) Requests {
	return Requests{r.PUT + o.PUT, r.GET + o.GET, r.HEAD + o.HEAD, r.LIST + o.LIST, r.DELETE + o.DELETE}
}

// Sub returns r minus o.
func (r Requests) Sub(o Requests) Requests { return r.Add(o.Scale(-1)) }

// PutClass is PUT + LIST, the requests billed at the PUT price.
func (r Requests) PutClass() float64 { return r.PUT + r.LIST }

// GetClass is GET + HEAD, the requests billed at the GET price.
func (r Requests) GetClass() float64 { return r.GET + r.HEAD }

// Total is every request.
func (r Requests) Total() float64 { return r.PUT + r.GET + r.HEAD + r.LIST + r.DELETE }

// Dollars is what r costs at prices p.
func (r Requests) Dollars(p Prices) float64 {
	var d float64
	for _, op := range s3store.Ops() {
		d += r.Of(op) * p.Per(op)
	}
	return d
}

// String renders the non-zero types, "PUT=3 GET=1.02 LIST=0.05", in the
// form ParseRequests reads.
func (r Requests) String() string {
	var parts []string
	for _, op := range s3store.Ops() {
		if v := r.Of(op); v != 0 {
			parts = append(parts, op.String()+"="+formatNum(v))
		}
	}
	if len(parts) == 0 {
		return "none"
	}
	return strings.Join(parts, ",")
}

func formatNum(v float64) string {
	switch a := math.Abs(v); {
	case a >= 100:
		return strconv.FormatFloat(v, 'f', 0, 64)
	case a >= 1:
		return strconv.FormatFloat(v, 'f', 2, 64)
	}
	return strconv.FormatFloat(v, 'f', 3, 64)
}

// ParseRequests reads "PUT=3.1,GET=1.2,LIST=0.05" (types in any order and
// case, separated by commas or spaces; absent types are 0; "none" or ""
// is all zero).
func ParseRequests(s string) (Requests, error) {
	var r Requests
	s = strings.TrimSpace(s)
	if s == "" || strings.EqualFold(s, "none") {
		return r, nil
	}
	seen := map[s3store.Op]bool{}
	for _, f := range strings.FieldsFunc(s, func(c rune) bool { return c == ',' || c == ' ' }) {
		name, val, ok := strings.Cut(f, "=")
		if !ok {
			return Requests{}, fmt.Errorf("%q: want TYPE=NUMBER, e.g. PUT=3.1", f)
		}
		op, ok := parseOp(name)
		if !ok {
			return Requests{}, fmt.Errorf("%q: unknown request type %q (want PUT, GET, HEAD, LIST or DELETE)", f, name)
		}
		if seen[op] {
			return Requests{}, fmt.Errorf("%q: %s given twice", f, op)
		}
		seen[op] = true
		v, err := strconv.ParseFloat(strings.TrimSpace(val), 64)
		if err != nil || v < 0 || math.IsInf(v, 0) || math.IsNaN(v) {
			return Requests{}, fmt.Errorf("%q: %q is not a non-negative number", f, val)
		}
		r.set(op, v)
	}
	return r, nil
}

func parseOp(name string) (s3store.Op, bool) {
	name = strings.ToUpper(strings.TrimSpace(name))
	for _, op := range s3store.Ops() {
		if op.String() == name {
			return op, true
		}
	}
	return 0, false
}

// Rates are requests by type per unit of each source of cost.
type Rates struct {
	// PerTask: every request made on a task's behalf, from submit to its
	// outcome, including the discovery LISTs of polling at the measured
	// load, the producer's fleet reads and the monitor's share.
	PerTask Requests
	// PerWorkerHour: what each worker costs per hour whatever the load
	// (a standby reading the fleet object).
	PerWorkerHour Requests
	// PerFleetHour: what the fleet costs per hour whatever its size (the
	// anchor member's renewals, doorbell reads and slow scans, the
	// monitor's sweeps of idle shards).
	PerFleetHour Requests
}

// Workload is what a month of the queue looks like.
type Workload struct {
	TasksPerDay float64
	Workers     int
	Rates       Rates
	// Prices default to S3Standard when zero.
	Prices Prices
}

// Source names one line of a bill's breakdown by source.
type Source string

// Sources of cost.
const (
	SourceTasks    Source = "tasks"
	SourceWorkers  Source = "liveness: workers"
	SourceFleet    Source = "liveness: fleet"
	SourceLiveness Source = "liveness" // workers + fleet
)

// Line is one source's requests and dollars in a month.
type Line struct {
	Source   Source
	Requests Requests
	Dollars  float64
}

// Bill is a month at a workload, broken down by source and by type.
type Bill struct {
	Workload Workload
	Prices   Prices
	Lines    []Line // tasks, liveness: workers, liveness: fleet
	Requests Requests
	Total    float64
}

// Monthly prices a month (30 days) of w.
func Monthly(w Workload) Bill {
	p := w.Prices
	if p == (Prices{}) {
		p = S3Standard
	}
	tasks := w.TasksPerDay * DaysPerMonth
	b := Bill{Workload: w, Prices: p}
	for _, l := range []Line{
		{Source: SourceTasks, Requests: w.Rates.PerTask.Scale(tasks)},
		{Source: SourceWorkers, Requests: w.Rates.PerWorkerHour.Scale(HoursPerMonth * float64(w.Workers))},
		{Source: SourceFleet, Requests: w.Rates.PerFleetHour.Scale(HoursPerMonth)},
	} {
		l.Dollars = l.Requests.Dollars(p)
		b.Lines = append(b.Lines, l)
		b.Requests = b.Requests.Add(l.Requests)
		b.Total += l.Dollars
	}
	return b
}

// Source returns the dollars of one source; SourceLiveness sums workers and
// fleet.
func (b Bill) Source(s Source) float64 {
	var d float64
	for _, l := range b.Lines {
		if l.Source == s || s == SourceLiveness && l.Source != SourceTasks {
			d += l.Dollars
		}
	}
	return d
}

// Op returns the dollars of one request type.
func (b Bill) Op(op s3store.Op) float64 { return b.Requests.Of(op) * b.Prices.Per(op) }

// PerTask is the whole bill divided by the tasks of the month ("all-in").
func (b Bill) PerTask() float64 {
	tasks := b.Workload.TasksPerDay * DaysPerMonth
	if tasks == 0 {
		return 0
	}
	return b.Total / tasks
}

// Print writes the bill as a readable table.
func (b Bill) Print(w io.Writer) {
	wl := b.Workload
	fmt.Fprintf(w, "workload: %s tasks/day (%s/month, %.2f tasks/s), %d workers, 30-day month\n",
		humanInt(wl.TasksPerDay), humanInt(wl.TasksPerDay*DaysPerMonth), wl.TasksPerDay/86400, wl.Workers)
	fmt.Fprintf(w, "prices:   PUT/COPY/POST/LIST $%g per 1,000; GET/HEAD $%g per 1,000; DELETE free\n\n", b.Prices.PutClass, b.Prices.GetClass)
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', tabwriter.AlignRight)
	fmt.Fprint(tw, "source\trate\t")
	for _, op := range s3store.Ops() {
		fmt.Fprintf(tw, "%s\t", op)
	}
	fmt.Fprint(tw, "$/month\t\n")
	rates := map[Source]string{
		SourceTasks:   "per task: " + wl.Rates.PerTask.String(),
		SourceWorkers: "per worker-hour: " + wl.Rates.PerWorkerHour.String(),
		SourceFleet:   "per fleet-hour: " + wl.Rates.PerFleetHour.String(),
	}
	for _, l := range b.Lines {
		fmt.Fprintf(tw, "%s\t%s\t", l.Source, rates[l.Source])
		for _, op := range s3store.Ops() {
			fmt.Fprintf(tw, "%s\t", humanInt(l.Requests.Of(op)))
		}
		fmt.Fprintf(tw, "%.2f\t\n", l.Dollars)
	}
	fmt.Fprint(tw, "total\t\t")
	for _, op := range s3store.Ops() {
		fmt.Fprintf(tw, "%s\t", humanInt(b.Requests.Of(op)))
	}
	fmt.Fprintf(tw, "%.2f\t\n", b.Total)
	fmt.Fprint(tw, "$ by type\t\t")
	for _, op := range s3store.Ops() {
		fmt.Fprintf(tw, "%.2f\t", b.Op(op))
	}
	fmt.Fprint(tw, "\t\n")
	tw.Flush()
	fmt.Fprintf(w, "\ntotal: $%.2f/month (tasks $%.2f, liveness $%.2f)", b.Total, b.Source(SourceTasks), b.Source(SourceLiveness))
	if pt := b.PerTask(); pt > 0 {
		fmt.Fprintf(w, "; $%.2f per million tasks all-in", pt*1e6)
	}
	fmt.Fprintln(w)
}

// humanInt renders a count with thousands separators, rounded.
func humanInt(v float64) string {
	n := int64(math.Round(v))
	neg := n < 0
	if neg {
		n = -n
	}
	s := strconv.FormatInt(n, 10)
	var out []byte
	for i := range s {
		if i > 0 && (len(s)-i)%3 == 0 {
			out = append(out, ',')
		}
		out = append(out, s[i])
	}
	if neg {
		return "-" + string(out)
	}
	return string(out)
}

// Profile is a named set of measured rates.
type Profile struct {
	Name  string
	About string // settings and the benchmark that measured the rates
	Rates Rates
}

// Profiles returns the measured rate sets, by name, sorted.
func Profiles() []Profile {
	out := []Profile{DefaultProfile, EconomyProfile, HeavyProfile}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out
}

// LookupProfile returns the profile called name.
func LookupProfile(name string) (Profile, bool) {
	for _, p := range Profiles() {
		if strings.EqualFold(p.Name, name) {
			return p, true
		}
	}
	return Profile{}, false
}
