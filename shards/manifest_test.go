package shards_test

import (
	"context"
	"encoding/json"
	"errors"
	"reflect"
	"testing"

	"github.com/s3queue/s3queue/s3store"
	"github.com/s3queue/s3queue/s3store/mem"
	"github.com/s3queue/s3queue/shards"
)

// deleteIgnoring ignores If-Match on DELETE, as MinIO does.
type deleteIgnoring struct{ s3store.Store }

func (s deleteIgnoring) Delete(ctx context.Context, key string, _ s3store.DeleteOptions) error {
	return s.Store.Delete(ctx, key, s3store.DeleteOptions{})
}

// casIgnoring ignores conditions on PUT, as some S3 clones do.
type casIgnoring struct{ s3store.Store }

func (s casIgnoring) Put(ctx context.Context, key string, body []byte, _ s3store.PutOptions) (string, error) {
	return s.Store.Put(ctx, key, body, s3store.PutOptions{})
}

// Creating a queue checks the provider and records what it does with a
// conditional DELETE; later opens trust the manifest.
func TestCreatingAQueueChecksTheProvider(t *testing.T) {
	ctx := context.Background()
	for _, tc := range []struct {
		name string
		st   func(s3store.Store) s3store.Store
		want string
	}{
		{"honoured", func(s s3store.Store) s3store.Store { return s }, s3store.DeleteHonoured},
		{"ignored", func(s s3store.Store) s3store.Store { return deleteIgnoring{s} }, s3store.DeleteIgnored},
	} {
		t.Run("conditional delete "+tc.name, func(t *testing.T) {
			base := mem.New()
			m, err := shards.Open(ctx, tc.st(base), 4)
			if err != nil {
				t.Fatal(err)
			}
			if m.ConditionalDelete != tc.want || m.DeleteHonoured() != (tc.want == s3store.DeleteHonoured) {
				t.Fatalf("manifest says conditional delete %q, want %q", m.ConditionalDelete, tc.want)
			}
			if n := base.Len(); n != 1 {
				t.Fatalf("%d objects after creating a queue, want the manifest alone (the check cleans up)", n)
			}
			ctr := s3store.NewCounter(tc.st(base))
			if m2, err := shards.Open(ctx, ctr, 4); err != nil || !reflect.DeepEqual(m2, m) {
				t.Fatalf("reopen: %+v %v, want %+v", m2, err, m)
			}
			if c := ctr.Counts(); c.Total() != 1 || c.Of(s3store.OpGet) != 1 {
				t.Fatalf("reopening made %s, want one GET (no provider check)", c)
			}
		})
	}
	t.Run("a provider that ignores conditional PUT is refused and no queue is created", func(t *testing.T) {
		base := mem.New()
		_, err := shards.Open(ctx, casIgnoring{base}, 4)
		if !errors.Is(err, s3store.ErrUnsupportedProvider) {
			t.Fatalf("open: %v, want ErrUnsupportedProvider", err)
		}
		if _, err := base.Get(ctx, shards.ManifestKey); !errors.Is(err, s3store.ErrNotFound) {
			t.Fatalf("a manifest was written on a refused provider: %v", err)
		}
	})
	t.Run("a manifest from before the field counts as ignoring", func(t *testing.T) {
		base := mem.New()
		body, _ := json.Marshal(map[string]any{"format": shards.FormatVersion, "shards": 4})
		base.Put(ctx, shards.ManifestKey, body, s3store.PutOptions{})
		m, err := shards.Open(ctx, base, 0)
		if err != nil || m.DeleteHonoured() {
			t.Fatalf("old manifest: %+v %v, want conditional delete not honoured", m, err)
		}
	})
}
