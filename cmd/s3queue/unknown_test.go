package main

import (
	"context"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"github.com/s3queue/s3queue/s3store"
	"github.com/s3queue/s3queue/s3store/mem"
	"github.com/s3queue/s3queue/task"
)

// A submit whose create may have landed, with the store down for longer
// than the command's minute of trying to learn whether it did, prints the
// task's id and exits 9 (outcome unknown), naming --id; the same submit
// again with --id ID then makes the task exist once, whatever became of
// the first.
func TestASubmitWhoseOutcomeIsUnknownExits9AndIsSafeAgainWithID(t *testing.T) {
	for _, landed := range []bool{true, false} {
		t.Run(map[bool]string{true: "the first create landed", false: "it did not"}[landed], func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				inner := mem.New()
				st := s3store.NewFaults(inner)
				submit := func(args ...string) cliResult {
					var out, errb syncBuffer
					a := &app{stdin: strings.NewReader(""), stdout: &out, stderr: &errb, environ: func() []string { return nil },
						open: func(context.Context, string) (s3store.Store, error) { return st, nil }}
					code := a.report(a.dispatch(context.Background(), append([]string{"submit", "--store", "s3://q", "--log-level", "error", "--type", "resize", "--input", `{"n": 1}`}, args...)))
					return cliResult{code, out.String(), errb.String()}
				}
				must := submit() // the queue exists
				if must.code != 0 {
					t.Fatalf("first submit: exit %d: %s", must.code, must.stderr)
				}
				st.Inject(s3store.Fault{Op: s3store.OpPut, KeyPrefix: "tasks/", KeySuffix: ".json", Err: s3store.ErrInjected500, AfterWrite: landed, Times: 1,
					Hook: func(string) {
						// Every task request fails for five minutes.
						st.Inject(s3store.Fault{Op: s3store.OpGet, KeyPrefix: "tasks/", Err: s3store.ErrInjected503})
						st.Inject(s3store.Fault{Op: s3store.OpPut, KeyPrefix: "tasks/", Err: s3store.ErrInjected503})
						go func() {
							time.Sleep(5 * time.Minute)
							st.Clear()
						}()
					}})
				r := submit()
				id := strings.TrimSpace(r.stdout)
				wantExit(t, r, exitUnknown, "--id "+id)
				if !task.ValidID(id) {
					t.Fatalf("stdout %q, want the task's id", r.stdout)
				}
				time.Sleep(5 * time.Minute)
				again := submit("--id", id)
				if again.code != 0 || strings.TrimSpace(again.stdout) != id {
					t.Fatalf("submit --id %s: exit %d, stdout %q, stderr %q", id, again.code, again.stdout, again.stderr)
				}
				n := 0
				page, err := inner.List(context.Background(), "tasks/", s3store.ListOptions{})
				if err != nil {
					t.Fatal(err)
				}
				for _, o := range page.Objects {
					if strings.HasSuffix(o.Key, id+".json") {
						n++
					}
				}
				if n != 1 {
					t.Fatalf("%d objects of task %s, want 1", n, id)
				}
			})
		})
	}
}
