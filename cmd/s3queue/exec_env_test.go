package main

import (
	"context"
	"io"
	"log/slog"
	"testing"

	"github.com/s3queue/s3queue/task"
)

// A handler runs without the worker's S3 credentials (it could rewrite any
// task with them, or print them into its task's error), its Pod Identity
// token and the dashboard's token, but with the rest of the worker's
// environment, the token file's path included.
func TestHandlersDoNotInheritTheWorkersCredentials(t *testing.T) {
	t.Setenv("AWS_ACCESS_KEY_ID", "AKIAWORKER")
	t.Setenv("AWS_SECRET_ACCESS_KEY", "worker-secret")
	t.Setenv("AWS_SESSION_TOKEN", "worker-token")
	t.Setenv("AWS_CONTAINER_AUTHORIZATION_TOKEN", "pod-identity-token")
	t.Setenv("S3QUEUE_DASHBOARD_TOKEN", "dashboard-token-0123456789")
	t.Setenv("AWS_CONTAINER_AUTHORIZATION_TOKEN_FILE", "/var/run/secrets/pods.eks.amazonaws.com/serviceaccount/eks-pod-identity-token")
	t.Setenv("AWS_REGION", "eu-west-3")
	h := execHandler{typ: "env", log: slog.New(slog.NewTextHandler(io.Discard, nil)),
		command: `printf '"%s|%s|%s|%s|%s|%s|%s"' "${AWS_ACCESS_KEY_ID-unset}" "${AWS_SECRET_ACCESS_KEY-unset}" "${AWS_SESSION_TOKEN-unset}" ` +
			`"${AWS_CONTAINER_AUTHORIZATION_TOKEN-unset}" "${S3QUEUE_DASHBOARD_TOKEN-unset}" "${AWS_CONTAINER_AUTHORIZATION_TOKEN_FILE##*/}" "$AWS_REGION"`}
	got, err := h.handle(context.Background(), &task.Task{ID: "01JDXYZ0000000000000000000", Type: "env"})
	if err != nil {
		t.Fatal(err)
	}
	if want := `"unset|unset|unset|unset|unset|eks-pod-identity-token|eu-west-3"`; string(got) != want {
		t.Errorf("handler saw %s, want %s", got, want)
	}
}
