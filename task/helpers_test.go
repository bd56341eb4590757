package task

import (
	"bytes"
	"errors"
	"math/rand/v2"
	"reflect"
	"testing"
	"time"
)

// t0 stands in for S3 server time; the local clock is never read.
var t0 = time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)

// testID is a fixed, valid task id.
const testID = "01HZZZZZZZZZZZZZZZZZZZZZZZ"

// newTask returns a fresh pending task due at t0, after applying mod to the
// default spec.
func newTask(t testing.TB, mod func(*Spec)) *Task {
	t.Helper()
	spec := Spec{Type: "email.send", Input: []byte(`{"to":"a@example.com"}`)}
	if mod != nil {
		mod(&spec)
	}
	tk, err := New(testID, 3, spec, t0)
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	return tk
}

// running returns a task claimed by worker w1 under claim c1 at t0.
func running(t testing.TB, mod func(*Spec)) *Task {
	t.Helper()
	tk := newTask(t, mod)
	if err := tk.ClaimBy("w1", "c1", t0); err != nil {
		t.Fatalf("ClaimBy: %v", err)
	}
	return tk
}

// inState drives a fresh task into status s.
func inState(t testing.TB, s Status) *Task {
	t.Helper()
	switch s {
	case Pending:
		return newTask(t, nil)
	case Running:
		return running(t, nil)
	case Succeeded:
		tk := running(t, nil)
		must(t, tk.Succeed("c1", []byte(`"ok"`), t0.Add(time.Second)))
		return tk
	case Dead:
		tk := running(t, nil)
		must(t, tk.Fail("c1", "boom", true, t0.Add(time.Second), nil))
		return tk
	case Canceled:
		tk := newTask(t, nil)
		_, err := tk.Cancel(t0)
		must(t, err)
		return tk
	}
	t.Fatalf("unknown status %s", s)
	return nil
}

func must(t testing.TB, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

func mustMarshal(t testing.TB, tk *Task) []byte {
	t.Helper()
	b, err := Marshal(tk)
	if err != nil {
		t.Fatalf("Marshal: %v", err)
	}
	return b
}

// wantErrUnchanged runs op, which must fail with every one of wants, and
// checks that the task did not change at all (so the caller writes nothing).
func wantErrUnchanged(t *testing.T, tk *Task, op func(*Task) error, wants ...error) {
	t.Helper()
	before := tk.Clone()
	beforeBytes := mustMarshal(t, tk)
	err := op(tk)
	if err == nil {
		t.Fatalf("want error %v, got nil", wants)
	}
	for _, w := range wants {
		if !errors.Is(err, w) {
			t.Errorf("error %q is not %v", err, w)
		}
	}
	if !reflect.DeepEqual(before, tk) || !bytes.Equal(beforeBytes, mustMarshal(t, tk)) {
		t.Errorf("task changed on error %q", err)
	}
}

// fixedRand returns a jitter source that always yields v.
func fixedRand(v float64) func() float64 { return func() float64 { return v } }

func seededRand(seed uint64) *rand.Rand { return rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15)) }

// seededReader is a deterministic randomness source for ids.
func seededReader(seed byte) *rand.ChaCha8 { return rand.NewChaCha8([32]byte{seed}) }
