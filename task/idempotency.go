package task

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"time"
)

// IdempotencyRecordKey is the object that records which task the
// idempotency key key created (Spec.IdempotencyKey). Keys are hashed so any
// string is a valid key.
func IdempotencyRecordKey(key string) string {
	sum := sha256.Sum256([]byte(key))
	return "idempotency/" + hex.EncodeToString(sum[:16]) + ".json"
}

// IdempotencyRecord is the content of an idempotency key's object. Records
// are created with If-None-Match, and replaced in two cases only, each by
// CAS (If-Match on the ETag read): a record whose uniqueness window has
// passed (Expired) is replaced by a submit with a record naming its new
// task (Window one more); and retention marks a record Retired by CAS
// before deleting it on servers that ignore a conditional DELETE. A retired record is final: its
// key stays taken by ID until the record is deleted. Only the monitor whose
// CAS retired it deletes it; another deletes it only once it has been
// retired for RetiredRecordGrace, and retires it again first (see
// RetiredRecordGrace).
type IdempotencyRecord struct {
	ID      string `json:"id"`
	Retired bool   `json:"retired,omitempty"`
	// Retires counts the CAS writes that marked the record retired: each
	// one changes the record's bytes, so that of two monitors retiring the
	// same version again only one succeeds.
	Retires int `json:"retires,omitempty"`
	// Spec is SpecHash of the task's type and input: a submit with the same
	// key and another type or input is a conflict, not the same task.
	// Records written before it existed have none and are not checked.
	Spec string `json:"spec,omitempty"`
	// Shards is the shard count the task was placed with (its key is
	// Key(ShardFor(ID, Shards), ID)), so a producer that completes the
	// task for a record written before a reshard creates it where its own
	// producer would. Records written before it existed have 0.
	Shards int `json:"shards,omitempty"`
	// UniqueFor is the key's uniqueness window (Spec.UniqueFor): the key
	// is taken by ID until UniqueFor after the record was written (its S3
	// LastModified; see WindowEnd), then the next submit replaces the
	// record. 0: taken until retention deletes the record with its task.
	UniqueFor Duration `json:"unique_for,omitempty"`
	// Window counts the records this one replaced after their windows
	// passed (0 for a record created afresh): each replacement changes
	// the bytes.
	Window int `json:"window,omitempty"`
}

// UniqueKeyPrefix begins every key Unique derives (UniqueKey); a key a user
// chooses may not begin with it, so the two never collide.
const UniqueKeyPrefix = "unique:"

// UniqueKey is the idempotency key of a task unique by its type and input
// (as Asynq's Unique): UniqueKeyPrefix and SpecHash of the type and the
// input as stored (compact JSON), so that inputs that differ only in
// spacing share the key.
func UniqueKey(typ string, input json.RawMessage) (string, error) {
	in, err := normaliseJSON(input, MaxInputBytes)
	if err != nil {
		return "", fmt.Errorf("%w: input %v", ErrInvalid, err)
	}
	return UniqueKeyPrefix + SpecHash(typ, in), nil
}

// WindowEnd is when the uniqueness window of a record written at written
// (its S3 LastModified) has passed by S3 time: UniqueFor later, and a
// second more, since LastModified has 1-second resolution and may lie up
// to a second before the write. Zero for a record without a window.
func (r IdempotencyRecord) WindowEnd(written time.Time) time.Time {
	if r.UniqueFor <= 0 {
		return time.Time{}
	}
	return written.Add(time.Second + r.UniqueFor.D())
}

// Expired reports whether a record written at written (its S3
// LastModified) has a uniqueness window that has passed by now (the
// earliest the S3 time can be): its key is free for a new task. A retired
// record never expires: retention is deleting it, and nothing but a
// retirement writes it again (see RetiredRecordGrace).
func (r IdempotencyRecord) Expired(written, now time.Time) bool {
	return r.UniqueFor > 0 && !r.Retired && !now.Before(r.WindowEnd(written))
}

// MinRetention is the shortest retention applied to t, whatever the
// monitor's retention says: 0 for a task without an idempotency key;
// MinKeyedRetention for one with a key; and for one with a uniqueness
// window, its window and a minute more (the window starts before the task
// was written, so it has passed by then, and retention never frees a key
// whose window is still open).
func (t *Task) MinRetention() time.Duration {
	if t.IdempotencyKey == "" {
		return 0
	}
	return max(MinKeyedRetention, t.UniqueFor.D()+time.Minute)
}

// SpecHash identifies a task's type and input (as stored: compact JSON).
func SpecHash(typ string, input []byte) string {
	h := sha256.New()
	h.Write([]byte(typ))
	h.Write([]byte{0})
	h.Write(input)
	return hex.EncodeToString(h.Sum(nil)[:16])
}

// Encode returns the record's bytes.
func (r IdempotencyRecord) Encode() []byte {
	b, _ := json.Marshal(r)
	return b
}

// ParseIdempotencyRecord parses a record's bytes.
func ParseIdempotencyRecord(b []byte) (IdempotencyRecord, error) {
	var r IdempotencyRecord
	if json.Unmarshal(b, &r) != nil || !ValidID(r.ID) {
		return r, fmt.Errorf("idempotency record is corrupt (%q)", truncateBytes(b, 80))
	}
	return r, nil
}

// IdempotencyRecordYoung: a record written less than this long ago (by S3 time) may
// belong to a producer still between its two writes (the record, then the
// task), so a producer that finds it completes its task without looking.
//
// Retention deletes a keyed task's record before the task, so a record that
// still exists means its task was not deleted by retention; and a task is
// retained only once it has been finished for MinKeyedRetention, far longer
// than IdempotencyRecordYoung, so a young record's task cannot be on its way out. A
// producer would have to stall for MinKeyedRetention - IdempotencyRecordYoung between
// reading a record and writing its task to break this.
const IdempotencyRecordYoung = time.Minute

// RetiredRecordGrace bounds how long a retired idempotency record may be
// on its way out. Where the server ignores a conditional DELETE, the
// record's DELETE is unconditional, and one that reaches the server late
// would delete the record a submit created after the retired one was gone:
// the key would be free while its task lives, and the next submit would
// make a second task. So at most one DELETE of a record is ever in flight:
// the monitor whose CAS retired the record sends it at once; a retired
// record still there RetiredRecordGrace later (by its S3 LastModified) was
// not deleted by that request, nor will be, so a monitor retires it again
// by CAS, which only one can win, and sends its own. A retired record
// younger than that is left alone. This assumes no request reaches the
// server a minute after it was sent, and no monitor stalls that long
// between its CAS and its DELETE.
const RetiredRecordGrace = time.Minute

// MinKeyedRetention is the shortest retention applied to a task with an
// idempotency key, whatever the monitor's retention says (see IdempotencyRecordYoung).
const MinKeyedRetention = 10 * time.Minute

// truncateBytes returns b as a string of at most n bytes and an ellipsis.
func truncateBytes(b []byte, n int) string {
	if len(b) > n {
		return string(b[:n]) + "..."
	}
	return string(b)
}
