package s3store_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/s3queue/s3queue/s3store"
)

func TestLostRaceIsA412OrA409(t *testing.T) {
	for _, tc := range []struct {
		err  error
		lost bool
	}{
		{fmt.Errorf("put: %w", s3store.ErrPreconditionFailed), true},
		{fmt.Errorf("put: %w", s3store.ErrConflict), true},
		{fmt.Errorf("put: %w", s3store.ErrNotFound), false},
		{errors.New("503"), false},
		{nil, false},
	} {
		if got := s3store.LostRace(tc.err); got != tc.lost {
			t.Errorf("LostRace(%v) = %v, want %v", tc.err, got, tc.lost)
		}
	}
}

// casRecorder is a CAS whose pauses are recorded, not slept.
func casRecorder(jitter float64) (s3store.CAS, *[]time.Duration) {
	var pauses []time.Duration
	return s3store.CAS{
		Jitter: func() float64 { return jitter },
		Sleep: func(ctx context.Context, d time.Duration) error {
			pauses = append(pauses, d)
			return ctx.Err()
		},
	}, &pauses
}

func TestCASRetriesLostRacesWithGrowingPauses(t *testing.T) {
	cas, pauses := casRecorder(0.5)
	attempts := 0
	err := cas.Retry(context.Background(), func(attempt int) (bool, error) {
		if attempt != attempts {
			t.Fatalf("attempt %d, want %d", attempt, attempts)
		}
		attempts++
		if attempts < 4 {
			return true, s3store.ErrPreconditionFailed
		}
		return false, nil
	})
	if err != nil || attempts != 4 {
		t.Fatalf("err %v after %d attempts, want nil after 4", err, attempts)
	}
	want := []time.Duration{5 * time.Millisecond, 10 * time.Millisecond, 15 * time.Millisecond}
	if fmt.Sprint(*pauses) != fmt.Sprint(want) {
		t.Fatalf("pauses %v, want %v (half of n × %v after the n-th lost race)", *pauses, want, s3store.CASPauseStep)
	}
}

// A pause after the n-th lost race is uniform in [0, n steps), n half-steps
// without a source of jitter.
func TestCASPause(t *testing.T) {
	for n := 1; n < s3store.CASAttempts; n++ {
		top := time.Duration(n) * s3store.CASPauseStep
		for _, tc := range []struct {
			jitter func() float64
			want   time.Duration
		}{
			{nil, top / 2},
			{func() float64 { return 0 }, 0},
			{func() float64 { return 0.25 }, top / 4},
			{func() float64 { return 0.5 }, top / 2},
		} {
			if got := (s3store.CAS{Jitter: tc.jitter}).Pause(n); got != tc.want {
				t.Errorf("Pause(%d) = %s, want %s", n, got, tc.want)
			}
		}
		if got := (s3store.CAS{Jitter: func() float64 { return 0.999999 }}).Pause(n); got >= top || got < top*99/100 {
			t.Errorf("Pause(%d) at the top of the draws = %s, want just below %s", n, got, top)
		}
	}
}

func TestCASReturnsAnErrorThatIsNoLostRaceAtOnce(t *testing.T) {
	cas, pauses := casRecorder(0.5)
	boom := errors.New("boom")
	attempts := 0
	err := cas.Retry(context.Background(), func(int) (bool, error) { attempts++; return false, boom })
	if !errors.Is(err, boom) || attempts != 1 || len(*pauses) != 0 {
		t.Fatalf("err %v after %d attempts and %d pauses, want boom after 1 and none", err, attempts, len(*pauses))
	}
}

func TestCASGivesUpAfterCASAttempts(t *testing.T) {
	cas, pauses := casRecorder(0)
	attempts := 0
	err := cas.Retry(context.Background(), func(int) (bool, error) { attempts++; return true, s3store.ErrConflict })
	if !errors.Is(err, s3store.ErrContended) || !errors.Is(err, s3store.ErrConflict) {
		t.Fatalf("err %v, want ErrContended wrapping the last lost race", err)
	}
	if attempts != s3store.CASAttempts || len(*pauses) != s3store.CASAttempts-1 {
		t.Fatalf("%d attempts, %d pauses; want %d and %d", attempts, len(*pauses), s3store.CASAttempts, s3store.CASAttempts-1)
	}
}

func TestCASStopsWhenTheContextEndsDuringAPause(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	cas := s3store.CAS{Sleep: func(ctx context.Context, _ time.Duration) error { cancel(); return ctx.Err() }}
	attempts := 0
	err := cas.Retry(ctx, func(int) (bool, error) { attempts++; return true, s3store.ErrPreconditionFailed })
	if !errors.Is(err, context.Canceled) || attempts != 1 {
		t.Fatalf("err %v after %d attempts, want context.Canceled after 1", err, attempts)
	}
}
