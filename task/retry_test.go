package task

import (
	"encoding/json"
	"math"
	"strings"
	"testing"
	"time"
)

func TestRetryDelay(t *testing.T) {
	p := RetryPolicy{InitialDelay: Duration(time.Second), MaxDelay: Duration(time.Minute), Multiplier: 2, Jitter: 0.2}

	t.Run("grows exponentially without jitter", func(t *testing.T) {
		want := []time.Duration{1, 2, 4, 8, 16, 32, 60, 60}
		for i, w := range want {
			if got := p.Delay(i+1, nil); got != w*time.Second {
				t.Errorf("Delay(%d) = %s, want %s", i+1, got, w*time.Second)
			}
		}
	})
	t.Run("is monotone and capped", func(t *testing.T) {
		prev := time.Duration(0)
		for a := 1; a <= 2000; a++ {
			d := p.Delay(a, nil)
			if d < prev || d > p.MaxDelay.D() {
				t.Fatalf("Delay(%d) = %s after %s (cap %s)", a, d, prev, p.MaxDelay)
			}
			prev = d
		}
	})
	t.Run("attempt below 1 counts as 1", func(t *testing.T) {
		if p.Delay(0, nil) != time.Second || p.Delay(-5, nil) != time.Second {
			t.Error("attempts below 1 are not treated as the first")
		}
	})
	t.Run("jitter stays within bounds and varies", func(t *testing.T) {
		r := seededRand(7)
		for a := 1; a <= 10; a++ {
			full := p.Delay(a, nil)
			low := time.Duration(float64(full) * (1 - p.Jitter))
			seen := map[time.Duration]bool{}
			for range 200 {
				d := p.Delay(a, r.Float64)
				if d < low || d > full {
					t.Fatalf("Delay(%d) = %s outside [%s, %s]", a, d, low, full)
				}
				seen[d] = true
			}
			if len(seen) < 50 {
				t.Errorf("Delay(%d): only %d distinct jittered values", a, len(seen))
			}
		}
	})
	t.Run("jitter extremes", func(t *testing.T) {
		if got := p.Delay(1, fixedRand(0)); got != time.Second {
			t.Errorf("rnd 0: %s", got)
		}
		if got := p.Delay(1, fixedRand(0.999999)); got <= 800*time.Millisecond || got >= 801*time.Millisecond {
			t.Errorf("rnd ~1: %s", got)
		}
		// A broken source cannot push the delay outside the bounds.
		for _, v := range []float64{-1, 5, math.NaN(), math.Inf(1)} {
			if got := p.Delay(1, fixedRand(v)); got < 800*time.Millisecond || got > time.Second {
				t.Errorf("rnd %v: %s", v, got)
			}
		}
	})
	t.Run("huge ceiling does not overflow", func(t *testing.T) {
		q := RetryPolicy{InitialDelay: Duration(time.Hour), MaxDelay: Duration(math.MaxInt64), Multiplier: 10}
		if got := q.Delay(1000, nil); got != time.Duration(math.MaxInt64) {
			t.Errorf("Delay = %s", got)
		}
	})
	t.Run("multiplier 1 is constant", func(t *testing.T) {
		q := RetryPolicy{InitialDelay: Duration(5 * time.Second), MaxDelay: Duration(time.Minute), Multiplier: 1}
		if q.Delay(1, nil) != 5*time.Second || q.Delay(50, nil) != 5*time.Second {
			t.Error("constant policy grows")
		}
	})
}

func TestRetryPolicyValidate(t *testing.T) {
	ok := DefaultRetryPolicy()
	tests := []struct {
		name string
		mod  func(*RetryPolicy)
		want string // error substring; "" means valid
	}{
		{"default", func(*RetryPolicy) {}, ""},
		{"no jitter", func(p *RetryPolicy) { p.Jitter = 0 }, ""},
		{"full jitter", func(p *RetryPolicy) { p.Jitter = 1 }, ""},
		{"zero initial delay", func(p *RetryPolicy) { p.InitialDelay = 0 }, "initial_delay"},
		{"max below initial", func(p *RetryPolicy) { p.MaxDelay = Duration(time.Millisecond) }, "max_delay"},
		{"multiplier below 1", func(p *RetryPolicy) { p.Multiplier = 0.9 }, "multiplier"},
		{"multiplier NaN", func(p *RetryPolicy) { p.Multiplier = math.NaN() }, "multiplier"},
		{"multiplier infinite", func(p *RetryPolicy) { p.Multiplier = math.Inf(1) }, "multiplier"},
		{"negative jitter", func(p *RetryPolicy) { p.Jitter = -0.1 }, "jitter"},
		{"jitter above 1", func(p *RetryPolicy) { p.Jitter = 1.1 }, "jitter"},
		{"jitter NaN", func(p *RetryPolicy) { p.Jitter = math.NaN() }, "jitter"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p := ok
			tt.mod(&p)
			err := p.Validate()
			if tt.want == "" && err != nil {
				t.Errorf("Validate = %v", err)
			}
			if tt.want != "" && (err == nil || !strings.Contains(err.Error(), tt.want)) {
				t.Errorf("Validate = %v, want an error about %s", err, tt.want)
			}
		})
	}
}

func TestDurationJSON(t *testing.T) {
	t.Run("marshals as a duration string", func(t *testing.T) {
		b, err := json.Marshal(Duration(90 * time.Second))
		must(t, err)
		if string(b) != `"1m30s"` {
			t.Errorf("got %s", b)
		}
		b, err = json.Marshal(DefaultRetryPolicy())
		must(t, err)
		if string(b) != `{"initial_delay":"1s","max_delay":"5m0s","multiplier":2,"jitter":0.2}` {
			t.Errorf("policy = %s", b)
		}
	})
	good := []struct {
		in   string
		want time.Duration
	}{
		{`"1m30s"`, 90 * time.Second},
		{`"250ms"`, 250 * time.Millisecond},
		{`"0s"`, 0},
		{`"-2s"`, -2 * time.Second},
		{`1500000000`, 1500 * time.Millisecond},
		{`0`, 0},
	}
	for _, tt := range good {
		t.Run("parses "+tt.in, func(t *testing.T) {
			var d Duration
			must(t, json.Unmarshal([]byte(tt.in), &d))
			if d.D() != tt.want {
				t.Errorf("got %s, want %s", d, tt.want)
			}
			// And round-trips through the string form.
			b, err := json.Marshal(d)
			must(t, err)
			var back Duration
			must(t, json.Unmarshal(b, &back))
			if back != d {
				t.Errorf("round trip %s → %s → %s", tt.in, b, back)
			}
		})
	}
	t.Run("null leaves the value alone", func(t *testing.T) {
		d := Duration(time.Second)
		must(t, json.Unmarshal([]byte(`null`), &d))
		if d != Duration(time.Second) {
			t.Errorf("got %s", d)
		}
	})
	for _, in := range []string{`"soon"`, `""`, `1.5`, `1e9`, `true`, `{}`, `"1x"`, `99999999999999999999`} {
		t.Run("rejects "+in, func(t *testing.T) {
			var d Duration
			if err := json.Unmarshal([]byte(in), &d); err == nil {
				t.Errorf("accepted %s as %s", in, d)
			}
		})
	}
}
