package storeurl

import (
	"context"
	"errors"
	"path/filepath"
	"strings"
	"testing"

	"github.com/s3queue/s3queue/s3store"
	"github.com/s3queue/s3queue/s3store/awss3"
	"github.com/s3queue/s3queue/s3store/local"
	"github.com/s3queue/s3queue/s3store/mem"
)

func TestParseAccepts(t *testing.T) {
	t.Setenv("AWS_REGION", "")
	tests := []struct {
		name string
		url  string
		want Spec
	}{
		{"s3 bucket only", "s3://jobs", Spec{Scheme: SchemeS3, S3: awss3.Config{Bucket: "jobs"}}},
		{"s3 bucket and prefix", "s3://jobs/team/queue-1/", Spec{Scheme: SchemeS3, S3: awss3.Config{Bucket: "jobs", Prefix: "team/queue-1"}}},
		{"s3 scheme is case-insensitive", "S3://jobs/p", Spec{Scheme: SchemeS3, S3: awss3.Config{Bucket: "jobs", Prefix: "p"}}},
		{"s3 with endpoint defaults region", "s3://jobs/p?endpoint=http://127.0.0.1:9000&path_style=true",
			Spec{Scheme: SchemeS3, S3: awss3.Config{Bucket: "jobs", Prefix: "p", Endpoint: "http://127.0.0.1:9000", Region: "us-east-1", PathStyle: true}}},
		{"s3 with explicit region", "s3://jobs?endpoint=https://s3.example.com&region=eu-west-3&path_style=0",
			Spec{Scheme: SchemeS3, S3: awss3.Config{Bucket: "jobs", Endpoint: "https://s3.example.com", Region: "eu-west-3"}}},
		{"s3 without endpoint leaves region to the AWS chain", "s3://jobs?path_style=false", Spec{Scheme: SchemeS3, S3: awss3.Config{Bucket: "jobs"}}},
		{"file absolute", "file:///var/lib/s3queue/", Spec{Scheme: SchemeFile, Dir: "/var/lib/s3queue"}},
		{"file localhost", "file://localhost/tmp/q", Spec{Scheme: SchemeFile, Dir: "/tmp/q"}},
		{"mem fresh", "mem://", Spec{Scheme: SchemeMem}},
		{"mem named", "mem://demo", Spec{Scheme: SchemeMem, Name: "demo"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := Parse(tt.url)
			if err != nil {
				t.Fatalf("Parse(%q): %v", tt.url, err)
			}
			if got != tt.want {
				t.Fatalf("Parse(%q) = %+v, want %+v", tt.url, got, tt.want)
			}
		})
	}
}

func TestParseRegionFromEnvironmentWins(t *testing.T) {
	t.Setenv("AWS_REGION", "ap-south-1")
	got, err := Parse("s3://jobs?endpoint=http://127.0.0.1:9000")
	if err != nil {
		t.Fatal(err)
	}
	if got.S3.Region != "" {
		t.Fatalf("Region = %q, want empty so the SDK reads AWS_REGION", got.S3.Region)
	}
}

func TestParseRejects(t *testing.T) {
	const secret = "wJalrXUtnFEMI-K7MDENG"
	tests := []struct {
		name string
		url  string
		want string // the problem the error must name
	}{
		{"empty", "", "empty store URL"},
		{"no scheme", "jobs/prefix", "has no scheme"},
		{"bare directory", "/var/lib/q", "for a directory write file:///var/lib/q"},
		{"unknown scheme", "ftp://jobs", `unknown scheme "ftp"`},
		{"malformed", "s3://jobs/%zz", "malformed store URL"},
		{"missing bucket", "s3:///prefix", "missing bucket name"},
		{"missing bucket, no path", "s3://", "missing bucket name"},
		{"port in bucket", "s3://127.0.0.1:9000/jobs", "contains ':'"},
		{"opaque", "s3:jobs", "lacks //"},
		{"unknown parameter", "s3://jobs?endpint=http://x", `unknown parameter "endpint"`},
		{"repeated parameter", "s3://jobs?region=a&region=b", `parameter "region" given 2 times`},
		{"bad path_style", "s3://jobs?path_style=yes", `path_style="yes" is not a boolean`},
		{"bad endpoint", "s3://jobs?endpoint=127.0.0.1:9000", "endpoint must be an http:// or https:// URL"},
		{"empty region", "s3://jobs?region=", "region is empty"},
		{"secret parameter", "s3://jobs?secret_key=" + secret, "credentials are not accepted"},
		{"access key parameter", "s3://jobs?access_key=AKIA", "credentials are not accepted"},
		{"userinfo", "s3://AKIA:" + secret + "@jobs/p", "credentials in the store URL are not accepted"},
		{"userinfo with slash in secret", "s3://AKIA:abc/" + secret + "@jobs", "malformed store URL"},
		{"fragment", "s3://jobs#x", "#fragment"},
		{"relative file", "file://data/queue", "relative path is not accepted"},
		{"opaque file", "file:data", "lacks //"},
		{"file without path", "file://", "no absolute path"},
		{"file parameter", "file:///tmp/q?sync=1", `unknown parameter "sync"`},
		{"mem path", "mem://demo/extra", "mem URL has a path"},
		{"mem parameter", "mem://demo?size=1", `unknown parameter "size"`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := Parse(tt.url)
			if err == nil {
				t.Fatalf("Parse(%q) succeeded, want error naming %q", tt.url, tt.want)
			}
			msg := err.Error()
			if !strings.Contains(msg, tt.want) {
				t.Errorf("error %q does not name the problem %q", msg, tt.want)
			}
			if !strings.Contains(msg, Forms) {
				t.Errorf("error %q does not show the expected forms", msg)
			}
			if strings.Contains(msg, secret) {
				t.Errorf("error %q contains the secret", msg)
			}
		})
	}
}

func TestRedact(t *testing.T) {
	tests := []struct {
		in, want string
	}{
		{"s3://jobs/p?endpoint=http://127.0.0.1:9000&path_style=true", "s3://jobs/p?endpoint=http://127.0.0.1:9000&path_style=true"},
		{"s3://AKIA:hunter2@jobs/p", "s3://jobs/p"},
		{"s3://jobs?secret_key=hunter2&region=x&access_key=AKIA&session_token=t&Password=p", "s3://jobs?region=x"},
		{"s3://jobs?aws%5Fsecret=hunter2&region=x", "s3://jobs?region=x"},
		{"file:///tmp/q", "file:///tmp/q"},
		{"mem://demo", "mem://demo"},
		{"s3://a:b/hunter2@jobs", "(malformed URL)"},
	}
	for _, tt := range tests {
		if got := Redact(tt.in); got != tt.want {
			t.Errorf("Redact(%q) = %q, want %q", tt.in, got, tt.want)
		}
	}
}

func TestOpenMem(t *testing.T) {
	ctx := context.Background()
	open := func(t *testing.T, u string) s3store.Store {
		t.Helper()
		s, err := Open(ctx, u)
		if err != nil {
			t.Fatalf("Open(%q): %v", u, err)
		}
		if _, ok := s.(*mem.Store); !ok {
			t.Fatalf("Open(%q) = %T, want *mem.Store", u, s)
		}
		return s
	}
	t.Run("same name shares one store", func(t *testing.T) {
		a := open(t, "mem://test-shared")
		if _, err := a.Put(ctx, "k", []byte("v"), s3store.PutOptions{}); err != nil {
			t.Fatal(err)
		}
		b := open(t, "mem://test-shared")
		if obj, err := b.Get(ctx, "k"); err != nil || string(obj.Body) != "v" {
			t.Fatalf("second open Get = %q, %v; want the first open's object", obj.Body, err)
		}
	})
	t.Run("plain mem is fresh each time", func(t *testing.T) {
		a := open(t, "mem://")
		if _, err := a.Put(ctx, "k", []byte("v"), s3store.PutOptions{}); err != nil {
			t.Fatal(err)
		}
		b := open(t, "mem://")
		if _, err := b.Get(ctx, "k"); !errors.Is(err, s3store.ErrNotFound) {
			t.Fatalf("fresh store Get = %v, want ErrNotFound", err)
		}
	})
	t.Run("different names are separate", func(t *testing.T) {
		a := open(t, "mem://test-one")
		if _, err := a.Put(ctx, "k", []byte("v"), s3store.PutOptions{}); err != nil {
			t.Fatal(err)
		}
		b := open(t, "mem://test-two")
		if _, err := b.Get(ctx, "k"); !errors.Is(err, s3store.ErrNotFound) {
			t.Fatalf("other name Get = %v, want ErrNotFound", err)
		}
	})
}

func TestOpenFile(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "queue")
	s, err := Open(context.Background(), "file://"+dir)
	if err != nil {
		t.Fatalf("Open: %v", err)
	}
	ls, ok := s.(*local.Store)
	if !ok {
		t.Fatalf("Open = %T, want *local.Store", s)
	}
	if ls.Dir() != dir {
		t.Fatalf("Dir = %q, want %q", ls.Dir(), dir)
	}
	if _, err := s.Put(context.Background(), "k", []byte("v"), s3store.PutOptions{IfNoneMatch: true}); err != nil {
		t.Fatalf("Put: %v", err)
	}
}

func TestOpenS3SendsNothing(t *testing.T) {
	t.Setenv("AWS_CONFIG_FILE", filepath.Join(t.TempDir(), "none"))
	t.Setenv("AWS_SHARED_CREDENTIALS_FILE", filepath.Join(t.TempDir(), "none"))
	t.Setenv("AWS_PROFILE", "")
	t.Setenv("AWS_ACCESS_KEY_ID", "AKIATEST")
	t.Setenv("AWS_SECRET_ACCESS_KEY", "test-secret")
	// Port 1 on loopback: any request would fail, but Open sends none.
	s, err := Open(context.Background(), "s3://jobs/p?endpoint=http://127.0.0.1:1&path_style=true")
	if err != nil {
		t.Fatalf("Open: %v", err)
	}
	if _, ok := s.(*awss3.Store); !ok {
		t.Fatalf("Open = %T, want *awss3.Store", s)
	}
}

func TestOpenReportsParseErrors(t *testing.T) {
	_, err := Open(context.Background(), "gs://jobs")
	if err == nil || !strings.Contains(err.Error(), `unknown scheme "gs"`) {
		t.Fatalf("Open = %v, want unknown scheme error", err)
	}
}
