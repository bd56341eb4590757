package worker

import (
	"strings"
	"time"

	"github.com/s3queue/s3queue/clock"
	"github.com/s3queue/s3queue/shards"
	"github.com/s3queue/s3queue/task"
)

// A worker with more than one pool reads the tasks a listing brings while
// any pool has room, and learns a task's type, hence its pool, only by
// reading it (a listing's sizes say a task's status and priority, not its
// type). A task due for a full pool is refused: left in the bucket. Were
// each poll to read the same refused tasks again, a worker whose default
// pool is idle while another is full would pay a GET per waiting task per
// poll, for nothing. So the scheduler remembers each refused candidate at
// the version (ETag) the listing showed, and does not read it again while
// it is unchanged and its pool has no place for it: it is counted as
// waiting, as it was. Nor does it evict a drop-oldest pool's pending task
// (pool.admit): it was waiting when they were claimed, and is no newer
// work for them to make way for; a drop-oldest pool evicts for tasks that
// arrive (or change) after its pending ones were claimed, so that a worker
// does not trade the tasks of one backlog among themselves every
// poll_max. Once its pool has room, as many of the remembered candidates as
// the room are read again (the first in listing order); a candidate whose
// ETag changed (released, canceled, claimed elsewhere) is read as any
// other. A refused task in a drain shard (an inactive one, swept on a
// back-off up to drain_max) is found again by a sweep made due at once when
// a slot of its pool frees (sweepRefusedNow), which is why each refusal
// notes the shard that listed it.
//
// A refusal is reported (event, hook, Stats) once per task version: a task
// refused again at the same ETag is logged at debug level only.

// maxRefusals bounds the refusals remembered: beyond it the oldest is
// forgotten (read again at the next listing that brings it, and reported
// again if refused again).
const maxRefusals = 1024

// refusal is a candidate refused for a full pool.
type refusal struct {
	etag     string    // the candidate's ETag when refused
	pool     *pool     // the pool it was refused for
	typ      string    // its task's type
	deadline time.Time // its task's deadline (zero: none)
	shard    int       // the shard whose listing brings it (-1: none)
	seq      uint64    // its place in order
}

// refusals remembers the refused candidates by key, for the scheduler.
type refusals struct {
	byKey  map[string]refusal
	order  []refusalRef // oldest first; entries whose seq no longer matches are stale
	seq    uint64
	inPool map[*pool]int // remembered refusals by pool
}

type refusalRef struct {
	key string
	seq uint64
}

// get returns the refusal remembered for key at etag.
func (r *refusals) get(key, etag string) (refusal, bool) {
	f, ok := r.byKey[key]
	return f, ok && f.etag == etag
}

// put remembers f for key, forgetting the oldest refusal beyond
// maxRefusals.
func (r *refusals) put(key string, f refusal) {
	if r.byKey == nil {
		r.byKey, r.inPool = make(map[string]refusal), make(map[*pool]int)
	}
	r.forget(key)
	r.seq++
	f.seq = r.seq
	r.byKey[key] = f
	r.inPool[f.pool]++
	r.order = append(r.order, refusalRef{key, f.seq})
	for len(r.byKey) > maxRefusals {
		ref := r.order[0]
		r.order = r.order[1:]
		if f, ok := r.byKey[ref.key]; ok && f.seq == ref.seq {
			r.forget(ref.key)
		}
	}
	if len(r.order) > 2*maxRefusals {
		kept := r.order[:0]
		for _, ref := range r.order {
			if f, ok := r.byKey[ref.key]; ok && f.seq == ref.seq {
				kept = append(kept, ref)
			}
		}
		r.order = kept
	}
}

// forget forgets the refusal of key, if any.
func (r *refusals) forget(key string) {
	if f, ok := r.byKey[key]; ok {
		delete(r.byKey, key)
		r.inPool[f.pool]--
	}
}

// waitingFor reports whether refusals for p are remembered: tasks wait for
// a slot of p.
func (r *refusals) waitingFor(p *pool) bool { return r.inPool[p] > 0 }

// shardsWithRoom returns the shards whose listings bring remembered
// refusals for a pool that has room now, or nil.
func (r *refusals) shardsWithRoom() map[int]bool {
	var out map[int]bool
	for _, f := range r.byKey {
		if f.shard >= 0 && f.pool.room() > 0 {
			if out == nil {
				out = make(map[int]bool)
			}
			out[f.shard] = true
		}
	}
	return out
}

// listedShard returns the shard whose listing brought key (a task object
// or a ready pointer in tasks/{shard}/), or -1 for another key (an inbox
// or overflow entry, a held task's).
func listedShard(key string) int {
	rest, ok := strings.CutPrefix(key, "tasks/")
	if !ok {
		return -1
	}
	name, _, ok := strings.Cut(rest, "/")
	if !ok {
		return -1
	}
	n, err := task.ParseShardName(name)
	if err != nil {
		return -1
	}
	return n
}

// skipRefused returns the candidates of batch to read: it leaves out, and
// counts as waiting, each one remembered as refused at its current ETag
// while its pool has no place at all (a free handler or pending place),
// unless its type is paused (read, to be held) or its deadline has passed
// (read, to be written dead). Once the pool has a place, every remembered
// one is read again and competes in batch order (priority, then age) with
// the rest: letting through only as many as the places, after the new
// candidates had taken them, starved the oldest (sim seed 501033).
func (w *Worker) skipRefused(batch []shards.Candidate, iv clock.Interval) []shards.Candidate {
	if len(w.refused.byKey) == 0 {
		return batch
	}
	var out []shards.Candidate
	for i, c := range batch {
		if w.waitsRefused(c, iv) {
			if out == nil {
				out = append(make([]shards.Candidate, 0, len(batch)), batch[:i]...)
			}
			continue
		}
		if out != nil {
			out = append(out, c)
		}
	}
	if out == nil {
		return batch
	}
	return out
}

// waitsRefused reports whether c is left unread, and counts it as
// waiting, as skipRefused leaves a candidate out.
func (w *Worker) waitsRefused(c shards.Candidate, iv clock.Interval) bool {
	f, ok := w.refused.get(c.Key, c.ETag)
	if ok && !w.pausedType(f.typ) && (f.deadline.IsZero() || !iv.Earliest.After(f.deadline)) && f.pool.places() == 0 {
		w.blocked[f.pool]++
		return true
	}
	return false
}
