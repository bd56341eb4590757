package direct

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"hash/fnv"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/s3queue/s3queue/clock"
	"github.com/s3queue/s3queue/lease"
	"github.com/s3queue/s3queue/s3store"
)

// Record is a worker's record, the Data of its lease: written with each
// renewal, so the lease doubles as the inbox's checkpoint and doorbell.
type Record struct {
	Worker    string    `json:"worker_id"`
	Host      string    `json:"hostname,omitempty"`
	CreatedAt time.Time `json:"created_at"`
	// Types are the task types the worker runs, sorted; producers route
	// a task only to a worker that runs its type.
	Types []string `json:"types"`
	// Cursor is the oldest inbox bucket the worker has not finished.
	Cursor string `json:"cursor,omitempty"`
	// Asleep: the worker reads its doorbell instead of listing its inbox;
	// a producer that routes a task to it rings the bell.
	Asleep bool `json:"asleep,omitempty"`
	// Busy: every slot of the worker was taken at its last write;
	// producers route to workers that are not busy while there are any.
	Busy bool `json:"busy,omitempty"`
}

// RunsAll reports whether the worker runs every type of types.
func (r Record) RunsAll(types []string) bool {
	for _, t := range types {
		if !r.Runs(t) {
			return false
		}
	}
	return true
}

// Runs reports whether the worker runs task type typ.
func (r Record) Runs(typ string) bool {
	_, ok := slices.BinarySearch(r.Types, typ)
	return ok
}

// DecodeRecord decodes a lease's Data.
func DecodeRecord(data json.RawMessage) (Record, error) {
	var r Record
	if err := json.Unmarshal(data, &r); err != nil || CheckWorkerID(r.Worker) != nil {
		return Record{}, fmt.Errorf("worker lease record: %w", lease.ErrCorrupt)
	}
	return r, nil
}

// Worker is a worker as a reader of the leases sees it.
type Worker struct {
	Record
	ExpiresAt time.Time // its lease's expiry, S3 time
}

// ReadWorkers lists the worker leases and reads each (one LIST per 1,000
// workers, one GET per worker). Corrupt leases are skipped and reported in
// the error, with the workers read.
func ReadWorkers(ctx context.Context, st s3store.Store) ([]Worker, error) {
	keys, err := listAll(ctx, st, WorkersPrefix)
	if err != nil {
		return nil, err
	}
	var ids []string
	for _, o := range keys {
		if id, ok := LeaseWorker(o.Key); ok {
			ids = append(ids, id)
		}
	}
	// Read concurrently, a few at a time: a producer's refresh of a large
	// fleet should not take a round trip per worker.
	ws := make([]Worker, len(ids))
	errs := make([]error, len(ids))
	sem := make(chan struct{}, 16)
	var wg sync.WaitGroup
	for i, id := range ids {
		wg.Go(func() {
			sem <- struct{}{}
			defer func() { <-sem }()
			ws[i], errs[i] = readWorker(ctx, st, id)
		})
	}
	wg.Wait()
	var out []Worker
	var bad []error
	for i := range ids {
		switch err := errs[i]; {
		case errors.Is(err, s3store.ErrNotFound):
		case err != nil:
			bad = append(bad, err)
		default:
			out = append(out, ws[i])
		}
	}
	return out, errors.Join(bad...)
}

func readWorker(ctx context.Context, st s3store.Store, id string) (Worker, error) {
	info, err := lease.Peek(ctx, st, LeaseKey(id))
	if err != nil {
		return Worker{}, err
	}
	r, err := DecodeRecord(info.Data)
	if err != nil || r.Worker != id {
		return Worker{}, fmt.Errorf("worker lease %s: %w", LeaseKey(id), lease.ErrCorrupt)
	}
	return Worker{Record: r, ExpiresAt: info.ExpiresAt}, nil
}

// listAll lists every key under prefix.
func listAll(ctx context.Context, st s3store.Store, prefix string) ([]s3store.ObjectInfo, error) {
	var out []s3store.ObjectInfo
	after := ""
	for {
		page, err := st.List(ctx, prefix, s3store.ListOptions{StartAfter: after})
		if err != nil {
			return out, fmt.Errorf("list %s: %w", prefix, err)
		}
		out = append(out, page.Objects...)
		if !page.Truncated || len(page.Objects) == 0 {
			return out, nil
		}
		after = page.Objects[len(page.Objects)-1].Key
	}
}

// Selection is how a producer picks among the live workers that run a
// task's type.
type Selection string

// The selection policies.
const (
	RoundRobin Selection = "round_robin" // each in turn
	Hash       Selection = "hash"        // by the task id: a task's worker is stable
	Random     Selection = "random"
)

// ParseSelection parses a worker_selection value.
func ParseSelection(s string) (Selection, error) {
	switch v := Selection(s); v {
	case RoundRobin, Hash, Random:
		return v, nil
	}
	return "", fmt.Errorf("invalid worker selection %q (want round_robin, hash or random)", s)
}

// Directory is a producer's cached view of the live workers: one LIST of
// workers/ and a GET per worker each TTL, whatever the producer submits.
// It is safe for concurrent use.
type Directory struct {
	St        s3store.Store
	Local     clock.Local
	TTL       time.Duration
	Margin    time.Duration // a worker counts as live until its expiry minus Margin
	Selection Selection
	IntN      func(n int) int // random draws (Random)

	mu      sync.Mutex
	view    []Worker // sorted by worker id
	read    time.Time
	next    uint64 // RoundRobin's turn
	started bool   // next has its random start
}

// Pick chooses the worker to route task id of type typ to, among those
// live at now (S3 time) by the view and, while there are any, not busy,
// and reports false when none is live.
func (d *Directory) Pick(ctx context.Context, now clock.Interval, typ, id string) (Worker, bool, error) {
	return d.pick(ctx, now, id, func(w Worker) bool { return w.Runs(typ) })
}

// Other chooses a worker other than self that runs every type of types,
// among those live and not busy at now: where a busy worker hands on the
// tasks waiting in its inbox.
func (d *Directory) Other(ctx context.Context, now clock.Interval, self string, types []string) (Worker, bool, error) {
	return d.pick(ctx, now, self, func(w Worker) bool { return w.Worker != self && !w.Busy && w.RunsAll(types) })
}

// pick chooses among the live workers that ok accepts, preferring those
// not busy, by the Selection (Hash hashes key).
func (d *Directory) pick(ctx context.Context, now clock.Interval, key string, ok func(Worker) bool) (Worker, bool, error) {
	view, err := d.workers(ctx)
	var live, idle []Worker
	for _, w := range view {
		if ok(w) && lease.Held(w.ExpiresAt, now, d.Margin) {
			live = append(live, w)
			if !w.Busy {
				idle = append(idle, w)
			}
		}
	}
	if len(idle) > 0 {
		live = idle
	}
	if len(live) == 0 {
		return Worker{}, false, err
	}
	var i int
	switch d.Selection {
	case Hash:
		h := fnv.New64a()
		h.Write([]byte(key))
		i = int(h.Sum64() % uint64(len(live)))
	case Random:
		i = d.IntN(len(live))
	default:
		d.mu.Lock()
		if !d.started {
			// Each producer starts its turn at random: producers that
			// submit a task each (a CLI submit per process) would
			// otherwise all pick the first worker.
			d.next, d.started = uint64(d.IntN(1<<30)), true
		}
		i = int(d.next % uint64(len(live)))
		d.next++
		d.mu.Unlock()
	}
	return live[i], true, err
}

// workers returns the view, read again when it is older than TTL. A failed
// read keeps the old view (its expiries still rule it) and is returned.
func (d *Directory) workers(ctx context.Context) ([]Worker, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if !d.read.IsZero() && clock.Since(d.Local, d.read) < d.TTL {
		return d.view, nil
	}
	ws, err := ReadWorkers(ctx, d.St)
	if ws == nil && err != nil {
		return d.view, err
	}
	slices.SortFunc(ws, func(a, b Worker) int { return strings.Compare(a.Worker, b.Worker) })
	d.view, d.read = ws, d.Local.Now()
	return d.view, err
}

// Forget drops the view, so the next Pick reads the leases again.
func (d *Directory) Forget() {
	d.mu.Lock()
	d.read = time.Time{}
	d.mu.Unlock()
}

// Route routes task id (in shard, due at at) to worker to: the inbox
// entry's PUT, then, if to sleeps, its doorbell's (a nonce makes the
// bell's bytes, so its ETag, differ per ring). err is the entry's: the task is not
// routed, announce it otherwise. ringErr is the doorbell's: the task is
// routed anyway, and the worker still lists its inbox every sleep_scan.
// nonce is called only for a ring (a draw from the caller's source).
func Route(ctx context.Context, st s3store.Store, to Worker, at time.Time, id string, shard int, nonce func() string) (ringErr, err error) {
	if _, err := st.Put(ctx, EntryKey(to.Worker, at, id, shard), nil, s3store.PutOptions{}); err != nil {
		return nil, err
	}
	if to.Asleep {
		_, ringErr = st.Put(ctx, BellKey(to.Worker), []byte(id+" "+nonce()), s3store.PutOptions{})
	}
	return ringErr, nil
}
