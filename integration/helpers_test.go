package integration

import (
	"context"
	"testing"

	"github.com/s3queue/s3queue/integration/harness"
	"github.com/s3queue/s3queue/s3store/awss3"
)

// storePrefix is where newStore roots its store inside the fresh bucket, so
// every test also exercises the prefix-to-key mapping a deployment uses.
const storePrefix = "queue"

// newStore opens the project's S3 store on a fresh bucket of srv, under
// storePrefix.
func newStore(t *testing.T, srv *harness.Server) *awss3.Store {
	t.Helper()
	st, err := awss3.New(context.Background(), awss3.Config{
		Bucket:    srv.NewBucket(t),
		Prefix:    storePrefix,
		Endpoint:  srv.Endpoint,
		Region:    srv.Region,
		PathStyle: true,
		AccessKey: srv.AccessKey,
		SecretKey: srv.SecretKey,
	})
	if err != nil {
		t.Fatalf("open awss3 store on %s: %v", srv.Name, err)
	}
	return st
}
