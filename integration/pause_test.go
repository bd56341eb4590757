package integration

import (
	"encoding/json"
	"slices"
	"testing"
	"time"

	"github.com/s3queue/s3queue/task"
)

// Pause and resume through the binary, on MinIO, with two worker
// processes: a paused type is not run by either while another type runs;
// its tasks stay pending, no attempt used, and run once it is resumed.
func TestPauseAndResumeThroughTheBinaryWithTwoWorkers(t *testing.T) {
	q := newMinIOQueue(t, 2, 3*time.Minute)
	ctx := q.ctx
	bin := buildCLI(t)
	env := []string{"S3QUEUE_STORE=" + q.url, "S3QUEUE_WORKER_PAUSE_CHECK_INTERVAL=500ms", "S3QUEUE_WORKER_POLL_MAX=1s"}
	runCLI(t, ctx, bin, env, "pause", "mail", "--reason", "SMTP provider down")
	var workers []*cliProcess
	for _, id := range []string{"A", "B"} {
		workers = append(workers, startCLI(t, bin, append(slices.Clone(env), "S3QUEUE_WORKER_ID="+id),
			"worker", "--exec", "mail=cat", "--exec", "job=cat"))
	}
	var mail, jobs []string
	for range 4 {
		mail = append(mail, submitCLI(t, ctx, bin, env, "mail", `{"n":1}`, time.Minute))
		jobs = append(jobs, submitCLI(t, ctx, bin, env, "job", `{"n":2}`, time.Minute))
	}
	all := func(ids []string, status task.Status) bool {
		for _, id := range ids {
			if getCLI(t, ctx, bin, env, id).Status != status {
				return false
			}
		}
		return true
	}
	waitUntil(t, ctx, "the job tasks to run", time.Minute, func() bool { return all(jobs, task.Succeeded) })
	for _, id := range mail {
		if tk := getCLI(t, ctx, bin, env, id); tk.Status != task.Pending || tk.Attempt != 0 {
			t.Fatalf("paused mail task %s is %s at attempt %d, want pending with no attempt used", id, tk.Status, tk.Attempt)
		}
	}
	var st struct {
		QueuePaused bool     `json:"queue_paused"`
		PausedTypes []string `json:"paused_types"`
		Reason      string   `json:"reason"`
	}
	if err := json.Unmarshal(runCLI(t, ctx, bin, env, "paused", "--json"), &st); err != nil ||
		st.QueuePaused || !slices.Equal(st.PausedTypes, []string{"mail"}) || st.Reason != "SMTP provider down" {
		t.Fatalf("s3queue paused --json: %+v (%v)", st, err)
	}

	runCLI(t, ctx, bin, env, "resume")
	waitUntil(t, ctx, "the mail tasks to run after the resume", time.Minute, func() bool { return all(mail, task.Succeeded) })
	for _, id := range mail {
		if tk := getCLI(t, ctx, bin, env, id); tk.Attempt != 1 {
			t.Errorf("resumed mail task %s ran at attempt %d, want 1", id, tk.Attempt)
		}
	}
	for _, w := range workers {
		w.stop(t)
	}
}
