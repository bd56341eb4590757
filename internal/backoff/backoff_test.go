package backoff

import (
	"math"
	"math/rand/v2"
	"testing"
	"time"
)

func fixed(v float64) func() float64 { return func() float64 { return v } }

func TestDelay(t *testing.T) {
	exp := Policy{Initial: time.Second, Max: time.Minute, Multiplier: 2}
	tests := []struct {
		name string
		p    Policy
		n    int
		rnd  func() float64
		want time.Duration
	}{
		{"first", exp, 1, nil, time.Second},
		{"n below 1 is the first", exp, 0, nil, time.Second},
		{"negative n is the first", exp, -7, nil, time.Second},
		{"doubles", exp, 2, nil, 2 * time.Second},
		{"doubles again", exp, 6, nil, 32 * time.Second},
		{"capped", exp, 7, nil, time.Minute},
		{"capped far out", exp, 10_000, nil, time.Minute},
		{"multiplier 1 is constant", Policy{Initial: 5 * time.Second, Max: time.Minute, Multiplier: 1}, 50, nil, 5 * time.Second},
		{"multiplier below 1 counts as 1", Policy{Initial: 5 * time.Second, Max: time.Minute, Multiplier: 0.5}, 3, nil, 5 * time.Second},
		{"NaN multiplier counts as 1", Policy{Initial: 5 * time.Second, Max: time.Minute, Multiplier: math.NaN()}, 3, nil, 5 * time.Second},
		{"infinite multiplier counts as 1", Policy{Initial: 5 * time.Second, Max: time.Minute, Multiplier: math.Inf(1)}, 3, nil, 5 * time.Second},
		{"fractional multiplier", Policy{Initial: time.Second, Max: time.Minute, Multiplier: 1.5}, 3, nil, 2250 * time.Millisecond},
		{"linear", Policy{Initial: 5 * time.Millisecond, Max: time.Second, Linear: true}, 7, nil, 35 * time.Millisecond},
		{"linear capped", Policy{Initial: 5 * time.Millisecond, Max: 20 * time.Millisecond, Linear: true}, 7, nil, 20 * time.Millisecond},
		{"zero cap", Policy{Initial: time.Second, Multiplier: 2}, 3, nil, 0},
		{"negative initial", Policy{Initial: -time.Second, Max: time.Minute, Multiplier: 2}, 3, nil, 0},
		{"overflow saturates", Policy{Initial: time.Hour, Max: math.MaxInt64, Multiplier: 10}, 1000, nil, math.MaxInt64},
		{"linear overflow saturates", Policy{Initial: time.Hour, Max: math.MaxInt64, Linear: true}, math.MaxInt, nil, math.MaxInt64},
		{"below, draw 0", Policy{Initial: time.Second, Max: time.Minute, Multiplier: 2, Jitter: 0.2}, 1, fixed(0), time.Second},
		{"below, draw 0.5", Policy{Initial: time.Second, Max: time.Minute, Multiplier: 2, Jitter: 0.2}, 2, fixed(0.5), 1800 * time.Millisecond},
		{"below, draw 1", Policy{Initial: time.Second, Max: time.Minute, Multiplier: 2, Jitter: 0.2}, 1, fixed(1), 800 * time.Millisecond},
		{"below, jitter over 1 counts as 1", Policy{Initial: time.Second, Max: time.Minute, Jitter: 3}, 1, fixed(0.25), 750 * time.Millisecond},
		{"around, draw 0", Policy{Initial: time.Second, Max: time.Minute, Multiplier: 2, Jitter: 0.25, Spread: Around}, 1, fixed(0), 750 * time.Millisecond},
		{"around, draw 0.5", Policy{Initial: time.Second, Max: time.Minute, Multiplier: 2, Jitter: 0.25, Spread: Around}, 1, fixed(0.5), time.Second},
		{"around, draw 1", Policy{Initial: time.Second, Max: time.Minute, Multiplier: 2, Jitter: 0.25, Spread: Around}, 1, fixed(1), 1250 * time.Millisecond},
		{"around jitters after the cap", Policy{Initial: time.Second, Max: time.Minute, Multiplier: 2, Jitter: 0.25, Spread: Around}, 20, fixed(1), 75 * time.Second},
		{"full jitter, draw 0", Policy{Initial: 5 * time.Millisecond, Max: time.Second, Linear: true, Jitter: 1, Spread: Around}, 4, fixed(0), 0},
		{"full jitter, draw 0.75", Policy{Initial: 5 * time.Millisecond, Max: time.Second, Linear: true, Jitter: 1, Spread: Around}, 4, fixed(0.75), 30 * time.Millisecond},
		{"no jitter without a source", Policy{Initial: time.Second, Max: time.Minute, Jitter: 0.5}, 1, nil, time.Second},
		{"NaN draw counts as 0", Policy{Initial: time.Second, Max: time.Minute, Jitter: 0.5}, 1, fixed(math.NaN()), time.Second},
		{"negative draw counts as 0", Policy{Initial: time.Second, Max: time.Minute, Jitter: 0.5}, 1, fixed(-2), time.Second},
		{"draw above 1 counts as 1", Policy{Initial: time.Second, Max: time.Minute, Jitter: 0.5}, 1, fixed(7), 500 * time.Millisecond},
		{"NaN jitter is none", Policy{Initial: time.Second, Max: time.Minute, Jitter: math.NaN()}, 1, fixed(0.9), time.Second},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := tt.p.Delay(tt.n, tt.rnd); got != tt.want {
				t.Errorf("Delay(%d) = %s, want %s", tt.n, got, tt.want)
			}
		})
	}
}

func TestJitterStaysWithinBounds(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	for _, spread := range []Spread{Below, Around} {
		for _, j := range []float64{0.1, 0.25, 0.5, 1} {
			p := Policy{Initial: 100 * time.Millisecond, Max: 10 * time.Second, Multiplier: 2, Jitter: j, Spread: spread}
			for n := 1; n <= 12; n++ {
				d := p.Delay(n, nil)
				lo, hi := time.Duration(float64(d)*(1-j)), d
				if spread == Around {
					hi = time.Duration(float64(d) * (1 + j))
				}
				seen := map[time.Duration]bool{}
				for range 200 {
					got := p.Delay(n, r.Float64)
					if got < lo || got > hi {
						t.Fatalf("spread %d jitter %v: Delay(%d) = %s outside [%s, %s]", spread, j, n, got, lo, hi)
					}
					seen[got] = true
				}
				if len(seen) < 50 {
					t.Errorf("spread %d jitter %v: Delay(%d) took only %d values", spread, j, n, len(seen))
				}
			}
		}
	}
}

func TestDelayIsMonotoneWithoutJitter(t *testing.T) {
	for _, p := range []Policy{
		{Initial: time.Second, Max: 5 * time.Minute, Multiplier: 2},
		{Initial: 3 * time.Millisecond, Max: time.Hour, Multiplier: 1.7},
		{Initial: time.Millisecond, Max: time.Second, Linear: true},
		{Initial: time.Hour, Max: math.MaxInt64, Multiplier: 3},
	} {
		prev := time.Duration(0)
		for n := 1; n <= 5000; n++ {
			d := p.Delay(n, nil)
			if d < prev || d > p.Max {
				t.Fatalf("%+v: Delay(%d) = %s after %s", p, n, d, prev)
			}
			prev = d
		}
	}
}

// The shapes the Policy replaced give the same delays to the nanosecond, so
// that a seeded simulation replays the timeline it replayed before.
func TestSameDelaysAsTheShapesItReplaced(t *testing.T) {
	r := rand.New(rand.NewPCG(3, 4))
	draws := []float64{0, 0.5, 0.999999999}
	for range 2000 {
		draws = append(draws, r.Float64())
	}
	t.Run("task retry policy", func(t *testing.T) {
		p := Policy{Initial: time.Second, Max: 5 * time.Minute, Multiplier: 2, Jitter: 0.2}
		for n := 1; n <= 12; n++ {
			for _, v := range draws {
				d := float64(time.Second) * math.Pow(2, float64(n-1))
				d = min(d, float64(5*time.Minute))
				d -= d * 0.2 * v
				if got, want := p.Delay(n, fixed(v)), time.Duration(d); got != want {
					t.Fatalf("Delay(%d) with %v = %d, was %d", n, v, got, want)
				}
			}
		}
	})
	t.Run("fleet requests", func(t *testing.T) {
		base, ceiling := 100*time.Millisecond, 5*time.Second
		p := Policy{Initial: base, Max: ceiling, Multiplier: 2, Jitter: 0.25, Spread: Around}
		for n := 0; n <= 12; n++ {
			for _, v := range draws {
				d := ceiling
				if base<<n < ceiling {
					d = base << n
				}
				want := time.Duration(float64(d) * (0.75 + 0.5*v))
				if got := p.Delay(n+1, fixed(v)); got != want {
					t.Fatalf("Delay(%d) with %v = %d, was %d", n+1, v, got, want)
				}
			}
		}
	})
	t.Run("CAS pause", func(t *testing.T) {
		step := 10 * time.Millisecond
		p := Policy{Initial: step / 2, Max: 20 * step, Linear: true, Jitter: 1, Spread: Around}
		for n := 1; n < 20; n++ {
			for _, v := range draws {
				want := time.Duration(v * float64(time.Duration(n)*step))
				if got := p.Delay(n, fixed(v)); got != want {
					t.Fatalf("Delay(%d) with %v = %d, was %d", n, v, got, want)
				}
			}
			if got, want := p.Delay(n, nil), time.Duration(0.5*float64(time.Duration(n)*step)); got != want {
				t.Fatalf("Delay(%d) without jitter = %d, was %d", n, got, want)
			}
		}
	})
}
