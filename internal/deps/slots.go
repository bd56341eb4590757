package deps

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/s3queue/s3queue/internal/events"
	"github.com/s3queue/s3queue/internal/taskio"
	"github.com/s3queue/s3queue/s3store"
	"github.com/s3queue/s3queue/task"
)

// A slot serialises the tasks of one key across the fleet (seed 004's
// controller, on the bucket): its object,
//
//	slots/{sha256 of the key}.json
//
// names the holder (the one task of the key that may be pending or
// running) and the FIFO of tasks waiting behind it (blocked). It changes
// only by CAS. A submit takes its place in the slot first (Admit), then
// writes its task: pending if it holds the slot, blocked if it waits. The
// slot moves on only when the holder's end is recorded: whoever records it
// (the worker's commit, a cancel, the monitor's dead-letter) passes the
// slot to the next task (Advance), after the ended marker, as dependents
// are settled. A lost lease is not an end: the re-dispatched task keeps
// the slot.

// Admission is how a submit with a slot key takes its place.
type Admission string

const (
	// AdmitQueue: behind the holder and the tasks already waiting (FIFO).
	AdmitQueue Admission = "queue"
	// AdmitReplace: latest wins: the task replaces the one waiting next
	// (which is canceled) without growing the queue, and the holder is
	// asked to stop through the cancel path.
	AdmitReplace Admission = "replace"
	// AdmitDropIfRunning: refused while the slot has a holder or a task
	// waiting; nothing is created.
	AdmitDropIfRunning Admission = "drop-if-running"
	// AdmitRequeue is AdmitQueue for a requeued task (not a submit's
	// choice): a slot that still names it as holder does so from its
	// previous run, whose end is being passed on, so it waits behind. A
	// requeue that retries passes the turn its earlier attempt got (in
	// Member.Turn), which it keeps. CheckWaiting admits a task its slot
	// passed over again this way, for a new turn.
	AdmitRequeue Admission = "requeue"
)

// ParseAdmission parses an admission's name ("" is AdmitQueue).
func ParseAdmission(s string) (Admission, error) {
	switch a := Admission(s); a {
	case "":
		return AdmitQueue, nil
	case AdmitQueue, AdmitReplace, AdmitDropIfRunning:
		return a, nil
	}
	return "", fmt.Errorf("unknown admission %q: want queue, replace or drop-if-running", s)
}

// MaxSlotQueue bounds the tasks waiting in one slot, so that its object
// stays small.
const MaxSlotQueue = 1000

// maxReplaced bounds Slot.Replaced.
const maxReplaced = 100

// ErrSlotBusy: a drop-if-running submit found its slot held or waited for.
var ErrSlotBusy = errors.New("slot busy")

// ErrSlotFull: the slot already has MaxSlotQueue tasks waiting.
var ErrSlotFull = errors.New("slot queue full")

// Member is a task in a slot, for one turn: a task requeued into its slot
// again takes a new turn, so that the end of its previous turn never
// passes the new one on (Advance).
type Member struct {
	ID    string `json:"id"`
	Shard int    `json:"shard"`
	// Turn is the slot's version that admitted it: unique in the slot.
	Turn int64 `json:"turn"`
}

// Slot is a slot object.
type Slot struct {
	Key string `json:"key"`
	// Holder may be pending or running; nil when the slot is free (then
	// Queue is empty).
	Holder *Member   `json:"holder,omitempty"`
	Queue  []Member  `json:"queue,omitempty"`
	Since  time.Time `json:"since"` // S3 time the holder took the slot
	// Replaced are the last tasks a replace took out of the queue (at
	// most maxReplaced), so that the repair cancels one whose cancel was
	// lost rather than admitting it again.
	Replaced []Member `json:"replaced,omitempty"`
	// Version grows with every write (invariant 2).
	Version int64 `json:"version"`
}

// SlotsPrefix is where the slot objects live.
const SlotsPrefix = "slots/"

// SlotKey is the object of slot key.
func SlotKey(key string) string {
	h := sha256.Sum256([]byte(key))
	return SlotsPrefix + hex.EncodeToString(h[:16]) + ".json"
}

// readSlot reads the slot of key; a slot never written is free ("" ETag).
func (e Env) readSlot(ctx context.Context, key string) (Slot, string, error) {
	obj, err := e.Store.Get(ctx, SlotKey(key))
	if errors.Is(err, s3store.ErrNotFound) {
		return Slot{Key: key}, "", nil
	}
	if err != nil {
		return Slot{}, "", fmt.Errorf("read slot %q: %w", key, err)
	}
	var s Slot
	if err := json.Unmarshal(obj.Body, &s); err != nil || s.Key != key {
		return Slot{}, "", fmt.Errorf("read slot %q: corrupt slot object %s", key, SlotKey(key))
	}
	return s, obj.ETag, nil
}

// writeSlot writes s by CAS on etag ("": create).
func (e Env) writeSlot(ctx context.Context, s Slot, etag string) error {
	s.Version++
	body, err := json.Marshal(s)
	if err != nil {
		return err
	}
	opts := s3store.PutOptions{IfMatch: etag, IfNoneMatch: etag == ""}
	_, err = e.Store.Put(ctx, SlotKey(s.Key), body, opts)
	return err
}

// Admitted is a submit's place in its slot.
type Admitted struct {
	// Wait: the task waits behind the holder (create it blocked).
	Wait bool
	// Turn is the task's turn in the slot (Task.SlotTurn).
	Turn int64
	// Replaced is the waiting task the submit replaced (AdmitReplace),
	// to be canceled; Holder the holder to ask to stop.
	Replaced, Holder *Member
}

// Admit takes m's place in slot key by admission a, by CAS on the slot
// object (a GET and a conditional PUT; again after a lost race).
// AdmitDropIfRunning on a busy slot is ErrSlotBusy, with nothing written.
func (e Env) Admit(ctx context.Context, key string, m Member, a Admission) (Admitted, error) {
	var out Admitted
	cas := s3store.CAS{Sleep: e.sleep}
	err := cas.Retry(ctx, func(int) (bool, error) {
		out = Admitted{}
		s, etag, err := e.readSlot(ctx, key)
		if err != nil {
			return false, err
		}
		retried := m.Turn      // a requeue's earlier attempt got this turn
		m.Turn = s.Version + 1 // the version this write makes
		same := func(o Member) bool { return o.ID == m.ID && (a != AdmitRequeue || o.Turn == retried) }
		switch {
		case s.Holder != nil && same(*s.Holder) && (a != AdmitRequeue || retried != 0):
			out.Turn = s.Holder.Turn // already holds it (a retried write)
			return false, nil
		case slices.ContainsFunc(s.Queue, same):
			out.Wait, out.Turn = true, s.Queue[slices.IndexFunc(s.Queue, same)].Turn
			return false, nil
		case s.Holder == nil:
			iv, err := e.Now(ctx)
			if err != nil {
				return false, err
			}
			s.Holder, s.Since = &m, iv.Latest
		case a == AdmitDropIfRunning:
			return false, fmt.Errorf("slot %q: %w: task %s holds it, %d wait", key, ErrSlotBusy, s.Holder.ID, len(s.Queue))
		case a == AdmitReplace && len(s.Queue) > 0:
			r := s.Queue[0]
			s.Queue = slices.Clone(s.Queue)
			s.Queue[0] = m
			s.Replaced = append(slices.Clone(s.Replaced), r)
			if n := len(s.Replaced); n > maxReplaced {
				s.Replaced = s.Replaced[n-maxReplaced:]
			}
			out = Admitted{Wait: true, Replaced: &r, Holder: s.Holder}
		case len(s.Queue) >= MaxSlotQueue:
			return false, fmt.Errorf("slot %q: %w: %d tasks wait", key, ErrSlotFull, len(s.Queue))
		default:
			s.Queue = append(slices.Clone(s.Queue), m)
			out.Wait = true
			if a == AdmitReplace {
				out.Holder = s.Holder
			}
		}
		out.Turn = m.Turn
		if err := e.writeSlot(ctx, s, etag); err != nil {
			return s3store.LostRace(err), fmt.Errorf("slot %q: %w", key, err)
		}
		return false, nil
	})
	return out, err
}

// Advance passes the slot of t (ended) on: if t holds it, the next task
// waiting takes it, and is made pending (SlotGranted) and announced; a
// next task that has ended meanwhile (canceled while it waited), or whose
// object never landed (after Grace), is passed over. If t no longer holds
// it, Advance makes sure the holder that does is not left blocked (a crash
// between the two writes). Idempotent. Requests: the slot's GET and
// conditional PUT, and the next task's GET, conditional PUT and pointer.
func (e Env) Advance(ctx context.Context, t *task.Task) error {
	for range MaxSlotQueue + 1 {
		s, etag, err := e.readSlot(ctx, t.Slot)
		if err != nil {
			return err
		}
		freed := false
		if s.Holder != nil && s.Holder.ID == t.ID && s.Holder.Turn == t.SlotTurn {
			// t's turn ends (a later turn of the same task, requeued
			// meanwhile, is not ended by it).
			s.Holder = nil
			if len(s.Queue) > 0 {
				next := s.Queue[0]
				s.Holder, s.Queue = &next, slices.Clone(s.Queue[1:])
				iv, err := e.Now(ctx)
				if err != nil {
					return err
				}
				s.Since = iv.Latest
			}
			if err := e.writeSlot(ctx, s, etag); err != nil {
				if s3store.LostRace(err) {
					// Another writer of the slot: s3store.CAS's first
					// pause, before reading it again.
					if err := e.sleep(ctx, s3store.CAS{Jitter: e.jitter()}.Pause(1)); err != nil {
						return err
					}
					continue
				}
				return fmt.Errorf("slot %q: %w", t.Slot, err)
			}
			freed = s.Holder == nil
		}
		if s.Holder == nil {
			if freed && e.Ended != nil {
				e.Ended(t) // SlotFreed (EventOf), from the writer that freed it
			}
			return nil
		}
		ended, err := e.grant(ctx, t.Slot, *s.Holder, s.Since)
		if err != nil {
			return err
		}
		if ended == nil {
			return nil
		}
		t = ended // the holder has ended, or never landed: pass it on too
	}
	return fmt.Errorf("slot %q: too many ended tasks in a row", t.Slot)
}

// grant makes the holder m of slot key pending if it waits, and returns a
// task to pass the slot on from when m has ended (or never landed, since
// before Grace).
func (e Env) grant(ctx context.Context, key string, m Member, since time.Time) (*task.Task, error) {
	cas := s3store.CAS{Sleep: e.sleep}
	var pass *task.Task
	var granted *task.Task
	err := cas.Retry(ctx, func(int) (bool, error) {
		v, err := taskio.Load(ctx, e.Store, task.Key(m.Shard, m.ID))
		if errors.Is(err, s3store.ErrNotFound) {
			iv, nerr := e.Now(ctx)
			if nerr == nil && iv.Earliest.After(since.Add(Grace)) {
				pass = &task.Task{ID: m.ID, Shard: m.Shard, Slot: key, Status: task.Canceled, SlotTurn: m.Turn}
				return false, nil
			}
			return false, fmt.Errorf("slot %q: holder %s not found yet: %w", key, m.ID, err)
		}
		if err != nil {
			return false, err
		}
		if v.Task.SlotTurn > m.Turn {
			// The task has a later turn (requeued into the slot again):
			// the turn the slot names as holder has ended.
			pass = &task.Task{ID: m.ID, Shard: m.Shard, Slot: key, Status: task.Canceled, SlotTurn: m.Turn}
			return false, nil
		}
		if v.Task.Status.Terminal() {
			if v.Task.SlotTurn == m.Turn {
				pass = v.Task
				return false, nil
			}
			// Ended in an earlier turn: the requeue that gave it this
			// turn has not landed yet, or never will (after Grace).
			iv, nerr := e.Now(ctx)
			if nerr == nil && iv.Earliest.After(since.Add(Grace)) {
				pass = &task.Task{ID: m.ID, Shard: m.Shard, Slot: key, Status: task.Canceled, SlotTurn: m.Turn}
				return false, nil
			}
			return false, fmt.Errorf("slot %q: holder %s's requeue not landed yet", key, m.ID)
		}
		iv, err := e.Now(ctx)
		if err != nil {
			return false, err
		}
		nt := v.Task.Clone()
		// Under the holder's turn: its end then passes this turn on.
		if err := nt.SlotGranted(m.Turn, iv.Mid()); errors.Is(err, task.ErrNoChange) {
			return false, nil // pending or running already
		} else if err != nil {
			return false, err
		}
		nv, err := taskio.Update(ctx, e.Store, e.Local, nt, v.ETag)
		if err != nil {
			return s3store.LostRace(err), err
		}
		granted = nv.Task
		return false, nil
	})
	if err != nil {
		return nil, err
	}
	if granted != nil {
		// A pending task nobody claims is announced by the monitor's
		// repair if this pointer is lost.
		_ = e.announce(ctx, granted)
		if e.Ended != nil {
			e.Ended(granted)
		}
	}
	return pass, nil
}

// EventOf is the event of a task that Settle or Advance moved on: one
// granted its slot, one whose dependencies all succeeded (unblocked), one
// a failed dependency ended, or the ended holder whose end left its slot
// free (a task has a slot or dependencies, never both).
func EventOf(t *task.Task) events.Kind {
	switch {
	case t.Status.Terminal() && t.Slot != "":
		return events.SlotFreed
	case t.Status == task.Pending && t.Slot != "":
		return events.SlotGranted
	case t.Status == task.Pending:
		return events.Unblocked
	}
	return events.DependencyFailed
}

// NeedsPassOn reports whether t's end, once recorded, must be passed on:
// to its dependents, or to the next task of its slot. Write the ended
// marker (Ending) before the write that ends it, and call PassOn after.
func NeedsPassOn(t *task.Task) bool {
	return t.Status.Terminal() && (t.Dependents || t.Slot != "")
}

// PassOn passes the end of t on: its slot to the next task (Advance), its
// outcome to its dependents (Settle), and deletes its ended marker once
// both are done. An error leaves the marker for the monitor's repair.
func (e Env) PassOn(ctx context.Context, t *task.Task) error {
	if t.Slot != "" {
		if err := e.Advance(ctx, t); err != nil {
			return fmt.Errorf("pass the slot of task %s on: %w", t.ID, err)
		}
	}
	if t.Dependents {
		return e.Settle(ctx, t)
	}
	if err := e.Store.Delete(ctx, EndedKey(t.ID, t.Shard, t.Version), s3store.DeleteOptions{}); err != nil {
		return fmt.Errorf("pass the end of task %s on: delete marker: %w", t.ID, err)
	}
	return nil
}

// CheckWaiting repairs a task blocked for its slot (t, older than Grace)
// that its slot does not know: one a replace took out of the queue whose
// cancel was lost is canceled (it reports it, for the caller to pass on);
// one whose write landed after the slot passed it over (later than Grace)
// is admitted again at the back, for a new turn (granted if the slot is
// free). One the slot names as holder is granted. A task that changed
// since t was read (granted and ended between the two reads) is left
// alone. Requests: the slot's GET, and what Admit or grant writes; before
// an Admit, the task's GET.
func (e Env) CheckWaiting(ctx context.Context, t *task.Task) (replaced bool, err error) {
	s, _, err := e.readSlot(ctx, t.Slot)
	if err != nil {
		return false, err
	}
	m := Member{ID: t.ID, Shard: t.Shard, Turn: t.SlotTurn}
	switch {
	case s.Holder != nil && *s.Holder == m:
		return false, e.granted(ctx, t.Slot, m, s.Since)
	case slices.Contains(s.Queue, m):
		return false, nil
	case slices.ContainsFunc(s.Replaced, func(r Member) bool { return r.ID == t.ID }):
		return true, nil
	}
	// The slot may have moved past t after t was read: granted, and ended.
	v, err := taskio.Load(ctx, e.Store, t.Key())
	if err != nil {
		return false, err
	}
	if v.Task.Version != t.Version {
		return false, nil
	}
	// A new entry, whatever stale ones of t the slot still has (AdmitQueue
	// would take those as t's place): its grant gives t its turn.
	adm, err := e.Admit(ctx, t.Slot, m, AdmitRequeue)
	if err != nil || adm.Wait {
		return false, err
	}
	m.Turn = adm.Turn
	return false, e.granted(ctx, t.Slot, m, time.Time{})
}

// granted grants holder m of slot key (grant), and passes the slot on if
// m has ended.
func (e Env) granted(ctx context.Context, key string, m Member, since time.Time) error {
	ended, err := e.grant(ctx, key, m, since)
	if err == nil && ended != nil {
		err = e.Advance(ctx, ended)
	}
	return err
}

// CancelReplaced cancels the task m, which a replace took out of its slot's
// queue (task.SlotReplaced), if it still waits, and passes its end on (its
// dependents; its slot has nothing to pass). A task that no longer waits,
// or never landed, is left alone. Requests: a GET, and if it waits the
// marker's PUT, a conditional PUT and the pass-on.
func (e Env) CancelReplaced(ctx context.Context, m Member, by string) error {
	var done *task.Task
	cas := s3store.CAS{Jitter: e.jitter(), Sleep: e.sleep}
	err := cas.Retry(ctx, func(int) (bool, error) {
		v, err := taskio.Load(ctx, e.Store, task.Key(m.Shard, m.ID))
		if errors.Is(err, s3store.ErrNotFound) {
			return false, nil
		}
		if err != nil {
			return false, err
		}
		iv, err := e.Now(ctx)
		if err != nil {
			return false, err
		}
		if v.Task.SlotTurn != m.Turn {
			return false, nil // requeued into its slot since: a new turn
		}
		t := v.Task.Clone()
		if err := t.SlotReplaced(by, iv.Mid()); errors.Is(err, task.ErrNoChange) {
			return false, nil
		} else if err != nil {
			return false, err
		}
		if NeedsPassOn(t) {
			if err := e.Ending(ctx, t); err != nil {
				return false, err
			}
		}
		nv, err := taskio.Update(ctx, e.Store, e.Local, t, v.ETag)
		if err != nil {
			return s3store.LostRace(err), err
		}
		done = nv.Task
		return false, nil
	})
	if err != nil || done == nil {
		return err
	}
	if NeedsPassOn(done) {
		return e.PassOn(ctx, done)
	}
	return nil
}

// CheckHolders repairs slots whose holder never landed (its submit died
// between the slot and the task writes): for each slot object changed
// more than Grace ago and not seen at this ETag before (seen, by key), the
// holder is read, and the slot passed on if it has ended or never landed.
// Requests: a LIST per 1,000 slots, and per changed slot a GET of it and of
// its holder.
func (e Env) CheckHolders(ctx context.Context, seen map[string]string) error {
	after := ""
	var errs []error
	for {
		page, err := e.Store.List(ctx, SlotsPrefix, s3store.ListOptions{StartAfter: after})
		if err != nil {
			return fmt.Errorf("check slots: %w", err)
		}
		iv, err := e.Now(ctx)
		if err != nil {
			return err
		}
		for _, o := range page.Objects {
			if seen[o.Key] == o.ETag || !iv.Earliest.After(o.LastModified.Add(Grace)) {
				continue
			}
			obj, err := e.Store.Get(ctx, o.Key)
			if err != nil {
				errs = append(errs, err)
				continue
			}
			var s Slot
			if json.Unmarshal(obj.Body, &s) != nil || SlotKey(s.Key) != o.Key {
				continue // not a slot object
			}
			if s.Holder != nil {
				if err := e.granted(ctx, s.Key, *s.Holder, s.Since); err != nil {
					errs = append(errs, err)
					continue
				}
			}
			// A task a replace took out of the queue whose own cancel was
			// lost (its producer died): canceled here, once per replace.
			failed := false
			for _, r := range s.Replaced {
				done := "replaced/" + r.ID // in seen: its cancel is confirmed
				if seen[done] != "" {
					continue
				}
				if err := e.CancelReplaced(ctx, r, "a later submit"); err != nil {
					errs = append(errs, err)
					failed = true
					continue
				}
				seen[done] = "1"
			}
			if !failed {
				seen[o.Key] = obj.ETag
			}
		}
		if !page.Truncated || len(page.Objects) == 0 {
			break
		}
		after = page.Objects[len(page.Objects)-1].Key
	}
	return errors.Join(errs...)
}
