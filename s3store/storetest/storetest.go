// Package storetest is the conformance suite every s3store backend passes:
// the embedded ones and awss3 against gofakes3 (in-process, see package
// fakes3) on every `go test`, MinIO and versitygw in integration/.
// It pins down the provider behaviours the queue relies on (see the table in
// docs/storage.md) and nothing a real S3 server would not also do.
package storetest

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"sort"
	"sync"
	"testing"
	"time"

	"github.com/s3queue/s3queue/s3store"
)

// Run runs the suite. newStore must return an empty store (a fresh bucket
// or prefix) each time it is called.
func Run(t *testing.T, newStore func(t *testing.T) s3store.Store) {
	RunWith(t, newStore, Options{})
}

// Options describe measured provider differences the suite asserts
// instead of the S3 behaviour.
type Options struct {
	// ParentKeys says what the server does with an object "dir" and an
	// object "dir/child" side by side. The queue's layout never needs both.
	ParentKeys ParentKeys
	// IfMatchMissing is what a PUT with If-Match on a missing key answers:
	// s3store.MissingNotFound ("" too: S3's 404) or
	// s3store.MissingPrecondition (gofakes3's 412). Either way nothing may
	// be created.
	IfMatchMissing string
	// ConditionalDelete is what a DELETE with a stale If-Match does:
	// s3store.DeleteHonoured or s3store.DeleteIgnored; "" accepts either.
	ConditionalDelete string
}

// ParentKeys are the measured behaviours for "dir" beside "dir/child".
type ParentKeys int

const (
	// ParentKeysCoexist: both are stored and listed, as on AWS S3.
	ParentKeysCoexist ParentKeys = iota
	// ParentKeysRefused: the second PUT fails (versitygw posix stores
	// objects as files and directories).
	ParentKeysRefused
	// ParentKeysHidden: both are stored and readable, but a listing shows
	// only "dir" (MinIO).
	ParentKeysHidden
)

// RunWith runs the suite for a provider with known differences.
func RunWith(t *testing.T, newStore func(t *testing.T) s3store.Store, opts Options) {
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
			defer cancel()
			tc.run(ctx, t, newStore(t), opts)
		})
	}
}

// QueueKeys are keys shaped like the ones the queue writes, with every
// character it uses.
var QueueKeys = []string{
	"queue.json",
	"tasks/000/01JDXYZ0000000000000000000.json",
	"tasks/015/01JDXYZ0000000000000000001.json",
	"ready/003/20261125T2330/01JDXYZ0000000000000000002",
	"shard-leases/007.json",
	"idempotency/c2hhMjU2Ojpmb28=.json",
	"workers/host-1_pid.42~a+b@c:d.lease.json",
	"a b/with space.json",
}

type testCase struct {
	name string
	run  func(ctx context.Context, t *testing.T, s s3store.Store, opts Options)
}

var cases = []testCase{
	{"get and head of a missing key are not found", func(ctx context.Context, t *testing.T, s s3store.Store, opts Options) {
		if _, err := s.Get(ctx, "missing"); !errors.Is(err, s3store.ErrNotFound) {
			t.Fatalf("get missing: want ErrNotFound, got %v", err)
		}
		if _, err := s.Head(ctx, "missing"); !errors.Is(err, s3store.ErrNotFound) {
			t.Fatalf("head missing: want ErrNotFound, got %v", err)
		}
	}},
	{"put returns the etag that get, head and list report", func(ctx context.Context, t *testing.T, s s3store.Store, opts Options) {
		body := []byte(`{"hello":"world"}`)
		etag := mustPut(ctx, t, s, "k.json", body, s3store.PutOptions{})
		if etag == "" || etag[0] == '"' {
			t.Fatalf("put returned etag %q: want a non-empty unquoted etag", etag)
		}
		obj, err := s.Get(ctx, "k.json")
		if err != nil {
			t.Fatalf("get: %v", err)
		}
		if !bytes.Equal(obj.Body, body) || obj.ETag != etag {
			t.Fatalf("get = %q etag %q, want %q etag %q", obj.Body, obj.ETag, body, etag)
		}
		info, err := s.Head(ctx, "k.json")
		if err != nil {
			t.Fatalf("head: %v", err)
		}
		if info.ETag != etag || info.Size != int64(len(body)) {
			t.Fatalf("head = etag %q size %d, want %q %d", info.ETag, info.Size, etag, len(body))
		}
		page := mustList(ctx, t, s, "", s3store.ListOptions{})
		if len(page.Objects) != 1 || page.Objects[0].ETag != etag || page.Objects[0].Size != int64(len(body)) {
			t.Fatalf("list = %+v, want one object with etag %q", page.Objects, etag)
		}
	}},
	{"zero-length bodies round-trip", func(ctx context.Context, t *testing.T, s s3store.Store, opts Options) {
		etag := mustPut(ctx, t, s, "empty", nil, s3store.PutOptions{IfNoneMatch: true})
		obj, err := s.Get(ctx, "empty")
		if err != nil || len(obj.Body) != 0 || obj.ETag != etag {
			t.Fatalf("get empty = %q %q %v, want empty body with etag %q", obj.Body, obj.ETag, err, etag)
		}
		if _, err := s.Put(ctx, "empty", []byte("x"), s3store.PutOptions{IfMatch: etag}); err != nil {
			t.Fatalf("if-match on empty object: %v", err)
		}
	}},
	{"create-if-absent twice fails the second time", func(ctx context.Context, t *testing.T, s s3store.Store, opts Options) {
		mustPut(ctx, t, s, "once", []byte("first"), s3store.PutOptions{IfNoneMatch: true})
		_, err := s.Put(ctx, "once", []byte("second"), s3store.PutOptions{IfNoneMatch: true})
		if !errors.Is(err, s3store.ErrPreconditionFailed) {
			t.Fatalf("second create: want ErrPreconditionFailed, got %v", err)
		}
		if got := mustGet(ctx, t, s, "once"); string(got.Body) != "first" {
			t.Fatalf("body after failed create = %q, want first", got.Body)
		}
	}},
	{"if-match with the current etag writes and changes the etag", func(ctx context.Context, t *testing.T, s s3store.Store, opts Options) {
		e1 := mustPut(ctx, t, s, "cas", []byte("v1"), s3store.PutOptions{})
		e2 := mustPut(ctx, t, s, "cas", []byte("v2"), s3store.PutOptions{IfMatch: e1})
		if e1 == e2 {
			t.Fatalf("etag did not change across writes of different bytes: %q", e1)
		}
		if got := mustGet(ctx, t, s, "cas"); string(got.Body) != "v2" || got.ETag != e2 {
			t.Fatalf("get = %q %q, want v2 %q", got.Body, got.ETag, e2)
		}
	}},
	{"if-match with a stale etag fails and leaves the object", func(ctx context.Context, t *testing.T, s s3store.Store, opts Options) {
		e1 := mustPut(ctx, t, s, "cas", []byte("v1"), s3store.PutOptions{})
		mustPut(ctx, t, s, "cas", []byte("v2"), s3store.PutOptions{IfMatch: e1})
		_, err := s.Put(ctx, "cas", []byte("v3"), s3store.PutOptions{IfMatch: e1})
		if !s3store.LostRace(err) {
			t.Fatalf("stale if-match: want a lost race (ErrPreconditionFailed or ErrConflict), got %v", err)
		}
		if got := mustGet(ctx, t, s, "cas"); string(got.Body) != "v2" {
			t.Fatalf("body after stale write = %q, want v2", got.Body)
		}
	}},
	{"if-match on a missing key is not found", func(ctx context.Context, t *testing.T, s s3store.Store, opts Options) {
		_, err := s.Put(ctx, "nothing-here", []byte("x"), s3store.PutOptions{IfMatch: "0123456789abcdef0123456789abcdef"})
		switch opts.IfMatchMissing {
		case s3store.MissingPrecondition:
			if !errors.Is(err, s3store.ErrPreconditionFailed) {
				t.Fatalf("if-match on missing key: provider listed as answering 412 answered %v: update docs/storage.md", err)
			}
		default:
			if !errors.Is(err, s3store.ErrNotFound) {
				t.Fatalf("if-match on missing key: want ErrNotFound, got %v", err)
			}
		}
		if _, err := s.Get(ctx, "nothing-here"); !errors.Is(err, s3store.ErrNotFound) {
			t.Fatalf("failed if-match created the key: %v", err)
		}
	}},
	{"delete removes and deleting a missing key succeeds", func(ctx context.Context, t *testing.T, s s3store.Store, opts Options) {
		mustPut(ctx, t, s, "gone", []byte("x"), s3store.PutOptions{})
		if err := s.Delete(ctx, "gone", s3store.DeleteOptions{}); err != nil {
			t.Fatalf("delete: %v", err)
		}
		if _, err := s.Get(ctx, "gone"); !errors.Is(err, s3store.ErrNotFound) {
			t.Fatalf("get after delete: want ErrNotFound, got %v", err)
		}
		if err := s.Delete(ctx, "gone", s3store.DeleteOptions{}); err != nil {
			t.Fatalf("delete of missing key: %v", err)
		}
	}},
	{"conditional delete with a stale etag is refused or ignored, never an error of another kind", func(ctx context.Context, t *testing.T, s s3store.Store, opts Options) {
		e1 := mustPut(ctx, t, s, "cd", []byte("v1"), s3store.PutOptions{})
		mustPut(ctx, t, s, "cd", []byte("v2"), s3store.PutOptions{IfMatch: e1})
		err := s.Delete(ctx, "cd", s3store.DeleteOptions{IfMatch: e1})
		_, getErr := s.Get(ctx, "cd")
		got := ""
		switch {
		case errors.Is(err, s3store.ErrPreconditionFailed):
			if getErr != nil {
				t.Fatalf("refused conditional delete still removed the object: %v", getErr)
			}
			got = s3store.DeleteHonoured
		case err == nil:
			if !errors.Is(getErr, s3store.ErrNotFound) {
				t.Fatalf("conditional delete reported success but the object remains (get: %v)", getErr)
			}
			got = s3store.DeleteIgnored
		default:
			t.Fatalf("conditional delete: want ErrPreconditionFailed or success, got %v", err)
		}
		if opts.ConditionalDelete != "" && got != opts.ConditionalDelete {
			t.Fatalf("conditional delete %s, but the provider is listed as %s: update docs/storage.md", got, opts.ConditionalDelete)
		}
	}},
	{"queue-shaped keys round-trip through put, get and list", func(ctx context.Context, t *testing.T, s s3store.Store, opts Options) {
		for _, k := range QueueKeys {
			mustPut(ctx, t, s, k, []byte(k), s3store.PutOptions{IfNoneMatch: true})
		}
		for _, k := range QueueKeys {
			if got := mustGet(ctx, t, s, k); string(got.Body) != k {
				t.Fatalf("get %q = %q", k, got.Body)
			}
		}
		want := append([]string(nil), QueueKeys...)
		sort.Strings(want)
		if got := keysOf(mustList(ctx, t, s, "", s3store.ListOptions{}).Objects); fmt.Sprint(got) != fmt.Sprint(want) {
			t.Fatalf("list all = %q, want %q", got, want)
		}
		if got := keysOf(mustList(ctx, t, s, "tasks/", s3store.ListOptions{}).Objects); len(got) != 2 {
			t.Fatalf("list tasks/ = %q, want the 2 task keys", got)
		}
	}},
	{"a key and a longer key under it coexist", func(ctx context.Context, t *testing.T, s s3store.Store, opts Options) {
		mustPut(ctx, t, s, "dir", []byte("file"), s3store.PutOptions{})
		switch opts.ParentKeys {
		case ParentKeysRefused:
			if _, err := s.Put(ctx, "dir/child", []byte("child"), s3store.PutOptions{}); err == nil {
				t.Fatal("provider listed as refusing dir/child beside dir accepted it: update docs/storage.md")
			}
			return
		case ParentKeysHidden:
			mustPut(ctx, t, s, "dir/child", []byte("child"), s3store.PutOptions{})
			if got := mustGet(ctx, t, s, "dir/child"); string(got.Body) != "child" {
				t.Fatalf("dir/child = %q", got.Body)
			}
			if got := keysOf(mustList(ctx, t, s, "dir", s3store.ListOptions{}).Objects); fmt.Sprint(got) != fmt.Sprint([]string{"dir"}) {
				t.Fatalf("provider listed as hiding dir/child lists %q: update docs/storage.md", got)
			}
			return
		}
		mustPut(ctx, t, s, "dir/child", []byte("child"), s3store.PutOptions{})
		mustPut(ctx, t, s, "dir-sibling", []byte("sib"), s3store.PutOptions{})
		got := keysOf(mustList(ctx, t, s, "dir", s3store.ListOptions{}).Objects)
		if fmt.Sprint(got) != fmt.Sprint([]string{"dir", "dir-sibling", "dir/child"}) {
			t.Fatalf("list dir = %q, want byte order dir, dir-sibling, dir/child", got)
		}
	}},
	{"list pages in key order and resumes after start-after", func(ctx context.Context, t *testing.T, s s3store.Store, opts Options) {
		var want []string
		for i := 0; i < 23; i++ {
			k := fmt.Sprintf("p/%03d", i)
			want = append(want, k)
			mustPut(ctx, t, s, k, []byte{byte(i)}, s3store.PutOptions{})
		}
		mustPut(ctx, t, s, "q/outside", nil, s3store.PutOptions{})
		var got []string
		after := ""
		pages := 0
		for {
			page := mustList(ctx, t, s, "p/", s3store.ListOptions{StartAfter: after, MaxKeys: 5})
			pages++
			if len(page.Objects) > 5 {
				t.Fatalf("page of %d keys, want at most 5", len(page.Objects))
			}
			got = append(got, keysOf(page.Objects)...)
			if !page.Truncated {
				break
			}
			after = page.Objects[len(page.Objects)-1].Key
			if pages > 10 {
				t.Fatal("listing does not end")
			}
		}
		if fmt.Sprint(got) != fmt.Sprint(want) || pages != 5 {
			t.Fatalf("paged list = %q in %d pages, want %q in 5", got, pages, want)
		}
		tail := keysOf(mustList(ctx, t, s, "p/", s3store.ListOptions{StartAfter: "p/020"}).Objects)
		if fmt.Sprint(tail) != fmt.Sprint([]string{"p/021", "p/022"}) {
			t.Fatalf("start-after p/020 = %q", tail)
		}
		if got := mustList(ctx, t, s, "nope/", s3store.ListOptions{}); len(got.Objects) != 0 || got.Truncated {
			t.Fatalf("empty prefix listed %+v", got)
		}
	}},
	{"racing creates: exactly one wins", func(ctx context.Context, t *testing.T, s s3store.Store, opts Options) {
		const n = 8
		var wg sync.WaitGroup
		wins := make(chan int, n)
		for i := 0; i < n; i++ {
			wg.Add(1)
			go func() {
				defer wg.Done()
				_, err := s.Put(ctx, "race", []byte(fmt.Sprint(i)), s3store.PutOptions{IfNoneMatch: true})
				switch {
				case err == nil:
					wins <- i
				case s3store.LostRace(err):
				default:
					t.Errorf("racing create: %v", err)
				}
			}()
		}
		wg.Wait()
		close(wins)
		var winners []int
		for w := range wins {
			winners = append(winners, w)
		}
		if len(winners) != 1 {
			t.Fatalf("%d creates won, want exactly 1", len(winners))
		}
		if got := mustGet(ctx, t, s, "race"); string(got.Body) != fmt.Sprint(winners[0]) {
			t.Fatalf("body %q is not the winner's %d", got.Body, winners[0])
		}
	}},
	{"racing read-modify-write loses no update", func(ctx context.Context, t *testing.T, s s3store.Store, opts Options) {
		mustPut(ctx, t, s, "counter", []byte("0"), s3store.PutOptions{})
		const workers, each = 4, 5
		var wg sync.WaitGroup
		for w := 0; w < workers; w++ {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for i := 0; i < each; i++ {
					for {
						obj, err := s.Get(ctx, "counter")
						if err != nil {
							t.Errorf("get counter: %v", err)
							return
						}
						var n int
						fmt.Sscan(string(obj.Body), &n)
						_, err = s.Put(ctx, "counter", []byte(fmt.Sprint(n+1)), s3store.PutOptions{IfMatch: obj.ETag})
						if err == nil {
							break
						}
						if !s3store.LostRace(err) {
							t.Errorf("put counter: %v", err)
							return
						}
					}
				}
			}()
		}
		wg.Wait()
		if got := mustGet(ctx, t, s, "counter"); string(got.Body) != fmt.Sprint(workers*each) {
			t.Fatalf("counter = %s, want %d", got.Body, workers*each)
		}
	}},
	{"a 1 MiB body round-trips", func(ctx context.Context, t *testing.T, s s3store.Store, opts Options) {
		body := bytes.Repeat([]byte("0123456789abcdef"), 1<<16)
		mustPut(ctx, t, s, "big", body, s3store.PutOptions{})
		if got := mustGet(ctx, t, s, "big"); !bytes.Equal(got.Body, body) {
			t.Fatalf("1 MiB body changed in transit (%d bytes back)", len(got.Body))
		}
	}},
	{"server time is near this machine's time", func(ctx context.Context, t *testing.T, s s3store.Store, opts Options) {
		before := time.Now()
		now, err := s.Now(ctx)
		if err != nil {
			t.Fatalf("now: %v", err)
		}
		if d := now.Sub(before); d < -2*time.Second || d > time.Minute {
			t.Fatalf("server time %v is %v from local time on a loopback server", now, d)
		}
	}},
	{"an ended context is refused", func(_ context.Context, t *testing.T, s s3store.Store, _ Options) {
		ctx, cancel := context.WithCancel(context.Background())
		cancel()
		if _, err := s.Put(ctx, "never", []byte("x"), s3store.PutOptions{}); err == nil {
			t.Fatal("put with a canceled context succeeded")
		}
	}},
}

func mustPut(ctx context.Context, t *testing.T, s s3store.Store, key string, body []byte, opts s3store.PutOptions) string {
	t.Helper()
	etag, err := s.Put(ctx, key, body, opts)
	if err != nil {
		t.Fatalf("put %q: %v", key, err)
	}
	return etag
}

func mustGet(ctx context.Context, t *testing.T, s s3store.Store, key string) s3store.Object {
	t.Helper()
	obj, err := s.Get(ctx, key)
	if err != nil {
		t.Fatalf("get %q: %v", key, err)
	}
	return obj
}

func mustList(ctx context.Context, t *testing.T, s s3store.Store, prefix string, opts s3store.ListOptions) s3store.ListPage {
	t.Helper()
	page, err := s.List(ctx, prefix, opts)
	if err != nil {
		t.Fatalf("list %q: %v", prefix, err)
	}
	return page
}

func keysOf(objs []s3store.ObjectInfo) []string {
	keys := make([]string, 0, len(objs))
	for _, o := range objs {
		keys = append(keys, o.Key)
	}
	return keys
}
