package main

import (
	"context"
	"flag"
	"fmt"
	"math"
	"strings"

	"github.com/s3queue/s3queue/internal/cost"
	"github.com/s3queue/s3queue/s3store"
)

var costCommand = &command{
	name: "cost", nargs: 0, noStore: true, json: true,
	summary: "estimate the monthly S3 request bill of a workload from measured request rates",
	examples: []string{
		"s3queue cost --tasks-per-day 100000 --workers 50",
		"s3queue cost --profile economy --tasks-per-day 2000000 --workers 20 --json",
	},
	details: "Prices a 30-day month at S3 Standard list prices (PUT/COPY/POST/LIST $0.005 per 1,000,\n" +
		"GET/HEAD $0.0004 per 1,000, DELETE free) from three rates: requests per task, per worker-hour\n" +
		"(what every worker costs whatever the load) and per fleet-hour (what the fleet costs whatever\n" +
		"its size: the anchor member, the monitor). --profile picks rates measured by the benchmarks\n" +
		"(integration/bench_*_test.go, docs/performance.md); --per-task, --idle-per-worker-hour and\n" +
		"--idle-per-fleet-hour replace them, as TYPE=NUMBER lists: \"PUT=3.1,GET=1.2,LIST=0.05\".\n" +
		"Touches no store.",
	define: func(a *app, fs *flag.FlagSet) func(context.Context, []string) error {
		var o costOptions
		fs.Float64Var(&o.tasksPerDay, "tasks-per-day", 100_000, "tasks submitted per `day`")
		fs.IntVar(&o.workers, "workers", 50, "how many worker `processes` run")
		names := make([]string, 0, 3)
		for _, p := range cost.Profiles() {
			names = append(names, p.Name)
		}
		fs.StringVar(&o.profile, "profile", cost.DefaultProfile.Name, "measured `rates` to start from: "+strings.Join(names, ", "))
		fs.StringVar(&o.perTask, "per-task", "", "requests per task, e.g. `PUT=3.1,GET=1.2,LIST=0.05` (replaces the profile's)")
		fs.StringVar(&o.perWorkerHour, "idle-per-worker-hour", "", "requests per worker-hour whatever the load, e.g. `GET=144,HEAD=144`")
		fs.StringVar(&o.perFleetHour, "idle-per-fleet-hour", "", "requests per fleet-hour whatever its size, e.g. `PUT=360,GET=1800,LIST=150`")
		fs.Float64Var(&o.prices.PutClass, "put-price", cost.S3Standard.PutClass, "`dollars` per 1,000 PUT, COPY, POST and LIST requests")
		fs.Float64Var(&o.prices.GetClass, "get-price", cost.S3Standard.GetClass, "`dollars` per 1,000 GET and HEAD requests")
		return func(context.Context, []string) error {
			return a.cost(o)
		}
	},
}

type costOptions struct {
	tasksPerDay                          float64
	workers                              int
	profile                              string
	perTask, perWorkerHour, perFleetHour string
	prices                               cost.Prices
}

// costJSON is the --json form of a bill.
type costJSON struct {
	Profile       string             `json:"profile"`
	TasksPerDay   float64            `json:"tasks_per_day"`
	Workers       int                `json:"workers"`
	Prices        cost.Prices        `json:"prices_per_1000"`
	PerTask       costRequests       `json:"per_task"`
	PerWorkerHour costRequests       `json:"per_worker_hour"`
	PerFleetHour  costRequests       `json:"per_fleet_hour"`
	Sources       []costJSONLine     `json:"sources"`
	ByType        map[string]float64 `json:"dollars_by_type"` // by request type, in lower case
	Requests      costRequests       `json:"requests_per_month"`
	Total         float64            `json:"dollars_per_month"`
}

type costJSONLine struct {
	Source   string       `json:"source"`
	Requests costRequests `json:"requests_per_month"`
	Dollars  float64      `json:"dollars_per_month"`
}

// costRequests is a cost.Requests with the snake_case keys of every
// --json output ("put", not "PUT").
type costRequests struct {
	Put    float64 `json:"put"`
	Get    float64 `json:"get"`
	Head   float64 `json:"head"`
	List   float64 `json:"list"`
	Delete float64 `json:"delete"`
}

func requestsJSON(r cost.Requests) costRequests {
	return costRequests{Put: r.PUT, Get: r.GET, Head: r.HEAD, List: r.LIST, Delete: r.DELETE}
}

func (a *app) cost(o costOptions) error {
	switch {
	case o.tasksPerDay < 0 || math.IsNaN(o.tasksPerDay) || math.IsInf(o.tasksPerDay, 0):
		return usageError("cost: --tasks-per-day %v must be a non-negative number", o.tasksPerDay)
	case o.workers < 0:
		return usageError("cost: --workers %d must not be negative", o.workers)
	case o.prices.PutClass < 0 || o.prices.GetClass < 0 || math.IsNaN(o.prices.PutClass) || math.IsNaN(o.prices.GetClass):
		return usageError("cost: prices must not be negative")
	}
	p, ok := cost.LookupProfile(o.profile)
	if !ok {
		var names []string
		for _, q := range cost.Profiles() {
			names = append(names, q.Name)
		}
		return usageError("cost: unknown --profile %q (want %s)", o.profile, strings.Join(names, ", "))
	}
	rates := p.Rates
	for _, f := range []struct {
		flag, val string
		into      *cost.Requests
	}{
		{"--per-task", o.perTask, &rates.PerTask},
		{"--idle-per-worker-hour", o.perWorkerHour, &rates.PerWorkerHour},
		{"--idle-per-fleet-hour", o.perFleetHour, &rates.PerFleetHour},
	} {
		if f.val == "" {
			continue
		}
		r, err := cost.ParseRequests(f.val)
		if err != nil {
			return usageError("cost: %s: %v", f.flag, err)
		}
		*f.into = r
	}
	bill := cost.Monthly(cost.Workload{TasksPerDay: o.tasksPerDay, Workers: o.workers, Rates: rates, Prices: o.prices})
	if a.jsonOut {
		out := costJSON{Profile: p.Name, TasksPerDay: o.tasksPerDay, Workers: o.workers, Prices: bill.Prices,
			PerTask: requestsJSON(rates.PerTask), PerWorkerHour: requestsJSON(rates.PerWorkerHour), PerFleetHour: requestsJSON(rates.PerFleetHour),
			ByType: map[string]float64{}, Requests: requestsJSON(bill.Requests), Total: bill.Total}
		for _, l := range bill.Lines {
			out.Sources = append(out.Sources, costJSONLine{Source: string(l.Source), Requests: requestsJSON(l.Requests), Dollars: l.Dollars})
		}
		for _, op := range s3store.Ops() {
			out.ByType[strings.ToLower(op.String())] = bill.Op(op)
		}
		return writeJSON(a.stdout, out)
	}
	fmt.Fprintf(a.stdout, "rates:    profile %q: %s\n", p.Name, p.About)
	if o.perTask != "" || o.perWorkerHour != "" || o.perFleetHour != "" {
		fmt.Fprintf(a.stdout, "          (some rates replaced by flags)\n")
	}
	bill.Print(a.stdout)
	return nil
}
