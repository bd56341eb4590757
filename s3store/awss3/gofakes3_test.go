package awss3_test

import (
	"testing"

	"github.com/s3queue/s3queue/s3store"
	"github.com/s3queue/s3queue/s3store/storetest"
	"github.com/s3queue/s3queue/s3store/storetest/fakes3"
)

// The conformance suite against gofakes3, in process: a third S3
// implementation on every go test, with its measured differences (412 on
// If-Match of a missing key, conditional DELETE ignored).
func TestConformance_GoFakeS3(t *testing.T) {
	srv := fakes3.Start(t)
	storetest.RunWith(t, func(t *testing.T) s3store.Store { return srv.Store(t, "q") }, fakes3.Options)
}
