package metrics

import (
	"fmt"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/s3queue/s3queue/internal/events"
)

// A registry gives out at most MaxTypeLabels type label values: the
// events of any further type count under type="other", so a monitor that
// meets thousands of types in the bucket keeps a bounded set of series.
func TestTypeLabelsAreCapped(t *testing.T) {
	r := New(Config{})
	const types = MaxTypeLabels + 50
	for i := range types {
		r.Observe(events.Event{Kind: events.Succeeded, Source: events.SourceWorker, Type: fmt.Sprintf("type-%03d", i), TaskID: "x", Duration: time.Millisecond})
	}
	// A type seen early keeps its name.
	r.Observe(events.Event{Kind: events.Succeeded, Source: events.SourceWorker, Type: "type-000", TaskID: "y", Duration: time.Millisecond})

	if n := testutil.CollectAndCount(r.attempts); n != MaxTypeLabels+1 {
		t.Errorf("%d s3queue_task_attempts_total series for %d types, want %d (and other)", n, types, MaxTypeLabels+1)
	}
	if n := testutil.CollectAndCount(r.events); n != MaxTypeLabels+1 {
		t.Errorf("%d s3queue_events_total series for %d types, want %d (and other)", n, types, MaxTypeLabels+1)
	}
	if n := testutil.CollectAndCount(r.handler); n != MaxTypeLabels+1 {
		t.Errorf("%d handler-duration series for %d types, want %d", n, types, MaxTypeLabels+1)
	}
	if got := testutil.ToFloat64(r.attempts.WithLabelValues(OtherType, "succeeded")); got != types-MaxTypeLabels {
		t.Errorf("type=%q counted %v events, want %d", OtherType, got, types-MaxTypeLabels)
	}
	if got := testutil.ToFloat64(r.attempts.WithLabelValues("type-000", "succeeded")); got != 2 {
		t.Errorf("type-000 counted %v events, want 2", got)
	}
}
