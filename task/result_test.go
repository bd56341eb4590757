package task

import (
	"errors"
	"strings"
	"testing"
	"time"
)

// A result stored apart is referenced only under the claim that wrote it:
// a reference to another attempt's object is refused, and a stale claim's
// commit is fenced as any other.
func TestSucceedRefIsFencedByTheClaimsKey(t *testing.T) {
	body := []byte(`"large"`)
	tk := running(t, nil)
	if err := tk.SucceedRef("c1", RefFor(ResultKey(3, testID, "c0"), body), t0.Add(time.Second)); !errors.Is(err, ErrInvalid) {
		t.Fatalf("a reference to another claim's object: %v", err)
	}
	if err := tk.SucceedRef("c0", RefFor(ResultKey(3, testID, "c0"), body), t0.Add(time.Second)); !errors.Is(err, ErrClaimMismatch) {
		t.Fatalf("a stale claim's commit: %v", err)
	}
	ref := RefFor(ResultKey(3, testID, "c1"), body)
	if err := tk.SucceedRef("c1", ref, t0.Add(time.Second)); err != nil {
		t.Fatal(err)
	}
	if tk.Status != Succeeded || tk.ResultRef == nil || *tk.ResultRef != ref || tk.Result != nil || !tk.HoldsResult() {
		t.Fatalf("task after SucceedRef: %+v", tk)
	}
	b, err := Marshal(tk)
	if err != nil || !strings.Contains(string(b), `"format":3`) {
		t.Fatalf("a task with a reference is written as format 3: %s %v", b, err)
	}
	back, err := Decode(b)
	if err != nil || *back.ResultRef != ref {
		t.Fatalf("decode: %+v %v", back, err)
	}
	if err := ref.Check(body); err != nil {
		t.Fatal(err)
	}
	if ref.Check([]byte(`"other"`)) == nil || ref.Check([]byte(`"largE"`)) == nil {
		t.Fatal("Check accepted other bytes")
	}
	if shard, id, claim, err := ParseResultKey(ref.Key); err != nil || shard != 3 || id != testID || claim != "c1" {
		t.Fatalf("ParseResultKey(%s) = %d %s %s %v", ref.Key, shard, id, claim, err)
	}
	for _, bad := range []string{"results/3/" + testID + "/c1", "results/003/x/c1", "results/003/" + testID + "/", "tasks/003/" + testID + "/c1"} {
		if _, _, _, err := ParseResultKey(bad); err == nil {
			t.Errorf("ParseResultKey(%q) accepted it", bad)
		}
	}
}

// ExpireResult drops an inline or referenced result of a succeeded task,
// changing its bytes; it refuses other statuses and retired tasks.
func TestExpireResult(t *testing.T) {
	later := t0.Add(time.Hour)
	tk := running(t, nil)
	if err := tk.ExpireResult(later); !errors.Is(err, ErrInvalid) {
		t.Fatalf("ExpireResult of a running task: %v", err)
	}
	if err := tk.Succeed("c1", []byte(`{"n":1}`), t0); err != nil {
		t.Fatal(err)
	}
	v := tk.Version
	if err := tk.ExpireResult(later); err != nil {
		t.Fatal(err)
	}
	if tk.HoldsResult() || !tk.ResultExpiredAt.Equal(later) || tk.Version != v+1 || tk.History[len(tk.History)-1].Reason != "result expired" {
		t.Fatalf("after ExpireResult: %+v", tk)
	}
	if err := tk.ExpireResult(later); err != nil || tk.Version != v+2 || !tk.ResultExpiredAt.Equal(later) {
		t.Fatalf("ExpireResult of a task without a result rewrites it only: %+v %v", tk, err)
	}
	if err := tk.Retire(later); err != nil {
		t.Fatal(err)
	}
	if err := tk.ExpireResult(later); !errors.Is(err, ErrRetired) {
		t.Fatalf("ExpireResult of a retired task: %v", err)
	}
}
