package awss3

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"strings"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	awshttp "github.com/aws/aws-sdk-go-v2/aws/transport/http"
	"github.com/aws/aws-sdk-go-v2/config"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/aws/aws-sdk-go-v2/service/s3"

	"github.com/s3queue/s3queue/s3store"
)

// DefaultMaxRetries is the number of retries (after the first attempt) used
// when Config.MaxRetries is 0.
const DefaultMaxRetries = 5

// defaultEndpointRegion is the region used with a custom Endpoint when none is
// configured: MinIO and versitygw accept any region, and sign-and-verify only
// needs both sides to agree.
const defaultEndpointRegion = "us-east-1"

// Config says which bucket to use and how to reach it.
type Config struct {
	// Bucket is the bucket name. Required.
	Bucket string
	// Prefix is the key prefix all keys of the store live under, without a
	// trailing slash (one is trimmed). Empty means the bucket root.
	Prefix string
	// Endpoint is the base URL of an S3-compatible server, such as
	// http://127.0.0.1:9000. Empty means AWS S3 (or AWS_ENDPOINT_URL_S3).
	Endpoint string
	// Region is the signing region. Empty means the standard AWS chain
	// (AWS_REGION, the shared config profile); with a custom Endpoint and no
	// region found anywhere, "us-east-1".
	Region string
	// PathStyle addresses the bucket in the URL path (http://host/bucket/key)
	// instead of the host name. MinIO and versitygw usually need it.
	PathStyle bool
	// AccessKey and SecretKey are static credentials. Set both or neither;
	// when neither is set the standard AWS chain is used (AWS_ACCESS_KEY_ID /
	// AWS_SECRET_ACCESS_KEY, AWS_PROFILE, instance roles...). The secret never
	// appears in an error.
	AccessKey string
	SecretKey string
	// MaxRetries is how many times a request is retried after a transient
	// failure (500, 502, 503 SlowDown, 504, RequestTimeout, network errors).
	// 0 means DefaultMaxRetries; a negative value disables retries.
	MaxRetries int
	// HTTPClient sends the requests; nil means the SDK's default client. A
	// *http.Client satisfies it.
	HTTPClient interface {
		Do(*http.Request) (*http.Response, error)
	}
}

// idleConns is how many idle connections to the server a store keeps:
// enough for a worker's slots, polls and renewals at once.
const idleConns = 256

// Store is an s3store.Store on one bucket and prefix of an S3 server. It
// reports the Date header of every response (s3store.DateWatcher). Safe for
// concurrent use.
type Store struct {
	s3store.DateFanout

	client   *s3.Client
	bucket   string
	root     string // Config.Prefix without slashes at either end
	endpoint string // for error messages; "" means AWS
	region   string
	secrets  []string // strings that must never appear in an error
}

var (
	_ s3store.Store       = (*Store)(nil)
	_ s3store.DateWatcher = (*Store)(nil)
)

// New returns a Store for cfg. It sends no request: call CheckBucket to
// verify at startup that the bucket exists and the credentials work.
func New(ctx context.Context, cfg Config) (*Store, error) {
	if cfg.Bucket == "" {
		return nil, errors.New("awss3: open store: no bucket name (set Config.Bucket)")
	}
	if (cfg.AccessKey == "") != (cfg.SecretKey == "") {
		return nil, errors.New("awss3: open store: set both AccessKey and SecretKey, or neither to use the AWS credential chain")
	}

	var loadOpts []func(*config.LoadOptions) error
	if cfg.Region != "" {
		loadOpts = append(loadOpts, config.WithRegion(cfg.Region))
	}
	if cfg.AccessKey != "" {
		loadOpts = append(loadOpts, config.WithCredentialsProvider(
			credentials.NewStaticCredentialsProvider(cfg.AccessKey, cfg.SecretKey, "")))
	}
	awsCfg, err := config.LoadDefaultConfig(ctx, loadOpts...)
	if err != nil {
		// The loader's messages name profiles and files, never secret values.
		return nil, fmt.Errorf("awss3: load AWS configuration: %w", err)
	}
	if awsCfg.Region == "" {
		if cfg.Endpoint == "" {
			return nil, errors.New("awss3: open store: no region (set Config.Region or AWS_REGION)")
		}
		awsCfg.Region = defaultEndpointRegion
	}

	s := &Store{
		bucket:   cfg.Bucket,
		root:     strings.Trim(cfg.Prefix, "/"),
		endpoint: cfg.Endpoint,
		region:   awsCfg.Region,
	}
	// The SDK also reads the secret key from AWS_SECRET_KEY.
	for _, v := range []string{cfg.SecretKey, os.Getenv("AWS_SECRET_ACCESS_KEY"), os.Getenv("AWS_SECRET_KEY"), os.Getenv("AWS_SESSION_TOKEN")} {
		if v != "" {
			s.secrets = append(s.secrets, v)
		}
	}

	s.client = s3.NewFromConfig(awsCfg, func(o *s3.Options) {
		if cfg.Endpoint != "" {
			o.BaseEndpoint = aws.String(cfg.Endpoint)
		}
		o.UsePathStyle = cfg.PathStyle
		if cfg.HTTPClient != nil {
			o.HTTPClient = cfg.HTTPClient
		} else {
			// The SDK keeps 10 idle connections per host; a worker with
			// more slots than that opened and closed a TCP connection for
			// most requests under load, on both ends.
			o.HTTPClient = awshttp.NewBuildableClient().WithTransportOptions(func(t *http.Transport) {
				t.MaxIdleConns, t.MaxIdleConnsPerHost = idleConns, idleConns
			})
		}
		// The SDK's default (CRC32 on every PUT, validation of every GET)
		// sends trailers and headers that MinIO and versitygw releases
		// reject or mishandle; S3 itself only requires checksums on a few
		// operations we never call.
		o.RequestChecksumCalculation = aws.RequestChecksumCalculationWhenRequired
		o.ResponseChecksumValidation = aws.ResponseChecksumValidationWhenRequired
		o.Retryer = newRetryer(cfg.MaxRetries)
		// Zero keeps AWS_MAX_ATTEMPTS from wrapping our retryer.
		o.RetryMaxAttempts = 0
		o.APIOptions = append(o.APIOptions, s.addDateMiddleware)
	})
	if s.endpoint == "" {
		if e := s.client.Options().BaseEndpoint; e != nil {
			s.endpoint = *e
		}
	}
	return s, nil
}

// CheckBucket verifies that the bucket exists and the credentials are
// accepted, with one HeadBucket. Its errors wrap ErrNoSuchBucket or
// ErrAccessDenied, or name the endpoint it cannot reach.
//
// A HEAD answer has no body, so it cannot tell a wrong secret from missing
// permissions, and credentials scoped to the prefix may be refused
// HeadBucket yet allowed to list the prefix. When HeadBucket is refused,
// one LIST of the prefix tells these apart.
func (s *Store) CheckBucket(ctx context.Context) error {
	_, err := s.client.HeadBucket(ctx, &s3.HeadBucketInput{Bucket: aws.String(s.bucket)})
	if err == nil {
		return nil
	}
	err = s.translate(err, bucketRequest)
	if errors.Is(err, ErrNoSuchBucket) || errors.Is(err, ErrAccessDenied) {
		in := &s3.ListObjectsV2Input{Bucket: aws.String(s.bucket), MaxKeys: aws.Int32(1)}
		if s.root != "" {
			in.Prefix = aws.String(s.root + "/")
		}
		_, lerr := s.client.ListObjectsV2(ctx, in)
		if lerr == nil {
			return nil
		}
		err = s.translate(lerr, bucketRequest)
	}
	return fmt.Errorf("awss3: check bucket: %w", err)
}

// key maps a store key to the object key in the bucket.
func (s *Store) key(k string) string {
	if s.root == "" {
		return k
	}
	return s.root + "/" + k
}

// Get returns the object's body and ETag, or an error wrapping
// s3store.ErrNotFound.
func (s *Store) Get(ctx context.Context, key string) (s3store.Object, error) {
	if key == "" {
		return s3store.Object{}, errors.New("awss3: get: empty key")
	}
	out, err := s.client.GetObject(ctx, &s3.GetObjectInput{
		Bucket: aws.String(s.bucket),
		Key:    aws.String(s.key(key)),
	})
	if err != nil {
		return s3store.Object{}, fmt.Errorf("awss3: get %q: %w", key, s.translate(err, objectRead))
	}
	defer out.Body.Close()
	body, err := io.ReadAll(out.Body)
	if err != nil {
		return s3store.Object{}, fmt.Errorf("awss3: read %q: %w", key, s.translate(err, objectRead))
	}
	return s3store.Object{
		Key:          key,
		Body:         body,
		ETag:         unquote(aws.ToString(out.ETag)),
		LastModified: aws.ToTime(out.LastModified),
	}, nil
}

// Head returns the object's metadata, or an error wrapping
// s3store.ErrNotFound.
func (s *Store) Head(ctx context.Context, key string) (s3store.ObjectInfo, error) {
	if key == "" {
		return s3store.ObjectInfo{}, errors.New("awss3: head: empty key")
	}
	out, err := s.client.HeadObject(ctx, &s3.HeadObjectInput{
		Bucket: aws.String(s.bucket),
		Key:    aws.String(s.key(key)),
	})
	if err != nil {
		return s3store.ObjectInfo{}, fmt.Errorf("awss3: head %q: %w", key, s.translate(err, objectRead))
	}
	return s3store.ObjectInfo{
		Key:          key,
		ETag:         unquote(aws.ToString(out.ETag)),
		Size:         aws.ToInt64(out.ContentLength),
		LastModified: aws.ToTime(out.LastModified),
	}, nil
}

// Put writes body under key and returns the new ETag (unquoted). Errors wrap
// s3store.ErrPreconditionFailed (412), s3store.ErrNotFound (If-Match on a
// missing key) or s3store.ErrConflict (409, a concurrent conditional write).
//
// A conditional PUT is retried on transient failures like any request. If the
// first attempt was applied but its response was lost, the retry finds the
// condition no longer holds (the ETag changed, or the key now exists) and
// returns ErrPreconditionFailed although the write took effect. That is
// acceptable: callers already treat a 412 as "re-read and decide", and the
// re-read shows their own write.
func (s *Store) Put(ctx context.Context, key string, body []byte, opts s3store.PutOptions) (string, error) {
	if key == "" {
		return "", errors.New("awss3: put: empty key")
	}
	if opts.IfMatch != "" && opts.IfNoneMatch {
		return "", fmt.Errorf("awss3: put %q: both IfMatch and IfNoneMatch set", key)
	}
	in := &s3.PutObjectInput{
		Bucket:        aws.String(s.bucket),
		Key:           aws.String(s.key(key)),
		Body:          bytes.NewReader(body),
		ContentLength: aws.Int64(int64(len(body))),
	}
	if opts.IfMatch != "" {
		in.IfMatch = aws.String(quote(opts.IfMatch))
	}
	if opts.IfNoneMatch {
		in.IfNoneMatch = aws.String("*")
	}
	out, err := s.client.PutObject(ctx, in)
	if err != nil {
		return "", fmt.Errorf("awss3: put %q: %w", key, s.translate(err, ownRequest))
	}
	return unquote(aws.ToString(out.ETag)), nil
}

// Delete removes key; a missing key is not an error. With IfMatch, AWS and
// versitygw return an error wrapping s3store.ErrPreconditionFailed on a stale
// ETag, while MinIO ignores the condition and deletes.
func (s *Store) Delete(ctx context.Context, key string, opts s3store.DeleteOptions) error {
	if key == "" {
		return errors.New("awss3: delete: empty key")
	}
	in := &s3.DeleteObjectInput{
		Bucket: aws.String(s.bucket),
		Key:    aws.String(s.key(key)),
	}
	if opts.IfMatch != "" {
		in.IfMatch = aws.String(quote(opts.IfMatch))
	}
	_, err := s.client.DeleteObject(ctx, in)
	if err != nil {
		err = s.translate(err, ownRequest)
		if errors.Is(err, s3store.ErrNotFound) {
			return nil
		}
		return fmt.Errorf("awss3: delete %q: %w", key, err)
	}
	return nil
}

// List returns one page of keys under prefix (relative to the store's
// Prefix, which is stripped from the returned keys), in lexicographic order.
func (s *Store) List(ctx context.Context, prefix string, opts s3store.ListOptions) (s3store.ListPage, error) {
	maxKeys := opts.MaxKeys
	if maxKeys <= 0 {
		maxKeys = s3store.DefaultMaxKeys
	}
	root := ""
	if s.root != "" {
		root = s.root + "/"
	}
	in := &s3.ListObjectsV2Input{
		Bucket:  aws.String(s.bucket),
		MaxKeys: aws.Int32(int32(min(maxKeys, 1<<30))),
	}
	if p := root + prefix; p != "" {
		in.Prefix = aws.String(p)
	}
	if opts.StartAfter != "" {
		in.StartAfter = aws.String(root + opts.StartAfter)
	}
	out, err := s.client.ListObjectsV2(ctx, in)
	if err != nil {
		// A LIST addresses the bucket: a 404 without a code can only mean the
		// bucket is missing.
		return s3store.ListPage{}, fmt.Errorf("awss3: list %q: %w", prefix, s.translate(err, bucketRequest))
	}
	page := s3store.ListPage{
		Objects:   make([]s3store.ObjectInfo, 0, len(out.Contents)),
		Truncated: aws.ToBool(out.IsTruncated),
	}
	for _, o := range out.Contents {
		k := aws.ToString(o.Key)
		if !strings.HasPrefix(k, root) {
			continue // cannot happen with a well-behaved server
		}
		page.Objects = append(page.Objects, s3store.ObjectInfo{
			Key:          strings.TrimPrefix(k, root),
			ETag:         unquote(aws.ToString(o.ETag)),
			Size:         aws.ToInt64(o.Size),
			LastModified: aws.ToTime(o.LastModified),
		})
	}
	return page, nil
}

// nowProbeKey is the key Now sends a HEAD for. It need not exist: a 404
// carries a Date header too, and a HEAD is the cheapest request class.
const nowProbeKey = ".s3queue-time-probe"

// Now sends one HEAD request and returns the Date header of its response
// (1 s resolution on every server measured). A HEAD of a key under the
// prefix, rather than HeadBucket, works for credentials scoped to the prefix.
func (s *Store) Now(ctx context.Context) (time.Time, error) {
	probe := &dateProbe{}
	_, err := s.client.HeadObject(withDateProbe(ctx, probe), &s3.HeadObjectInput{
		Bucket: aws.String(s.bucket),
		Key:    aws.String(s.key(nowProbeKey)),
	})
	if err != nil {
		if err = s.translate(err, ownRequest); !errors.Is(err, s3store.ErrNotFound) {
			return time.Time{}, fmt.Errorf("awss3: read server time: %w", err)
		}
	}
	if !probe.ok {
		return time.Time{}, errors.New("awss3: read server time: response had no valid Date header")
	}
	return probe.sample.Date, nil
}

func quote(etag string) string {
	if strings.HasPrefix(etag, `"`) || strings.HasPrefix(etag, `W/"`) {
		return etag
	}
	return `"` + etag + `"`
}

func unquote(etag string) string {
	return strings.Trim(etag, `"`)
}
