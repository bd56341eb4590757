// Package fakes3 runs gofakes3 (github.com/johannesboyne/gofakes3, with its
// in-memory s3mem backend) as an S3 server inside a test process, so that
// the awss3 backend meets a third S3 implementation, besides MinIO and
// versitygw, on every `go test`, without Docker or a build.
//
// gofakes3 differs from AWS in two measured ways, which Options records for
// the conformance suite: a PUT with If-Match on a missing key answers 412
// ("the object does not exist") instead of 404, without creating the key,
// and a DELETE with a stale If-Match is ignored (the object is deleted), as
// on MinIO. Its conditional PUT is atomic.
//
// It is for tests only; it must not be imported by the queue's packages.
package fakes3

import (
	"context"
	"fmt"
	"net/http/httptest"
	"sync/atomic"
	"testing"

	"github.com/johannesboyne/gofakes3"
	"github.com/johannesboyne/gofakes3/backend/s3mem"

	"github.com/s3queue/s3queue/s3store"
	"github.com/s3queue/s3queue/s3store/awss3"
	"github.com/s3queue/s3queue/s3store/storetest"
)

// Version is the gofakes3 release the server runs (go.mod pins it).
const Version = "v1.2.0"

// Static credentials: gofakes3 accepts any signature.
const (
	AccessKey = "fakes3-access"
	SecretKey = "fakes3-secret"
)

// Options are gofakes3's measured differences for storetest.RunWith.
var Options = storetest.Options{
	ParentKeys:        storetest.ParentKeysCoexist,
	IfMatchMissing:    s3store.MissingPrecondition,
	ConditionalDelete: s3store.DeleteIgnored,
}

// Server is one gofakes3 server on a loopback port.
type Server struct {
	// URL is the endpoint, like http://127.0.0.1:PORT.
	URL     string
	backend *s3mem.Backend
	buckets atomic.Int64
}

// Start starts a server that stops when the test ends.
func Start(t testing.TB) *Server {
	t.Helper()
	backend := s3mem.New()
	faker := gofakes3.New(backend, gofakes3.WithoutVersioning())
	srv := httptest.NewServer(faker.Server())
	t.Cleanup(srv.Close)
	return &Server{URL: srv.URL, backend: backend}
}

// NewBucket creates an empty bucket and returns its name.
func (s *Server) NewBucket(t testing.TB) string {
	t.Helper()
	name := fmt.Sprintf("bucket-%d", s.buckets.Add(1))
	if err := s.backend.CreateBucket(name); err != nil {
		t.Fatalf("fakes3: create bucket %s: %v", name, err)
	}
	return name
}

// Store opens an awss3 store on a new bucket of the server, under prefix.
func (s *Server) Store(t testing.TB, prefix string) *awss3.Store {
	t.Helper()
	st, err := awss3.New(context.Background(), awss3.Config{
		Bucket:    s.NewBucket(t),
		Prefix:    prefix,
		Endpoint:  s.URL,
		Region:    "us-east-1",
		PathStyle: true,
		AccessKey: AccessKey,
		SecretKey: SecretKey,
	})
	if err != nil {
		t.Fatalf("fakes3: open store: %v", err)
	}
	return st
}

// StoreURL is the s3:// URL of prefix in a new bucket of the server, for
// the command line and storeurl.Open. Credentials come from the
// environment: see SetCredentials.
func (s *Server) StoreURL(t testing.TB, prefix string) string {
	t.Helper()
	return fmt.Sprintf("s3://%s/%s?endpoint=%s&region=us-east-1&path_style=true", s.NewBucket(t), prefix, s.URL)
}

// SetCredentials sets the AWS environment to the server's credentials for
// the rest of the test.
func SetCredentials(t testing.TB) {
	t.Helper()
	for k, v := range map[string]string{
		"AWS_ACCESS_KEY_ID":           AccessKey,
		"AWS_SECRET_ACCESS_KEY":       SecretKey,
		"AWS_SESSION_TOKEN":           "",
		"AWS_PROFILE":                 "",
		"AWS_CONFIG_FILE":             "/dev/null",
		"AWS_SHARED_CREDENTIALS_FILE": "/dev/null",
		"AWS_REGION":                  "us-east-1",
	} {
		t.Setenv(k, v)
	}
}
