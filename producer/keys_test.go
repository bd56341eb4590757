package producer_test

import (
	"reflect"
	"strings"
	"testing"

	"github.com/s3queue/s3queue/internal/settings"
	"github.com/s3queue/s3queue/producer"
)

// The defaults a zero field takes: New and queue.toml must keep them.
func TestZeroFieldsTakeTheDefaults(t *testing.T) {
	var c producer.Config
	settings.Of[producer.Config]().Fill(&c)
	want := producer.Config{BatchParallelism: 8, MaxQueueDepth: 0, QueuePolicy: producer.Block}
	if !reflect.DeepEqual(c, want) {
		t.Errorf("filled zero Config:\n got %+v\nwant %+v", c, want)
	}
	// A negative parallelism took the default before it was a key.
	c = producer.Config{BatchParallelism: -3, MaxQueueDepth: producer.Unbounded, QueuePolicy: producer.Reject}
	settings.Of[producer.Config]().Fill(&c)
	if c.BatchParallelism != 8 || c.MaxQueueDepth != producer.Unbounded || c.QueuePolicy != producer.Reject {
		t.Errorf("Fill changed set fields or kept a negative parallelism: %+v", c)
	}
}

func TestValidateNamesTheKey(t *testing.T) {
	for _, tc := range []struct {
		cfg  producer.Config
		want string
	}{
		{producer.Config{BatchParallelism: 20000}, "producer.batch_parallelism: 20000 out of range 1..10000"},
		{producer.Config{MaxQueueDepth: -2}, "producer.max_queue_depth: -2 out of range -1..1000000"},
		{producer.Config{QueuePolicy: "fifo"}, `producer.queue_policy: invalid queue policy "fifo"`},
	} {
		c := tc.cfg
		settings.Of[producer.Config]().Fill(&c)
		if err := settings.Of[producer.Config]().Validate(&c); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%+v: error %v, want %q", tc.cfg, err, tc.want)
		}
	}
}
