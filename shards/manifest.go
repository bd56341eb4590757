package shards

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/s3queue/s3queue/s3store"
)

// ManifestKey is where the queue's manifest lives, relative to the store root.
const ManifestKey = "queue.json"

// FormatVersion is the newest bucket layout this code reads and writes:
// format 2 is a queue whose shard count has changed (Manifest.Previous
// lists the earlier counts). A queue never resharded keeps FormatOriginal,
// so binaries that know only format 1 still open it; they refuse a format-2
// queue with ErrLayoutMismatch rather than look for tasks in the wrong
// shards.
const FormatVersion = 2

// FormatOriginal is the layout of a queue whose shard count never changed:
// new queues are created with it.
const FormatOriginal = 1

// DefaultShards is the shard count of a new queue unless configured.
const DefaultShards = 16

// MaxShards bounds the shard count (shard names have three digits).
const MaxShards = 1000

// ErrLayoutMismatch reports a process configured differently from the
// queue in the bucket (invariant 8).
var ErrLayoutMismatch = errors.New("queue layout mismatch")

// Manifest fixes the layout everyone must agree on.
type Manifest struct {
	Format int `json:"format"`
	// Shards is the current shard count: new task ids are placed with it
	// (task.ShardFor(id, Shards)).
	Shards int `json:"shards"`
	// Previous are the earlier shard counts, oldest first, set by Reshard.
	// A task placed before a reshard stays where it was put, under one of
	// them (see Counts).
	Previous  []int     `json:"previous_shards,omitempty"`
	CreatedAt time.Time `json:"created_at"`
	// ConditionalDelete is what the provider did with a DELETE whose
	// If-Match was stale when the queue was created: s3store.DeleteHonoured
	// or s3store.DeleteIgnored. Empty (a queue created before it was
	// recorded) counts as ignored.
	ConditionalDelete string `json:"conditional_delete,omitempty"`
	// DispatchMode is how new tasks reach workers: DispatchShared ("", a
	// queue created before it was recorded, is shared) or DispatchDirect.
	// Fixed when the queue is created.
	DispatchMode DispatchMode `json:"dispatch_mode,omitempty"`
}

// DispatchMode is how new tasks reach workers ([queue] dispatch_mode;
// docs/direct-dispatch.md): DispatchShared or DispatchDirect.
type DispatchMode string

// The dispatch modes.
const (
	// DispatchShared: members of the fleet find new tasks by listing the
	// shards they lease.
	DispatchShared DispatchMode = "shared"
	// DispatchDirect: producers route each new task to a live worker's
	// inbox; the shards carry only ready pointers (retries, repairs).
	DispatchDirect DispatchMode = "direct"
)

// Validate reports an error unless m is DispatchShared, DispatchDirect or
// "" (shared).
func (m DispatchMode) Validate() error {
	switch m {
	case "", DispatchShared, DispatchDirect:
		return nil
	}
	return fmt.Errorf("dispatch mode %q: want %q or %q", string(m), DispatchShared, DispatchDirect)
}

// Mode is the queue's dispatch mode.
func (m Manifest) Mode() DispatchMode {
	if m.DispatchMode == "" {
		return DispatchShared
	}
	return m.DispatchMode
}

// Direct reports whether the queue dispatches directly to inboxes.
func (m Manifest) Direct() bool { return m.Mode() == DispatchDirect }

// DeleteHonoured reports whether the provider refuses a DELETE whose
// If-Match is stale, so that a conditional DELETE is atomic. Only then may
// retention delete a finished task without tombstoning it first.
func (m Manifest) DeleteHonoured() bool { return m.ConditionalDelete == s3store.DeleteHonoured }

// Counts returns every shard count a task id may have been placed with:
// the current one first, then the previous ones, newest first, without
// duplicates. A task id is found by trying task.ShardFor(id, c) for each
// (taskio.LoadID).
func (m Manifest) Counts() []int {
	out := []int{m.Shards}
	for i := len(m.Previous) - 1; i >= 0; i-- {
		if !slices.Contains(out, m.Previous[i]) {
			out = append(out, m.Previous[i])
		}
	}
	return out
}

// ProviderCheckPrefix is where Open's provider check writes its scratch
// objects (and removes them).
const ProviderCheckPrefix = "doctor/"

// Open reads the queue manifest, creating it with wantShards shards when
// the queue is new. wantShards 0 means "whatever the queue has" (DefaultShards
// for a new queue). A manifest that disagrees with wantShards, or has a
// format this code does not know, is an ErrLayoutMismatch naming both sides.
//
// Creating a queue first checks the provider (s3store.CheckProvider, about
// ten requests on scratch keys): a server that does not honour conditional
// PUT is refused with an error wrapping s3store.ErrUnsupportedProvider, and
// what it does with a conditional DELETE is recorded in the manifest. Later
// opens trust the manifest and check nothing (one GET).
func Open(ctx context.Context, st s3store.Store, wantShards int) (Manifest, error) {
	return OpenMode(ctx, st, wantShards, DispatchShared)
}

// OpenMode is Open for a process configured with dispatch mode mode
// (DispatchShared, or "" for it, or DispatchDirect): a new queue records
// it, and an existing queue of the other mode is an ErrLayoutMismatch. The
// two modes do not mix: a shared-mode producer's tasks would wait in
// shards that direct-mode workers only read for ready pointers, and a
// direct-mode producer's inbox entries would wait for workers that hold no
// inbox.
func OpenMode(ctx context.Context, st s3store.Store, wantShards int, mode DispatchMode) (Manifest, error) {
	if err := mode.Validate(); err != nil {
		return Manifest{}, err
	}
	if mode == "" {
		mode = DispatchShared
	}
	if wantShards < 0 || wantShards > MaxShards {
		return Manifest{}, fmt.Errorf("shard count %d out of range 1..%d", wantShards, MaxShards)
	}
	obj, err := st.Get(ctx, ManifestKey)
	if errors.Is(err, s3store.ErrNotFound) {
		n := wantShards
		if n == 0 {
			n = DefaultShards
		}
		rep, cerr := s3store.CheckProvider(ctx, st, ProviderCheckPrefix)
		if cerr != nil {
			return Manifest{}, fmt.Errorf("create queue: %w", cerr)
		}
		if cerr := rep.Supported(); cerr != nil {
			return Manifest{}, fmt.Errorf("create queue: %w", cerr)
		}
		m := Manifest{Format: FormatOriginal, Shards: n, CreatedAt: rep.ServerTime.UTC(), ConditionalDelete: rep.ConditionalDelete}
		if mode == DispatchDirect {
			m.DispatchMode = mode
		}
		body, _ := json.Marshal(m)
		_, err = st.Put(ctx, ManifestKey, body, s3store.PutOptions{IfNoneMatch: true})
		if err == nil {
			return m, nil
		}
		if !s3store.LostRace(err) {
			return Manifest{}, fmt.Errorf("create queue manifest: %w", err)
		}
		// Someone else created it first: read theirs.
		obj, err = st.Get(ctx, ManifestKey)
	}
	if err != nil {
		return Manifest{}, fmt.Errorf("read queue manifest: %w", err)
	}
	m, err := parseManifest(obj.Body)
	if err != nil {
		return Manifest{}, err
	}
	if wantShards != 0 && m.Shards != wantShards {
		if slices.Contains(m.Previous, wantShards) {
			return Manifest{}, fmt.Errorf("%w: the queue was resharded from %d to %d shards but this process is configured with %d; set shards = %d (or remove the setting)", ErrLayoutMismatch, wantShards, m.Shards, wantShards, m.Shards)
		}
		return Manifest{}, fmt.Errorf("%w: the queue has %d shards but this process is configured with %d; set shards = %d (or remove the setting)", ErrLayoutMismatch, m.Shards, wantShards, m.Shards)
	}
	if m.Mode() != mode {
		return Manifest{}, fmt.Errorf("%w: the queue was created with dispatch_mode = %q but this process is configured with %q; set dispatch_mode = %q in [queue] (or S3QUEUE_QUEUE_DISPATCH_MODE=%s)", ErrLayoutMismatch, m.Mode(), mode, m.Mode(), m.Mode())
	}
	return m, nil
}

// ReadManifest reads the queue's manifest, creating nothing: a store
// without one is an error wrapping s3store.ErrNotFound. Processes re-read it
// when the fleet object shows a larger shard count than theirs (Fleet.Shards).
func ReadManifest(ctx context.Context, st s3store.Store) (Manifest, error) {
	m, _, err := readManifest(ctx, st)
	return m, err
}

func readManifest(ctx context.Context, st s3store.Store) (Manifest, string, error) {
	obj, err := st.Get(ctx, ManifestKey)
	if err != nil {
		return Manifest{}, "", fmt.Errorf("read queue manifest: %w", err)
	}
	m, err := parseManifest(obj.Body)
	return m, obj.ETag, err
}

// parseManifest decodes a manifest and checks it is one this code reads.
func parseManifest(body []byte) (Manifest, error) {
	var m Manifest
	if err := json.Unmarshal(body, &m); err != nil || m.Format == 0 || m.Shards <= 0 || m.Shards > MaxShards {
		return Manifest{}, fmt.Errorf("read queue manifest: %s is not a valid s3queue manifest (%q)", ManifestKey, truncate(body, 80))
	}
	if m.DispatchMode != "" && m.DispatchMode != DispatchShared && m.DispatchMode != DispatchDirect {
		return Manifest{}, fmt.Errorf("%w: the queue uses dispatch mode %q, this s3queue understands %q and %q", ErrLayoutMismatch, m.DispatchMode, DispatchShared, DispatchDirect)
	}
	if m.Format != FormatOriginal && m.Format != FormatVersion {
		return Manifest{}, fmt.Errorf("%w: the queue uses layout format %d, this s3queue understands %d and %d", ErrLayoutMismatch, m.Format, FormatOriginal, FormatVersion)
	}
	for _, n := range m.Previous {
		if n <= 0 || n > MaxShards {
			return Manifest{}, fmt.Errorf("read queue manifest: %s is not a valid s3queue manifest (previous shard count %d)", ManifestKey, n)
		}
	}
	return m, nil
}

func truncate(b []byte, n int) string {
	if len(b) > n {
		return string(b[:n]) + "..."
	}
	return string(b)
}
