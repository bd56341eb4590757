package main

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/s3queue/s3queue/internal/pause"
	"github.com/s3queue/s3queue/s3store"
	"github.com/s3queue/s3queue/shards"
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
	// Every key docs/cli.md lists is there, empty when there is nothing
	// to say: a script reads .reason without testing for it.
	wantKeys := func(out string) {
		t.Helper()
		var m map[string]any
		if err := json.Unmarshal([]byte(out), &m); err != nil {
			t.Fatal(err)
		}
		for _, k := range []string{"queue_paused", "paused_types", "version", "updated_at", "updated_by", "reason"} {
			if _, ok := m[k]; !ok {
				t.Errorf("--json printed %s, without %q", out, k)
			}
		}
	}
	wantKeys(must(t, "paused", "--json", "--store", store))
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
	if out := must(t, "paused", "--json", "--store", store); !strings.Contains(out, `"reason": ""`) {
		t.Errorf("paused --json after a resume (no reason) printed %s, want \"reason\": \"\"", out)
	} else {
		wantKeys(out)
	}
	if out := must(t, "paused", "--store", store); !strings.Contains(out, "paused types:  none") {
		t.Errorf("paused printed\n%s", out)
	}
	wantExit(t, cli(t, "", "pause", "", "--store", store), exitUsage, "pause: invalid task: type must be 1..128 characters, got 0")
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

// pause checks its types as submit checks a task's (one function,
// task.ValidType): a name no task can have is refused before anything is
// stored. A well-formed name that nothing cheaply known runs (the
// configuration, the fleet object's workers) is paused with a warning.
func TestPauseChecksItsTypes(t *testing.T) {
	store, _ := newStore(t)
	must(t, "submit", "--store", store, "--type", "job")
	for _, typ := range []string{"bad/type", "has space", strings.Repeat("x", 200)} {
		wantExit(t, cli(t, "", "pause", typ, "--store", store), exitUsage, "pause: invalid task: type")
		wantExit(t, cli(t, "", "resume", typ, "--store", store), exitUsage, "resume: invalid task: type")
		r := cli(t, "", "submit", "--type", typ, "--store", store)
		wantExit(t, r, exitUsage, "submit: invalid task: type")
	}
	if out := must(t, "paused", "--json", "--store", store); !strings.Contains(out, `"paused_types": []`) {
		t.Fatalf("a refused pause was stored: %s", out)
	}

	r := cli(t, "", "pause", "nosuchtype", "--store", store)
	if r.code != 0 || !strings.Contains(r.stdout, "paused types:  nosuchtype") {
		t.Fatalf("pause nosuchtype: exit %d\n%s%s", r.code, r.stdout, r.stderr)
	}
	if want := `s3queue: warning: pause: no worker of the fleet nor the configuration runs type "nosuchtype"`; !strings.HasPrefix(r.stderr, want) {
		t.Errorf("pause nosuchtype: stderr %q, want a warning %q", r.stderr, want)
	}
	// A type of the configuration's handlers is known without a request.
	cfg := writeConfig(t, "[handlers]\nmail = \"cat\"\n")
	if r := cli(t, "", "pause", "mail", "--store", store, "--config", cfg); r.code != 0 || r.stderr != "" {
		t.Errorf("pause mail with [handlers] mail: exit %d, stderr %q; want no warning", r.code, r.stderr)
	}
	// So is a type a worker of the fleet runs.
	wcfg := writeConfig(t, fastWorker)
	stderr, stop := background(t, "worker", "--store", store, "--config", wcfg, "--exec", "job=cat")
	waitFor(t, "the worker to join the fleet", func() bool {
		obj, err := openStore(t, store).Get(context.Background(), shards.FleetKey)
		return err == nil && strings.Contains(string(obj.Body), `"job"`)
	})
	if r := cli(t, "", "pause", "job", "--store", store); r.code != 0 || r.stderr != "" {
		t.Errorf("pause job with a worker running job: exit %d, stderr %q; want no warning", r.code, r.stderr)
	}
	if code := stop(); code != 0 {
		t.Errorf("worker exit %d:\n%s", code, stderr)
	}

	// A name an older s3queue stored unchecked can still be resumed.
	body, _ := json.Marshal(map[string]any{"version": 9, "types": []string{"bad/type", "job"}, "updated_at": time.Now()})
	if _, err := openStore(t, store).Put(context.Background(), pause.Key, body, s3store.PutOptions{}); err != nil {
		t.Fatal(err)
	}
	if out := must(t, "resume", "bad/type", "--store", store); !strings.Contains(out, "paused types:  job\n") {
		t.Errorf("resume of a stored bad name printed\n%s", out)
	}
}
