package awss3

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/aws/smithy-go"

	"github.com/s3queue/s3queue/s3store"
)

const (
	testBucket    = "queue-bucket"
	testAccessKey = "AKIATESTACCESSKEY"
	testSecret    = "s3cr3t-Val-never-print-me"
	serverDate    = "Mon, 02 Jan 2006 15:04:05 GMT"
)

func TestMain(m *testing.M) {
	// Keep retries fast; the policy, not the delays, is under test.
	retryBaseDelay = time.Millisecond
	slowDownBaseDelay = time.Millisecond
	os.Exit(m.Run())
}

// fakeS3 is an httptest server whose responses each test scripts.
type fakeS3 struct {
	srv      *httptest.Server
	requests atomic.Int32
	mu       sync.Mutex
	last     *http.Request
	handler  http.HandlerFunc
}

func (f *fakeS3) lastRequest() *http.Request {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.last
}

// setup starts a fake server running handler and a Store pointed at it. The
// AWS environment is isolated so no profile or IMDS is consulted.
func setup(t *testing.T, handler http.HandlerFunc, mutate ...func(*Config)) (*Store, *fakeS3) {
	t.Helper()
	isolateAWSEnv(t)
	f := &fakeS3{handler: handler}
	f.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		f.requests.Add(1)
		f.mu.Lock()
		f.last = r.Clone(context.Background())
		f.mu.Unlock()
		w.Header().Set("Date", serverDate)
		f.handler(w, r)
	}))
	t.Cleanup(f.srv.Close)
	cfg := Config{
		Bucket:    testBucket,
		Prefix:    "app/q/",
		Endpoint:  f.srv.URL,
		Region:    "us-east-1",
		PathStyle: true,
		AccessKey: testAccessKey,
		SecretKey: testSecret,
	}
	for _, m := range mutate {
		m(&cfg)
	}
	s, err := New(context.Background(), cfg)
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	return s, f
}

func isolateAWSEnv(t *testing.T) {
	t.Helper()
	dir := t.TempDir()
	for _, k := range []string{"AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN",
		"AWS_PROFILE", "AWS_REGION", "AWS_DEFAULT_REGION", "AWS_ENDPOINT_URL", "AWS_ENDPOINT_URL_S3", "AWS_MAX_ATTEMPTS"} {
		t.Setenv(k, "")
	}
	t.Setenv("AWS_CONFIG_FILE", filepath.Join(dir, "config"))
	t.Setenv("AWS_SHARED_CREDENTIALS_FILE", filepath.Join(dir, "credentials"))
	t.Setenv("AWS_EC2_METADATA_DISABLED", "true")
}

// xmlError writes an S3 error document.
func xmlError(w http.ResponseWriter, status int, code, message string) {
	w.Header().Set("Content-Type", "application/xml")
	w.WriteHeader(status)
	fmt.Fprintf(w, `<?xml version="1.0" encoding="UTF-8"?><Error><Code>%s</Code><Message>%s</Message><RequestId>req-1</RequestId></Error>`, code, message)
}

func TestGetReturnsBodyAndUnquotedETag(t *testing.T) {
	s, f := setup(t, func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("ETag", `"abc123"`)
		w.Header().Set("Last-Modified", serverDate)
		fmt.Fprint(w, "hello")
	})
	obj, err := s.Get(context.Background(), "tasks/0/t1.json")
	if err != nil {
		t.Fatalf("Get: %v", err)
	}
	if string(obj.Body) != "hello" || obj.ETag != "abc123" || obj.Key != "tasks/0/t1.json" {
		t.Fatalf("Get = %+v, want body hello, etag abc123", obj)
	}
	if got, want := f.lastRequest().URL.Path, "/queue-bucket/app/q/tasks/0/t1.json"; got != want {
		t.Fatalf("request path = %q, want %q (prefix joined with /)", got, want)
	}
}

func TestPutSendsConditionsAndReturnsETag(t *testing.T) {
	tests := []struct {
		name            string
		opts            s3store.PutOptions
		wantIfMatch     string
		wantIfNoneMatch string
	}{
		{name: "unconditional"},
		{name: "if-match quotes the etag", opts: s3store.PutOptions{IfMatch: "e1"}, wantIfMatch: `"e1"`},
		{name: "if-none-match star", opts: s3store.PutOptions{IfNoneMatch: true}, wantIfNoneMatch: "*"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var body string
			s, f := setup(t, func(w http.ResponseWriter, r *http.Request) {
				b := make([]byte, r.ContentLength)
				_, _ = r.Body.Read(b)
				body = string(b)
				w.Header().Set("ETag", `"new-etag"`)
			})
			etag, err := s.Put(context.Background(), "k", []byte("payload"), tt.opts)
			if err != nil {
				t.Fatalf("Put: %v", err)
			}
			if etag != "new-etag" {
				t.Fatalf("etag = %q, want new-etag", etag)
			}
			r := f.lastRequest()
			if r.Method != http.MethodPut || body != "payload" {
				t.Fatalf("request %s body %q, want PUT payload", r.Method, body)
			}
			if got := r.Header.Get("If-Match"); got != tt.wantIfMatch {
				t.Fatalf("If-Match = %q, want %q", got, tt.wantIfMatch)
			}
			if got := r.Header.Get("If-None-Match"); got != tt.wantIfNoneMatch {
				t.Fatalf("If-None-Match = %q, want %q", got, tt.wantIfNoneMatch)
			}
			if r.Header.Get("X-Amz-Trailer") != "" || r.Header.Get("X-Amz-Checksum-Crc32") != "" {
				t.Fatalf("request carries SDK checksums (%v), which break MinIO/versitygw", r.Header)
			}
		})
	}
}

func TestErrorTranslation(t *testing.T) {
	type call func(s *Store) error
	get := func(s *Store) error { _, err := s.Get(context.Background(), "k"); return err }
	head := func(s *Store) error { _, err := s.Head(context.Background(), "k"); return err }
	put := func(s *Store) error {
		_, err := s.Put(context.Background(), "k", []byte("x"), s3store.PutOptions{IfMatch: "old"})
		return err
	}
	list := func(s *Store) error { _, err := s.List(context.Background(), "", s3store.ListOptions{}); return err }
	tests := []struct {
		name     string
		status   int
		code     string
		call     call
		want     error
		wantText []string
	}{
		{"404 NoSuchKey is not found", 404, "NoSuchKey", get, s3store.ErrNotFound,
			[]string{`awss3: get "k": not found`, "NoSuchKey"}},
		{"bodiless HEAD 404 is not found", 404, "", head, s3store.ErrNotFound, []string{`awss3: head "k": not found`}},
		{"412 is precondition failed", 412, "PreconditionFailed", put, s3store.ErrPreconditionFailed,
			[]string{`awss3: put "k": precondition failed`, "HTTP 412"}},
		{"409 ConditionalRequestConflict is conflict", 409, "ConditionalRequestConflict", put, s3store.ErrConflict,
			[]string{"conflict", "ConditionalRequestConflict"}},
		{"409 OperationAborted is conflict", 409, "OperationAborted", put, s3store.ErrConflict, []string{"conflict"}},
		{"PUT If-Match on missing key is not found", 404, "NoSuchKey", put, s3store.ErrNotFound, []string{"not found"}},
		{"403 InvalidAccessKeyId is access denied", 403, "InvalidAccessKeyId", get, ErrAccessDenied,
			[]string{"access denied", "does not know the access key", "AWS_ACCESS_KEY_ID"}},
		{"403 SignatureDoesNotMatch is access denied", 403, "SignatureDoesNotMatch", put, ErrAccessDenied,
			[]string{"secret key does not match"}},
		{"403 AccessDenied names the bucket", 403, "AccessDenied", list, ErrAccessDenied,
			[]string{"access denied", `"queue-bucket"`}},
		{"bodiless 409 is conflict", 409, "", put, s3store.ErrConflict, []string{"conflict"}},
		{"versitygw unknown access key is access denied, not not-found", 404, "XAdminUserNotFound", get, ErrAccessDenied,
			[]string{"does not know the access key"}},
		{"NoSuchBucket names the bucket", 404, "NoSuchBucket", list, ErrNoSuchBucket,
			[]string{"no such bucket", `"queue-bucket"`, "http://127.0.0.1"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s, f := setup(t, func(w http.ResponseWriter, r *http.Request) {
				if tt.code == "" || r.Method == http.MethodHead {
					w.WriteHeader(tt.status)
					return
				}
				xmlError(w, tt.status, tt.code, "server says "+tt.code)
			})
			err := tt.call(s)
			if !errors.Is(err, tt.want) {
				t.Fatalf("err = %v, want errors.Is %v", err, tt.want)
			}
			for _, w := range tt.wantText {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("err %q does not contain %q", err, w)
				}
			}
			if strings.Contains(err.Error(), testSecret) {
				t.Errorf("err %q contains the secret key", err)
			}
			if n := f.requests.Load(); n != 1 {
				t.Errorf("%d requests, want 1: HTTP %d must not be retried", n, tt.status)
			}
		})
	}
}

// A missing bucket and refused credentials will not heal by retrying: they
// wrap s3store.ErrUnusable beside their own sentinel. An AccessDenied on a
// read of one object may be that object's own and does not.
func TestUnusableErrors(t *testing.T) {
	get := func(s *Store) error { _, err := s.Get(context.Background(), "k"); return err }
	head := func(s *Store) error { _, err := s.Head(context.Background(), "k"); return err }
	put := func(s *Store) error {
		_, err := s.Put(context.Background(), "k", []byte("x"), s3store.PutOptions{})
		return err
	}
	del := func(s *Store) error { return s.Delete(context.Background(), "k", s3store.DeleteOptions{}) }
	list := func(s *Store) error { _, err := s.List(context.Background(), "", s3store.ListOptions{}); return err }
	now := func(s *Store) error { _, err := s.Now(context.Background()); return err }
	for _, tt := range []struct {
		name     string
		status   int
		code     string
		call     func(*Store) error
		sentinel error
		unusable bool
	}{
		{"NoSuchBucket on LIST", 404, "NoSuchBucket", list, ErrNoSuchBucket, true},
		{"NoSuchBucket on PUT", 404, "NoSuchBucket", put, ErrNoSuchBucket, true},
		{"NoSuchBucket on GET", 404, "NoSuchBucket", get, ErrNoSuchBucket, true},
		{"bodiless 404 on LIST", 404, "", list, ErrNoSuchBucket, true},
		{"InvalidAccessKeyId on GET", 403, "InvalidAccessKeyId", get, ErrAccessDenied, true},
		{"SignatureDoesNotMatch on PUT", 403, "SignatureDoesNotMatch", put, ErrAccessDenied, true},
		{"XAdminUserNotFound on GET", 404, "XAdminUserNotFound", get, ErrAccessDenied, true},
		{"AccessDenied on LIST", 403, "AccessDenied", list, ErrAccessDenied, true},
		{"AccessDenied on PUT", 403, "AccessDenied", put, ErrAccessDenied, true},
		{"AccessDenied on DELETE", 403, "AccessDenied", del, ErrAccessDenied, true},
		{"bodiless 403 on the time probe", 403, "", now, ErrAccessDenied, true},
		{"AccessDenied on GET of one object", 403, "AccessDenied", get, ErrAccessDenied, false},
		{"bodiless 403 on HEAD of one object", 403, "", head, ErrAccessDenied, false},
		{"NoSuchKey", 404, "NoSuchKey", get, s3store.ErrNotFound, false},
		{"412", 412, "PreconditionFailed", put, s3store.ErrPreconditionFailed, false},
	} {
		t.Run(tt.name, func(t *testing.T) {
			s, _ := setup(t, func(w http.ResponseWriter, r *http.Request) {
				if tt.code == "" || r.Method == http.MethodHead {
					w.WriteHeader(tt.status)
					return
				}
				xmlError(w, tt.status, tt.code, "server says "+tt.code)
			})
			err := tt.call(s)
			if !errors.Is(err, tt.sentinel) {
				t.Fatalf("err = %v, want errors.Is %v", err, tt.sentinel)
			}
			if got := errors.Is(err, s3store.ErrUnusable); got != tt.unusable {
				t.Errorf("errors.Is(%v, ErrUnusable) = %v, want %v", err, got, tt.unusable)
			}
		})
	}
}

func TestSentinelErrorsKeepProviderError(t *testing.T) {
	s, _ := setup(t, func(w http.ResponseWriter, r *http.Request) {
		xmlError(w, 404, "NoSuchKey", "The specified key does not exist.")
	})
	_, err := s.Get(context.Background(), "k")
	var withStatus interface{ HTTPStatusCode() int }
	if !errors.As(err, &withStatus) || withStatus.HTTPStatusCode() != 404 {
		t.Fatalf("err %v does not wrap the provider's response error", err)
	}
}

func TestRetries(t *testing.T) {
	tests := []struct {
		name         string
		maxRetries   int
		failures     int // responses that fail before a 200
		failStatus   int
		failCode     string
		wantErr      bool
		wantRequests int32
	}{
		{"503 SlowDown then 200 succeeds", 0, 1, 503, "SlowDown", false, 2},
		{"500 twice then 200 succeeds", 0, 2, 500, "InternalError", false, 3},
		{"RequestTimeout is retried", 0, 1, 400, "RequestTimeout", false, 2},
		{"500 forever gives up after MaxRetries", 3, 100, 500, "InternalError", true, 4},
		{"default MaxRetries is 5", 0, 100, 503, "SlowDown", true, 6},
		{"negative MaxRetries disables retries", -1, 100, 503, "SlowDown", true, 1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var n atomic.Int32
			s, f := setup(t, func(w http.ResponseWriter, r *http.Request) {
				if int(n.Add(1)) <= tt.failures {
					xmlError(w, tt.failStatus, tt.failCode, "try again")
					return
				}
				w.Header().Set("ETag", `"e"`)
				fmt.Fprint(w, "ok")
			}, func(c *Config) { c.MaxRetries = tt.maxRetries })
			_, err := s.Get(context.Background(), "k")
			if (err != nil) != tt.wantErr {
				t.Fatalf("err = %v, wantErr %v", err, tt.wantErr)
			}
			if tt.wantErr && tt.wantRequests > 1 && !strings.Contains(err.Error(), fmt.Sprintf("gave up after %d attempts", tt.wantRequests)) {
				t.Errorf("err %q does not say how many attempts were made", err)
			}
			if got := f.requests.Load(); got != tt.wantRequests {
				t.Fatalf("%d requests, want %d", got, tt.wantRequests)
			}
		})
	}
}

func TestUnreachableEndpointIsNamed(t *testing.T) {
	isolateAWSEnv(t)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	endpoint := "http://" + ln.Addr().String()
	ln.Close() // nothing listens there now: connection refused

	s, err := New(context.Background(), Config{
		Bucket: testBucket, Endpoint: endpoint, PathStyle: true,
		AccessKey: testAccessKey, SecretKey: testSecret, MaxRetries: 2,
	})
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	err = s.CheckBucket(context.Background())
	if err == nil {
		t.Fatal("CheckBucket succeeded against a closed port")
	}
	want := "cannot reach S3 endpoint " + endpoint
	if !strings.Contains(err.Error(), want) || !strings.Contains(err.Error(), "gave up after 3 attempts") {
		t.Fatalf("err = %q, want it to contain %q and the attempt count", err, want)
	}
	if strings.Contains(err.Error(), testSecret) {
		t.Fatalf("err %q contains the secret key", err)
	}
}

func TestCanceledContextIsNotRetried(t *testing.T) {
	s, f := setup(t, func(w http.ResponseWriter, r *http.Request) {
		xmlError(w, 503, "SlowDown", "slow down")
	})
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	_, err := s.Get(ctx, "k")
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("err = %v, want context.Canceled", err)
	}
	if n := f.requests.Load(); n != 0 {
		t.Fatalf("%d requests sent with a canceled context", n)
	}
}

func TestCheckBucket(t *testing.T) {
	tests := []struct {
		name       string
		headStatus int
		listStatus int    // answer to the LIST sent when HEAD is refused
		listCode   string // "" for a bodiless answer
		want       error
		wantText   string
		wantList   bool
	}{
		{name: "existing bucket", headStatus: 200, want: nil},
		{name: "missing bucket", headStatus: 404, listStatus: 404, listCode: "NoSuchBucket",
			want: ErrNoSuchBucket, wantText: `no such bucket "queue-bucket"`, wantList: true},
		{name: "missing bucket, bodiless list", headStatus: 404, listStatus: 404,
			want: ErrNoSuchBucket, wantText: `no such bucket "queue-bucket"`, wantList: true},
		{name: "wrong secret is named", headStatus: 403, listStatus: 403, listCode: "SignatureDoesNotMatch",
			want: ErrAccessDenied, wantText: "secret key does not match", wantList: true},
		{name: "unknown access key on versitygw is named", headStatus: 404, listStatus: 404, listCode: "XAdminUserNotFound",
			want: ErrAccessDenied, wantText: "does not know the access key", wantList: true},
		{name: "prefix-scoped credentials that may list pass", headStatus: 403, listStatus: 200, want: nil, wantList: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var heads, lists atomic.Int32
			s, _ := setup(t, func(w http.ResponseWriter, r *http.Request) {
				switch {
				case r.Method == http.MethodHead && r.URL.Path == "/queue-bucket":
					heads.Add(1)
					w.WriteHeader(tt.headStatus)
				case r.Method == http.MethodGet && r.URL.Query().Get("list-type") == "2" &&
					r.URL.Query().Get("prefix") == "app/q/" && r.URL.Query().Get("max-keys") == "1":
					lists.Add(1)
					switch {
					case tt.listStatus == 200:
						fmt.Fprint(w, `<ListBucketResult><IsTruncated>false</IsTruncated></ListBucketResult>`)
					case tt.listCode == "":
						w.WriteHeader(tt.listStatus)
					default:
						xmlError(w, tt.listStatus, tt.listCode, "said "+tt.listCode)
					}
				default:
					t.Errorf("unexpected request %s %s", r.Method, r.URL)
					w.WriteHeader(400)
				}
			})
			err := s.CheckBucket(context.Background())
			if !errors.Is(err, tt.want) || (tt.want == nil && err != nil) {
				t.Fatalf("CheckBucket = %v, want %v", err, tt.want)
			}
			if err != nil && !strings.Contains(err.Error(), tt.wantText) {
				t.Errorf("err %q does not contain %q", err, tt.wantText)
			}
			if heads.Load() != 1 || (lists.Load() == 1) != tt.wantList {
				t.Fatalf("%d HEAD, %d LIST requests; want 1 HEAD and a LIST only when HEAD is refused", heads.Load(), lists.Load())
			}
		})
	}
}

func TestOtherCodesAreNotSentinels(t *testing.T) {
	// A 404 or 409 that does not mean "no such key" or "lost race" must not
	// pass for one: callers would create the key or retry forever.
	tests := []struct {
		status int
		code   string
	}{
		{409, "ObjectParentIsFile"},
		{409, "ExistingObjectIsDirectory"},
		{404, "NoSuchUpload"},
	}
	for _, tt := range tests {
		t.Run(tt.code, func(t *testing.T) {
			s, _ := setup(t, func(w http.ResponseWriter, r *http.Request) { xmlError(w, tt.status, tt.code, "said "+tt.code) })
			_, err := s.Put(context.Background(), "k", []byte("x"), s3store.PutOptions{})
			if err == nil {
				t.Fatal("Put succeeded")
			}
			for _, sentinel := range []error{s3store.ErrNotFound, s3store.ErrConflict, s3store.ErrPreconditionFailed} {
				if errors.Is(err, sentinel) {
					t.Fatalf("err %v is %v", err, sentinel)
				}
			}
			if !strings.Contains(err.Error(), tt.code) {
				t.Fatalf("err %q does not carry the server's code", err)
			}
		})
	}
}

func TestSecretNeverAppearsInErrors(t *testing.T) {
	// A hostile or buggy server echoing the secret back must not leak it
	// into logs through our error strings.
	for _, code := range []string{"SignatureDoesNotMatch", "InternalError", "WeirdError"} {
		t.Run(code, func(t *testing.T) {
			status := 403
			if code != "SignatureDoesNotMatch" {
				status = 400
			}
			s, _ := setup(t, func(w http.ResponseWriter, r *http.Request) {
				xmlError(w, status, code, "your secret "+testSecret+" is wrong")
			}, func(c *Config) { c.MaxRetries = -1 })
			_, err := s.Put(context.Background(), "k", []byte("x"), s3store.PutOptions{})
			if err == nil {
				t.Fatal("Put succeeded")
			}
			if strings.Contains(err.Error(), testSecret) {
				t.Fatalf("err %q contains the secret key", err)
			}
			if !strings.Contains(err.Error(), "[REDACTED]") {
				t.Fatalf("err %q lost the rest of the server's message", err)
			}
		})
	}
}

func TestDateHeaderOfEveryResponseIsPublished(t *testing.T) {
	var n atomic.Int32
	s, _ := setup(t, func(w http.ResponseWriter, r *http.Request) {
		switch n.Add(1) {
		case 1:
			xmlError(w, 503, "SlowDown", "slow down")
		case 2:
			fmt.Fprint(w, "ok")
		default:
			xmlError(w, 404, "NoSuchKey", "missing")
		}
	})
	var mu sync.Mutex
	var samples []s3store.DateSample
	if !s3store.WatchDates(s, func(d s3store.DateSample) {
		mu.Lock()
		samples = append(samples, d)
		mu.Unlock()
	}) {
		t.Fatal("Store does not implement s3store.DateWatcher")
	}

	before := time.Now()
	if _, err := s.Get(context.Background(), "a"); err != nil {
		t.Fatalf("Get: %v", err)
	}
	if _, err := s.Get(context.Background(), "b"); !errors.Is(err, s3store.ErrNotFound) {
		t.Fatalf("Get b = %v, want not found", err)
	}
	after := time.Now()

	mu.Lock()
	defer mu.Unlock()
	if len(samples) != 3 {
		t.Fatalf("%d samples, want 3 (503 attempt, its retry, and the 404)", len(samples))
	}
	want, _ := http.ParseTime(serverDate)
	for i, d := range samples {
		if !d.Date.Equal(want) {
			t.Errorf("sample %d Date = %v, want %v", i, d.Date, want)
		}
		if d.Sent.Before(before) || d.Received.Before(d.Sent) || d.Received.After(after) {
			t.Errorf("sample %d: Sent %v, Received %v not within [%v, %v] in order", i, d.Sent, d.Received, before, after)
		}
		if i > 0 && d.Sent.Before(samples[i-1].Received) {
			t.Errorf("sample %d sent before sample %d was received: not one sample per attempt", i, i-1)
		}
	}
}

func TestNowReturnsServerDateEvenOn404(t *testing.T) {
	s, f := setup(t, func(w http.ResponseWriter, r *http.Request) { w.WriteHeader(404) })
	got, err := s.Now(context.Background())
	if err != nil {
		t.Fatalf("Now: %v", err)
	}
	want, _ := http.ParseTime(serverDate)
	if !got.Equal(want) {
		t.Fatalf("Now = %v, want %v", got, want)
	}
	if r := f.lastRequest(); r.Method != http.MethodHead {
		t.Fatalf("Now sent %s, want HEAD (the cheapest request)", r.Method)
	}
}

func TestNowReportsAccessDenied(t *testing.T) {
	s, _ := setup(t, func(w http.ResponseWriter, r *http.Request) { w.WriteHeader(403) })
	if _, err := s.Now(context.Background()); !errors.Is(err, ErrAccessDenied) {
		t.Fatalf("Now = %v, want ErrAccessDenied", err)
	}
}

func TestListStripsPrefixAndPassesBounds(t *testing.T) {
	s, f := setup(t, func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/xml")
		fmt.Fprint(w, `<?xml version="1.0" encoding="UTF-8"?>
<ListBucketResult xmlns="http://s3.amazonaws.com/doc/2006-03-01/"><Name>queue-bucket</Name><Prefix>app/q/tasks/</Prefix><KeyCount>2</KeyCount><MaxKeys>2</MaxKeys><IsTruncated>true</IsTruncated>
<Contents><Key>app/q/tasks/a</Key><LastModified>2026-01-01T00:00:00.000Z</LastModified><ETag>&quot;e1&quot;</ETag><Size>3</Size></Contents>
<Contents><Key>app/q/tasks/b</Key><LastModified>2026-01-01T00:00:00.000Z</LastModified><ETag>&quot;e2&quot;</ETag><Size>5</Size></Contents>
</ListBucketResult>`)
	})
	page, err := s.List(context.Background(), "tasks/", s3store.ListOptions{StartAfter: "tasks/0", MaxKeys: 2})
	if err != nil {
		t.Fatalf("List: %v", err)
	}
	q := f.lastRequest().URL.Query()
	if q.Get("list-type") != "2" || q.Get("prefix") != "app/q/tasks/" || q.Get("start-after") != "app/q/tasks/0" || q.Get("max-keys") != "2" {
		t.Fatalf("query = %v, want ListObjectsV2 with prefixed prefix and start-after, max-keys 2", q)
	}
	if !page.Truncated || len(page.Objects) != 2 {
		t.Fatalf("page = %+v, want 2 objects, truncated", page)
	}
	if o := page.Objects[1]; o.Key != "tasks/b" || o.ETag != "e2" || o.Size != 5 {
		t.Fatalf("object = %+v, want key tasks/b etag e2 size 5", o)
	}
}

func TestListDefaultsMaxKeys(t *testing.T) {
	s, f := setup(t, func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprint(w, `<ListBucketResult><IsTruncated>false</IsTruncated></ListBucketResult>`)
	}, func(c *Config) { c.Prefix = "" })
	page, err := s.List(context.Background(), "", s3store.ListOptions{})
	if err != nil {
		t.Fatalf("List: %v", err)
	}
	q := f.lastRequest().URL.Query()
	if q.Get("max-keys") != "1000" || q.Has("prefix") && q.Get("prefix") != "" || q.Has("start-after") {
		t.Fatalf("query = %v, want max-keys 1000 and no prefix or start-after", q)
	}
	if page.Truncated || len(page.Objects) != 0 {
		t.Fatalf("page = %+v, want empty", page)
	}
}

func TestDelete(t *testing.T) {
	t.Run("missing key is not an error", func(t *testing.T) {
		s, _ := setup(t, func(w http.ResponseWriter, r *http.Request) { xmlError(w, 404, "NoSuchKey", "missing") })
		if err := s.Delete(context.Background(), "k", s3store.DeleteOptions{}); err != nil {
			t.Fatalf("Delete = %v, want nil", err)
		}
	})
	t.Run("if-match is sent and 412 reported", func(t *testing.T) {
		s, f := setup(t, func(w http.ResponseWriter, r *http.Request) { xmlError(w, 412, "PreconditionFailed", "stale") })
		err := s.Delete(context.Background(), "k", s3store.DeleteOptions{IfMatch: "e1"})
		if !errors.Is(err, s3store.ErrPreconditionFailed) {
			t.Fatalf("Delete = %v, want ErrPreconditionFailed", err)
		}
		if r := f.lastRequest(); r.Method != http.MethodDelete || r.Header.Get("If-Match") != `"e1"` {
			t.Fatalf("request %s If-Match %q, want DELETE with \"e1\"", r.Method, r.Header.Get("If-Match"))
		}
	})
	t.Run("missing bucket is an error", func(t *testing.T) {
		s, _ := setup(t, func(w http.ResponseWriter, r *http.Request) { xmlError(w, 404, "NoSuchBucket", "no bucket") })
		if err := s.Delete(context.Background(), "k", s3store.DeleteOptions{}); !errors.Is(err, ErrNoSuchBucket) {
			t.Fatalf("Delete = %v, want ErrNoSuchBucket", err)
		}
	})
}

func TestNewValidatesConfig(t *testing.T) {
	isolateAWSEnv(t)
	tests := []struct {
		name string
		cfg  Config
		want string
	}{
		{"no bucket", Config{Endpoint: "http://x"}, "no bucket name"},
		{"access key without secret", Config{Bucket: "b", Endpoint: "http://x", AccessKey: "a"}, "both AccessKey and SecretKey"},
		{"no region without endpoint", Config{Bucket: "b"}, "no region"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := New(context.Background(), tt.cfg)
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("New = %v, want error containing %q", err, tt.want)
			}
		})
	}
	t.Run("endpoint without region defaults to us-east-1", func(t *testing.T) {
		s, err := New(context.Background(), Config{Bucket: "b", Endpoint: "http://127.0.0.1:1"})
		if err != nil {
			t.Fatalf("New: %v", err)
		}
		if s.region != "us-east-1" {
			t.Fatalf("region = %q, want us-east-1", s.region)
		}
	})
}

func TestProfileSecretsNeverAppearInErrors(t *testing.T) {
	// Credentials the SDK resolves itself (here a profile with a session
	// token) are scrubbed like static keys.
	const key, token = "pr0file-s3cret-value", "pr0file-sess10n-token"
	s, _ := setup(t, func(w http.ResponseWriter, r *http.Request) {
		xmlError(w, 400, "WeirdError", "you sent "+r.Header.Get("X-Amz-Security-Token")+" and "+key)
	}, func(c *Config) {
		// setup isolated the environment before calling this.
		creds := "[q]\naws_access_key_id = AKIAPROFILE\naws_secret_access_key = " + key + "\naws_session_token = " + token + "\n"
		if err := os.WriteFile(os.Getenv("AWS_SHARED_CREDENTIALS_FILE"), []byte(creds), 0o600); err != nil {
			t.Fatal(err)
		}
		t.Setenv("AWS_PROFILE", "q")
		c.AccessKey, c.SecretKey, c.MaxRetries = "", "", -1
	})
	_, err := s.Put(context.Background(), "k", []byte("x"), s3store.PutOptions{})
	if err == nil {
		t.Fatal("Put succeeded")
	}
	if strings.Contains(err.Error(), token) || strings.Contains(err.Error(), key) {
		t.Fatalf("err %q quotes the profile's secrets", err)
	}
	if !strings.Contains(err.Error(), "[REDACTED]") {
		t.Fatalf("err %q lost the rest of the server's message", err)
	}
}

// The SDK's retries wait a uniform draw below a cap that doubles per
// attempt from the base delay (more after a SlowDown) up to the maximum.
func TestBackoffDelay(t *testing.T) {
	base, slow := retryBaseDelay, slowDownBaseDelay
	retryBaseDelay, slowDownBaseDelay = 100*time.Millisecond, 500*time.Millisecond
	defer func() { retryBaseDelay, slowDownBaseDelay = base, slow }()
	slowDown := &smithy.GenericAPIError{Code: "SlowDown"}
	for _, tc := range []struct {
		attempt int
		err     error
		cap     time.Duration
	}{
		{1, errors.New("reset"), 100 * time.Millisecond},
		{2, errors.New("reset"), 200 * time.Millisecond},
		{4, errors.New("reset"), 800 * time.Millisecond},
		{8, errors.New("reset"), retryMaxDelay},
		{1000, errors.New("reset"), retryMaxDelay},
		{1, slowDown, 500 * time.Millisecond},
		{3, slowDown, 2 * time.Second},
		{7, slowDown, retryMaxDelay},
	} {
		lo, hi := tc.cap, time.Duration(0)
		for range 500 {
			d, err := backoffDelay(tc.attempt, tc.err)
			if err != nil || d < 0 || d >= tc.cap {
				t.Fatalf("backoffDelay(%d, %v) = %s, %v; want below %s", tc.attempt, tc.err, d, err, tc.cap)
			}
			lo, hi = min(lo, d), max(hi, d)
		}
		if lo > tc.cap/10 || hi < tc.cap*9/10 {
			t.Errorf("backoffDelay(%d, %v) drew only from [%s, %s] of [0, %s)", tc.attempt, tc.err, lo, hi, tc.cap)
		}
	}
}
