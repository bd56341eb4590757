package main

import (
	"context"
	"io"
	"log/slog"
	"testing"

	"github.com/s3queue/s3queue/task"
)

// A handler runs without the worker's S3 credentials (it could rewrite any
// task with them, or print them into its task's error) but with the rest of
// the worker's environment.
func TestHandlersDoNotInheritTheWorkersCredentials(t *testing.T) {
	t.Setenv("AWS_ACCESS_KEY_ID", "AKIAWORKER")
	t.Setenv("AWS_SECRET_ACCESS_KEY", "worker-secret")
	t.Setenv("AWS_SESSION_TOKEN", "worker-token")
	t.Setenv("AWS_REGION", "eu-west-3")
	h := execHandler{typ: "env", log: slog.New(slog.NewTextHandler(io.Discard, nil)),
		command: `printf '"%s|%s|%s|%s"' "${AWS_ACCESS_KEY_ID-unset}" "${AWS_SECRET_ACCESS_KEY-unset}" "${AWS_SESSION_TOKEN-unset}" "$AWS_REGION"`}
	got, err := h.handle(context.Background(), &task.Task{ID: "01JDXYZ0000000000000000000", Type: "env"})
	if err != nil {
		t.Fatal(err)
	}
	if want := `"unset|unset|unset|eu-west-3"`; string(got) != want {
		t.Errorf("handler saw %s, want %s", got, want)
	}
}
