package harness

import (
	"net/url"
	"regexp"
	"testing"
)

func TestBucketNameIsValidAndUnique(t *testing.T) {
	valid := regexp.MustCompile(`^[a-z0-9][a-z0-9-]{1,61}[a-z0-9]$`)
	for _, name := range []string{
		"TestX",
		"TestConformance_MinIO/a_key_and_a_longer_key_under_it_coexist_and_then_some_more_words",
		"Test/../Odd Name!!",
		"",
	} {
		a, b := bucketName(name), bucketName(name)
		if !valid.MatchString(a) {
			t.Errorf("bucketName(%q) = %q: not a valid S3 bucket name", name, a)
		}
		if a == b {
			t.Errorf("bucketName(%q) returned %q twice", name, a)
		}
	}
}

func TestStoreURLCarriesEndpointRegionAndPathStyle(t *testing.T) {
	srv := &Server{Endpoint: "http://127.0.0.1:9000", Region: Region}
	raw := srv.StoreURL("b1", "team/queue")
	u, err := url.Parse(raw)
	if err != nil {
		t.Fatalf("parse %q: %v", raw, err)
	}
	q := u.Query()
	if u.Scheme != "s3" || u.Host != "b1" || u.Path != "/team/queue" ||
		q.Get("endpoint") != srv.Endpoint || q.Get("region") != Region || q.Get("path_style") != "true" {
		t.Fatalf("StoreURL = %q", raw)
	}
}
