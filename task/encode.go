package task

import (
	"encoding/json"
	"fmt"
)

// Marshal encodes t as compact JSON, the bytes stored in the bucket. A
// task whose result is stored apart is written as format 3, one that uses
// dependencies or a slot as format 2, which older binaries refuse
// (ErrUnsupportedFormat: reported and skipped) rather than rewrite (or
// delete) without the fields they do not know; any other task stays
// format 1.
func Marshal(t *Task) ([]byte, error) {
	c := *t
	c.Format = formatOf(t)
	b, err := json.Marshal(&c)
	if err != nil {
		return nil, fmt.Errorf("encode task %s: %w", t.ID, err)
	}
	return b, nil
}

// formatOf is the format t is written as.
func formatOf(t *Task) int {
	if t.ResultRef != nil {
		return 3
	}
	if len(t.Deps) > 0 || t.Dependents || t.Slot != "" || t.Status == Blocked {
		return 2
	}
	return 1
}

// Decode parses a stored task object and checks that it is one this package
// can safely drive through its state machine. Errors:
//   - ErrUnsupportedFormat: written by a newer s3queue (upgrade);
//   - ErrCorrupt: not JSON, no format, or missing or inconsistent fields.
//
// Both carry a message fit for an operator. Unknown fields are ignored.
// Decode followed by Marshal reproduces what Marshal wrote.
func Decode(b []byte) (*Task, error) {
	// Read the format alone first: a newer format may change other fields
	// in ways that would not even unmarshal here.
	var probe struct {
		Format *int `json:"format"`
	}
	if err := json.Unmarshal(b, &probe); err != nil {
		return nil, fmt.Errorf("decode task: %w: %v", ErrCorrupt, err)
	}
	switch {
	case probe.Format == nil || *probe.Format == 0:
		return nil, fmt.Errorf("decode task: %w: no format version", ErrCorrupt)
	case *probe.Format < 0:
		return nil, fmt.Errorf("decode task: %w: bad format version %d", ErrCorrupt, *probe.Format)
	case *probe.Format > FormatVersion:
		return nil, fmt.Errorf("decode task: %w: task format %d is newer than this s3queue understands (%d): upgrade s3queue",
			ErrUnsupportedFormat, *probe.Format, FormatVersion)
	}
	var t Task
	if err := json.Unmarshal(b, &t); err != nil {
		return nil, fmt.Errorf("decode task: %w: %v", ErrCorrupt, err)
	}
	if err := t.check(); err != nil {
		return nil, fmt.Errorf("decode task %q: %w: %v", t.ID, ErrCorrupt, err)
	}
	return &t, nil
}

// check reports the first inconsistency that would make the state machine
// misbehave on t.
func (t *Task) check() error {
	switch {
	case t.ID == "":
		return fmt.Errorf("missing id")
	case !ValidID(t.ID):
		return fmt.Errorf("id is not a task id")
	case t.Type == "":
		return fmt.Errorf("missing type")
	case ValidType(t.Type) != nil:
		return fmt.Errorf("bad type %q", t.Type)
	case !t.Status.Valid():
		return fmt.Errorf("invalid status %q", t.Status)
	case t.Shard < 0:
		return fmt.Errorf("negative shard %d", t.Shard)
	case t.Version < 1:
		return fmt.Errorf("version %d, want >= 1", t.Version)
	case t.Attempt < 0:
		return fmt.Errorf("negative attempt %d", t.Attempt)
	case t.Snoozes < 0:
		return fmt.Errorf("negative snoozes %d", t.Snoozes)
	case t.MaxAttempts < 1:
		return fmt.Errorf("max_attempts %d, want >= 1", t.MaxAttempts)
	case t.Timeout <= 0:
		return fmt.Errorf("timeout %s, want > 0", t.Timeout)
	case t.HistoryDropped < 0:
		return fmt.Errorf("negative history_dropped %d", t.HistoryDropped)
	case t.Status == Running && (t.Claim == nil || t.Claim.ID == ""):
		return fmt.Errorf("running without a claim")
	case t.Status != Running && t.Claim != nil:
		return fmt.Errorf("%s task holds a claim", t.Status)
	case t.Retired && !t.Status.Terminal():
		return fmt.Errorf("retired but %s", t.Status)
	case t.ResultRef != nil && (t.Status != Succeeded || len(t.Result) > 0 || t.ResultRef.Key == ""):
		return fmt.Errorf("result reference on a %s task, or beside an inline result", t.Status)
	}
	if err := t.Retry.Validate(); err != nil {
		return err
	}
	return nil
}
