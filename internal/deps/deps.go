// Package deps keeps the edges between tasks and their dependents in the
// bucket and passes a task's end on to the tasks that wait for it
// (docs/dependencies.md). It owns two kinds of objects, both empty:
//
//	deps/{parent id}/{child id}~{child shard}   an edge: the child waits for the parent
//	ended/{parent id}~{parent shard}~{version}  the write of that version ends the parent: its edges are to be settled
//
// An edge is written before its child task, and deleted once the child has
// learned the parent's end (Task.SettleDep). The ended marker is written
// before the write that ends a parent with dependents (Task.Dependents), and
// deleted once every edge of the parent is settled: a marker left behind by
// a crash is how the monitor's repair (Repair) finds the work to finish.
// Nothing polls a parent: the process that records a parent's end settles
// its children.
//
// The package must not decide by the local clock: ends and due times are
// stamped with the S3 time its callers pass in.
package deps

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/s3queue/s3queue/clock"
	"github.com/s3queue/s3queue/internal/taskio"
	"github.com/s3queue/s3queue/s3store"
	"github.com/s3queue/s3queue/shards"
	"github.com/s3queue/s3queue/task"
)

const (
	edgesPrefix = "deps/"
	endedPrefix = "ended/"
)

// EdgePrefix is where the edges from parent to its children are listed.
func EdgePrefix(parent string) string { return edgesPrefix + parent + "/" }

// EdgeKey is the edge from parent to child, which lives in childShard.
func EdgeKey(parent, child string, childShard int) string {
	return EdgePrefix(parent) + child + "~" + task.ShardName(childShard)
}

// EndedKey is the marker of the end of parent, which lives in shard, that
// the write of the task's version makes. Each end has its own marker: a
// pass-on of an earlier end, or a late DELETE of its marker, never touches
// a later one.
func EndedKey(parent string, shard int, version int64) string {
	return fmt.Sprintf("%s%s~%s~%d", endedPrefix, parent, task.ShardName(shard), version)
}

// parseEndedKey reads a marker's task, shard and version.
func parseEndedKey(key string) (id string, shard int, version int64, ok bool) {
	parts := strings.Split(strings.TrimPrefix(key, endedPrefix), "~")
	if len(parts) != 3 || !task.ValidID(parts[0]) {
		return "", 0, 0, false
	}
	shard, err := task.ParseShardName(parts[1])
	if err != nil {
		return "", 0, 0, false
	}
	version, err = strconv.ParseInt(parts[2], 10, 64)
	return parts[0], shard, version, err == nil
}

// EndedPrefix is where the monitor's repair lists the markers.
const EndedPrefix = endedPrefix

// Grace is how long an edge whose child task is not found is kept: the
// child's PUT may still land (a delayed request); after Grace it never
// will, and the edge is deleted.
const Grace = shards.PointerGrace

// Env is what settling needs: the store, the local clock that paces its
// retries, and the S3 clock that stamps its writes.
type Env struct {
	Store s3store.Store
	Local clock.Local
	Now   func(context.Context) (clock.Interval, error)
	// Counts are the shard counts a task may have been placed with
	// (the manifest's), to find a parent by id.
	Counts []int
	// Announce, if set, writes the ready pointer of a task Settle or
	// Advance made pending (the monitor and producers route it to a shard
	// a member polls and ring the doorbell); nil writes it in the task's
	// own shard.
	Announce func(ctx context.Context, t *task.Task) error
	// Ended, if set, is told of each task that Settle or Advance moved to
	// pending or ended, and of the ended holder whose end Advance found
	// no task waiting for, freeing its slot (for events: EventOf).
	Ended func(t *task.Task)
	// Jitter draws a uniform float in [0,1) for the pauses between lost
	// races (s3store.CAS); nil draws from math/rand/v2. Services pass
	// their Config.Rand's, so a seeded run replays.
	Jitter func() float64
}

// ErrUnknownParent: a dependency names no task of this queue.
var ErrUnknownParent = errors.New("unknown dependency")

// Prepare readies the edges of a child task, id in shard, that depends on
// parents, before the child is written: it reads every parent first (an
// unknown one is an error wrapping ErrUnknownParent, and nothing is
// written), then, for each that has not ended, marks it as having
// dependents (once per parent: a conditional PUT), writes the edge, and
// reads the parent again. It returns the child's Deps, with Ended set for
// the parents that had already ended, whose edges are settled at once.
// Requests per parent: a GET; for one not ended, a PUT of the edge and a
// second GET, and the first time it gains a dependent a conditional PUT of
// it.
//
// The mark comes before the edge, so that an edge is never left where no
// end will look: a producer that dies after the mark leaves a parent
// whose end lists no edge of it, one that dies after the edge leaves an
// edge the parent's end deletes (its child never lands: Grace).
func (e Env) Prepare(ctx context.Context, child string, shard int, parents []string) ([]task.Dep, error) {
	out := make([]task.Dep, len(parents))
	read := make([]taskio.Versioned, len(parents))
	for i, id := range parents {
		if !task.ValidID(id) {
			return nil, fmt.Errorf("dependency %q: %w: not a task id", id, ErrUnknownParent)
		}
		v, err := taskio.LoadID(ctx, e.Store, id, e.Counts)
		if errors.Is(err, s3store.ErrNotFound) {
			return nil, fmt.Errorf("dependency %s: %w: no such task in this queue", id, ErrUnknownParent)
		}
		if err != nil {
			return nil, fmt.Errorf("dependency %s: %w", id, err)
		}
		read[i] = v
		out[i] = task.Dep{ID: id, Shard: v.Task.Shard}
		if v.Task.Status.Terminal() {
			out[i].Ended = v.Task.Status
		}
	}
	for i, v := range read {
		if out[i].Ended != "" {
			continue
		}
		ended, err := e.edge(ctx, v, child, shard)
		if err != nil {
			return nil, fmt.Errorf("dependency %s: %w", v.Task.ID, err)
		}
		out[i].Ended = ended
	}
	return out, nil
}

// edge writes the edge from parent v to child, in shard, and returns the
// parent's end if it has ended meanwhile (then the edge is deleted again:
// the child learns the end at once).
//
// The read after the edge's write is what makes the edge safe: a parent
// that had not ended then lists its edges after that write when it ends
// (it has dependents), so it sees this one; a parent that had ended may
// have listed them before, and the child learns its end here instead.
func (e Env) edge(ctx context.Context, v taskio.Versioned, child string, shard int) (task.Status, error) {
	parent := v.Task.ID
	if !v.Task.Dependents {
		ended, err := e.markDependents(ctx, v)
		if err != nil || ended != "" {
			return ended, err
		}
	}
	key := EdgeKey(parent, child, shard)
	if _, err := e.Store.Put(ctx, key, nil, s3store.PutOptions{}); err != nil {
		return "", fmt.Errorf("write edge: %w", err)
	}
	nv, err := taskio.Load(ctx, e.Store, v.Task.Key())
	if err != nil {
		return "", fmt.Errorf("read again after the edge: %w", err)
	}
	if !nv.Task.Status.Terminal() {
		return "", nil
	}
	// Left behind if this fails: the parent's end, or the repair, deletes
	// it once Grace has passed.
	_ = e.Store.Delete(ctx, key, s3store.DeleteOptions{})
	return nv.Task.Status, nil
}

// markDependents sets the parent's Dependents flag by CAS unless it is set,
// and returns the parent's end if it ended first (then nothing is written).
func (e Env) markDependents(ctx context.Context, v taskio.Versioned) (task.Status, error) {
	cas := s3store.CAS{Jitter: e.jitter(), Sleep: e.sleep}
	var ended task.Status
	err := cas.Retry(ctx, func(attempt int) (bool, error) {
		if attempt > 0 {
			nv, err := taskio.Load(ctx, e.Store, v.Task.Key())
			if err != nil {
				return false, err
			}
			v = nv
		}
		t := v.Task
		switch {
		case t.Status.Terminal():
			ended = t.Status
			return false, nil
		case t.Dependents:
			return false, nil
		}
		iv, err := e.Now(ctx)
		if err != nil {
			return false, err
		}
		t = t.Clone()
		t.MarkDependents(iv.Mid())
		if _, err := taskio.Update(ctx, e.Store, e.Local, t, v.ETag); err != nil {
			return s3store.LostRace(err), err
		}
		return false, nil
	})
	return ended, err
}

func (e Env) jitter() func() float64 {
	if e.Jitter != nil {
		return e.Jitter
	}
	return rand.Float64
}

// settleRounds bounds the CAS loops of a child's settle: a child has at
// most task.MaxDeps parents, so its settle can lose at most that many races
// to its parents' settles (and a few to cancels), each a round trip or two
// apart. s3store.CASAttempts alone gives up after about 2s, while 100
// parents ending at once take about 100 serial writes (measured: 60 of 100
// settles gave up at 20ms a request); the rest would wait for the
// monitor's repair.
const settleRounds = (task.MaxDeps + 10 + s3store.CASAttempts - 1) / s3store.CASAttempts

// contended runs a read-modify-CAS loop on a child under s3store.CAS,
// with jittered pauses, for up to settleRounds rounds.
func (e Env) contended(ctx context.Context, try func(attempt int) (bool, error)) error {
	cas := s3store.CAS{Jitter: e.jitter(), Sleep: e.sleep}
	n := 0
	for round := 1; ; round++ {
		err := cas.Retry(ctx, func(int) (bool, error) { n++; return try(n - 1) })
		if !errors.Is(err, s3store.ErrContended) || round == settleRounds {
			return err
		}
	}
}

func (e Env) sleep(ctx context.Context, d time.Duration) error {
	if !clock.Sleep(e.Local, d, ctx.Done()) {
		return ctx.Err()
	}
	return nil
}

// Ending writes the marker of a parent about to end (before the write that
// ends it), so that a crash after that write leaves the repair a trail.
func (e Env) Ending(ctx context.Context, t *task.Task) error {
	if _, err := e.Store.Put(ctx, EndedKey(t.ID, t.Shard, t.Version), nil, s3store.PutOptions{}); err != nil {
		return fmt.Errorf("mark task %s ending: %w", t.ID, err)
	}
	return nil
}

// settleParallel bounds the children one Settle updates at once.
const settleParallel = 16

// Settle passes the end of parent (terminal, with Dependents) to each child
// whose edge is listed under it: the child learns it by CAS
// (Task.SettleDep), a child now pending is announced with a ready pointer,
// and a child now ended passes its own end on in turn (transitively). Each
// edge is deleted once its child has learned the end, and the marker once
// no edge is left. It reports an error if edges are left (a child's write
// failed, or a child not found yet may still land): the marker stays, and
// the monitor's repair settles the rest. Requests: a LIST per 1,000 edges;
// per edge a GET and a conditional PUT of the child, and a DELETE; a PUT
// of a pointer per child released; a DELETE of the marker.
func (e Env) Settle(ctx context.Context, parent *task.Task) error {
	var left []error
	var mu sync.Mutex
	var next []*task.Task // children that ended in turn
	after := ""
	for {
		page, err := e.Store.List(ctx, EdgePrefix(parent.ID), s3store.ListOptions{StartAfter: after})
		if err != nil {
			return fmt.Errorf("settle dependents of %s: %w", parent.ID, err)
		}
		objs := page.Objects
		sem := make(chan struct{}, settleParallel)
		var wg sync.WaitGroup
		for _, o := range objs {
			wg.Add(1)
			sem <- struct{}{}
			go func() {
				defer func() { <-sem; wg.Done() }()
				ended, err := e.settleEdge(ctx, parent, o)
				mu.Lock()
				defer mu.Unlock()
				if err != nil {
					left = append(left, err)
				}
				if ended != nil {
					next = append(next, ended)
				}
			}()
		}
		wg.Wait()
		if !page.Truncated || len(objs) == 0 {
			break
		}
		after = objs[len(objs)-1].Key
	}
	for _, c := range next {
		if err := e.Settle(ctx, c); err != nil {
			left = append(left, err)
		}
	}
	if len(left) > 0 {
		return fmt.Errorf("settle dependents of %s: %d left: %w", parent.ID, len(left), errors.Join(left...))
	}
	if err := e.Store.Delete(ctx, EndedKey(parent.ID, parent.Shard, parent.Version), s3store.DeleteOptions{}); err != nil {
		return fmt.Errorf("settle dependents of %s: delete marker: %w", parent.ID, err)
	}
	return nil
}

// settleEdge passes parent's end to the child of edge o, and returns the
// child if it ended in turn and has dependents of its own (with its marker
// written).
func (e Env) settleEdge(ctx context.Context, parent *task.Task, o s3store.ObjectInfo) (*task.Task, error) {
	child, shard, err := parseEdge(parent.ID, o.Key)
	if err != nil {
		// Not an edge this package wrote: leave it, and say so.
		return nil, err
	}
	key := task.Key(shard, child)
	var settled *task.Task
	err = e.contended(ctx, func(int) (bool, error) {
		v, err := taskio.Load(ctx, e.Store, key)
		if errors.Is(err, s3store.ErrNotFound) {
			iv, nerr := e.Now(ctx)
			if nerr == nil && iv.Earliest.After(o.LastModified.Add(Grace)) {
				// Its child never landed (the producer died between the
				// edge and the task).
				return false, nil
			}
			return false, fmt.Errorf("child %s not found yet: %w", child, err)
		}
		if err != nil {
			return false, err
		}
		iv, err := e.Now(ctx)
		if err != nil {
			return false, err
		}
		t := v.Task.Clone()
		switch err := t.SettleDep(parent.ID, parent.Status, parent.LastError, iv.Mid()); {
		case errors.Is(err, task.ErrNoChange):
			return false, nil
		case err != nil:
			return false, err
		}
		if t.Status.Terminal() && t.Dependents {
			if err := e.Ending(ctx, t); err != nil {
				return false, err
			}
		}
		nv, err := taskio.Update(ctx, e.Store, e.Local, t, v.ETag)
		if err != nil {
			return s3store.LostRace(err), err
		}
		settled = nv.Task
		return false, nil
	})
	if err != nil {
		return nil, fmt.Errorf("child %s: %w", child, err)
	}
	if settled != nil && settled.Status != task.Blocked {
		if settled.Status == task.Pending {
			if err := e.announce(ctx, settled); err != nil {
				// The monitor's repair announces a pending task nobody
				// claims; the edge is settled either way.
				_ = err
			}
		}
		if e.Ended != nil {
			e.Ended(settled)
		}
	}
	if err := e.Store.Delete(ctx, o.Key, s3store.DeleteOptions{}); err != nil {
		return nil, fmt.Errorf("child %s: delete edge: %w", child, err)
	}
	if settled != nil && settled.Status.Terminal() && settled.Dependents {
		return settled, nil
	}
	return nil, nil
}

// parseEdge reads the child and its shard from an edge key under parent.
func parseEdge(parent, key string) (string, int, error) {
	name, ok := strings.CutPrefix(key, EdgePrefix(parent))
	id, shardName, ok2 := strings.Cut(name, "~")
	shard, err := task.ParseShardName(shardName)
	if !ok || !ok2 || err != nil || !task.ValidID(id) {
		return "", 0, fmt.Errorf("%s is not an edge", key)
	}
	return id, shard, nil
}

// Repair settles what crashes left: for each ended marker, the parent is
// read; one that has ended has its edges settled (Settle); one that has not
// (its writer died between the marker and the end, or lost its lease)
// keeps its marker, and its end, when it comes, settles and deletes it; one
// not found (deleted) settles its children as canceled.
//
// The marker of a parent that has not ended is never deleted, however old:
// an end may be landing at that moment (its marker rewritten, its write
// next), and a DELETE between the two, followed by the ender's death before
// it settles, would leave no trail to its children. Servers ignore If-Match
// on DELETE, and the marker's bytes never change, so nothing can tell the
// old marker from the new one. Such a marker costs a GET per repair until
// its parent ends. It returns how many markers it found and how many parents it
// settled. Requests: a LIST per 1,000 markers (none left: one LIST), and
// per marker a GET and what Settle does.
func (e Env) Repair(ctx context.Context) (found, settled int, err error) {
	var markers []s3store.ObjectInfo
	after := ""
	for {
		page, err := e.Store.List(ctx, endedPrefix, s3store.ListOptions{StartAfter: after})
		if err != nil {
			return 0, 0, fmt.Errorf("repair dependencies: %w", err)
		}
		markers = append(markers, page.Objects...)
		if !page.Truncated || len(page.Objects) == 0 {
			break
		}
		after = page.Objects[len(page.Objects)-1].Key
	}
	var errs []error
	for _, o := range markers {
		id, shard, version, ok := parseEndedKey(o.Key)
		if !ok {
			continue
		}
		v, err := taskio.Load(ctx, e.Store, task.Key(shard, id))
		switch {
		case errors.Is(err, s3store.ErrNotFound):
			gone := &task.Task{ID: id, Shard: shard, Status: task.Canceled, Dependents: true}
			if err = e.Settle(ctx, gone); err == nil {
				err = e.Store.Delete(ctx, o.Key, s3store.DeleteOptions{})
			}
		case err != nil:
		case v.Task.Version < version:
			// The write this marker announces has not landed (yet): it
			// may still, so the marker stays.
			continue
		case v.Task.Version == version && v.Task.Status.Terminal():
			err = e.PassOn(ctx, v.Task)
		default:
			// The write it announces never landed (another took its
			// version), or a later write followed it: the edges it would
			// settle are still there for the task's next end, which has
			// its own marker; a slot entry of its turn is passed over by
			// CheckHolders. Nothing is left to this one.
			err = e.Store.Delete(ctx, o.Key, s3store.DeleteOptions{})
		}
		if err != nil {
			errs = append(errs, err)
			continue
		}
		settled++
	}
	return len(markers), settled, errors.Join(errs...)
}

// announce writes the ready pointer of t, made pending now.
func (e Env) announce(ctx context.Context, t *task.Task) error {
	if e.Announce != nil {
		return e.Announce(ctx, t)
	}
	iv, err := e.Now(ctx)
	if err != nil {
		return err
	}
	return shards.Announce(ctx, e.Store, t, iv.Latest, -1)
}
