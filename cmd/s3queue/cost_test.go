package main

import (
	"encoding/json"
	"math"
	"strings"
	"testing"

	"github.com/s3queue/s3queue/internal/cost"
)

func TestCostArithmeticFloor(t *testing.T) {
	// 3 PUT + 1 GET per task at 100K tasks/day = $46.20 (docs/performance.md#cost-arithmetic).
	out := must(t, "cost", "--tasks-per-day", "100000", "--workers", "50", "--per-task", "PUT=3,GET=1",
		"--idle-per-worker-hour", "none", "--idle-per-fleet-hour", "none")
	for _, want := range []string{"100,000 tasks/day", "50 workers", "total: $46.20/month", "(some rates replaced by flags)"} {
		if !strings.Contains(out, want) {
			t.Errorf("cost output lacks %q:\n%s", want, out)
		}
	}
	// 50 holders renewing every 20 s = $32.40.
	out = must(t, "cost", "--tasks-per-day=0", "--workers=50", "--per-task=none", "--idle-per-worker-hour=PUT=180", "--idle-per-fleet-hour=none")
	if !strings.Contains(out, "total: $32.40/month") {
		t.Errorf("holders:\n%s", out)
	}
}

func TestCostJSON(t *testing.T) {
	out := must(t, "cost", "--json", "--tasks-per-day", "1000000", "--workers", "200", "--per-task", "PUT=3,GET=1,LIST=0.1",
		"--idle-per-worker-hour", "GET=144", "--idle-per-fleet-hour", "PUT=360", "--put-price", "0.005", "--get-price", "0.0004")
	var got struct {
		Workers       int                `json:"workers"`
		PerTask       costRequests       `json:"per_task"`
		Total         float64            `json:"dollars_per_month"`
		ByType        map[string]float64 `json:"dollars_by_type"`
		Sources       []costJSONLine     `json:"sources"`
		PerWorkerHour costRequests       `json:"per_worker_hour"`
	}
	if err := json.Unmarshal([]byte(out), &got); err != nil {
		t.Fatalf("not JSON: %v\n%s", err, out)
	}
	// tasks: 30M x (3.1 x 0.005 + 1 x 0.0004)/1000 = 477; workers: 200 x 144
	// x 720 x 0.0004/1000 = 8.2944; fleet: 360 x 720 x 0.005/1000 = 1.296.
	want := 477 + 8.2944 + 1.296
	if math.Abs(got.Total-want) > 1e-6 || got.Workers != 200 || got.PerTask.List != 0.1 || got.PerWorkerHour.Get != 144 {
		t.Fatalf("got %+v, want total %v", got, want)
	}
	if len(got.Sources) != 3 || math.Abs(got.ByType["list"]-30e6*0.1*0.005/1000) > 1e-6 {
		t.Fatalf("breakdown: %+v", got)
	}
}

func TestCostProfiles(t *testing.T) {
	for _, p := range cost.Profiles() {
		out := must(t, "cost", "--profile", p.Name)
		if !strings.Contains(out, "profile \""+p.Name+"\"") || !strings.Contains(out, "total: $") {
			t.Errorf("profile %s:\n%s", p.Name, out)
		}
	}
	if out := must(t, "help", "cost"); !strings.Contains(out, "-per-task") || !strings.Contains(out, "-idle-per-worker-hour") {
		t.Errorf("help cost:\n%s", out)
	}
}

func TestCostUsageErrors(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--per-task", "PUT=x"}, "cost: --per-task"},
		{[]string{"--idle-per-worker-hour", "POST=1"}, "unknown request type"},
		{[]string{"--profile", "nope"}, "unknown --profile"},
		{[]string{"--workers", "-1"}, "must not be negative"},
		{[]string{"--tasks-per-day", "-5"}, "non-negative"},
		{[]string{"--get-price", "-1"}, "prices must not be negative"},
		{[]string{"--store", "mem://x"}, "unknown flag --store"},
		{[]string{"extra"}, "unexpected argument"},
	} {
		wantExit(t, cli(t, "", append([]string{"cost"}, tc.args...)...), exitUsage, tc.want)
	}
}
