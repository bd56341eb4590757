package task

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"strings"
	"time"
)

// Results larger than a worker's inline limit (worker.result_inline_max)
// are stored apart, in an object of their own, and the task references it
// (ResultRef). The object is written by the attempt that produced it,
// before the commit, at a key naming that attempt's claim id: only the
// commit under that claim can reference it, and the commit is fenced
// (invariant 3), so a stale attempt's object is never the task's result.
const (
	// MaxExternalResultBytes is the hard cap of a result stored apart
	// (worker.max_result_bytes may not exceed it): a handler returns its
	// result in memory, and a reader reads it in one GET.
	MaxExternalResultBytes = 64 << 20
	// ResultsPrefix is where result objects live, under the queue prefix.
	ResultsPrefix = "results/"
)

// ResultRef references a result stored apart from its task.
type ResultRef struct {
	// Key is the result object's key, relative to the queue prefix
	// (ResultKey).
	Key string `json:"key"`
	// Size is the result's length in bytes (compact JSON).
	Size int64 `json:"size"`
	// SHA256 is the hex SHA-256 of the result's bytes: a reader checks it.
	SHA256 string `json:"sha256"`
}

// ResultKey is the key of the result object written by the attempt under
// claimID of task id in shard: results/{shard}/{id}/{claim id}.
func ResultKey(shard int, id, claimID string) string {
	return ResultsPrefix + ShardName(shard) + "/" + id + "/" + claimID
}

// ResultsShardPrefix is the prefix of shard's result objects.
func ResultsShardPrefix(shard int) string { return ResultsPrefix + ShardName(shard) + "/" }

// ParseResultKey is the inverse of ResultKey.
func ParseResultKey(key string) (shard int, id, claimID string, err error) {
	rest, ok := strings.CutPrefix(key, ResultsPrefix)
	parts := strings.Split(rest, "/")
	if !ok || len(parts) != 3 || parts[2] == "" {
		return 0, "", "", fmt.Errorf("parse result key %q: %w: want %s{shard}/{id}/{claim id}", key, ErrInvalid, ResultsPrefix)
	}
	shard, err = ParseShardName(parts[0])
	if err != nil || !ValidID(parts[1]) {
		return 0, "", "", fmt.Errorf("parse result key %q: %w: bad shard or task id", key, ErrInvalid)
	}
	return shard, parts[1], parts[2], nil
}

// NormaliseResult validates a handler's result and compacts it, as the
// task stores it (inline or apart); empty means none. limit bounds its
// compact size.
func NormaliseResult(result json.RawMessage, limit int) (json.RawMessage, error) {
	res, err := normaliseJSON(result, limit)
	if err != nil {
		return nil, fmt.Errorf("%w: result %v", ErrInvalid, err)
	}
	return res, nil
}

// RefFor is the reference to result (compact JSON, as NormaliseResult
// returns it) stored at key.
func RefFor(key string, result []byte) ResultRef {
	sum := sha256.Sum256(result)
	return ResultRef{Key: key, Size: int64(len(result)), SHA256: hex.EncodeToString(sum[:])}
}

// Check reports whether body is the result ref references.
func (ref ResultRef) Check(body []byte) error {
	if int64(len(body)) != ref.Size {
		return fmt.Errorf("result object %s is %d bytes, the task says %d", ref.Key, len(body), ref.Size)
	}
	sum := sha256.Sum256(body)
	if hex.EncodeToString(sum[:]) != ref.SHA256 {
		return fmt.Errorf("result object %s does not match the task's sha256", ref.Key)
	}
	return nil
}

// HoldsResult reports whether the task holds a result, inline or apart.
func (t *Task) HoldsResult() bool { return len(t.Result) > 0 || t.ResultRef != nil }

// SucceedRef is Succeed with a result stored apart: → succeeded with ref
// instead of an inline result. ref.Key must be the key of this claim's
// result (ResultKey with claimID): a reference to another attempt's object
// is refused.
func (t *Task) SucceedRef(claimID string, ref ResultRef, now time.Time) error {
	if err := t.fence("complete", claimID); err != nil {
		return err
	}
	if ref.Key != ResultKey(t.Shard, t.ID, claimID) || ref.Size <= 0 || len(ref.SHA256) != 64 {
		return fmt.Errorf("complete task %s: %w: result reference %+v is not this claim's", t.ID, ErrInvalid, ref)
	}
	worker := t.Claim.Worker
	t.Status = Succeeded
	t.Result = nil
	r := ref
	t.ResultRef = &r
	t.Claim = nil
	t.CancelRequested = false
	t.commit(now, &Transition{From: Running, To: Succeeded, Worker: worker, Reason: "succeeded", Attempt: t.Attempt})
	return nil
}

// ExpireResult drops the result of a succeeded task whose result TTL
// passed: the inline result, or the reference to the object (which the
// caller deletes once this write landed). ResultExpiredAt records when.
// A task without a result is only rewritten (a new version, and the size
// that says it holds none). Errors: ErrRetired, ErrInvalid for a task that
// did not succeed.
func (t *Task) ExpireResult(now time.Time) error {
	if t.Retired {
		return t.retiredErr("expire result of")
	}
	if t.Status != Succeeded {
		return fmt.Errorf("expire result of task %s: %w: status %s", t.ID, ErrInvalid, t.Status)
	}
	now = now.UTC()
	if !t.HoldsResult() {
		t.commit(now, nil)
		return nil
	}
	t.Result, t.ResultRef = nil, nil
	t.ResultExpiredAt = now
	t.commit(now, &Transition{From: Succeeded, To: Succeeded, Reason: "result expired"})
	return nil
}
