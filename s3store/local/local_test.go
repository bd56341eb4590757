package local_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/s3queue/s3queue/s3store"
	"github.com/s3queue/s3queue/s3store/local"
	"github.com/s3queue/s3queue/s3store/storetest"
)

func TestMain(m *testing.M) {
	if os.Getenv(childEnv) == "1" {
		os.Exit(runChild())
	}
	os.Exit(m.Run())
}

func TestConformance(t *testing.T) {
	storetest.Run(t, func(t *testing.T) s3store.Store { return open(t, t.TempDir()) })
}

func open(t *testing.T, dir string) *local.Store {
	t.Helper()
	s, err := local.Open(dir)
	if err != nil {
		t.Fatalf("open: %v", err)
	}
	return s
}

func put(t *testing.T, s s3store.Store, key, body string, opts s3store.PutOptions) string {
	t.Helper()
	etag, err := s.Put(context.Background(), key, []byte(body), opts)
	if err != nil {
		t.Fatalf("put %q: %v", key, err)
	}
	return etag
}

// listAll pages through prefix after startAfter, maxKeys at a time.
func listAll(t *testing.T, s s3store.Store, prefix, startAfter string, maxKeys int) []string {
	t.Helper()
	var keys []string
	for pages := 0; ; pages++ {
		page, err := s.List(context.Background(), prefix, s3store.ListOptions{StartAfter: startAfter, MaxKeys: maxKeys})
		if err != nil {
			t.Fatalf("list %q after %q: %v", prefix, startAfter, err)
		}
		if maxKeys > 0 && len(page.Objects) > maxKeys {
			t.Fatalf("list %q: page of %d keys, want at most %d", prefix, len(page.Objects), maxKeys)
		}
		for _, o := range page.Objects {
			keys = append(keys, o.Key)
		}
		if !page.Truncated {
			return keys
		}
		if len(page.Objects) == 0 || pages > 1000 {
			t.Fatalf("list %q: truncated page with %d keys", prefix, len(page.Objects))
		}
		startAfter = page.Objects[len(page.Objects)-1].Key
	}
}

func TestOpen(t *testing.T) {
	t.Run("creates missing directories", func(t *testing.T) {
		dir := filepath.Join(t.TempDir(), "x", "y")
		s := open(t, dir)
		put(t, s, "k", "v", s3store.PutOptions{})
		if st, err := os.Stat(dir); err != nil || !st.IsDir() {
			t.Fatalf("store directory: %v", err)
		}
	})
	t.Run("a file in the way is an error naming it", func(t *testing.T) {
		file := filepath.Join(t.TempDir(), "file")
		if err := os.WriteFile(file, nil, 0o644); err != nil {
			t.Fatal(err)
		}
		_, err := local.Open(file)
		if err == nil || !strings.Contains(err.Error(), file) {
			t.Fatalf("open on a file = %v, want an error naming %s", err, file)
		}
	})
	t.Run("an empty name is an error", func(t *testing.T) {
		if _, err := local.Open(""); err == nil {
			t.Fatal("open of an empty name succeeded")
		}
	})
	t.Run("a second store on the same directory sees the first one's objects", func(t *testing.T) {
		dir := t.TempDir()
		etag := put(t, open(t, dir), "a/b", "v", s3store.PutOptions{})
		obj, err := open(t, dir).Get(context.Background(), "a/b")
		if err != nil || string(obj.Body) != "v" || obj.ETag != etag {
			t.Fatalf("get through a second store = %q %q %v", obj.Body, obj.ETag, err)
		}
	})
}

// trickyKeys sort differently as keys than as paths: '-' and '.' sort before
// '/', and a key can be both an object and a "directory" of others.
var trickyKeys = []string{
	"a", "a/", "a/b", "a/b/c", "a/b-", "a/b/", "a-c", "a.b", "a0", "a b", "ab", "ab/c",
	"a.obj", "a.dir", "a.dir/x", "a.obj/y", ".obj", ".dir/z", "./dot", "...", "a/..b",
	"b=1:2+3~4@5_6", "tasks/000/01J.json", "tasks/001/01J.json", "tasks/0010/x",
	"z/ü", "z/é/x", "z/\x7f",
}

func TestListMatchesByteOrder(t *testing.T) {
	s := open(t, t.TempDir())
	for _, k := range trickyKeys {
		put(t, s, k, k, s3store.PutOptions{IfNoneMatch: true})
	}
	sorted := slices.Clone(trickyKeys)
	slices.Sort(sorted)
	prefixes := []string{"", "a", "a/", "a/b", "a/b/", "a.", "a.d", "a.dir/", "ab", ".", "tasks/", "tasks/00", "tasks/001", "z/", "nope", "a//", "/", "../"}
	afters := []string{"", "a", "a/", "a/a", "a/b", "a/b/", "a/b0", "a-", "a.dir", "ab", "tasks/000/", "tasks/001/01J.json", "z", "zz"}
	for _, prefix := range prefixes {
		for _, after := range afters {
			var want []string
			for _, k := range sorted {
				if strings.HasPrefix(k, prefix) && k > after {
					want = append(want, k)
				}
			}
			for _, maxKeys := range []int{0, 1, 2, 3, 7} {
				got := listAll(t, s, prefix, after, maxKeys)
				if !slices.Equal(got, want) {
					t.Fatalf("list %q after %q by %d = %q, want %q", prefix, after, maxKeys, got, want)
				}
			}
		}
	}
}

func TestListShowsOnlyObjects(t *testing.T) {
	dir := t.TempDir()
	s := open(t, dir)
	put(t, s, "a/b", "v", s3store.PutOptions{})
	// What a crashed writer and a stranger leave behind.
	for _, name := range []string{"a.dir/.put-0123456789abcdef.tmp", "a.dir/notes.txt", "stray", "a.dir/sub.dir/.keep"} {
		if err := os.MkdirAll(filepath.Dir(filepath.Join(dir, name)), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, name), []byte("x"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := os.Stat(filepath.Join(dir, ".locks")); err != nil {
		t.Fatalf("lock directory: %v", err)
	}
	if got := listAll(t, s, "", "", 0); !slices.Equal(got, []string{"a/b"}) {
		t.Fatalf("list = %q, want only a/b", got)
	}
}

func TestETagChangesOnEveryWrite(t *testing.T) {
	s := open(t, t.TempDir())
	seen := make(map[string]bool)
	etag := ""
	for i := 0; i < 5; i++ {
		etag = put(t, s, "same", "identical bytes", s3store.PutOptions{IfMatch: etag, IfNoneMatch: etag == ""})
		if seen[etag] {
			t.Fatalf("write %d of identical bytes reused etag %q", i, etag)
		}
		seen[etag] = true
	}
}

func TestObjectInfo(t *testing.T) {
	s := open(t, t.TempDir())
	ctx := context.Background()
	before := time.Now()
	etag := put(t, s, "k", "12345", s3store.PutOptions{})
	info, err := s.Head(ctx, "k")
	if err != nil {
		t.Fatalf("head: %v", err)
	}
	if info.Key != "k" || info.ETag != etag || info.Size != 5 ||
		info.LastModified.Before(before.Add(-time.Second)) || info.LastModified.After(time.Now()) {
		t.Fatalf("head = %+v, want key k, etag %q, size 5, modified just now", info, etag)
	}
	page, err := s.List(ctx, "", s3store.ListOptions{})
	if err != nil || len(page.Objects) != 1 || page.Objects[0] != info {
		t.Fatalf("list = %+v %v, want [%+v]", page.Objects, err, info)
	}
	obj, err := s.Get(ctx, "k")
	if err != nil || !obj.LastModified.Equal(info.LastModified) {
		t.Fatalf("get modified %v %v, want %v", obj.LastModified, err, info.LastModified)
	}
}

func TestInvalidKeys(t *testing.T) {
	s := open(t, t.TempDir())
	ctx := context.Background()
	for _, key := range []string{"", "/a", "a//b", "a/../b", "..", "a\x00"} {
		_, err := s.Put(ctx, key, []byte("x"), s3store.PutOptions{})
		if err == nil || errors.Is(err, s3store.ErrNotFound) || errors.Is(err, s3store.ErrPreconditionFailed) {
			t.Errorf("put %q = %v, want an invalid-key error", key, err)
		} else if !strings.Contains(err.Error(), "invalid key") {
			t.Errorf("put %q = %v, want it to say invalid key", key, err)
		}
		if _, err := s.Get(ctx, key); err == nil || errors.Is(err, s3store.ErrNotFound) {
			t.Errorf("get %q = %v, want an invalid-key error", key, err)
		}
		if err := s.Delete(ctx, key, s3store.DeleteOptions{}); err == nil {
			t.Errorf("delete %q succeeded", key)
		}
	}
	if got := listAll(t, s, "", "", 0); len(got) != 0 {
		t.Fatalf("invalid puts stored %q", got)
	}
}

func TestPutConditions(t *testing.T) {
	s := open(t, t.TempDir())
	ctx := context.Background()
	etag := put(t, s, "k", "v1", s3store.PutOptions{IfNoneMatch: true})
	if _, err := s.Put(ctx, "k", nil, s3store.PutOptions{IfMatch: etag, IfNoneMatch: true}); err == nil {
		t.Fatal("put with both conditions succeeded")
	}
	if _, err := s.Put(ctx, "k", nil, s3store.PutOptions{IfNoneMatch: true}); !errors.Is(err, s3store.ErrPreconditionFailed) {
		t.Fatalf("create over an object = %v, want ErrPreconditionFailed", err)
	}
	if _, err := s.Put(ctx, "k", nil, s3store.PutOptions{IfMatch: "stale"}); !errors.Is(err, s3store.ErrPreconditionFailed) {
		t.Fatalf("stale if-match = %v, want ErrPreconditionFailed", err)
	}
	if _, err := s.Put(ctx, "other", nil, s3store.PutOptions{IfMatch: etag}); !errors.Is(err, s3store.ErrNotFound) {
		t.Fatalf("if-match on a missing key = %v, want ErrNotFound", err)
	}
	if obj, err := s.Get(ctx, "k"); err != nil || string(obj.Body) != "v1" || obj.ETag != etag {
		t.Fatalf("failed puts changed the object: %q %q %v", obj.Body, obj.ETag, err)
	}
}

func TestDelete(t *testing.T) {
	dir := t.TempDir()
	s := open(t, dir)
	ctx := context.Background()
	etag := put(t, s, "a/b/c", "v", s3store.PutOptions{})
	put(t, s, "a/x", "v", s3store.PutOptions{})

	if err := s.Delete(ctx, "a/b/c", s3store.DeleteOptions{IfMatch: "stale"}); !errors.Is(err, s3store.ErrPreconditionFailed) {
		t.Fatalf("delete with a stale etag = %v, want ErrPreconditionFailed", err)
	}
	if err := s.Delete(ctx, "a/b/c", s3store.DeleteOptions{IfMatch: etag}); err != nil {
		t.Fatalf("delete with the current etag: %v", err)
	}
	if _, err := s.Head(ctx, "a/b/c"); !errors.Is(err, s3store.ErrNotFound) {
		t.Fatalf("head after delete = %v, want ErrNotFound", err)
	}
	if err := s.Delete(ctx, "a/b/c", s3store.DeleteOptions{IfMatch: etag}); err != nil {
		t.Fatalf("conditional delete of a missing key = %v, want success", err)
	}
	if _, err := os.Stat(filepath.Join(dir, "a.dir", "b.dir")); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("the emptied directory of a/b/c was left behind (%v)", err)
	}
	if got := listAll(t, s, "", "", 0); !slices.Equal(got, []string{"a/x"}) {
		t.Fatalf("list after delete = %q, want [a/x]", got)
	}
	// The directory came back empty-handed and must work again.
	put(t, s, "a/b/d", "v", s3store.PutOptions{IfNoneMatch: true})
	if got := listAll(t, s, "a/b/", "", 0); !slices.Equal(got, []string{"a/b/d"}) {
		t.Fatalf("list after re-creating a/b/ = %q", got)
	}
}

// A file this package did not write whole is an object like any other: it
// is listed with its size, a Get returns its bytes, and a conditional write
// or delete can replace it. One bad file never stops a listing (defect 13:
// it blocked a whole shard).
func TestBadObjectFilesAreObjects(t *testing.T) {
	ctx := context.Background()
	header := func(t *testing.T) []byte {
		s := open(t, t.TempDir())
		put(t, s, "x", "", s3store.PutOptions{})
		data, err := os.ReadFile(filepath.Join(s.Dir(), "x.obj"))
		if err != nil {
			t.Fatal(err)
		}
		return data
	}(t)
	for _, tc := range []struct {
		name string
		file []byte
	}{
		{"zero bytes", nil},
		{"cut inside its header", header[:len(header)/2]},
		{"cut after its magic", header[:8]},
		{"foreign", []byte("not ours, and rather longer than a header would be: " + strings.Repeat("x", 100))},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			s := open(t, dir)
			put(t, s, "tasks/a", "first", s3store.PutOptions{})
			put(t, s, "tasks/c", "third", s3store.PutOptions{})
			path := filepath.Join(dir, "tasks.dir", "b.obj")
			if err := os.WriteFile(path, tc.file, 0o644); err != nil {
				t.Fatal(err)
			}

			page, err := s.List(ctx, "tasks/", s3store.ListOptions{})
			if err != nil {
				t.Fatalf("list over a bad file: %v", err)
			}
			var keys []string
			var bad s3store.ObjectInfo
			for _, o := range page.Objects {
				keys = append(keys, o.Key)
				if o.Key == "tasks/b" {
					bad = o
				}
			}
			if !slices.Equal(keys, []string{"tasks/a", "tasks/b", "tasks/c"}) {
				t.Fatalf("list = %q, want the bad object between the good ones", keys)
			}
			if bad.Size != int64(len(tc.file)) || bad.ETag == "" || bad.LastModified.IsZero() {
				t.Errorf("listed bad object = %+v, want size %d, an ETag and a time", bad, len(tc.file))
			}
			// Paging past it works too.
			if got := listAll(t, s, "tasks/", "", 1); !slices.Equal(got, keys) {
				t.Errorf("list one key a page = %q", got)
			}

			obj, err := s.Get(ctx, "tasks/b")
			if err != nil || string(obj.Body) != string(tc.file) || obj.ETag != bad.ETag {
				t.Fatalf("get = %q, %q, %v; want the file's bytes %q with the listed ETag %q", obj.Body, obj.ETag, err, tc.file, bad.ETag)
			}
			if info, err := s.Head(ctx, "tasks/b"); err != nil || info.ETag != bad.ETag || info.Size != bad.Size {
				t.Errorf("head = %+v, %v; want what the listing said", info, err)
			}

			if _, err := s.Put(ctx, "tasks/b", []byte("new"), s3store.PutOptions{IfNoneMatch: true}); !errors.Is(err, s3store.ErrPreconditionFailed) {
				t.Errorf("create over a bad object = %v, want precondition failed (it exists)", err)
			}
			if _, err := s.Put(ctx, "tasks/b", []byte("new"), s3store.PutOptions{IfMatch: "raw-0-0"}); !errors.Is(err, s3store.ErrPreconditionFailed) {
				t.Errorf("put with another ETag = %v, want precondition failed", err)
			}
			if err := s.Delete(ctx, "tasks/b", s3store.DeleteOptions{IfMatch: "raw-0-0"}); !errors.Is(err, s3store.ErrPreconditionFailed) {
				t.Errorf("delete with another ETag = %v, want precondition failed", err)
			}
			etag, err := s.Put(ctx, "tasks/b", []byte("replaced"), s3store.PutOptions{IfMatch: bad.ETag})
			if err != nil {
				t.Fatalf("put with the bad object's ETag: %v", err)
			}
			if obj, err := s.Get(ctx, "tasks/b"); err != nil || string(obj.Body) != "replaced" || obj.ETag != etag {
				t.Errorf("after replacing: %q %v", obj.Body, err)
			}
		})
	}
}

// A body damaged after it was written keeps its header's ETag (a listing
// reads only headers), and a Get returns the whole file, header included,
// so no reader takes the damaged bytes for what was written.
func TestDamagedBodyIsReturnedWhole(t *testing.T) {
	dir := t.TempDir()
	s := open(t, dir)
	ctx := context.Background()
	etag := put(t, s, "k", `{"good":"body"}`, s3store.PutOptions{})
	path := filepath.Join(dir, "k.obj")
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	data[len(data)-3] ^= 1
	if err := os.WriteFile(path, data, 0o644); err != nil {
		t.Fatal(err)
	}
	obj, err := s.Get(ctx, "k")
	if err != nil || string(obj.Body) != string(data) || obj.ETag != etag {
		t.Fatalf("get of a damaged body = %q %q %v, want the whole file with ETag %q", obj.Body, obj.ETag, err, etag)
	}
	if page, err := s.List(ctx, "", s3store.ListOptions{}); err != nil || len(page.Objects) != 1 || page.Objects[0].ETag != etag {
		t.Fatalf("list = %+v %v", page, err)
	}
	if err := s.Delete(ctx, "k", s3store.DeleteOptions{IfMatch: etag}); err != nil {
		t.Fatalf("conditional delete of the damaged object: %v", err)
	}
}

// A file that cannot be opened at all is still listed; only a read of it
// fails.
func TestUnreadableFileDoesNotStopAListing(t *testing.T) {
	if os.Geteuid() == 0 {
		t.Skip("root reads any file")
	}
	dir := t.TempDir()
	s := open(t, dir)
	ctx := context.Background()
	put(t, s, "a", "1", s3store.PutOptions{})
	put(t, s, "b", "2", s3store.PutOptions{})
	if err := os.Chmod(filepath.Join(dir, "a.obj"), 0); err != nil {
		t.Fatal(err)
	}
	if got := listAll(t, s, "", "", 0); !slices.Equal(got, []string{"a", "b"}) {
		t.Fatalf("list = %q", got)
	}
	if _, err := s.Get(ctx, "a"); err == nil {
		t.Errorf("get of an unreadable file succeeded")
	}
}

func TestCanceledContextIsRefused(t *testing.T) {
	s := open(t, t.TempDir())
	put(t, s, "k", "v", s3store.PutOptions{})
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	calls := map[string]error{}
	_, calls["get"] = s.Get(ctx, "k")
	_, calls["head"] = s.Head(ctx, "k")
	_, calls["put"] = s.Put(ctx, "k", nil, s3store.PutOptions{})
	calls["delete"] = s.Delete(ctx, "k", s3store.DeleteOptions{})
	_, calls["list"] = s.List(ctx, "", s3store.ListOptions{})
	_, calls["now"] = s.Now(ctx)
	for op, err := range calls {
		if !errors.Is(err, context.Canceled) {
			t.Errorf("%s with a canceled context = %v, want context.Canceled", op, err)
		}
	}
	if obj, err := s.Get(context.Background(), "k"); err != nil || string(obj.Body) != "v" {
		t.Fatalf("canceled calls changed the store: %q %v", obj.Body, err)
	}
}

func TestEveryCallReportsTheDate(t *testing.T) {
	s := open(t, t.TempDir())
	ctx := context.Background()
	var samples []s3store.DateSample
	if !s3store.WatchDates(s, func(d s3store.DateSample) { samples = append(samples, d) }) {
		t.Fatal("local store is not a DateWatcher")
	}
	before := time.Now()
	put(t, s, "k", "v", s3store.PutOptions{})
	s.Get(ctx, "k")
	s.Get(ctx, "missing")
	s.Head(ctx, "k")
	s.List(ctx, "", s3store.ListOptions{})
	s.Delete(ctx, "k", s3store.DeleteOptions{})
	now, err := s.Now(ctx)
	if err != nil {
		t.Fatal(err)
	}
	after := time.Now()
	if now.Before(before) || now.After(after) {
		t.Fatalf("now = %v, want between %v and %v", now, before, after)
	}
	if len(samples) != 7 {
		t.Fatalf("%d date samples for 7 calls", len(samples))
	}
	for _, d := range samples {
		if d.Date.Before(before.Add(-time.Millisecond)) || d.Date.After(after) || d.Sent.After(d.Received) {
			t.Fatalf("sample %+v outside the calls (%v .. %v)", d, before, after)
		}
	}
}

func TestZeroLengthBodies(t *testing.T) {
	s := open(t, t.TempDir())
	etag := put(t, s, "empty", "", s3store.PutOptions{IfNoneMatch: true})
	info, err := s.Head(context.Background(), "empty")
	if err != nil || info.Size != 0 || info.ETag != etag {
		t.Fatalf("head = %+v %v, want size 0 etag %q", info, err, etag)
	}
	obj, err := s.Get(context.Background(), "empty")
	if err != nil || len(obj.Body) != 0 {
		t.Fatalf("get = %q %v", obj.Body, err)
	}
	if fmt.Sprint(listAll(t, s, "", "", 0)) != "[empty]" {
		t.Fatal("empty object not listed")
	}
}

// A store whose directory is gone, is not a directory or is closed to us
// cannot serve anything until an operator acts: every request fails with
// s3store.ErrUnusable, reads included (S3 answers NoSuchBucket, not
// NoSuchKey, for a missing bucket).
func TestUnusableRoot(t *testing.T) {
	ctx := context.Background()
	calls := map[string]func(s3store.Store) error{
		"get":  func(s s3store.Store) error { _, err := s.Get(ctx, "tasks/a"); return err },
		"head": func(s s3store.Store) error { _, err := s.Head(ctx, "tasks/a"); return err },
		"put": func(s s3store.Store) error {
			_, err := s.Put(ctx, "tasks/b", []byte("x"), s3store.PutOptions{})
			return err
		},
		"create": func(s s3store.Store) error {
			_, err := s.Put(ctx, "tasks/b", []byte("x"), s3store.PutOptions{IfNoneMatch: true})
			return err
		},
		"delete": func(s s3store.Store) error { return s.Delete(ctx, "tasks/a", s3store.DeleteOptions{}) },
		"list":   func(s s3store.Store) error { _, err := s.List(ctx, "tasks/", s3store.ListOptions{}); return err },
	}
	for _, tc := range []struct {
		name   string
		damage func(t *testing.T, dir string)
		want   string
	}{
		{"removed", func(t *testing.T, dir string) { os.RemoveAll(dir) }, "is gone"},
		{"replaced by a file", func(t *testing.T, dir string) {
			os.RemoveAll(dir)
			os.WriteFile(dir, []byte("x"), 0o644)
		}, "not a directory"},
		{"closed to us", func(t *testing.T, dir string) {
			if os.Geteuid() == 0 {
				t.Skip("root passes every permission check")
			}
			os.Chmod(dir, 0)
			t.Cleanup(func() { os.Chmod(dir, 0o755) })
		}, "permission denied"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := filepath.Join(t.TempDir(), "store")
			s := open(t, dir)
			put(t, s, "tasks/a", "x", s3store.PutOptions{})
			tc.damage(t, dir)
			for name, call := range calls {
				err := call(s)
				if !errors.Is(err, s3store.ErrUnusable) || !strings.Contains(err.Error(), tc.want) {
					t.Errorf("%s: %v, want ErrUnusable saying %q", name, err, tc.want)
				}
				if errors.Is(err, s3store.ErrNotFound) {
					t.Errorf("%s: %v is also not-found", name, err)
				}
			}
		})
	}
	t.Run("a missing key is still not found", func(t *testing.T) {
		s := open(t, t.TempDir())
		if _, err := s.Get(ctx, "tasks/none"); !errors.Is(err, s3store.ErrNotFound) || errors.Is(err, s3store.ErrUnusable) {
			t.Errorf("get of a missing key: %v", err)
		}
		if page, err := s.List(ctx, "tasks/", s3store.ListOptions{}); err != nil || len(page.Objects) != 0 {
			t.Errorf("list of a missing prefix: %v %v", page, err)
		}
	})
}
