package shards

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/s3queue/s3queue/s3store"
)

// ManifestKey is where the queue's manifest lives, relative to the store root.
const ManifestKey = "queue.json"

// FormatVersion is the bucket layout this code reads and writes.
const FormatVersion = 1

// DefaultShards is the shard count of a new queue unless configured.
const DefaultShards = 16

// MaxShards bounds the shard count (shard names have three digits).
const MaxShards = 1000

// ErrLayoutMismatch reports a process configured differently from the
// queue in the bucket (invariant 8).
var ErrLayoutMismatch = errors.New("queue layout mismatch")

// Manifest fixes the layout everyone must agree on.
type Manifest struct {
	Format    int       `json:"format"`
	Shards    int       `json:"shards"`
	CreatedAt time.Time `json:"created_at"`
}

// Open reads the queue manifest, creating it with wantShards shards when
// the queue is new. wantShards 0 means "whatever the queue has" (DefaultShards
// for a new queue). A manifest that disagrees with wantShards, or has a
// format this code does not know, is an ErrLayoutMismatch naming both sides.
func Open(ctx context.Context, st s3store.Store, wantShards int) (Manifest, error) {
	if wantShards < 0 || wantShards > MaxShards {
		return Manifest{}, fmt.Errorf("shard count %d out of range 1..%d", wantShards, MaxShards)
	}
	obj, err := st.Get(ctx, ManifestKey)
	if errors.Is(err, s3store.ErrNotFound) {
		n := wantShards
		if n == 0 {
			n = DefaultShards
		}
		now, terr := st.Now(ctx)
		if terr != nil {
			return Manifest{}, fmt.Errorf("create queue manifest: %w", terr)
		}
		m := Manifest{Format: FormatVersion, Shards: n, CreatedAt: now.UTC()}
		body, _ := json.Marshal(m)
		_, err = st.Put(ctx, ManifestKey, body, s3store.PutOptions{IfNoneMatch: true})
		if err == nil {
			return m, nil
		}
		if !errors.Is(err, s3store.ErrPreconditionFailed) && !errors.Is(err, s3store.ErrConflict) {
			return Manifest{}, fmt.Errorf("create queue manifest: %w", err)
		}
		// Someone else created it first: read theirs.
		obj, err = st.Get(ctx, ManifestKey)
	}
	if err != nil {
		return Manifest{}, fmt.Errorf("read queue manifest: %w", err)
	}
	var m Manifest
	if err := json.Unmarshal(obj.Body, &m); err != nil || m.Format == 0 || m.Shards <= 0 || m.Shards > MaxShards {
		return Manifest{}, fmt.Errorf("read queue manifest: %s is not a valid s3queue manifest (%q)", ManifestKey, truncate(obj.Body, 80))
	}
	if m.Format != FormatVersion {
		return Manifest{}, fmt.Errorf("%w: the queue uses layout format %d, this s3queue understands %d", ErrLayoutMismatch, m.Format, FormatVersion)
	}
	if wantShards != 0 && m.Shards != wantShards {
		return Manifest{}, fmt.Errorf("%w: the queue has %d shards but this process is configured with %d; set shards = %d (or remove the setting)", ErrLayoutMismatch, m.Shards, wantShards, m.Shards)
	}
	return m, nil
}

func truncate(b []byte, n int) string {
	if len(b) > n {
		return string(b[:n]) + "..."
	}
	return string(b)
}
