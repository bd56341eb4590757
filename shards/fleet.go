package shards

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sort"
	"sync"
	"time"

	"github.com/s3queue/s3queue/clock"
	"github.com/s3queue/s3queue/internal/rnd"
	"github.com/s3queue/s3queue/lease"
	"github.com/s3queue/s3queue/s3store"
)

// FleetKey is the fleet object: who polls which shards, and the doorbell.
//
// Shard leasing here is one small object, not one lease per shard: the
// members listed in it share the shards, each renewing its own entry with a
// CAS write. Only members poll; the rest of the fleet stands by and reads the
// object now and then. So an idle fleet has one member (renewing once per
// renew interval, and reading the doorbell), not fifty lease holders.
const FleetKey = "fleet.json"

// Fleet is the content of the fleet object.
type Fleet struct {
	Version int64    `json:"version"` // +1 per write
	Members []Member `json:"members"`
	// Want is how many members the busy members asked for; standbys join
	// while there are fewer live members than this.
	Want int `json:"want,omitempty"`
	// WantUntil is when an unmet Want lapses (S3 time).
	WantUntil time.Time `json:"want_until,omitempty"`
	// Asleep is the doorbell: the only member is idle and watches this
	// object instead of listing; a producer that sees it rings.
	Asleep bool  `json:"asleep,omitempty"`
	Ring   int64 `json:"ring,omitempty"` // +1 per ring
	// Shards is the shard count members assign shards by (0: a fleet
	// written before it was recorded; members then use their manifest's).
	// Reshard raises it after the manifest; a member whose manifest has
	// more shards raises it in its next join or renewal. A process that
	// sees it larger than its manifest's count re-reads the manifest.
	Shards int `json:"shards,omitempty"`
	// Crowded is the S3 time since which Want has stood above the shard
	// count without a break (zero while it does not): standbys beyond the
	// shard count cannot help, and once this has lasted the first member
	// grows the shard count (the worker's max_shards and reshard_after).
	Crowded time.Time `json:"crowded_since,omitzero"`
	// Leases: lease objects may exist under LeasePrefix (leased members,
	// applicants, or what departed ones left behind), so the keeper lists
	// them at its renewals; it clears this when a listing finds none.
	Leases bool `json:"leases,omitempty"`
	// WakeAt is when a sleeping fleet must wake by itself (S3 time): the
	// earliest delayed task, retry or ready pointer its last member saw,
	// or a producer submitted, while it slept. Zero: none known.
	WakeAt time.Time `json:"wake_at,omitzero"`
	// Waiting lists the task types of pending tasks that no member could
	// run when the fleet went to sleep: a standby that runs one of them
	// joins the sleeping fleet (and wakes it), as it would join an awake
	// one whose members do not run its type.
	Waiting []string `json:"waiting,omitempty"`
	// Standbys is the roster of workers that are not members: they take
	// turns reading this object (the watch, standby.go), so that the
	// fleet as a whole reads it at a steady pace whatever its size.
	Standbys []Standby `json:"standbys,omitempty"`
}

// Standby is one worker in the roster of those that stand by.
type Standby struct {
	ID string `json:"id"`
	// Until is when the entry lapses (S3 time) unless renewed: a worker
	// killed while it stood by leaves a gap in the watch until then.
	Until time.Time `json:"until"`
}

// ShardCount is the shard count to assign and route by for a process
// holding a manifest of held shards: the fleet's when recorded, else held.
func (f Fleet) ShardCount(held int) int {
	if f.Shards > 0 {
		return f.Shards
	}
	return held
}

// Member is one worker that polls shards.
type Member struct {
	ID        string    `json:"id"`
	Joined    time.Time `json:"joined"`
	ExpiresAt time.Time `json:"expires_at"`
	// Types are the task types the member has handlers for; producers
	// route each task to a shard whose member can run it.
	Types []string `json:"types,omitempty"`
	// Dedicated members never leave when idle.
	Dedicated bool `json:"dedicated,omitempty"`
	// Busy: at its last write the member had every slot busy with due
	// work left behind. Busy members hand work they cannot start to
	// members that are not (by ready pointers in their shards).
	Busy bool `json:"busy,omitempty"`
	// Leased members renew a lease object of their own (LeaseKey) instead
	// of this entry, so that writes to the fleet object do not grow with
	// the fleet. The keeper keeps their ExpiresAt and Busy from a listing
	// of the lease objects (Fleet.Keep); TTL is the member's own.
	Leased bool          `json:"leased,omitempty"`
	TTL    time.Duration `json:"ttl,omitempty"`
	// Renewed is the S3 time of a root member's last renewal (the latest
	// the clock could be when it wrote): with ExpiresAt it says when the
	// next renewal is due, a third of the way (Suspect).
	Renewed time.Time `json:"renewed,omitzero"`
	// Slots is how many tasks the member runs at once: how much of a
	// backlog it takes (the ask for more members and the hand-off).
	Slots int `json:"slots,omitempty"`
}

// Suspect reports whether root member m's renewal is certainly overdue at
// now, by more than margin: renewals come every third of the entry's life,
// so a member that misses one by more than the margin has most likely
// died. Its entry stays until it expires, but it serves no shard and gets
// no new task meanwhile (Serving): its shards move on within a renewal
// interval and a margin of its death, not after the whole entry's life.
// A member that was only slow renews, and takes its shards back. Leased
// members are judged by their lease (the keeper prunes them).
func (m Member) Suspect(now clock.Interval, margin time.Duration) bool {
	if m.Leased || m.Renewed.IsZero() || !m.ExpiresAt.After(m.Renewed) {
		return false
	}
	due := m.Renewed.Add(m.ExpiresAt.Sub(m.Renewed) / 3)
	return now.After(due.Add(margin))
}

// Handles reports whether the member runs tasks of type typ.
func (m Member) Handles(typ string) bool {
	for _, t := range m.Types {
		if t == typ {
			return true
		}
	}
	return false
}

// ShardsFor returns the active shards whose member handles typ (nil when no
// serving member does). A sleeping fleet takes new tasks in shard 0,
// where the worker that answers the doorbell looks first.
func (f Fleet) ShardsFor(typ string, now clock.Interval, margin time.Duration, n int) []int {
	live := f.Serving(now, margin)
	if f.Asleep {
		for _, m := range live {
			if m.Handles(typ) {
				return []int{0}
			}
		}
		return nil
	}
	k := Active(len(live), n)
	var out []int
	for s := 0; s < k && s < len(live); s++ {
		if live[s%len(live)].Handles(typ) {
			out = append(out, s)
		}
	}
	return out
}

// Covers reports whether some serving member handles typ.
func (f Fleet) Covers(typ string, now clock.Interval, margin time.Duration) bool {
	for _, m := range f.Serving(now, margin) {
		if m.Handles(typ) {
			return true
		}
	}
	return false
}

// Live returns the members that may still hold their entries at now: those
// not certainly expired beyond margin. Order: by join time, then id.
func (f Fleet) Live(now clock.Interval, margin time.Duration) []Member {
	var live []Member
	for _, m := range f.Members {
		if !lease.Expired(m.ExpiresAt, now, margin) {
			live = append(live, m)
		}
	}
	sort.Slice(live, func(i, j int) bool {
		if !live[i].Joined.Equal(live[j].Joined) {
			return live[i].Joined.Before(live[j].Joined)
		}
		return live[i].ID < live[j].ID
	})
	return live
}

// JoinTime is the Joined a member that joins at now gets: now's latest,
// and after every member already in the fleet. Joins then keep the order
// they were written in, so a joiner takes the next place and moves no
// member from its shard, however the writers' clocks disagree (two joins
// stamped within a clock's uncertainty would otherwise swap shards that
// members had already started on).
func (f Fleet) JoinTime(now clock.Interval) time.Time {
	t := now.Latest
	for _, m := range f.Members {
		if !m.Joined.Before(t) {
			t = m.Joined.Add(time.Nanosecond)
		}
	}
	return t
}

// Serving returns the live members that are not Suspect at now: those
// that poll shards and receive new tasks. Order: as Live's.
func (f Fleet) Serving(now clock.Interval, margin time.Duration) []Member {
	live := f.Live(now, margin)
	out := live[:0]
	for _, m := range live {
		if !m.Suspect(now, margin) {
			out = append(out, m)
		}
	}
	return out
}

// Active is how many shards receive new tasks: one per live member, at
// least one, at most n. New tasks go to shards [0, Active).
func Active(live int, n int) int {
	return max(1, min(live, n))
}

// Assignment is what one member polls.
type Assignment struct {
	Index  int   // position among live members (0 is the anchor)
	Active int   // shards [0, Active) receive new tasks
	Own    []int // the active shard(s) this member polls at full speed
	Drain  []int // inactive shards it sweeps slowly for leftovers
}

// Assign returns member id's share of n shards, or ok=false if id is not a
// live member. Every member computes it from the same object, so shares
// never overlap for one version of the fleet.
func (f Fleet) Assign(id string, now clock.Interval, margin time.Duration, n int) (Assignment, bool) {
	live := f.Serving(now, margin)
	k := Active(len(live), n)
	for i, m := range live {
		if m.ID != id {
			continue
		}
		a := Assignment{Index: i, Active: k}
		for s := 0; s < n; s++ {
			switch {
			case s < k && s%len(live) == i:
				a.Own = append(a.Own, s)
			case s >= k && (s-k)%len(live) == i:
				a.Drain = append(a.Drain, s)
			}
		}
		return a, true
	}
	return Assignment{}, false
}

// ErrCorruptFleet reports a fleet object that is not a fleet. Readers get
// it together with an empty fleet and the object's ETag: the next member's
// CAS write replaces the object, and every member rejoins.
var ErrCorruptFleet = errors.New("the fleet object " + FleetKey + " is corrupt; the next member's write replaces it")

// ReadFleet returns the fleet object and its ETag; a missing one is an
// empty fleet with ETag "", a corrupt one an empty fleet with its ETag and
// ErrCorruptFleet.
func ReadFleet(ctx context.Context, st s3store.Store) (Fleet, string, error) {
	obj, err := st.Get(ctx, FleetKey)
	if errors.Is(err, s3store.ErrNotFound) {
		return Fleet{}, "", nil
	}
	if err != nil {
		return Fleet{}, "", fmt.Errorf("read fleet: %w", err)
	}
	var f Fleet
	if err := json.Unmarshal(obj.Body, &f); err != nil {
		return Fleet{}, obj.ETag, fmt.Errorf("%w (%v)", ErrCorruptFleet, err)
	}
	return f, obj.ETag, nil
}

// UpdateFleet applies change to the fleet object by CAS, re-reading after a
// lost race, under the policy of cas. It starts from the given view (f,
// etag) to save a GET when the caller's view is current. change returns
// false to write nothing. It returns the fleet as written (or as read, when
// nothing was written).
func UpdateFleet(ctx context.Context, st s3store.Store, cas s3store.CAS, f Fleet, etag string, change func(*Fleet) bool) (Fleet, string, error) {
	var out Fleet
	var outTag string
	err := cas.Retry(ctx, func(attempt int) (bool, error) {
		if attempt > 0 {
			var err error
			if f, etag, err = ReadFleet(ctx, st); err != nil && !errors.Is(err, ErrCorruptFleet) {
				return false, err
			}
		}
		next := f
		next.Members = append([]Member(nil), f.Members...)
		if !change(&next) {
			out, outTag = f, etag
			return false, nil
		}
		next.Version = f.Version + 1
		body, _ := json.Marshal(next)
		opts := s3store.PutOptions{IfMatch: etag}
		if etag == "" {
			opts = s3store.PutOptions{IfNoneMatch: true}
		}
		newTag, err := st.Put(ctx, FleetKey, body, opts)
		if err == nil {
			out, outTag = next, newTag
			return false, nil
		}
		// A lost race: 412/409, or 404 when the object we read was deleted
		// (If-Match on a missing key). A 404 to a create is no race but a
		// store that cannot write: retrying it would only spin.
		lost := s3store.LostRace(err) || errors.Is(err, s3store.ErrNotFound) && etag != ""
		return lost && !errors.Is(err, s3store.ErrUnusable), fmt.Errorf("write fleet: %w", err)
	})
	if err != nil {
		return f, etag, err
	}
	return out, outTag, nil
}

// FleetCacheTTL is how long producers and monitors reuse a read of the
// fleet object. A member marking itself asleep keeps scanning for longer
// than this (worker AwakeGrace), so a producer acting on a view this old
// cannot miss the moment it should have rung.
const FleetCacheTTL = 2 * time.Second

// FleetCache is a reader's view of the fleet object, re-read when older than
// FleetCacheTTL. It is safe for concurrent use.
type FleetCache struct {
	st     s3store.Store
	rand   Rand
	margin time.Duration
	local  clock.Local
	cas    s3store.CAS

	// busy is a token held by the one caller reading or writing the fleet
	// object: others wait for it (or for their ctx) and then reuse what it
	// read. A channel, not a lock, so no lock is held across a request.
	busy chan struct{}

	mu   sync.Mutex // guards the view below; never held across a request
	f    Fleet
	etag string
	read time.Time // local monotonic time of the read
	// routes caches ShardsFor's answers for the view: a producer places
	// every task by them, and finding the live members sorts the fleet.
	routes *routes
}

// routes are the shards new tasks go to, by type, in one view of the fleet
// with n shards, valid while no live member's entry can have expired.
type routes struct {
	n      int
	until  time.Time // the earliest expiry plus margin among the live members
	active []int     // shards [0, Active)
	byType map[string][]int
}

// Rand is a source of random draws, safe for concurrent use: a
// FleetCache's ShardFor choice and its CAS pauses' jitter.
type Rand interface {
	// IntN returns a number in [0, n).
	IntN(n int) int
	// Float64 returns a number in [0, 1).
	Float64() float64
}

// NewFleetCache returns an empty cache; margin is the members' lease
// margin, local times the cache's age and its CAS pauses, and src is the
// source of ShardFor's random choice and of the pauses' jitter, shared with
// the service that owns the cache (nil local means clock.System(), nil src
// one over crypto/rand).
func NewFleetCache(st s3store.Store, margin time.Duration, local clock.Local, src Rand) *FleetCache {
	if local == nil {
		local = clock.System()
	}
	if src == nil {
		src = rnd.New(nil)
	}
	c := &FleetCache{st: st, margin: margin, local: local, rand: src, busy: make(chan struct{}, 1)}
	c.cas = s3store.CAS{Jitter: src.Float64, Sleep: func(ctx context.Context, d time.Duration) error {
		if !clock.Sleep(local, d, ctx.Done()) {
			return ctx.Err()
		}
		return nil
	}}
	return c
}

// Get returns the fleet, reading it if the cached view is older than
// FleetCacheTTL.
func (c *FleetCache) Get(ctx context.Context) (Fleet, error) {
	return c.GetWithin(ctx, FleetCacheTTL)
}

// GetWithin returns the fleet, reading it if the cached view is older than
// maxAge: a caller that can act on an older view reads less often, and
// reuses any fresher read made for another caller. On an error it returns
// the last view it had.
func (c *FleetCache) GetWithin(ctx context.Context, maxAge time.Duration) (Fleet, error) {
	if f, ok := c.fresh(maxAge); ok {
		return f, nil
	}
	if err := c.acquire(ctx); err != nil {
		return c.Cached(), err
	}
	defer c.release()
	if f, ok := c.fresh(maxAge); ok { // read by another caller meanwhile
		return f, nil
	}
	f, etag, err := ReadFleet(ctx, c.st)
	if err != nil && !errors.Is(err, ErrCorruptFleet) {
		return c.Cached(), err
	}
	c.store(f, etag)
	return f, err
}

// fresh returns the cached view if it is younger than maxAge.
func (c *FleetCache) fresh(maxAge time.Duration) (Fleet, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.f, !c.read.IsZero() && clock.Since(c.local, c.read) < maxAge
}

// store makes f, read or written now with etag, the cached view.
func (c *FleetCache) store(f Fleet, etag string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.f, c.etag, c.read = f, etag, c.local.Now()
	c.routes = nil
}

// acquire takes the busy token, or gives up when ctx ends.
func (c *FleetCache) acquire(ctx context.Context) error {
	select {
	case c.busy <- struct{}{}:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

func (c *FleetCache) release() { <-c.busy }

// Cached returns the fleet as last read, without reading it (an empty fleet
// before the first read): what a caller may learn from without a request.
func (c *FleetCache) Cached() Fleet {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.f
}

// ShardFor picks, at random, an active shard whose member runs tasks of
// type typ, or any active shard when no live member does (the task then
// waits for one; standbys that can run it join the fleet).
func (c *FleetCache) ShardFor(ctx context.Context, typ string, now clock.Interval, n int) int {
	s := c.ShardsFor(ctx, typ, now, n)
	return s[c.rand.IntN(len(s))]
}

// ShardsFor returns the shards new tasks of type typ may go to, in the
// cached view: the active shards whose member runs typ, or, when no live
// member does, every active shard. Never empty.
func (c *FleetCache) ShardsFor(ctx context.Context, typ string, now clock.Interval, n int) []int {
	c.GetWithin(ctx, c.routesAge(now))
	c.mu.Lock()
	defer c.mu.Unlock()
	r := c.routes
	if r == nil || r.n != n || now.Earliest.After(r.until) {
		live := c.f.Serving(now, c.margin)
		r = &routes{n: n, until: time.Unix(1<<40, 0), active: make([]int, Active(len(live), n)), byType: map[string][]int{}}
		if c.f.Asleep {
			r.active = r.active[:1] // a sleeping fleet takes new tasks in shard 0
		}
		for i := range r.active {
			r.active[i] = i
		}
		for _, m := range live {
			// The routes hold until a member may turn suspect or expire.
			until := m.ExpiresAt.Add(c.margin)
			if !m.Leased && !m.Renewed.IsZero() && m.ExpiresAt.After(m.Renewed) {
				until = m.Renewed.Add(m.ExpiresAt.Sub(m.Renewed) / 3).Add(c.margin)
			}
			if until.Before(r.until) {
				r.until = until
			}
		}
		for s := 0; s < len(r.active) && s < len(live); s++ {
			for _, t := range live[s%len(live)].Types {
				r.byType[t] = append(r.byType[t], s)
			}
		}
		c.routes = r
	}
	if s := r.byType[typ]; len(s) > 0 {
		return s
	}
	return r.active
}

// routesAge is how old a view ShardsFor may route by: FleetCacheTTL, or,
// once the routes of the cached view have lapsed (a member in it may have
// turned suspect by now, or renewed since), a third of the shortest TTL
// its members renew by, if that is less. A member renews every third of
// its TTL: routing on an older view would count one that renewed on time
// as suspect, and route none of its shards new tasks (with a member_ttl
// of 600 ms, against the cache's 2 s, a producer sent most tasks to shard
// 0 alone). With the default member_ttl (30 s) it is FleetCacheTTL.
func (c *FleetCache) routesAge(now clock.Interval) time.Duration {
	c.mu.Lock()
	defer c.mu.Unlock()
	age := FleetCacheTTL
	if c.routes == nil || !now.Earliest.After(c.routes.until) {
		return age
	}
	for _, m := range c.f.Members {
		if !m.Leased && !m.Renewed.IsZero() && m.ExpiresAt.After(m.Renewed) {
			age = min(age, m.ExpiresAt.Sub(m.Renewed)/3)
		}
	}
	return age
}

// Serves reports whether shard is polled at full speed by a member that
// runs typ, in the cached view.
func (c *FleetCache) Serves(ctx context.Context, typ string, now clock.Interval, shard, n int) bool {
	f, _ := c.Get(ctx)
	for _, s := range f.ShardsFor(typ, now, c.margin, n) {
		if s == shard {
			return true
		}
	}
	return (f.Asleep || len(f.Serving(now, c.margin)) == 0) && shard == 0
}

// RingIfAsleep rings the doorbell if the (cached) fleet is asleep, for work
// due at due (zero: now): it clears Asleep by CAS, so the next read of the
// fleet object by the standby whose turn it is (or by a member asleep at
// the doorbell) wakes the fleet. Work not yet due instead sets the
// sleeping fleet's WakeAt, if it is earlier than the one set: the fleet
// wakes when it comes due, not now to find nothing. It reports whether it
// wrote. now is the caller's S3 time.
func (c *FleetCache) RingIfAsleep(ctx context.Context, now clock.Interval, due time.Time) (bool, error) {
	f, err := c.Get(ctx)
	if err != nil || !f.Asleep {
		return false, err
	}
	if err := c.acquire(ctx); err != nil {
		return false, err
	}
	defer c.release()
	c.mu.Lock()
	cur, curETag := c.f, c.etag
	c.mu.Unlock()
	rang := false
	nf, etag, err := UpdateFleet(ctx, c.st, c.cas, cur, curETag, func(f *Fleet) bool {
		rang = false
		if !f.Asleep {
			return false // someone else rang first
		}
		if due.After(now.Latest.Add(RingAhead)) {
			if !f.WakeAt.IsZero() && !due.Before(f.WakeAt) {
				return false // it wakes by then anyway
			}
			f.WakeAt, rang = due, true
			return true
		}
		f.Asleep, f.Ring, rang = false, f.Ring+1, true
		return true
	})
	if err != nil {
		return false, fmt.Errorf("ring the doorbell: %w", err)
	}
	c.store(nf, etag)
	return rang, nil
}

// RingAhead: work due within this long of now rings the doorbell at once
// rather than setting the sleeping fleet's wake time (a fleet that wakes
// polls for a while before it can sleep again).
const RingAhead = 5 * time.Second
