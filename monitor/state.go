package monitor

import (
	"context"
	"errors"
	"slices"
	"sort"
	"time"

	"github.com/s3queue/s3queue/clock"
	"github.com/s3queue/s3queue/internal/taskio"
	"github.com/s3queue/s3queue/s3store"
	"github.com/s3queue/s3queue/shards"
	"github.com/s3queue/s3queue/task"
)

// State is what the monitor knows of the queue, from what its sweeps
// listed (sizes say statuses: task.StatusBySize) and its cached view of the
// fleet object. Taking it costs no request; the dashboard
// (internal/dashboard) serves it. Counts are as fresh as the last completed
// sweep of each shard, which the monitor's interval and back-off pace.
type State struct {
	// At is the S3 time of the snapshot (the last tick's, plus the local
	// time since).
	At time.Time `json:"at"`
	// Monitor is this monitor's id; Leading reports whether it sweeps (a
	// standby monitor of Config.Leader knows nothing but the fleet).
	Monitor string `json:"monitor"`
	Leading bool   `json:"leading"`
	// Ticks counts the monitor's ticks so far.
	Ticks int `json:"ticks"`
	// Shards, by shard number; Totals adds them up by status.
	Shards []ShardState        `json:"shards"`
	Totals map[task.Status]int `json:"totals"`
	// Members are the live members of the fleet, in their order (the
	// first is the anchor); Lapsed lists entries still in the fleet object
	// whose lease has certainly expired. Standbys only read the fleet
	// object and leave nothing in it: State cannot list them.
	Members []MemberState `json:"members"`
	Lapsed  []MemberState `json:"lapsed"`
	// Want is how many members the busy members asked for; Asleep says
	// the fleet sleeps (the doorbell).
	Want   int  `json:"want"`
	Asleep bool `json:"asleep"`
	// Minutes are the last 60 minutes of S3 time, oldest first: tasks that
	// ended in each (by their objects' LastModified) and the monitor's
	// requests.
	Minutes []Minute `json:"minutes"`
	// Dead lists the most recent dead tasks, newest first, up to
	// Config.DeadList of them (none when it is 0).
	Dead []DeadTask `json:"dead"`
	// Requests counts the monitor's own requests, when its store counts
	// them (an s3store.Counter in its chain of wrappers); nil otherwise.
	Requests *Requests `json:"requests,omitempty"`
}

// ShardState is one shard as the monitor last saw it.
type ShardState struct {
	Shard int `json:"shard"`
	// Counts by status. When Whole, the last completed sweep's: it
	// listed every key of the shard, so a task deleted by anyone (a purge,
	// a lifecycle rule, a person at the console) is no longer counted.
	// Otherwise the shard's finished history below its floor was too long
	// to list at every sweep (more keys than the room the sweep's last
	// page left): the counts are the last sweep's (keys above the floor)
	// plus the last full walk's (below it, at Walked) and the finished
	// runs the sweeps settled since, and a task deleted or requeued below
	// the floor is seen at the next full walk.
	Counts map[task.Status]int `json:"counts"`
	// Whole says the last completed sweep listed every key of the shard.
	Whole bool `json:"whole"`
	// Depth is how many tasks wait to run: pending ones.
	Depth int `json:"depth"`
	// OldestPending is the id time (submit time) of the oldest pending
	// task the last sweep listed; zero when there is none.
	OldestPending time.Time `json:"oldest_pending,omitzero"`
	// OldestPendingSecs is the age of that task at At.
	OldestPendingSecs float64 `json:"oldest_pending_secs"`
	// Swept is the S3 time the last completed sweep started (zero: none
	// completed yet); Walked the end of the last full walk.
	Swept  time.Time `json:"swept,omitzero"`
	Walked time.Time `json:"walked,omitzero"`
	// Member polls the shard; Role says how: "active" (new tasks land
	// here) or "drain" (swept slowly for leftovers). LeaseExpires is the
	// member's entry's expiry in the fleet object.
	Member       string    `json:"member,omitempty"`
	Role         string    `json:"role,omitempty"`
	LeaseExpires time.Time `json:"lease_expires,omitzero"`
}

// MemberState is one member of the fleet.
type MemberState struct {
	ID        string    `json:"id"`
	Joined    time.Time `json:"joined"`
	ExpiresAt time.Time `json:"expires_at"`
	Types     []string  `json:"types,omitempty"`
	Busy      bool      `json:"busy"`
	Dedicated bool      `json:"dedicated"`
	Leased    bool      `json:"leased"`
	// Shards it owns (active) and drains.
	Own   []int `json:"own,omitempty"`
	Drain []int `json:"drain,omitempty"`
}

// Minute is one minute of the last hour.
type Minute struct {
	Start     time.Time `json:"start"`
	Succeeded int       `json:"succeeded"`
	Dead      int       `json:"dead"`
	Canceled  int       `json:"canceled"`
	// Requests the monitor made in this minute, by type (PUT, GET, HEAD,
	// LIST, DELETE); nil when its store does not count them.
	Requests map[string]int64 `json:"requests,omitempty"`
}

// Requests are the monitor's request counts.
type Requests struct {
	// Total since the monitor started, by type.
	Total map[string]int64 `json:"total"`
	// LastHour: the requests of the last Window (an hour, or less while
	// the monitor has run for less), by type.
	LastHour   map[string]int64 `json:"last_hour"`
	WindowSecs float64          `json:"window_secs"`
}

// DeadTask is one dead task of the dead-letter list.
type DeadTask struct {
	ID        string    `json:"id"`
	Shard     int       `json:"shard"`
	Type      string    `json:"type"`
	LastError string    `json:"last_error"`
	Attempts  int       `json:"attempts"`
	Ended     time.Time `json:"ended"`
}

// stateStatuses are the statuses tallies count, in their index order.
var stateStatuses = [...]task.Status{task.Pending, task.Blocked, task.Running, task.Succeeded, task.Dead, task.Canceled}

// tally counts task objects by the status their sizes say.
type tally [len(stateStatuses)]int

func (t *tally) add(s task.Status) {
	if i := slices.Index(stateStatuses[:], s); i >= 0 {
		t[i]++
	}
}

func (t tally) plus(o tally) tally {
	for i := range t {
		t[i] += o[i]
	}
	return t
}

func (t tally) minus(o tally) tally {
	for i := range t {
		t[i] = max(0, t[i]-o[i])
	}
	return t
}

// pageMark is when one page of a sweep was listed: keys up to last, by the
// S3 time interval [lo, hi] that surely holds the listing.
type pageMark struct {
	last   string
	lo, hi time.Time
}

// shardObs is what the sweeps of one shard learnt for State. Nothing in it
// grows with the retained history: tallies, a page list per sweep, and the
// keys that ended within a few seconds of their listing.
type shardObs struct {
	// The sweep in progress: its tally, its settling run's (the finished
	// keys the floor will rise past), its oldest pending id time, its
	// pages, and the keys it saw ended near their listing.
	cur, settle tally
	curOldest   time.Time
	curPages    []pageMark
	curEdge     map[string]bool
	curListed   int    // keys it listed
	start       string // the floor it started from ("": the first key)
	gen         int    // +1 per sweep

	// The last completed sweep's pages and edge keys: a finished key is
	// newly ended if it ended after that sweep listed it.
	prevPages  []pageMark
	prevStart  string
	prevEdge   map[string]bool
	prevDone   bool
	prevListed int

	above, below tally // published: the last sweep's and below its floor
	oldest       time.Time
	swept        time.Time
	whole        bool // the last sweep listed every key of the shard

	walk    tally // the full walk in progress
	walkGen int
	walked  time.Time
}

// deadEntry is one task of the dead-letter list, as read at etag.
type deadEntry struct {
	key, etag string
	task      DeadTask
	sweepGen  int // the shard's sweep (or walk) that last listed it
	walkGen   int
}

// deadCandidate is a dead task listed but not read yet.
type deadCandidate struct {
	key, etag         string
	shard             int
	modified          time.Time
	sweepGen, walkGen int // of the sweep or walk that listed it
}

// deadReadsPerTick caps the GETs one tick spends on the dead-letter list,
// so a backlog of newly dead tasks spreads over ticks.
const deadReadsPerTick = 20

// observer is the monitor's memory for State, under Monitor.mu.
type observer struct {
	minutes    map[int64]*Minute // by Unix minute of S3 time
	dead       map[string]*deadEntry
	candidates map[string]deadCandidate
	counts     s3store.Counts // the store's counts at the last tick
	startedAt  time.Time      // S3 time of the first tick
	// now is the S3 time the tick in progress read, at local nowLocal.
	now      clock.Interval
	nowLocal time.Time
}

// minuteOf is the Unix minute t falls in.
func minuteOf(t time.Time) int64 { return t.Unix() / 60 }

// observe records one task object a sweep (walk false) or a full walk
// listed at iv (a key of shard sw), after inspect, which may have deleted
// it (gone).
func (m *Monitor) observe(shard int, sw *sweep, o s3store.ObjectInfo, iv clock.Interval, walk, gone bool) {
	if shards.IsPointer(o.Key) {
		return
	}
	ob := &sw.obs
	s, ok := task.StatusBySize(o.Size)
	if gone {
		m.forgetDead(o.Key)
		return
	}
	if !ok {
		return
	}
	if walk {
		ob.walk.add(s)
	} else {
		ob.cur.add(s)
		if sw.settling {
			ob.settle.add(s)
		}
		if s == task.Pending {
			if _, id, err := task.ParseKey(o.Key); err == nil {
				if at, err := task.IDTime(id); err == nil && (ob.curOldest.IsZero() || at.Before(ob.curOldest)) {
					ob.curOldest = at
				}
			}
		}
		if s.Terminal() {
			m.countEnded(ob, o, s, iv)
		}
	}
	m.noteDead(shard, sw, o, s, walk)
}

// countEnded counts o, a finished task a sweep listed, in the minute it
// ended if it ended since the previous sweep listed it. Sizes say it is
// finished and LastModified when; the previous sweep's page times say
// whether it was already finished then, and for a task that ended within
// the uncertainty of that listing, the previous sweep's edge keys say
// whether it was counted. No state per retained task.
func (m *Monitor) countEnded(ob *shardObs, o s3store.ObjectInfo, s task.Status, iv clock.Interval) {
	lo := iv.Earliest.Add(-listSlack)
	if !o.LastModified.Before(lo) {
		if ob.curEdge == nil {
			ob.curEdge = make(map[string]bool)
		}
		ob.curEdge[o.Key] = true
	}
	if ob.prevDone && o.Key <= ob.prevStart && len(ob.prevPages) > 0 && o.LastModified.Before(ob.prevPages[0].lo) {
		// Below the floor the previous sweep started from, and finished
		// before it: a sweep counted it when it first listed it finished
		// (the floor rises past finished keys only).
		return
	}
	if ob.prevDone && o.Key > ob.prevStart {
		i := sort.Search(len(ob.prevPages), func(i int) bool { return ob.prevPages[i].last >= o.Key })
		if i < len(ob.prevPages) {
			p := ob.prevPages[i]
			switch {
			case o.LastModified.Before(p.lo):
				return // finished when the previous sweep listed it
			case !o.LastModified.After(p.hi) && ob.prevEdge[o.Key]:
				return // counted then
			}
		}
	}
	since := minuteOf(iv.Earliest) - 59
	k := minuteOf(o.LastModified)
	if k < since || k > since+59 {
		return
	}
	mn := m.obs.minute(k)
	switch s {
	case task.Succeeded:
		mn.Succeeded++
	case task.Dead:
		mn.Dead++
	case task.Canceled:
		mn.Canceled++
	}
}

// listSlack widens a listing's time interval below: LastModified is to
// the second, and the listing began before the clock reading after it.
const listSlack = 2 * time.Second

// sweepsReset forgets the tasks counted as ended: the sweeps start over
// (a change of leader), and their first ones count every task that ended
// in the last hour again, by its LastModified.
func (o *observer) sweepsReset() {
	for _, mn := range o.minutes {
		mn.Succeeded, mn.Dead, mn.Canceled = 0, 0, 0
	}
}

// minute returns the bucket of Unix minute k, making it.
func (o *observer) minute(k int64) *Minute {
	if o.minutes == nil {
		o.minutes = make(map[int64]*Minute)
	}
	mn := o.minutes[k]
	if mn == nil {
		mn = &Minute{Start: time.Unix(k*60, 0).UTC()}
		o.minutes[k] = mn
	}
	return mn
}

// pageListed records a sweep page's listing time and last key.
func (m *Monitor) pageListed(sw *sweep, page s3store.ListPage, iv clock.Interval) {
	last := "\xff" // the page ended the listing: it covers every key after
	if page.Truncated && len(page.Objects) > 0 {
		last = page.Objects[len(page.Objects)-1].Key
	}
	sw.obs.curPages = append(sw.obs.curPages, pageMark{last: last, lo: iv.Earliest.Add(-listSlack), hi: iv.Latest})
}

// sweepStarted resets the tallies of a sweep starting at floor.
func (ob *shardObs) sweepStarted(floor string) {
	ob.cur, ob.settle, ob.curOldest, ob.curPages, ob.curEdge, ob.curListed = tally{}, tally{}, time.Time{}, nil, nil, 0
	ob.start = floor
	ob.gen++
}

// sweepEnded publishes a completed sweep's tallies: the finished run the
// floor rose past moves below the floor. A sweep that ended before its
// listing did (end, its last key; see Monitor.overran) listed nothing
// after end: there, what the previous sweep listed stands for the count of
// ended tasks, and the dead-letter list keeps its entries.
func (m *Monitor) sweepEnded(shard int, sw *sweep, startedAt time.Time, end string) {
	ob := &sw.obs
	if end != "" && ob.prevDone {
		for _, p := range ob.prevPages {
			if p.last > end {
				ob.curPages = append(ob.curPages, p)
			}
		}
		for k := range ob.prevEdge {
			if k > end {
				if ob.curEdge == nil {
					ob.curEdge = make(map[string]bool)
				}
				ob.curEdge[k] = true
			}
		}
	}
	ob.above = ob.cur
	if ob.start == "" {
		// It listed the history too: what the full walk counted below the
		// floor may be stale (deleted since, or requeued above it).
		ob.below = tally{}
	}
	if sw.floor > ob.start && sw.floor == sw.settled {
		ob.below = ob.below.plus(ob.settle)
		ob.above = ob.cur.minus(ob.settle)
	}
	ob.oldest, ob.swept, ob.whole = ob.curOldest, startedAt, ob.start == "" && end == ""
	ob.prevPages, ob.prevStart, ob.prevEdge, ob.prevDone = ob.curPages, ob.start, ob.curEdge, true
	ob.prevListed = ob.curListed
	// Dead tasks in the swept range not listed this time are gone
	// (deleted, or requeued and listed under another size already).
	for k, e := range m.obs.dead {
		if e.task.Shard == shard && k > ob.start && (end == "" || k <= end) && e.sweepGen != ob.gen {
			delete(m.obs.dead, k)
		}
	}
}

// walkStarted and walkEnded do the same for a full walk.
func (ob *shardObs) walkStarted() {
	ob.walk = tally{}
	ob.walkGen++
}

func (m *Monitor) walkEnded(shard int, sw *sweep, at time.Time) {
	ob := &sw.obs
	ob.below, ob.walked = ob.walk, at
	for k, e := range m.obs.dead {
		if e.task.Shard == shard && k <= sw.floor && e.walkGen != ob.walkGen && e.sweepGen != ob.gen {
			delete(m.obs.dead, k)
		}
	}
}

// noteDead keeps the dead-letter list: a dead task new to it (or changed
// since it was read) becomes a candidate to read; a listed one that is no
// longer dead leaves it.
func (m *Monitor) noteDead(shard int, sw *sweep, o s3store.ObjectInfo, s task.Status, walk bool) {
	if m.cfg.DeadList <= 0 {
		return
	}
	e := m.obs.dead[o.Key]
	if s != task.Dead {
		if e != nil {
			delete(m.obs.dead, o.Key)
		}
		return
	}
	if e != nil && e.etag == o.ETag {
		if walk {
			e.walkGen = sw.obs.walkGen
		} else {
			e.sweepGen = sw.obs.gen
		}
		return
	}
	if m.obs.candidates == nil {
		m.obs.candidates = make(map[string]deadCandidate)
	}
	c := deadCandidate{key: o.Key, etag: o.ETag, shard: shard, modified: o.LastModified, sweepGen: -1, walkGen: -1}
	if walk {
		c.walkGen = sw.obs.walkGen
	} else {
		c.sweepGen = sw.obs.gen
	}
	m.obs.candidates[o.Key] = c
	// Keep the candidates bounded: only the newest can enter the list.
	if len(m.obs.candidates) > 2*m.cfg.DeadList {
		m.trimCandidates()
	}
}

func (m *Monitor) forgetDead(key string) {
	delete(m.obs.dead, key)
	delete(m.obs.candidates, key)
}

// trimCandidates keeps the DeadList newest candidates.
func (m *Monitor) trimCandidates() {
	cs := m.sortedCandidates()
	for _, c := range cs[min(len(cs), m.cfg.DeadList):] {
		delete(m.obs.candidates, c.key)
	}
}

func (m *Monitor) sortedCandidates() []deadCandidate {
	cs := make([]deadCandidate, 0, len(m.obs.candidates))
	for _, c := range m.obs.candidates {
		cs = append(cs, c)
	}
	sort.Slice(cs, func(i, j int) bool {
		if !cs[i].modified.Equal(cs[j].modified) {
			return cs[i].modified.After(cs[j].modified)
		}
		return cs[i].key > cs[j].key
	})
	return cs
}

// readDead reads up to deadReadsPerTick candidates, newest first: one GET
// each, once per dead task (and again only if its object changes while it
// stays dead). A candidate older than every entry of a full list is dropped
// unread.
func (m *Monitor) readDead(ctx context.Context, st *TickStats) {
	if m.cfg.DeadList <= 0 || len(m.obs.candidates) == 0 {
		return
	}
	if m.obs.dead == nil {
		m.obs.dead = make(map[string]*deadEntry)
	}
	for i, c := range m.sortedCandidates() {
		if i >= deadReadsPerTick || ctx.Err() != nil {
			return
		}
		delete(m.obs.candidates, c.key)
		if len(m.obs.dead) >= m.cfg.DeadList && !c.modified.After(m.oldestDead().task.Ended) {
			continue
		}
		v, err := taskio.Load(ctx, m.st, c.key)
		st.Loaded++
		if err != nil {
			if !errors.Is(err, s3store.ErrNotFound) {
				m.log.Debug("read a dead task for the dead-letter list", "key", c.key, "err", err)
			}
			continue
		}
		t := v.Task
		if t.Status != task.Dead {
			continue
		}
		m.obs.dead[c.key] = &deadEntry{key: c.key, etag: v.ETag, task: DeadTask{ID: t.ID, Shard: t.Shard, Type: t.Type,
			LastError: t.LastError, Attempts: t.Attempt, Ended: t.UpdatedAt}, sweepGen: c.sweepGen, walkGen: c.walkGen}
		if len(m.obs.dead) > m.cfg.DeadList {
			delete(m.obs.dead, m.oldestDead().key)
		}
	}
}

func (m *Monitor) oldestDead() *deadEntry {
	var old *deadEntry
	for _, e := range m.obs.dead {
		if old == nil || e.task.Ended.Before(old.task.Ended) || e.task.Ended.Equal(old.task.Ended) && e.key < old.key {
			old = e
		}
	}
	return old
}

// countingStore finds the request counter in the monitor's chain of store
// wrappers, if any.
func countingStore(st s3store.Store) interface{ Counts() s3store.Counts } {
	for st != nil {
		if c, ok := st.(interface{ Counts() s3store.Counts }); ok {
			return c
		}
		u, ok := st.(interface{ Unwrap() s3store.Store })
		if !ok {
			return nil
		}
		st = u.Unwrap()
	}
	return nil
}

func opCounts(c s3store.Counts) map[string]int64 {
	out := make(map[string]int64)
	for _, op := range s3store.Ops() {
		out[op.String()] = c.Of(op)
	}
	return out
}

// publish ends a tick: it adds the tick's requests to the current minute,
// drops minutes older than an hour, reads dead-letter candidates, and
// makes the State that State returns until the next tick. Under m.mu.
func (m *Monitor) publishState(ctx context.Context, st *TickStats) {
	if m.obs.now.Earliest.IsZero() {
		return // not leading yet: nothing swept
	}
	now := m.obs.now.Earliest
	if m.obs.startedAt.IsZero() {
		m.obs.startedAt = now
	}
	m.readDead(ctx, st)
	counter := countingStore(m.st)
	var total s3store.Counts
	if counter != nil {
		total = counter.Counts()
		m.obs.minute(minuteOf(now)).Requests = addCounts(m.obs.minute(minuteOf(now)).Requests, total.Sub(m.obs.counts))
		m.obs.counts = total
	}
	first := minuteOf(now) - 59
	for k := range m.obs.minutes {
		if k < first {
			delete(m.obs.minutes, k)
		}
	}
	s := State{At: now, Monitor: m.cfg.ID, Leading: !m.cfg.Leader || m.lease.Valid(ctx), Ticks: m.total.Ticks + st.Ticks,
		Totals: make(map[task.Status]int)}
	for k := first; k <= first+59; k++ {
		mn := Minute{Start: time.Unix(k*60, 0).UTC()}
		if b := m.obs.minutes[k]; b != nil {
			mn = *b
			mn.Requests = maps(b.Requests)
		}
		if counter != nil && mn.Requests == nil {
			mn.Requests = opCounts(s3store.Counts{})
		}
		s.Minutes = append(s.Minutes, mn)
	}
	if counter != nil {
		r := &Requests{Total: opCounts(total), LastHour: make(map[string]int64)}
		for _, mn := range s.Minutes {
			for op, n := range mn.Requests {
				r.LastHour[op] += n
			}
		}
		// The minutes hold every request since the first tick, or the
		// last 59 whole minutes and the current one's part.
		window := now.Sub(m.obs.startedAt)
		if window >= 59*time.Minute {
			window = 59*time.Minute + now.Sub(time.Unix(minuteOf(now)*60, 0))
		}
		r.WindowSecs = max(window, time.Second).Seconds()
		s.Requests = r
	}
	for shard := range m.manifest.Shards {
		ss := ShardState{Shard: shard, Counts: make(map[task.Status]int)}
		if sw := m.sweeps[shard]; sw != nil {
			ob := &sw.obs
			t := ob.above.plus(ob.below)
			for i, status := range stateStatuses {
				ss.Counts[status] = t[i]
				s.Totals[status] += t[i]
			}
			ss.Depth = ss.Counts[task.Pending]
			ss.OldestPending, ss.Swept, ss.Walked, ss.Whole = ob.oldest, ob.swept, ob.walked, ob.whole
		}
		s.Shards = append(s.Shards, ss)
	}
	for _, e := range m.obs.dead {
		s.Dead = append(s.Dead, e.task)
	}
	sort.Slice(s.Dead, func(i, j int) bool {
		if !s.Dead[i].Ended.Equal(s.Dead[j].Ended) {
			return s.Dead[i].Ended.After(s.Dead[j].Ended)
		}
		return s.Dead[i].ID > s.Dead[j].ID
	})
	m.snapMu.Lock()
	m.snap, m.snapLocal = s, m.obs.nowLocal
	m.snapMu.Unlock()
}

func addCounts(m map[string]int64, c s3store.Counts) map[string]int64 {
	if m == nil {
		m = make(map[string]int64)
	}
	for _, op := range s3store.Ops() {
		m[op.String()] += c.Of(op)
	}
	return m
}

func maps(m map[string]int64) map[string]int64 {
	if m == nil {
		return nil
	}
	out := make(map[string]int64, len(m))
	for k, v := range m {
		out[k] = v
	}
	return out
}

// State returns a snapshot of what the monitor knows, from memory only: no
// request, and no wait for a tick in progress. The fleet (members, lease
// expiries, which member polls which shard) is the monitor's cached view
// of the fleet object, which its ticks re-read every few intervals.
func (m *Monitor) State() State {
	m.snapMu.Lock()
	s, at := m.snap, m.snapLocal
	m.snapMu.Unlock()
	if s.At.IsZero() {
		return State{Monitor: m.cfg.ID, Totals: map[task.Status]int{}, Shards: []ShardState{}, Members: []MemberState{},
			Lapsed: []MemberState{}, Minutes: []Minute{}, Dead: []DeadTask{}}
	}
	// The snapshot is shared: copy what the fleet fills in.
	s.Shards = slices.Clone(s.Shards)
	s.At = s.At.Add(clock.Since(m.local, at))
	for i := range s.Shards {
		if !s.Shards[i].OldestPending.IsZero() {
			s.Shards[i].OldestPendingSecs = max(0, s.At.Sub(s.Shards[i].OldestPending).Seconds())
		}
	}
	f := m.fleet.Cached()
	iv := clock.Interval{Earliest: s.At, Latest: s.At}
	n := len(s.Shards)
	s.Members, s.Lapsed = []MemberState{}, []MemberState{}
	live := f.Live(iv, m.cfg.LeaseMargin)
	for _, mb := range live {
		ms := memberState(mb)
		if a, ok := f.Assign(mb.ID, iv, m.cfg.LeaseMargin, n); ok {
			ms.Own, ms.Drain = a.Own, a.Drain
			for _, sh := range a.Own {
				s.Shards[sh].Member, s.Shards[sh].Role, s.Shards[sh].LeaseExpires = mb.ID, "active", mb.ExpiresAt
			}
			for _, sh := range a.Drain {
				s.Shards[sh].Member, s.Shards[sh].Role, s.Shards[sh].LeaseExpires = mb.ID, "drain", mb.ExpiresAt
			}
		}
		s.Members = append(s.Members, ms)
	}
	for _, mb := range f.Members {
		if !slices.ContainsFunc(live, func(l shards.Member) bool { return l.ID == mb.ID }) {
			s.Lapsed = append(s.Lapsed, memberState(mb))
		}
	}
	s.Want, s.Asleep = f.Want, f.Asleep
	return s
}

func memberState(mb shards.Member) MemberState {
	return MemberState{ID: mb.ID, Joined: mb.Joined, ExpiresAt: mb.ExpiresAt, Types: mb.Types, Busy: mb.Busy,
		Dedicated: mb.Dedicated, Leased: mb.Leased}
}
