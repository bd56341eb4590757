package main

import (
	"testing"
	"time"
)

func TestClockSkewHookOffsetsWallTimeOnly(t *testing.T) {
	a := &app{environ: func() []string { return []string{envClockSkew + "=-7m"} }}
	local, err := a.localClock()
	if err != nil {
		t.Fatal(err)
	}
	before := time.Now()
	got := local.Now()
	if off := got.Sub(before.Round(0)); off > -7*time.Minute+time.Second || off < -7*time.Minute-time.Second {
		t.Fatalf("skewed clock reads %v, %v off the host's; want -7m", got, off)
	}
	// Elapsed time between readings is the host's monotonic time.
	if d := local.Now().Sub(got); d < 0 || d > time.Second {
		t.Fatalf("elapsed between two readings of the skewed clock = %v", d)
	}

	a.environ = func() []string { return nil }
	if local, err := a.localClock(); local != nil || err != nil {
		t.Fatalf("without %s: %v, %v; want the default (nil)", envClockSkew, local, err)
	}
	a.environ = func() []string { return []string{envClockSkew + "=soon"} }
	if _, err := a.localClock(); err == nil {
		t.Fatalf("%s=soon accepted", envClockSkew)
	}
}
