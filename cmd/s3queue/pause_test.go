package main

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/s3queue/s3queue/task"
)

func TestPauseResumePausedCommands(t *testing.T) {
	store, _ := newStore(t)
	wantExit(t, cli(t, "", "paused", "--store", store), exitNotFound, "no queue in "+store)
	must(t, "submit", "--store", store, "--type", "job")
	state := func(args ...string) pauseJSON {
		t.Helper()
		var s pauseJSON
		out := must(t, append(args, "--json", "--store", store)...)
		if err := json.Unmarshal([]byte(out), &s); err != nil {
			t.Fatalf("%s --json printed %q: %v", args[0], out, err)
		}
		return s
	}
	if s := state("paused"); s.QueuePaused || len(s.PausedTypes) != 0 || s.PausedTypes == nil {
		t.Fatalf("paused on a fresh queue: %+v, want nothing paused and an empty list", s)
	}
	out := must(t, "pause", "mail", "sms", "--reason", "SMTP provider down", "--store", store)
	for _, want := range []string{"queue:         running", "paused types:  mail, sms", "(SMTP provider down)"} {
		if !strings.Contains(out, want) {
			t.Errorf("pause printed\n%s\nwant a line with %q", out, want)
		}
	}
	if s := state("pause"); !s.QueuePaused || strings.Join(s.PausedTypes, ",") != "mail,sms" || s.Version != 2 {
		t.Fatalf("after pausing the queue: %+v", s)
	}
	if s := state("resume", "mail"); !s.QueuePaused || strings.Join(s.PausedTypes, ",") != "sms" {
		t.Fatalf("after resuming mail: %+v, want the queue and sms still paused", s)
	}
	if s := state("resume"); s.QueuePaused || len(s.PausedTypes) != 0 {
		t.Fatalf("after resume: %+v, want nothing paused", s)
	}
	if out := must(t, "paused", "--store", store); !strings.Contains(out, "paused types:  none") {
		t.Errorf("paused printed\n%s", out)
	}
	wantExit(t, cli(t, "", "pause", "", "--store", store), exitUsage, "empty task type")
}

// A worker started while a type is paused runs the other types and leaves
// the paused one pending, its attempt unused; after resume it runs it.
func TestWorkerHonoursPauseAndResume(t *testing.T) {
	store, _ := newStore(t)
	cfg := writeConfig(t, strings.Replace(fastWorker, "[worker]\n", "[worker]\npause_check_interval = \"100ms\"\n", 1)+`
[handlers]
mail = "cat"
job = "cat"
`)
	mail := submit(t, store, cfg, "mail", "--input", `{}`)
	must(t, "pause", "mail", "--store", store)
	job := submit(t, store, cfg, "job", "--input", `{}`)
	stderr, stop := background(t, "worker", "--store", store, "--config", cfg)
	if got := waitTerminal(t, store, job); got.Status != task.Succeeded {
		t.Fatalf("job: %s", got.Status)
	}
	if got := getTask(t, store, mail); got.Status != task.Pending || got.Attempt != 0 {
		t.Fatalf("paused mail task is %s at attempt %d, want pending, no attempt used", got.Status, got.Attempt)
	}
	must(t, "resume", "mail", "--store", store)
	if got := waitTerminal(t, store, mail); got.Status != task.Succeeded || got.Attempt != 1 {
		t.Fatalf("mail after resume: %s at attempt %d", got.Status, got.Attempt)
	}
	if code := stop(); code != 0 {
		t.Errorf("worker exit %d; stderr:\n%s", code, stderr)
	}
}
