package sim

import (
	"encoding/json"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/s3queue/s3queue/shards"
	"github.com/s3queue/s3queue/worker"
)

// A dedicated process that never opened its worker does not make its id's
// worker dedicated: under direct dispatch a later process of an id (here
// w1.2, started while w1 was cut off from S3) retries opening while the
// earlier one still holds the id's lease, and w1, elastic, runs on as a
// standby. Seed 180034 reported w1 as a dedicated worker missing from the
// fleet. A dedicated worker that runs and is not listed is still reported.
func TestDeadMembersDedicatedByTheRunningProcess(t *testing.T) {
	srv := NewServer(Providers[0], rand.New(rand.NewPCG(1, 2)), 0)
	f := shards.Fleet{Members: []shards.Member{{ID: "w2", ExpiresAt: time.Now().Add(time.Minute), Dedicated: true}}}
	body, err := json.Marshal(f)
	if err != nil {
		t.Fatal(err)
	}
	srv.Put(shards.FleetKey, body)
	w := &world{srv: srv, procs: make(map[string]*proc), dedicated: make(map[string]bool)}
	add := func(name, id string, dedicated, opened bool) {
		p := &proc{name: name, kind: "w", id: id, h: srv.Handle(name)}
		if opened {
			p.wk = &worker.Worker{}
		}
		w.procs[name] = p
		w.dedicated[name] = dedicated
	}
	add("w1", "w1", false, true)    // elastic, a standby
	add("w1.2", "w1", true, false)  // dedicated, refused: w1 holds the lease
	add("w2", "w2", true, true)     // dedicated, listed
	add("w3.2", "w3", true, true)   // dedicated, not listed: a violation
	add("w4.2", "w4", false, false) // elastic, not opened
	got := w.readDeadMembers()
	if slices.ContainsFunc(got, func(s string) bool { return strings.Contains(s, "worker w1 ") }) {
		t.Errorf("w1 reported as a dedicated worker missing from the fleet: %q", got)
	}
	want := "dedicated worker w3 is alive but not a live member of " + shards.FleetKey
	if !slices.Contains(got, want) {
		t.Errorf("readDeadMembers() = %q, want it to contain %q", got, want)
	}
	if len(got) != 1 {
		t.Errorf("readDeadMembers() = %q, want one violation", got)
	}
}
