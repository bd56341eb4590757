package worker_test

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/s3queue/s3queue/s3store"
	"github.com/s3queue/s3queue/s3store/mem"
	"github.com/s3queue/s3queue/shards"
	"github.com/s3queue/s3queue/worker"
)

// putCounter counts successful and refused PUTs to the fleet object and
// to lease objects.
type putCounter struct {
	s3store.Store
	mu                              sync.Mutex
	fleetPuts, fleet412s, leasePuts int
}

func (c *putCounter) Put(ctx context.Context, key string, body []byte, opts s3store.PutOptions) (string, error) {
	etag, err := c.Store.Put(ctx, key, body, opts)
	c.mu.Lock()
	defer c.mu.Unlock()
	switch {
	case key == shards.FleetKey && err == nil:
		c.fleetPuts++
	case key == shards.FleetKey && s3store.LostRace(err):
		c.fleet412s++
	case strings.HasPrefix(key, shards.LeasePrefix) && err == nil:
		c.leasePuts++
	}
	return etag, err
}

func (c *putCounter) counts() (fleet, lost, lease int) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.fleetPuts, c.fleet412s, c.leasePuts
}

// leasedConfig is fast, but for a MemberTTL of 3s: a leased member counts
// on its lease from the earliest S3 time its PUT can have landed, and S3's
// Date is to the second, so its lease must be well above a second.
func leasedConfig(f *fleet, id string, root int) worker.Config {
	cfg := f.fast(id)
	cfg.Dedicated, cfg.RootMembers, cfg.MemberTTL = true, root, 3*time.Second
	return cfg
}

// leasedFleet starts n dedicated workers with root_members root on 8
// shards and waits until every shard has exactly one member and every
// worker is one.
func leasedFleet(t *testing.T, f *fleet, n, root int, st s3store.Store) []*worker.Worker {
	t.Helper()
	var ws []*worker.Worker
	for i := range n {
		cfg := leasedConfig(f, fmt.Sprintf("w%d", i), root)
		ws = append(ws, f.start(cfg, st, nil))
	}
	waitFor(t, fmt.Sprintf("%d members sharing 8 shards", n), 30*time.Second, func() bool {
		own, _, exact := shares(ws, 8)
		return exact && len(own) == n
	})
	return ws
}

func TestLeasedMembersRenewWithoutWritingTheFleetObject(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		c := &putCounter{Store: mem.New()}
		f := newFleet(t, c, 8)
		leasedFleet(t, f, 6, 2, c)
		fl, _, _ := shards.ReadFleet(f.ctx, c)
		leased := 0
		for _, m := range fl.Members {
			if m.Leased {
				leased++
			}
		}
		if len(fl.Members) != 6 || leased != 4 {
			t.Fatalf("fleet lists %d members, %d leased; want 6, 4 leased (root_members 2)", len(fl.Members), leased)
		}
		// Ten renewal intervals (MemberTTL/3 = 1s).
		fleet0, lost0, lease0 := c.counts()
		time.Sleep(10 * time.Second)
		fleet1, lost1, lease1 := c.counts()
		fleetPuts, lost, leasePuts := fleet1-fleet0, lost1-lost0, lease1-lease0
		t.Logf("in 10 renewal intervals: %d fleet.json writes (%d refused), %d lease PUTs", fleetPuts, lost, leasePuts)
		// The two root members renew in fleet.json (the keeper's listing
		// rides on its own renewal); the four leased ones never write it.
		if fleetPuts > 2*10+2 {
			t.Errorf("%d fleet.json writes in 10 renewal intervals; want at most 22 (2 root members)", fleetPuts)
		}
		if leasePuts < 4*9 || leasePuts > 4*10+4 {
			t.Errorf("%d lease PUTs in 10 renewal intervals; want about 40 (4 leased members)", leasePuts)
		}
	})
}

func TestADeadLeasedMemberIsPrunedAndItsShardsMoveOn(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		st := mem.New()
		f := newFleet(t, st, 8)
		ws := leasedFleet(t, f, 3, 1, st)
		// w2 joined last: leased. It is cut off from the bucket.
		cfg := leasedConfig(f, "w3", 1)
		faulty := s3store.NewFaults(st)
		w3 := f.start(cfg, faulty, nil)
		ws = append(ws, w3)
		waitFor(t, "4 members sharing 8 shards", 30*time.Second, func() bool {
			own, _, exact := shares(ws, 8)
			return exact && len(own) == 4
		})
		for _, op := range s3store.Ops() {
			faulty.Inject(s3store.Fault{Op: op, Err: s3store.ErrInjected503})
		}
		waitFor(t, "the other three to share every shard", 30*time.Second, func() bool {
			own, _, exact := shares(ws[:3], 8)
			return exact && len(own) == 3
		})
		fl, _, _ := shards.ReadFleet(f.ctx, st)
		for _, m := range fl.Members {
			if m.ID == "w3" {
				t.Fatalf("the fleet still lists the dead leased member: %+v", m)
			}
		}
		waitFor(t, "its lease object to be deleted", 30*time.Second, func() bool {
			page, err := st.List(f.ctx, shards.LeasePrefix, s3store.ListOptions{})
			if err != nil {
				t.Fatal(err)
			}
			for _, o := range page.Objects {
				if strings.HasSuffix(o.Key, "/w3") {
					return false
				}
			}
			return true
		})
	})
}

func TestALeasedMemberTakesTheFreedRootPlace(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		st := mem.New()
		f := newFleet(t, st, 8)
		ws := leasedFleet(t, f, 3, 1, st)
		f.stop("w0") // the root member and keeper leaves
		ws = ws[1:]
		waitFor(t, "one of w1 and w2 to renew in fleet.json, the other to stay leased", 30*time.Second, func() bool {
			fl, _, _ := shards.ReadFleet(f.ctx, st)
			leased := 0
			for _, m := range fl.Members {
				if m.Leased {
					leased++
				}
			}
			own, _, exact := shares(ws, 8)
			return len(fl.Members) == 2 && leased == 1 && exact && len(own) == 2
		})
		// The leased member's entry must still be kept by the new keeper.
		time.Sleep(10 * time.Second)
		if own, _, exact := shares(ws, 8); !exact || len(own) != 2 {
			t.Fatalf("after 10s: shares %v, exact %v; want both members polling", own, exact)
		}
	})
}

func TestStandbysApplyAndAreAdmittedOnlyWhenTheFleetAsks(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		st := mem.New()
		f := newFleet(t, st, 4)
		block := blockUntilCleanup(t)
		elastic := func(id string) worker.Config {
			cfg := leasedConfig(f, id, 1)
			cfg.Dedicated, cfg.Concurrency = false, 1
			return cfg
		}
		w0 := f.start(elastic("first"), nil, block)
		waitFor(t, "the first worker to join", 10*time.Second, func() bool { m, _ := w0.Member(); return m })
		var standbys []*worker.Worker
		for i := range 3 {
			standbys = append(standbys, f.start(elastic(fmt.Sprintf("s%d", i)), nil, block))
		}
		// An idle fleet needs no one: nobody applies.
		time.Sleep(5 * time.Second)
		page, err := st.List(f.ctx, shards.LeasePrefix, s3store.ListOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if len(page.Objects) > 0 {
			t.Fatalf("standbys of an idle fleet applied: %v", page.Objects)
		}
		p := f.producer(st)
		for range 20 {
			f.submit(p)
		}
		// The first member is saturated and asks; the standbys apply (all
		// beyond root_members 1) and the keeper admits them.
		waitFor(t, "the standbys to be admitted", 60*time.Second, func() bool {
			for _, w := range standbys {
				if m, _ := w.Member(); !m {
					return false
				}
			}
			return true
		})
		fl, _, _ := shards.ReadFleet(f.ctx, st)
		for _, m := range fl.Members {
			if m.ID != "first" && !m.Leased {
				t.Errorf("%s joined as a root member; want leased (root_members 1)", m.ID)
			}
		}
	})
}

// Seed 190600: the root member and keeper leaves, and the leased member
// ahead of the survivor in the order is dead, with a longer MemberTTL, so
// that its entry keeps it the keeper after the survivor's own entry has
// lapsed, with nobody to extend it. Once the dead member's entry lapses
// too, no member is live in the fleet object: the survivor is neither the
// keeper nor the first leased member, yet must take the root place, prune
// the dead and delete their leases, rather than renew its lease object
// alone while no producer routes to it.
func TestALeasedMemberWhoseEntryLapsedWithNoKeeperTakesTheRootPlace(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		st := mem.New()
		f := newFleet(t, st, 8)
		w0 := f.start(leasedConfig(f, "w0", 1), st, nil)
		waitFor(t, "w0 to join", 30*time.Second, func() bool { ok, _ := w0.Member(); return ok })
		cfg := leasedConfig(f, "w1", 1)
		cfg.MemberTTL = 30 * time.Second
		faulty := s3store.NewFaults(st)
		w1 := f.start(cfg, faulty, nil)
		waitFor(t, "w1 to be admitted", 60*time.Second, func() bool { ok, _ := w1.Member(); return ok })
		w2 := f.start(leasedConfig(f, "w2", 1), st, nil)
		waitFor(t, "w2 to be admitted", 30*time.Second, func() bool { ok, _ := w2.Member(); return ok })
		for _, op := range s3store.Ops() {
			faulty.Inject(s3store.Fault{Op: op, Err: s3store.ErrInjected503})
		}
		f.stop("w0") // the root member and keeper leaves: w1, dead, is the keeper now
		waitFor(t, "fleet.json to list w2 alone, as a root member", time.Minute, func() bool {
			fl, _, _ := shards.ReadFleet(f.ctx, st)
			return len(fl.Members) == 1 && fl.Members[0].ID == "w2" && !fl.Members[0].Leased
		})
		waitFor(t, "w1's lease object to be deleted", 30*time.Second, func() bool {
			page, err := st.List(f.ctx, shards.LeasePrefix, s3store.ListOptions{})
			if err != nil {
				t.Fatal(err)
			}
			return len(page.Objects) == 0
		})
		if own, _, exact := shares([]*worker.Worker{w2}, 8); !exact || len(own) != 1 {
			t.Fatalf("w2 polls %v (exact %v); want every shard", own, exact)
		}
	})
}
