package dashboard_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"sync"
	"testing"
	"time"

	"github.com/s3queue/s3queue/internal/dashboard"
	"github.com/s3queue/s3queue/monitor"
	"github.com/s3queue/s3queue/task"
)

// slowTasks requeues like a real S3 under load: each requeue takes
// latency (or fails for the ids in bad), and it records how many ran at
// once.
type slowTasks struct {
	latency       time.Duration
	bad           map[string]bool
	mu            sync.Mutex
	inFlight, max int
	done          int
}

func (s *slowTasks) Get(context.Context, string) (*task.Task, error) {
	return nil, errors.New("unused")
}
func (s *slowTasks) Cancel(context.Context, string) (bool, error) { return false, errors.New("unused") }
func (s *slowTasks) Requeue(ctx context.Context, id string) error {
	s.mu.Lock()
	s.inFlight++
	s.max = max(s.max, s.inFlight)
	s.mu.Unlock()
	defer func() { s.mu.Lock(); s.inFlight--; s.mu.Unlock() }()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-time.After(s.latency):
	}
	if s.bad[id] {
		return errors.New("403 access denied")
	}
	s.mu.Lock()
	s.done++
	s.mu.Unlock()
	return nil
}

// Requeuing the dead of a type runs a bounded number of requeues at once,
// each under its own timeout: 200 dead tasks of 20 ms each, sequential
// under one 2 s timeout, failed the later ones on a slow store while the
// answer said "requeued". The answer counts what was and was not requeued.
func TestRequeueAllDeadIsBoundedAndTruthful(t *testing.T) {
	const n = 200
	var dead []monitor.DeadTask
	bad := map[string]bool{}
	for i := range n {
		id := fmt.Sprintf("dead-%03d", i)
		dead = append(dead, monitor.DeadTask{ID: id, Type: "mail"})
		if i%50 == 7 {
			bad[id] = true
		}
	}
	dead = append(dead, monitor.DeadTask{ID: "other-type", Type: "resize"})
	tasks := &slowTasks{latency: 20 * time.Millisecond, bad: bad}
	d, err := dashboard.New(dashboard.Config{State: fixedState{monitor.State{Dead: dead}}, Tasks: tasks, Token: secret,
		Timeout: 2 * time.Second, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		t.Fatal(err)
	}
	code, body := do(t, d, "POST", "/api/dead/requeue?type=mail", "Bearer "+secret)
	if code != http.StatusOK {
		t.Fatalf("requeue the dead: %d %s", code, body)
	}
	var got dashboard.ActionResponse
	if err := json.Unmarshal([]byte(body), &got); err != nil {
		t.Fatal(err)
	}
	if got.RequeuedCount == nil || got.FailedCount == nil || *got.RequeuedCount != n-len(bad) || *got.FailedCount != len(bad) ||
		len(got.Requeued) != n-len(bad) || len(got.Failed) != len(bad) || got.Status != "partly requeued" {
		t.Fatalf("answer: status %q, %d requeued, %d failed (%v); want partly requeued, %d and %d", got.Status,
			len(got.Requeued), len(got.Failed), got.Failed, n-len(bad), len(bad))
	}
	for _, f := range got.Failed {
		if !bad[f.ID] || f.Error != "403 access denied" {
			t.Errorf("failed %s: %s; want only the refused ones, with why", f.ID, f.Error)
		}
	}
	if tasks.done != n-len(bad) {
		t.Errorf("the store requeued %d, the answer says %d", tasks.done, *got.RequeuedCount)
	}
	if tasks.max > 16 || tasks.max < 2 {
		t.Errorf("%d requeues ran at once, want between 2 and 16", tasks.max)
	}

	// None requeued says so.
	all := map[string]bool{}
	for _, dt := range dead {
		all[dt.ID] = true
	}
	tasks.bad = all
	_, body = do(t, d, "POST", "/api/dead/requeue?type=resize", "Bearer "+secret)
	if err := json.Unmarshal([]byte(body), &got); err != nil {
		t.Fatal(err)
	}
	if got.Status != "not requeued" || *got.RequeuedCount != 0 || *got.FailedCount != 1 {
		t.Errorf("all failed: %s", body)
	}
}
