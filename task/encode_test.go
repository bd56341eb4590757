package task

import (
	"bytes"
	"encoding/json"
	"errors"
	"reflect"
	"strings"
	"testing"
	"time"
)

// lifecycle returns a task that went through most transitions, so its
// encoding exercises every field.
func lifecycle(t *testing.T) *Task {
	t.Helper()
	tk := newTask(t, func(s *Spec) {
		s.IdempotencyKey = "order-42"
		s.ShardKey = "customer-7"
		s.Retry = &RetryPolicy{InitialDelay: Duration(1500 * time.Millisecond), Jitter: 0.1}
	})
	must(t, tk.ClaimBy("w1", "c1", t0))
	must(t, tk.Renew("c1", t0.Add(10*time.Second)))
	must(t, tk.Fail("c1", "smtp: 421 try later", false, t0.Add(11*time.Second), fixedRand(0.3)))
	must(t, tk.ClaimBy("w2", "c2", tk.AvailableAt.Add(time.Millisecond)))
	_, err := tk.Cancel(tk.UpdatedAt.Add(time.Second))
	must(t, err)
	return tk
}

func TestMarshalDecode(t *testing.T) {
	t.Run("round-trips byte for byte", func(t *testing.T) {
		for name, tk := range map[string]*Task{
			"new":       newTask(t, nil),
			"running":   lifecycle(t),
			"succeeded": inState(t, Succeeded),
			"dead":      inState(t, Dead),
		} {
			t.Run(name, func(t *testing.T) {
				b := mustMarshal(t, tk)
				got, err := Decode(b)
				must(t, err)
				if !reflect.DeepEqual(got, tk) {
					t.Errorf("decoded task differs:\n got %+v\nwant %+v", got, tk)
				}
				if again := mustMarshal(t, got); !bytes.Equal(again, b) {
					t.Errorf("re-encoding differs:\n%s\n%s", again, b)
				}
			})
		}
	})
	t.Run("writes compact JSON with the documented field names", func(t *testing.T) {
		b := mustMarshal(t, lifecycle(t))
		var compact bytes.Buffer
		must(t, json.Compact(&compact, b))
		if !bytes.Equal(compact.Bytes(), b) {
			t.Error("encoding is not compact")
		}
		for _, field := range []string{`"format":1`, `"id":"` + testID + `"`, `"type":"email.send"`, `"shard":3`,
			`"status":"running"`, `"attempt":2`, `"max_attempts":3`, `"timeout":"30s"`, `"initial_delay":"1.5s"`,
			`"idempotency_key":"order-42"`, `"shard_key":"customer-7"`, `"available_at":"`, `"claim":{"worker":"w2","id":"c2","expires_at":"`,
			`"cancel_requested":true`, `"last_error":"smtp: 421 try later"`, `"version":6`, `"history":[{"at":"2026-03-01T12:00:00Z","to":"pending","reason":"submitted"}`} {
			if !bytes.Contains(b, []byte(field)) {
				t.Errorf("encoding lacks %s:\n%s", field, b)
			}
		}
	})
	t.Run("decoded task keeps working through the state machine", func(t *testing.T) {
		tk, err := Decode(mustMarshal(t, lifecycle(t)))
		must(t, err)
		must(t, tk.Fail("c2", "context canceled", false, t0.Add(time.Hour), nil)) // its cancel was requested
		if tk.Status != Canceled {
			t.Errorf("status %s", tk.Status)
		}
	})
	t.Run("ignores unknown fields", func(t *testing.T) {
		b := mustMarshal(t, newTask(t, nil))
		b = append([]byte(`{"added_later":{"x":1},`), b[1:]...)
		if _, err := Decode(b); err != nil {
			t.Errorf("Decode: %v", err)
		}
	})
	t.Run("accepts a timeout in nanoseconds", func(t *testing.T) {
		b := bytes.Replace(mustMarshal(t, newTask(t, nil)), []byte(`"timeout":"30s"`), []byte(`"timeout":30000000000`), 1)
		tk, err := Decode(b)
		must(t, err)
		if tk.Timeout.D() != 30*time.Second {
			t.Errorf("timeout %s", tk.Timeout)
		}
	})
}

func TestDecodeErrors(t *testing.T) {
	valid := string(mustMarshal(t, newTask(t, nil)))
	runningJSON := string(mustMarshal(t, running(t, nil)))
	edit := func(doc, old, new string) string {
		if !strings.Contains(doc, old) {
			t.Fatalf("fixture lacks %s", old)
		}
		return strings.Replace(doc, old, new, 1)
	}
	tests := []struct {
		name string
		in   string
		want error
		msg  string // substring of the message
	}{
		{"future format", edit(valid, `"format":1`, `"format":4`), ErrUnsupportedFormat,
			"task format 4 is newer than this s3queue understands (3): upgrade s3queue"},
		{"future format with changed fields", `{"format":7,"id":{"new":"shape"},"history":"elsewhere"}`, ErrUnsupportedFormat, "upgrade s3queue"},
		{"format 0", edit(valid, `"format":1`, `"format":0`), ErrCorrupt, "no format version"},
		{"missing format", edit(valid, `"format":1,`, ``), ErrCorrupt, "no format version"},
		{"negative format", edit(valid, `"format":1`, `"format":-1`), ErrCorrupt, "format"},
		{"string format", edit(valid, `"format":1`, `"format":"1"`), ErrCorrupt, ""},
		{"empty input", ``, ErrCorrupt, ""},
		{"garbage", "\x00\xffnot json at all", ErrCorrupt, ""},
		{"truncated", valid[:len(valid)/2], ErrCorrupt, ""},
		{"trailing data", valid + "{}", ErrCorrupt, ""},
		{"JSON null", `null`, ErrCorrupt, ""},
		{"JSON array", `[1,2]`, ErrCorrupt, ""},
		{"foreign object", `{"format":1,"hello":"world"}`, ErrCorrupt, "missing id"},
		{"missing id", edit(valid, `"id":"`+testID+`",`, ``), ErrCorrupt, "missing id"},
		{"bad id", edit(valid, testID, "not-a-task-id"), ErrCorrupt, "not a task id"},
		{"missing type", edit(valid, `"type":"email.send",`, ``), ErrCorrupt, "missing type"},
		{"bad type", edit(valid, `"type":"email.send"`, `"type":"a b"`), ErrCorrupt, "bad type"},
		{"invalid status", edit(valid, `"status":"pending"`, `"status":"failed"`), ErrCorrupt, `invalid status "failed"`},
		{"missing status", edit(valid, `"status":"pending",`, ``), ErrCorrupt, "invalid status"},
		{"wrong field type", edit(valid, `"shard":3`, `"shard":"3"`), ErrCorrupt, ""},
		{"bad timeout", edit(valid, `"timeout":"30s"`, `"timeout":"soon"`), ErrCorrupt, ""},
		{"zero timeout", edit(valid, `"timeout":"30s"`, `"timeout":"0s"`), ErrCorrupt, "timeout"},
		{"version 0", edit(valid, `"version":1`, `"version":0`), ErrCorrupt, "version"},
		{"negative attempt", edit(valid, `"attempt":0`, `"attempt":-1`), ErrCorrupt, "attempt"},
		{"zero max attempts", edit(valid, `"max_attempts":3`, `"max_attempts":0`), ErrCorrupt, "max_attempts"},
		{"negative shard", edit(valid, `"shard":3`, `"shard":-3`), ErrCorrupt, "shard"},
		{"bad retry policy", edit(valid, `"multiplier":2`, `"multiplier":0`), ErrCorrupt, "multiplier"},
		{"running without a claim", edit(valid, `"status":"pending"`, `"status":"running"`), ErrCorrupt, "running without a claim"},
		{"running with an empty claim id", edit(runningJSON, `"id":"c1"`, `"id":""`), ErrCorrupt, "running without a claim"},
		{"pending with a claim", edit(runningJSON, `"status":"running"`, `"status":"pending"`), ErrCorrupt, "holds a claim"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			tk, err := Decode([]byte(tt.in))
			if tk != nil || !errors.Is(err, tt.want) {
				t.Fatalf("Decode = %v, %v; want %v", tk, err, tt.want)
			}
			if !strings.Contains(err.Error(), tt.msg) {
				t.Errorf("message %q lacks %q", err, tt.msg)
			}
			other := ErrCorrupt
			if tt.want == ErrCorrupt {
				other = ErrUnsupportedFormat
			}
			if errors.Is(err, other) {
				t.Errorf("error %q is both corrupt and unsupported", err)
			}
		})
	}
}

// FuzzDecode: no input makes Decode panic, and whatever Decode accepts
// re-encodes and reaches a fixed point after one round trip.
func FuzzDecode(f *testing.F) {
	seeds := [][]byte{
		nil, []byte(`{}`), []byte(`null`), []byte(`{"format":1}`), []byte(`{"format":2}`),
		[]byte(`{"format":1,"id":"01HZZZZZZZZZZZZZZZZZZZZZZZ","type":"t","status":"running","claim":null}`),
	}
	for _, s := range []Status{Pending, Running, Succeeded, Dead, Canceled} {
		tk := inState(f, s)
		b, _ := Marshal(tk)
		seeds = append(seeds, b)
	}
	tk := inState(f, Running)
	tk.Input = json.RawMessage(`{"nested":[1,{"x":null}],"s":"\u00e9"}`)
	b, _ := Marshal(tk)
	seeds = append(seeds, b)
	for _, s := range seeds {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, in []byte) {
		tk, err := Decode(in)
		if err != nil {
			if !errors.Is(err, ErrCorrupt) && !errors.Is(err, ErrUnsupportedFormat) {
				t.Fatalf("error %q is neither ErrCorrupt nor ErrUnsupportedFormat", err)
			}
			return
		}
		b1, err := Marshal(tk)
		if err != nil {
			t.Fatalf("Marshal after Decode: %v", err)
		}
		tk2, err := Decode(b1)
		if err != nil {
			t.Fatalf("Decode of re-encoded task: %v\n%s", err, b1)
		}
		b2, err := Marshal(tk2)
		if err != nil {
			t.Fatalf("second Marshal: %v", err)
		}
		if !bytes.Equal(b1, b2) {
			t.Fatalf("encoding is not stable:\n%s\n%s", b1, b2)
		}
		// Transitions on a decoded task must not panic either.
		now := time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)
		c := tk.Clone()
		_ = c.ClaimBy("w", "fuzz", now)
		_ = c.Renew("fuzz", now)
		_ = c.Expire(now.Add(48*time.Hour), func() float64 { return 0.5 })
		_, _ = tk.Clone().Cancel(now)
		_ = tk.Clone().Requeue(now)
		_ = tk.Clone().Fail("fuzz", "x", false, now, nil)
	})
}

func TestTraceContext(t *testing.T) {
	const parent = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
	t.Run("a task without tracing has no trace field", func(t *testing.T) {
		b := mustMarshal(t, newTask(t, func(s *Spec) { s.Trace = map[string]string{} }))
		if bytes.Contains(b, []byte(`"trace"`)) {
			t.Errorf("encoding has a trace field:\n%s", b)
		}
	})
	t.Run("is kept through transitions, and leaves the format at 1", func(t *testing.T) {
		in := map[string]string{"traceparent": parent}
		tk := newTask(t, func(s *Spec) { s.Trace = in })
		in["traceparent"] = "changed by the caller"
		must(t, tk.ClaimBy("w1", "c1", t0))
		must(t, tk.Fail("c1", "boom", false, t0.Add(time.Second), fixedRand(0.5)))
		b := mustMarshal(t, tk)
		if !bytes.Contains(b, []byte(`"trace":{"traceparent":"`+parent+`"}`)) || !bytes.Contains(b, []byte(`"format":1`)) {
			t.Errorf("encoding lacks the trace context or is not format 1:\n%s", b)
		}
		got, err := Decode(b)
		must(t, err)
		if !reflect.DeepEqual(got, tk) {
			t.Errorf("decoded task differs:\n got %+v\nwant %+v", got, tk)
		}
		c := got.Clone()
		c.Trace["traceparent"] = "x"
		if got.Trace["traceparent"] != parent {
			t.Error("Clone shares the trace context")
		}
	})
	t.Run("an older reader, which knows no trace field, reads the task", func(t *testing.T) {
		// The field is unknown to a binary from before it: Decode ignores
		// unknown fields, and the format says nothing new.
		b := mustMarshal(t, newTask(t, func(s *Spec) { s.Trace = map[string]string{"traceparent": parent} }))
		b = bytes.Replace(b, []byte(`"trace":`), []byte(`"added_later":`), 1)
		if _, err := Decode(b); err != nil {
			t.Errorf("Decode: %v", err)
		}
	})
	t.Run("is bounded", func(t *testing.T) {
		for name, tr := range map[string]map[string]string{
			"too large":  {"tracestate": strings.Repeat("a", MaxTraceBytes)},
			"empty name": {"": "x"},
			"not UTF-8":  {"traceparent": "\xff"},
		} {
			if _, err := New(testID, 3, Spec{Type: "x", Trace: tr}, t0); !errors.Is(err, ErrInvalid) {
				t.Errorf("%s: New: %v, want ErrInvalid", name, err)
			}
		}
	})
}
