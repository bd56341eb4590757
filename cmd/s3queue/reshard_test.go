package main

import (
	"context"
	"strings"
	"testing"

	"github.com/s3queue/s3queue/s3store"
	"github.com/s3queue/s3queue/s3store/mem"
	"github.com/s3queue/s3queue/shards"
	"github.com/s3queue/s3queue/task"
)

// reshard grows a running queue's shard count: it prints the old and the
// new count, tasks submitted before it are still found, and every bad
// request is one clear line and a non-zero exit.
func TestReshard(t *testing.T) {
	store, _ := newStore(t)
	wantExit(t, cli(t, "", "reshard", "--shards", "32", "--store", store), exitNotFound, "no queue in "+store)
	if keys := storeKeys(t, store); len(keys) != 0 {
		t.Fatalf("a reshard of an empty store wrote %v", keys)
	}
	var ids []string
	for range 20 {
		ids = append(ids, strings.TrimSpace(must(t, "submit", "--store", store, "--type", "x")))
	}
	if out := must(t, "reshard", "--shards", "32", "--store", store); out != "resharded: 16 -> 32 shards\n" {
		t.Fatalf("reshard printed %q, want the old and the new count", out)
	}
	moved := 0
	for _, id := range ids {
		if tk := getTask(t, store, id); tk.ID != id || tk.Shard != task.ShardFor(id, 16) {
			t.Fatalf("task %s after the reshard: %+v, want it found where it was placed", id, tk)
		}
		if task.ShardFor(id, 16) != task.ShardFor(id, 32) {
			moved++
		}
	}
	if moved == 0 {
		t.Fatal("no task's shard differs under 32 shards: the test proves nothing")
	}
	if out := must(t, "doctor", "--store", store); !strings.Contains(out, "32 shards, layout format 2") {
		t.Fatalf("doctor after the reshard:\n%s\nwant 32 shards, layout format 2", out)
	}
	if out := must(t, "reshard", "--shards", "32", "--store", store); !strings.Contains(out, "already has 32 shards") {
		t.Fatalf("a second reshard to 32 printed %q", out)
	}
	for _, tc := range []struct {
		args []string
		code int
		want string
	}{
		{[]string{"--shards", "16"}, exitUsage, "shrinking is not supported: the queue has 32 shards"},
		{nil, exitUsage, "--shards N is required"},
		{[]string{"--shards", "1001"}, exitUsage, "--shards N is required, from the queue's current count up to 1000 (got 1001)"},
		{[]string{"--shards", "x"}, exitUsage, `--shards "x": want a whole number`},
	} {
		r := cli(t, "", append([]string{"reshard", "--store", store}, tc.args...)...)
		wantExit(t, r, tc.code, tc.want)
		if strings.Count(r.stderr, "\n") != 1 {
			t.Errorf("reshard %v: stderr %q, want one line", tc.args, r.stderr)
		}
	}
	wantExit(t, cli(t, "", "reshard", "--shards", "64", "--store", "mem://q"), exitUsage, "mem:// store lives only in the memory of this process")
}

// A reshard whose manifest write landed with its response lost (412 on
// the store's retry) prints the reshard it made, not "nothing to do".
func TestAReshardWhoseResponseWasLostPrintsTheReshard(t *testing.T) {
	ctx := context.Background()
	st := s3store.NewFaults(mem.New())
	if _, err := shards.Open(ctx, st, 4); err != nil {
		t.Fatal(err)
	}
	st.Inject(s3store.Fault{Op: s3store.OpPut, KeyPrefix: shards.ManifestKey, Err: s3store.ErrPreconditionFailed, AfterWrite: true, Times: 1})
	var out, errb syncBuffer
	a := &app{stdin: strings.NewReader(""), stdout: &out, stderr: &errb, environ: func() []string { return nil },
		open: func(context.Context, string) (s3store.Store, error) { return st, nil }}
	if code := a.report(a.dispatch(ctx, []string{"reshard", "--shards", "8", "--store", "s3://q"})); code != 0 || out.String() != "resharded: 4 -> 8 shards\n" {
		t.Fatalf("exit %d, stdout %q, stderr %q; want \"resharded: 4 -> 8 shards\"", code, out.String(), errb.String())
	}
}
