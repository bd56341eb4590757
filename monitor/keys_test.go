package monitor_test

import (
	"context"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/s3queue/s3queue/internal/settings"
	"github.com/s3queue/s3queue/monitor"
	"github.com/s3queue/s3queue/s3store/mem"
)

// The defaults a zero or negative field takes, as they were before they
// were declared in ConfigKeys: New and queue.toml must keep them.
func TestUnsetFieldsTakeTheDefaults(t *testing.T) {
	want := monitor.Config{Interval: 5 * time.Second, PageSize: 1000, LeaseMargin: 2 * time.Second,
		RepairAfter: time.Minute, Retention: 7 * 24 * time.Hour, StaleAfter: 10 * time.Second,
		SweepMax: 10 * time.Minute, FullSweep: 6 * time.Hour, Scheduler: true, ScheduleRefresh: time.Minute}
	var zero monitor.Config
	settings.Of[monitor.Config]().Fill(&zero)
	if !reflect.DeepEqual(zero, want) {
		t.Errorf("filled zero Config:\n got %+v\nwant %+v", zero, want)
	}
	neg := monitor.Config{Interval: -1, PageSize: -1, ShardsPerTick: -1, LeaseMargin: -1, RepairAfter: -1,
		StaleAfter: -1, SweepMax: -1, FullSweep: -1, ScheduleRefresh: -1}
	settings.Of[monitor.Config]().Fill(&neg)
	if !reflect.DeepEqual(neg, want) {
		t.Errorf("filled negative Config:\n got %+v\nwant %+v", neg, want)
	}
	off := monitor.Config{NoScheduler: true}
	settings.Of[monitor.Config]().Fill(&off)
	if off.Scheduler {
		t.Errorf("NoScheduler: scheduler filled with true")
	}
	keep := monitor.Config{KeepForever: true}
	settings.Of[monitor.Config]().Fill(&keep)
	if keep.Retention != 0 {
		t.Errorf("KeepForever: retention filled with %v", keep.Retention)
	}
}

func TestNewRefusesNegativeRetention(t *testing.T) {
	_, err := monitor.New(context.Background(), mem.New(), monitor.Config{Retention: -time.Hour})
	if err == nil || !strings.Contains(err.Error(), "monitor.retention: duration -1h0m0s must not be negative") {
		t.Errorf("error %v, want one naming monitor.retention", err)
	}
}
