package harness

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"net/url"
	"os"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/minio/minio-go/v7"
	"github.com/minio/minio-go/v7/pkg/credentials"
)

// Server names, as accepted by Start and S3QUEUE_TEST_PROVIDER.
const (
	MinIOName     = "minio"
	VersityGWName = "versitygw"
)

// Region is the region every test server is configured with.
const Region = "us-east-1"

// Default credentials of the servers the harness starts. Overridden by
// S3QUEUE_TEST_ACCESS_KEY / S3QUEUE_TEST_SECRET_KEY.
const (
	defaultAccessKey = "s3queue-test"
	defaultSecretKey = "s3queue-test-secret"
)

// Environment variables read by the harness.
const (
	EnvEndpoint       = "S3QUEUE_TEST_ENDPOINT"
	EnvProvider       = "S3QUEUE_TEST_PROVIDER"
	EnvAccessKey      = "S3QUEUE_TEST_ACCESS_KEY"
	EnvSecretKey      = "S3QUEUE_TEST_SECRET_KEY"
	EnvBinDir         = "S3QUEUE_TEST_BINDIR"
	EnvMinIOImage     = "S3QUEUE_MINIO_IMAGE"
	EnvVersityGWImage = "S3QUEUE_VERSITYGW_IMAGE"
	// EnvVerbose=1 prints server and testcontainers output to stderr.
	EnvVerbose = "S3QUEUE_TEST_VERBOSE"
)

// startTimeout bounds how long a server may take to answer S3 requests.
const startTimeout = 90 * time.Second

// Server is one running S3 server.
type Server struct {
	// Name is MinIOName or VersityGWName.
	Name string
	// Endpoint is the server's base URL, http://127.0.0.1:PORT.
	Endpoint  string
	AccessKey string
	SecretKey string
	Region    string
	// How is how the server was started: "external", "docker IMAGE" or
	// "process PATH".
	How string
	// InNetwork is the endpoint containers on the server's Docker network
	// reach it at (http://ALIAS:PORT), for a server of Network.StartOn;
	// empty otherwise.
	InNetwork string

	client *minio.Client
	stop   func(context.Context) error
	// logs returns the server's recent output, for failure reports.
	logs func() string

	stopOnce sync.Once
	stopErr  error
}

// Minio returns a minio-go client for the server: an S3 client independent of
// the project's own store, for setting up and checking what tests do.
func (s *Server) Minio() *minio.Client { return s.client }

// Logs returns the server's recent output (empty for external servers).
func (s *Server) Logs() string {
	if s.logs == nil {
		return ""
	}
	return s.logs()
}

// Stop stops the server and removes its data. Stopping an external server
// does nothing. Stop is idempotent.
func (s *Server) Stop(ctx context.Context) error {
	s.stopOnce.Do(func() {
		if s.stop != nil {
			s.stopErr = s.stop(ctx)
		}
	})
	return s.stopErr
}

// StoreURL returns the s3:// URL of a store rooted at bucket/prefix on this
// server. Credentials are not part of it: they come from AWS_ACCESS_KEY_ID and
// AWS_SECRET_ACCESS_KEY, which Main sets for the process.
func (s *Server) StoreURL(bucket, prefix string) string {
	q := url.Values{}
	q.Set("endpoint", s.Endpoint)
	q.Set("region", s.Region)
	q.Set("path_style", "true")
	u := url.URL{
		Scheme:   "s3",
		Host:     bucket,
		Path:     "/" + strings.TrimPrefix(prefix, "/"),
		RawQuery: q.Encode(),
	}
	return u.String()
}

// NewBucket creates a bucket no other test uses and returns its name. The
// bucket and its objects are removed when the test ends.
func (s *Server) NewBucket(t testing.TB) string {
	t.Helper()
	name := bucketName(t.Name())
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := s.client.MakeBucket(ctx, name, minio.MakeBucketOptions{Region: s.Region}); err != nil {
		t.Fatalf("%s: create bucket %s: %v", s.Name, name, err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
		defer cancel()
		if err := s.removeBucket(ctx, name); err != nil {
			// The server is discarded at the end of the run anyway; a
			// leftover bucket only matters on an external server.
			t.Logf("%s: remove bucket %s: %v", s.Name, name, err)
		}
	})
	return name
}

func (s *Server) removeBucket(ctx context.Context, bucket string) error {
	objects := s.client.ListObjects(ctx, bucket, minio.ListObjectsOptions{Recursive: true})
	for res := range s.client.RemoveObjects(ctx, bucket, objects, minio.RemoveObjectsOptions{}) {
		if res.Err != nil {
			return fmt.Errorf("remove %s: %w", res.ObjectName, res.Err)
		}
	}
	err := s.client.RemoveBucket(ctx, bucket)
	if err != nil && s.Name == MinIOName {
		// MinIO hides "a/b" from listings while an object "a" exists, so
		// the loop above can miss objects; its force delete cannot.
		err = s.client.RemoveBucketWithOptions(ctx, bucket, minio.RemoveBucketOptions{ForceDelete: true})
	}
	return err
}

var bucketUnsafe = regexp.MustCompile(`[^a-z0-9]+`)

// bucketName derives a valid, unique S3 bucket name (3-63 characters of
// lower-case letters, digits and hyphens) from a test name, so a leftover
// bucket says which test made it.
func bucketName(testName string) string {
	var b [4]byte
	if _, err := rand.Read(b[:]); err != nil {
		panic(err)
	}
	suffix := hex.EncodeToString(b[:])
	base := strings.Trim(bucketUnsafe.ReplaceAllString(strings.ToLower(testName), "-"), "-")
	const maxBase = 63 - len("t--") - 8
	if len(base) > maxBase {
		base = strings.TrimRight(base[:maxBase], "-")
	}
	return "t-" + base + "-" + suffix
}

// newClient builds the minio-go client for endpoint and waits until the
// server answers an authenticated request: a process or container can listen
// before its object layer is ready, and an external endpoint may have wrong
// credentials. The last error is returned when ctx ends first.
func newClient(ctx context.Context, endpoint, accessKey, secretKey string) (*minio.Client, error) {
	u, err := url.Parse(endpoint)
	if err != nil || u.Host == "" {
		return nil, fmt.Errorf("parse endpoint %q: want http(s)://HOST:PORT", endpoint)
	}
	client, err := minio.New(u.Host, &minio.Options{
		Creds:        credentials.NewStaticV4(accessKey, secretKey, ""),
		Secure:       u.Scheme == "https",
		Region:       Region,
		BucketLookup: minio.BucketLookupPath,
		// Readiness is polled below; no hidden retries inside one call.
		MaxRetries: 1,
	})
	if err != nil {
		return nil, fmt.Errorf("create minio client: %w", err)
	}
	var lastErr error
	for {
		callCtx, cancel := context.WithTimeout(ctx, 5*time.Second)
		_, lastErr = client.ListBuckets(callCtx)
		cancel()
		if lastErr == nil {
			return client, nil
		}
		var resp minio.ErrorResponse
		if errors.As(lastErr, &resp) && (resp.Code == "InvalidAccessKeyId" || resp.Code == "SignatureDoesNotMatch") {
			return nil, fmt.Errorf("list buckets at %s: credentials rejected: %w", endpoint, lastErr)
		}
		select {
		case <-ctx.Done():
			return nil, fmt.Errorf("server at %s not ready: %w", endpoint, lastErr)
		case <-time.After(200 * time.Millisecond):
		}
	}
}

// credentialsFromEnv returns the credentials for every server of the run.
func credentialsFromEnv() (accessKey, secretKey string) {
	accessKey, secretKey = os.Getenv(EnvAccessKey), os.Getenv(EnvSecretKey)
	if accessKey == "" {
		accessKey = defaultAccessKey
	}
	if secretKey == "" {
		secretKey = defaultSecretKey
	}
	return accessKey, secretKey
}

func verbose() bool { return os.Getenv(EnvVerbose) == "1" }
