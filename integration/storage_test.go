package integration

import (
	"bytes"
	"context"
	"io"
	"testing"

	"github.com/minio/minio-go/v7"

	"github.com/s3queue/s3queue/integration/harness"
	"github.com/s3queue/s3queue/s3store"
	"github.com/s3queue/s3queue/s3store/storetest"
	"github.com/s3queue/s3queue/s3store/storeurl"
)

// TestServerSmoke proves each server takes a bucket and round-trips an
// object through an independent client, so a failing store test points at
// the store, not at the harness.
func TestServerSmoke(t *testing.T) {
	harness.ForEach(t, func(t *testing.T, srv *harness.Server) {
		ctx := context.Background()
		bucket := srv.NewBucket(t)
		body := []byte(`{"hello":"` + srv.Name + `"}`)

		info, err := srv.Minio().PutObject(ctx, bucket, "smoke/object.json", bytes.NewReader(body), int64(len(body)),
			minio.PutObjectOptions{ContentType: "application/json"})
		if err != nil {
			t.Fatalf("put: %v", err)
		}
		if info.ETag == "" {
			t.Fatal("put returned no ETag")
		}

		obj, err := srv.Minio().GetObject(ctx, bucket, "smoke/object.json", minio.GetObjectOptions{})
		if err != nil {
			t.Fatalf("get: %v", err)
		}
		defer obj.Close()
		got, err := io.ReadAll(obj)
		if err != nil {
			t.Fatalf("read: %v", err)
		}
		if !bytes.Equal(got, body) {
			t.Fatalf("get returned %q, want %q", got, body)
		}
		stat, err := obj.Stat()
		if err != nil {
			t.Fatalf("stat: %v", err)
		}
		if stat.ETag != info.ETag {
			t.Fatalf("get ETag %q, put ETag %q", stat.ETag, info.ETag)
		}
	})
}

func TestConformance_MinIO(t *testing.T) {
	srv := harness.MinIO(t)
	storetest.RunWith(t, func(t *testing.T) s3store.Store { return newStore(t, srv) },
		storetest.Options{ParentKeys: storetest.ParentKeysHidden, ConditionalDelete: s3store.DeleteIgnored})
}

func TestConformance_VersityGW(t *testing.T) {
	srv := harness.Versity(t)
	// The posix backend stores keys as files and directories.
	storetest.RunWith(t, func(t *testing.T) s3store.Store { return newStore(t, srv) },
		storetest.Options{ParentKeys: storetest.ParentKeysRefused, ConditionalDelete: s3store.DeleteHonoured})
}

// TestStoreURL opens a store the way users do, from an s3:// URL with the
// credentials in the environment, and checks with the independent client
// that it writes where the URL says.
func TestStoreURL(t *testing.T) {
	harness.ForEach(t, func(t *testing.T, srv *harness.Server) {
		ctx := context.Background()
		bucket := srv.NewBucket(t)
		st, err := storeurl.Open(ctx, srv.StoreURL(bucket, "team/queue"))
		if err != nil {
			t.Fatalf("open %s: %v", storeurl.Redact(srv.StoreURL(bucket, "team/queue")), err)
		}
		etag, err := st.Put(ctx, "queue.json", []byte(`{"v":1}`), s3store.PutOptions{IfNoneMatch: true})
		if err != nil {
			t.Fatalf("put through the URL's store: %v", err)
		}
		stat, err := srv.Minio().StatObject(ctx, bucket, "team/queue/queue.json", minio.StatObjectOptions{})
		if err != nil {
			t.Fatalf("stat team/queue/queue.json with minio-go: %v", err)
		}
		if stat.ETag != etag {
			t.Fatalf("minio-go sees ETag %q, the store returned %q", stat.ETag, etag)
		}
	})
}
