package worker_test

import (
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/s3queue/s3queue/internal/settings"
	"github.com/s3queue/s3queue/task"
	"github.com/s3queue/s3queue/worker"
)

// The defaults a zero field takes, as they were before they were declared
// in ConfigKeys: New and queue.toml must keep them.
func TestZeroFieldsTakeTheDefaults(t *testing.T) {
	var c worker.Config
	settings.Of[worker.Config]().Fill(&c)
	want := worker.Config{
		Concurrency: 4, QueuePolicy: worker.Block, CrashPolicy: worker.CrashFail, PollMin: 200 * time.Millisecond, PollMax: 5 * time.Second, PollMultiplier: 2, PollPace: 1800 * time.Millisecond, PollBatch: 10,
		ScanLag: 5 * time.Second, ScanLookback: time.Hour, LeaseMargin: 2 * time.Second, ShutdownGrace: 30 * time.Second,
		MemberTTL: 30 * time.Second, StandbyPoll: time.Second, IdleLeave: time.Minute, SleepAfter: 30 * time.Second,
		BellPoll: 1500 * time.Millisecond, SleepScan: 10 * time.Minute, AwakeGrace: 5 * time.Second, DrainMax: 10 * time.Minute,
		MaxShards: 256, ReshardAfter: time.Minute, RootMembers: 16, PauseCheckInterval: 10 * time.Second,
		ResultInlineMax: task.MaxResultBytes, MaxResultBytes: 4 << 20,
		LeaseDuration: time.Minute, LeaseRenewalInterval: 20 * time.Second, OverflowScavengeInterval: 2 * time.Minute,
	}
	if !reflect.DeepEqual(c, want) {
		t.Errorf("filled zero Config:\n got %+v\nwant %+v", c, want)
	}

	// Set fields stay; an empty OwnShards that is not nil pins the worker
	// to no shard, so it is kept.
	set := worker.Config{Concurrency: 9, PollMax: time.Minute, OwnShards: []int{}}
	settings.Of[worker.Config]().Fill(&set)
	if set.Concurrency != 9 || set.PollMax != time.Minute || set.OwnShards == nil {
		t.Errorf("Fill changed set fields: %+v", set)
	}
}

func TestValidateNamesTheKey(t *testing.T) {
	for _, tc := range []struct {
		cfg  worker.Config
		want string
	}{
		{worker.Config{Concurrency: 20000}, "worker.concurrency: 20000 out of range 1..10000"},
		{worker.Config{MaxResultBytes: 1}, "worker.max_result_bytes: 1 out of range 1024..67108864"},
		{worker.Config{PollMin: -time.Second}, "worker.poll_min: duration -1s must be positive"},
		{worker.Config{PollMin: time.Minute}, "worker.poll_min (1m0s) is more than worker.poll_max (5s)"},
		{worker.Config{MemberTTL: 5 * time.Second}, "worker.member_ttl (5s) is less than 3 × worker.lease_margin"},
	} {
		c := tc.cfg
		settings.Of[worker.Config]().Fill(&c)
		if err := settings.Of[worker.Config]().Validate(&c); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%+v: error %v, want %q", tc.cfg, err, tc.want)
		}
	}
}
