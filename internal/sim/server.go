package sim

import (
	"bytes"
	"context"
	"crypto/md5"
	"encoding/hex"
	"errors"
	"fmt"
	"hash/fnv"
	"math/rand/v2"
	"os"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing/synctest"
	"time"

	"github.com/s3queue/s3queue/s3store"
)

// Provider is what the simulated server does where real servers differ
// (docs/storage.md, "What the servers do (measured)").
type Provider struct {
	Name string
	// IgnoreConditionalDelete: a DELETE with a stale If-Match deletes the
	// object anyway (MinIO, gofakes3).
	IgnoreConditionalDelete bool
	// IfMatchMissing412: a PUT with If-Match on a missing key answers 412
	// instead of 404, creating nothing (gofakes3).
	IfMatchMissing412 bool
}

// Providers are the behaviours a seed chooses from.
var Providers = []Provider{
	{Name: "aws"},
	{Name: "minio", IgnoreConditionalDelete: true},
	{Name: "gofakes3", IgnoreConditionalDelete: true, IfMatchMissing412: true},
}

// Faults are the per-request fault rates of a phase. The server decides
// each request's fate with its seeded source when it serves it.
type Faults struct {
	// Error: an error before the request is applied (500 or 503).
	Error float64
	// Conflict: a conditional PUT fails with 409 before it is applied.
	Conflict float64
	// Lost: a write is applied and its response lost: a conditional PUT
	// then reports 412 (the store's retry met its own write) or 500, any
	// other write 500.
	Lost float64
	// Delay: the request is held for up to MaxDelay of virtual time before
	// it is served.
	Delay    float64
	MaxDelay time.Duration
	// Zombie: a write whose caller gave up while it was held is applied
	// anyway when its delay ends (a request the network delivered late).
	Zombie float64
	// Forbidden: a GET of an object under Foreign fails with 403.
	Forbidden bool
}

// Entry is one applied write (PUT or DELETE) in the server's log, the
// checker's ground truth.
type Entry struct {
	Seq     int
	At      time.Time // server time it was applied
	Sent    time.Time // server time its caller sent it (At, unless the network held it)
	Proc    string
	Op      s3store.Op
	Key     string
	Old     []byte // nil: the key did not exist
	New     []byte // nil: deleted
	Fault   string // "lost" when the caller was told it failed, "zombie" when applied after the caller gave up
	Existed bool
}

// Errors the simulated server answers with.
var (
	errCrashed   = errors.New("sim: the process crashed")
	errCut       = fmt.Errorf("sim: %w: the process is cut off from the server", s3store.ErrInjected)
	errForbidden = fmt.Errorf("sim: %w: 403 access denied", s3store.ErrInjected)
	errOutage    = fmt.Errorf("sim: %w: the server is unreachable", s3store.ErrInjected)
)

type object struct {
	body     []byte
	etag     string
	modified time.Time
}

// request is one request waiting to be served.
type request struct {
	h     *Handle
	seq   uint64
	op    s3store.Op
	now   bool // a Now request (counted as the HEAD it is)
	key   string
	body  []byte
	put   s3store.PutOptions
	del   s3store.DeleteOptions
	list  s3store.ListOptions
	sent  time.Time
	reply chan response
	// control requests run a function at a quiescent point, in the
	// seeded order, instead of touching objects.
	control func()
	name    string // a control request's name, for the trace

	// head and tail make up the request's order key (sortKey), split so
	// that the tail, which hashes the body, is computed only when a
	// comparison needs it: head is set once when the request is enqueued
	// (the schedule compares it many times), tail on first use.
	head, tail string
	hasTail    bool

	delayed   bool
	abandoned bool // the caller gave up; served only as a zombie
	zombie    bool
	latency   time.Duration // the modelled S3's service time, if any
}

type response struct {
	obj  s3store.Object
	info s3store.ObjectInfo
	etag string
	page s3store.ListPage
	now  time.Time
	date time.Time
	err  error
}

// Server is the simulated S3 server. Requests from every process's Handle
// queue up; one scheduler goroutine serves them one at a time, whenever
// every other goroutine of the bubble is blocked, in an order and with a
// fate drawn from the seeded source. Time passes only when nothing can run.
type Server struct {
	provider Provider
	// flipTies breaks ties between identical pending requests (one
	// process's, same operation, key and body) by the reverse of their
	// arrival: a run whose trace then differs depends on the order in
	// which the Go scheduler ran goroutines (see FlipTies).
	flipTies bool

	mu       sync.Mutex
	rng      *rand.Rand
	faults   Faults
	foreign  string // key prefix of objects whose GET is forbidden
	objects  map[string]object
	keys     keyIndex   // the keys of objects, in order, for LIST
	pending  []*request // sorted by request.less: the schedule draws an index into it
	seq      uint64
	closed   bool
	log      []Entry
	trace    []string
	counts   map[string]int
	violated []string // requests made by stopped processes

	wake chan struct{}
	done chan struct{}
	// maxPage caps LIST pages: servers may return fewer keys than asked,
	// and small pages exercise every pagination path.
	maxPage int
	start   time.Time
	// model, if set, is a modelled S3 (s3model.go) that times each
	// request and refuses those over its partition's rate.
	model *S3Model
	// lean: keep no trace and no log of applied writes (a scale run makes
	// millions of requests, and checks no invariant over them).
	lean bool
	// watched: the key whose reads are kept (WatchReads), and those reads.
	watched string
	reads   []Read
	// down: UnixNano until which the server is unreachable for everyone
	// (Outage), 0 for never.
	down atomic.Int64
}

// Read is one GET of the watched key, as its caller saw it.
type Read struct {
	Proc     string
	At       time.Time // server time the caller asked
	Answered bool      // the object, or "not found"; false: an error
}

// WatchReads makes the server keep every GET of key, as its caller saw it
// (crashed, cut off, held past its caller's patience, or served). Call it
// before Start.
func (s *Server) WatchReads(key string) { s.watched = key }

// Reads returns the reads of the watched key, in the order they ended.
func (s *Server) Reads() []Read {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.reads)
}

// NewServer returns a server with the given provider behaviour, seeded
// source and page cap (0: none). Call Start inside the bubble.
func NewServer(p Provider, rng *rand.Rand, maxPage int) *Server {
	return &Server{provider: p, rng: rng, objects: make(map[string]object), counts: make(map[string]int),
		wake: make(chan struct{}, 1), done: make(chan struct{}), maxPage: maxPage}
}

// Start runs the scheduler until Close.
func (s *Server) Start() {
	s.start = time.Now()
	go s.schedule()
}

// Close stops the scheduler once nothing is pending and waits for it.
func (s *Server) Close() {
	s.mu.Lock()
	s.closed = true
	s.mu.Unlock()
	s.signal()
	<-s.done
}

// SetModel makes the server a modelled S3: m times every request and
// refuses with 503 SlowDown those over their partition's rate. Call it
// before Start. Without it a response takes 0.2-20 ms and nothing is
// refused for load.
func (s *Server) SetModel(m *S3Model) { s.model = m }

// SetFaults switches the fault rates at a quiescent point.
func (s *Server) SetFaults(f Faults) {
	s.Control("faults", func() { s.faults = f })
}

// SetForeign makes GETs of keys under prefix fail with 403 while
// Faults.Forbidden is on.
func (s *Server) SetForeign(prefix string) {
	s.mu.Lock()
	s.foreign = prefix
	s.mu.Unlock()
}

// Control runs fn (under the server's lock, so it must not call the
// server) as one step of the schedule, and waits for it.
func (s *Server) Control(name string, fn func()) {
	r := &request{control: fn, name: name, reply: make(chan response, 1)}
	s.enqueue(r)
	<-r.reply
}

func (s *Server) signal() {
	select {
	case s.wake <- struct{}{}:
	default:
	}
}

func (s *Server) enqueue(r *request) {
	r.head = r.sortHead()
	s.mu.Lock()
	s.seq++
	r.seq = s.seq
	s.addPending(r)
	s.mu.Unlock()
	s.signal()
}

// addPending inserts r into the pending requests in their order. Called
// with s.mu held. Keeping them sorted as they arrive gives the order a
// sort of the whole set before each pick would (less is a total order),
// at the cost of one binary search and one copy per request.
func (s *Server) addPending(r *request) {
	i := sort.Search(len(s.pending), func(i int) bool { return r.less(s.pending[i], s.flipTies) })
	s.pending = append(s.pending, nil)
	copy(s.pending[i+1:], s.pending[i:])
	s.pending[i] = r
}

// FlipTies makes the server break ties between identical pending
// requests against their arrival order, before any request: a second run
// of a seed with it (TestASeedReplaysExactly) differs from the first only
// if the code under test lets the Go scheduler decide something (sim
// seed 7: two identical hand-off PUTs, one failed, and which old pointer
// was deleted was the scheduler's; 14 of 80 seeds differed so).
func (s *Server) FlipTies() {
	s.mu.Lock()
	s.flipTies = true
	s.mu.Unlock()
}

// dropPending removes r from the pending requests, if it is there.
// Called with s.mu held.
func (s *Server) dropPending(r *request) {
	i := sort.Search(len(s.pending), func(i int) bool { return !s.pending[i].less(r, s.flipTies) })
	if i < len(s.pending) && s.pending[i] == r {
		s.pending = append(s.pending[:i], s.pending[i+1:]...)
	}
}

// schedule is the scheduler goroutine.
func (s *Server) schedule() {
	defer close(s.done)
	for {
		synctest.Wait() // every other goroutine is blocked: the pending set is fixed
		s.mu.Lock()
		if len(s.pending) == 0 {
			closed := s.closed
			s.mu.Unlock()
			if closed {
				return
			}
			<-s.wake // durably blocked: virtual time moves to the next timer
			continue
		}
		i := s.rng.IntN(len(s.pending))
		r := s.pending[i]
		s.pending = append(s.pending[:i], s.pending[i+1:]...)
		s.serve(r)
		s.mu.Unlock()
	}
}

// less orders pending requests by what they are, not by when their
// goroutines happened to enqueue them: by sortKey, then by arrival (or,
// with flip, against it: see Server.FlipTies). It
// compares the heads first and reads the tails (a hash of the body) only
// when the heads cannot decide: equal, or one a prefix of the other.
// Called with the server's lock held (it may compute a tail).
func (r *request) less(o *request, flip bool) bool {
	a, b := r.head, o.head
	n := min(len(a), len(b))
	if a[:n] != b[:n] {
		return a[:n] < b[:n]
	}
	if c := strings.Compare(a+r.sortTail(), b+o.sortTail()); c != 0 {
		return c < 0
	}
	if flip {
		return r.seq > o.seq
	}
	return r.seq < o.seq
}

// sortKey is the request's place in the schedule: sortHead()+sortTail().
func (r *request) sortKey() string { return r.sortHead() + r.sortTail() }

// sortHead is the start of sortKey: the process, the operation and the key.
func (r *request) sortHead() string {
	if r.control != nil {
		return "\x00" + r.name
	}
	return r.h.proc + "|" + strconv.Itoa(int(r.op)) + "|" + strconv.FormatBool(r.now) + "|" + r.key + "|"
}

// sortTail is the rest of sortKey: a hash of the body and the options,
// computed once.
func (r *request) sortTail() string {
	if !r.hasTail {
		if r.control == nil {
			h := fnv.New64a()
			h.Write(r.body)
			r.tail = fmt.Sprintf("%x|%v|%v|%s", h.Sum64(), r.put, r.del, r.list.StartAfter)
		}
		r.hasTail = true
	}
	return r.tail
}

// serve decides the fate of r and replies. Called with s.mu held.
func (s *Server) serve(r *request) {
	if r.control != nil {
		r.control()
		s.tracef("control %s", r.name)
		r.reply <- response{}
		return
	}
	f := s.faults
	write := (r.op == s3store.OpPut || r.op == s3store.OpDelete) && !r.now
	if write && !r.abandoned && !r.h.crashed() {
		if d := r.h.armed.Swap(0); d != 0 {
			// The partition Arm planned begins with this write in flight.
			r.h.cut.Store(time.Now().UnixNano() + d)
			s.tracef("partition of %s begins, for %v", r.h.proc, time.Duration(d).Round(time.Millisecond))
		}
	}
	switch {
	case r.abandoned:
		// The caller gave up while the request was held: the network
		// may still deliver it.
		if r.zombie {
			s.counts["zombie"]++
			resp := s.apply(r, "zombie")
			s.tracef("%s (caller gone) -> %s", r.describe(), outcome(resp.err))
		}
		return
	case r.h.crashed():
		// The process died with the request in flight: it lands or not.
		if write && s.rng.IntN(2) == 0 {
			s.counts["zombie"]++
			resp := s.apply(r, "zombie")
			s.tracef("%s (process dead) -> %s", r.describe(), outcome(resp.err))
		}
		r.reply <- response{err: errCrashed}
		return
	case s.unreachable(r.h, time.Now()):
		// A request in flight when its process was cut off, or the
		// server became unreachable (a partition, an outage): it lands
		// or not, as the seed decides, and its caller hears nothing.
		if write && s.rng.IntN(2) == 0 {
			s.counts["lost"]++
			resp := s.apply(r, "lost")
			s.tracef("%s (cut off in flight) -> applied, response lost: %s", r.describe(), outcome(resp.err))
		} else {
			s.tracef("%s (cut off in flight) -> not applied", r.describe())
		}
		s.counts["partitioned"]++
		s.respond(r, response{err: s.unreachableErr(r.h)})
		return
	}
	if !r.delayed && f.Delay > 0 && s.rng.Float64() < f.Delay {
		r.delayed = true
		r.zombie = write && s.rng.Float64() < f.Zombie
		d := time.Duration(1 + s.rng.Int64N(int64(f.MaxDelay)))
		s.tracef("%s delayed %v", r.describe(), d)
		s.counts["delay"]++
		time.AfterFunc(d, func() {
			s.mu.Lock()
			s.addPending(r)
			s.mu.Unlock()
			s.signal()
		})
		return
	}
	if s.model != nil {
		key := r.key
		if r.op == s3store.OpList {
			key = ListKey(r.key, r.list.StartAfter)
		}
		v := s.model.Serve(time.Now(), r.op, key)
		r.latency = v.Latency
		if v.SlowDown {
			s.counts["slowdown"]++
			s.tracef("%s -> slow down (partition %q)", r.describe(), v.Partition)
			s.respond(r, response{err: s3store.ErrInjected503, date: s.date()})
			return
		}
	}
	x := s.rng.Float64()
	var resp response
	switch {
	case x < f.Error:
		s.counts["error"]++
		resp.err = s3store.ErrInjected500
		if s.rng.IntN(2) == 0 {
			resp.err = s3store.ErrInjected503
		}
		resp.date = s.date()
	case x < f.Error+f.Conflict && r.op == s3store.OpPut && (r.put.IfMatch != "" || r.put.IfNoneMatch):
		s.counts["conflict"]++
		resp.err = fmt.Errorf("sim: %w: 409", s3store.ErrConflict)
		resp.date = s.date()
	case x < f.Error+f.Conflict+f.Lost && write:
		applied := s.apply(r, "lost")
		if applied.err != nil {
			resp = applied // it failed anyway: nothing was lost
			break
		}
		s.counts["lost"]++
		resp.err = s3store.ErrInjected500
		if r.op == s3store.OpPut && (r.put.IfMatch != "" || r.put.IfNoneMatch) && s.rng.IntN(2) == 0 {
			// The store's own retry met the write it had just made.
			resp.err = fmt.Errorf("sim: %w: 412 on retry after a lost response", s3store.ErrPreconditionFailed)
		}
		s.tracef("%s -> applied, response lost: %s", r.describe(), outcome(resp.err))
		s.respond(r, resp)
		return
	case f.Forbidden && r.op == s3store.OpGet && s.foreign != "" && strings.HasPrefix(r.key, s.foreign):
		s.counts["forbidden"]++
		resp.err = errForbidden
		resp.date = s.date()
	default:
		resp = s.apply(r, "")
	}
	if s.lean {
		s.respond(r, resp)
		return
	}
	if r.op == s3store.OpList && resp.err == nil && debugLists {
		var ks []string
		for _, o := range resp.page.Objects {
			ks = append(ks, fmt.Sprintf("%s(%d)", strings.TrimPrefix(o.Key, r.key), o.Size))
		}
		s.tracef("%s -> ok %v", r.describe(), ks)
	} else if resp.etag != "" {
		s.tracef("%s -> %s %s", r.describe(), outcome(resp.err), short(resp.etag))
	} else {
		s.tracef("%s -> %s", r.describe(), outcome(resp.err))
	}
	s.respond(r, resp)
}

// debugLists puts the keys each LIST returned in the trace.
var debugLists = os.Getenv("S3QUEUE_SIM_TRACE_LISTS") != ""

// respond delivers resp after a network latency drawn from the seed
// (0.2-20 ms, or the modelled S3's service time). Besides being
// realistic, distinct arrival instants keep goroutines of one process
// from waking at the same virtual instant, where
// the order they run in (and which case of a select fires) is the Go
// scheduler's choice, not the seed's.
func (s *Server) respond(r *request, resp response) {
	d := r.latency
	if s.model == nil {
		d = 200*time.Microsecond + time.Duration(s.rng.Int64N(int64(20*time.Millisecond)))
	}
	time.AfterFunc(d, func() {
		if r.h != nil && s.unreachable(r.h, time.Now()) {
			// The response was on its way when the process was cut off
			// or the server became unreachable: it never arrives.
			resp = response{err: s.unreachableErr(r.h)}
		}
		r.reply <- resp
	})
}

// unreachable reports whether h cannot reach the server at now: it is cut
// off (Partition), or the server is down for everyone (Outage).
func (s *Server) unreachable(h *Handle, now time.Time) bool {
	n := now.UnixNano()
	return n < h.cut.Load() || n < s.down.Load()
}

func (s *Server) unreachableErr(h *Handle) error {
	if time.Now().UnixNano() < h.cut.Load() {
		return errCut
	}
	return errOutage
}

// Partition cuts h off from the server until until, at a quiescent point:
// every request it sends fails, after a second, without reaching the
// server; each of its requests already on its way lands or not, as the
// seed decides, and every response on its way to it is lost.
func (s *Server) Partition(h *Handle, until time.Time) {
	s.Control(fmt.Sprintf("partition %s for %v", h.proc, time.Until(until).Round(time.Millisecond)), func() { h.cut.Store(until.UnixNano()) })
}

// Arm plans a partition of h for d, at a quiescent point: it begins when
// the server next serves a write of h, which is then in flight (it lands
// or not, and its response is lost), as Partition.
func (s *Server) Arm(h *Handle, d time.Duration) {
	s.Control(fmt.Sprintf("partition of %s armed", h.proc), func() { h.armed.Store(int64(d)) })
}

// Outage makes the server unreachable for every process until until, at a
// quiescent point, as Partition does one process.
func (s *Server) Outage(until time.Time) {
	s.Control(fmt.Sprintf("outage for %v", time.Until(until).Round(time.Millisecond)), func() { s.down.Store(until.UnixNano()) })
}

func outcome(err error) string {
	if err == nil {
		return "ok"
	}
	return s3store.OutcomeOf(err).String()
}

func (r *request) describe() string {
	if r.now {
		return r.h.proc + " NOW"
	}
	s := r.h.proc + " " + r.op.String() + " " + r.key
	if r.op == s3store.OpPut {
		if st := field(r.body, "status"); st != "" {
			s += " [" + st + " v" + field(r.body, "version") + "]"
		}
	}
	switch {
	case r.put.IfMatch != "":
		s += " if-match " + short(r.put.IfMatch)
	case r.put.IfNoneMatch:
		s += " if-none-match"
	case r.del.IfMatch != "":
		s += " if-match " + short(r.del.IfMatch)
	case r.op == s3store.OpList && r.list.StartAfter != "":
		s += " after " + r.list.StartAfter
	}
	return s
}

// field pulls a top-level scalar out of a JSON body for the trace, cheaply.
func field(body []byte, name string) string {
	i := bytes.Index(body, []byte(`"`+name+`":`))
	if i < 0 {
		return ""
	}
	rest := bytes.TrimLeft(body[i+len(name)+3:], `"`)
	if j := bytes.IndexAny(rest, `",}`); j >= 0 {
		return string(rest[:j])
	}
	return ""
}

func short(etag string) string {
	if len(etag) > 8 {
		return etag[:8]
	}
	return etag
}

func (s *Server) tracef(format string, args ...any) {
	if s.lean {
		return
	}
	s.trace = append(s.trace, fmt.Sprintf("%9.3fs ", time.Since(s.start).Seconds())+fmt.Sprintf(format, args...))
}

// date is the server's Date header: its time at 1-second resolution.
func (s *Server) date() time.Time { return time.Now().UTC().Truncate(time.Second) }

// apply performs r on the objects. Called with s.mu held.
func (s *Server) apply(r *request, fault string) response {
	now := time.Now().UTC()
	resp := response{date: s.date()}
	s.counts[r.op.String()]++
	if r.now {
		resp.now = resp.date
		return resp
	}
	cur, exists := s.objects[r.key]
	switch r.op {
	case s3store.OpGet:
		if !exists {
			resp.err = fmt.Errorf("sim: get %q: %w", r.key, s3store.ErrNotFound)
			break
		}
		resp.obj = s3store.Object{Key: r.key, Body: append([]byte(nil), cur.body...), ETag: cur.etag, LastModified: cur.modified}
	case s3store.OpHead:
		if !exists {
			resp.err = fmt.Errorf("sim: head %q: %w", r.key, s3store.ErrNotFound)
			break
		}
		resp.info = s3store.ObjectInfo{Key: r.key, ETag: cur.etag, Size: int64(len(cur.body)), LastModified: cur.modified}
	case s3store.OpPut:
		switch {
		case r.put.IfNoneMatch && exists:
			resp.err = fmt.Errorf("sim: put %q: %w", r.key, s3store.ErrPreconditionFailed)
		case r.put.IfMatch != "" && !exists && s.provider.IfMatchMissing412:
			resp.err = fmt.Errorf("sim: put %q: %w: the object does not exist", r.key, s3store.ErrPreconditionFailed)
		case r.put.IfMatch != "" && !exists:
			resp.err = fmt.Errorf("sim: put %q: %w", r.key, s3store.ErrNotFound)
		case r.put.IfMatch != "" && cur.etag != r.put.IfMatch:
			resp.err = fmt.Errorf("sim: put %q: %w", r.key, s3store.ErrPreconditionFailed)
		default:
			sum := md5.Sum(r.body) // S3's ETag of a single-part PUT: identical bytes, identical ETag
			o := object{body: r.body, etag: hex.EncodeToString(sum[:]), modified: now.Truncate(time.Second)}
			s.objects[r.key] = o
			if !exists {
				s.keys.insert(r.key)
			}
			s.record(r, now, fault, cur, exists, o.body)
			resp.etag = o.etag
		}
	case s3store.OpDelete:
		if exists && r.del.IfMatch != "" && cur.etag != r.del.IfMatch && !s.provider.IgnoreConditionalDelete {
			resp.err = fmt.Errorf("sim: delete %q: %w", r.key, s3store.ErrPreconditionFailed)
			break
		}
		if exists {
			delete(s.objects, r.key)
			s.keys.remove(r.key)
			s.record(r, now, fault, cur, true, nil)
		}
	case s3store.OpList:
		max := r.list.MaxKeys
		if max <= 0 {
			max = s3store.DefaultMaxKeys
		}
		if s.maxPage > 0 && max > s.maxPage {
			max = s.maxPage
		}
		keys := s.keys.list(r.key, r.list.StartAfter, max+1)
		if len(keys) > max {
			keys, resp.page.Truncated = keys[:max], true
		}
		for _, k := range keys {
			o := s.objects[k]
			resp.page.Objects = append(resp.page.Objects, s3store.ObjectInfo{Key: k, ETag: o.etag, Size: int64(len(o.body)), LastModified: o.modified})
		}
	}
	return resp
}

func (s *Server) record(r *request, now time.Time, fault string, old object, existed bool, body []byte) {
	if s.lean {
		return
	}
	e := Entry{Seq: len(s.log), At: now, Sent: r.sent, Proc: r.h.proc, Op: r.op, Key: r.key, New: body, Fault: fault, Existed: existed}
	if existed {
		e.Old = old.body
	}
	s.log = append(s.log, e)
}

// crash marks h crashed at a quiescent point: each of its requests still
// held is applied anyway or dropped when it is served, as the seed decides.
func (s *Server) crash(h *Handle) {
	s.Control("crash "+h.proc, func() { h.state.Store(stateCrashed) })
}

// Log returns the applied writes, in order.
func (s *Server) Log() []Entry {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]Entry(nil), s.log...)
}

// Trace returns what the server did, one line per request.
func (s *Server) Trace() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]string(nil), s.trace...)
}

// Counts returns requests by type and faults by kind.
func (s *Server) Counts() map[string]int {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make(map[string]int, len(s.counts))
	for k, v := range s.counts {
		out[k] = v
	}
	return out
}

// Objects returns a copy of the objects under prefix.
func (s *Server) Objects(prefix string) map[string][]byte {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make(map[string][]byte)
	for k, o := range s.objects {
		if strings.HasPrefix(k, prefix) {
			out[k] = append([]byte(nil), o.body...)
		}
	}
	return out
}

// Put writes an object directly (setting up the bucket before a run).
func (s *Server) Put(key string, body []byte) {
	s.mu.Lock()
	defer s.mu.Unlock()
	sum := md5.Sum(body)
	if _, ok := s.objects[key]; !ok {
		s.keys.insert(key)
	}
	s.objects[key] = object{body: body, etag: hex.EncodeToString(sum[:]), modified: time.Now().UTC().Truncate(time.Second)}
}

// Violations returns what the server itself saw go wrong: requests from
// processes that had stopped.
func (s *Server) Violations() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]string(nil), s.violated...)
}

// Process states.
const (
	stateAlive int32 = iota
	stateCrashed
	stateStopped
)

// Handle is one process's connection to the server: an s3store.Store
// whose responses carry the server's Date, as a remote store's do.
type Handle struct {
	s3store.DateFanout
	srv   *Server
	proc  string
	state atomic.Int32
	cut   atomic.Int64 // UnixNano until which every request fails (a partition), 0 for none
	armed atomic.Int64 // a partition's length, to begin at its next write (Server.Arm), 0 for none
	// flaky: how many of the process's next reads of the watched key fail
	// (FailWatchedReads).
	flaky atomic.Int32
}

// FailWatchedReads makes the next n reads of the watched key by h fail, as
// a store does that is flaky just when a process starts.
func (h *Handle) FailWatchedReads(n int) { h.flaky.Store(int32(n)) }

var _ s3store.Store = (*Handle)(nil)

// Handle returns a new connection for process proc.
func (s *Server) Handle(proc string) *Handle { return &Handle{srv: s, proc: proc} }

func (h *Handle) crashed() bool { return h.state.Load() == stateCrashed }

// Crash makes every request of h, held or future, fail: the process is
// gone. Held writes are applied or not, as the seed decides.
func (h *Handle) Crash() { h.srv.crash(h) }

// Stop records that the process's Run returned: any later request is a
// violation (nothing may outlive Run).
func (h *Handle) Stop() { h.state.CompareAndSwap(stateAlive, stateStopped) }

// Cut makes every request of h fail, without reaching the server, until
// until: the process is cut off from the server, and lives on (see
// Server.Partition, which also cuts off what it has in flight).
func (h *Handle) Cut(until time.Time) { h.srv.Partition(h, until) }

func (h *Handle) do(ctx context.Context, r *request) response {
	r.h = h
	if now := time.Now().UnixNano(); (now < h.cut.Load() || now < h.srv.down.Load()) && h.state.Load() == stateAlive {
		// It takes time, as a timeout does, so a loop that retries
		// without pause cannot spin the bubble.
		err := errCut
		if now >= h.cut.Load() {
			err = errOutage
			h.srv.mu.Lock()
			h.srv.counts["outage"]++
			h.srv.mu.Unlock()
		} else {
			h.srv.mu.Lock()
			h.srv.counts["partitioned"]++
			h.srv.mu.Unlock()
		}
		time.Sleep(time.Second)
		return response{err: err}
	}
	switch h.state.Load() {
	case stateCrashed:
		// A dead process's requests fail, and take time, so a loop that
		// retries without pause cannot spin the bubble forever.
		time.Sleep(time.Second)
		return response{err: errCrashed}
	case stateStopped:
		h.srv.mu.Lock()
		if len(h.srv.violated) < 20 {
			h.srv.violated = append(h.srv.violated, fmt.Sprintf("%s made a request after its Run returned: %s", h.proc, r.describe()))
		}
		h.srv.mu.Unlock()
	}
	if err := ctx.Err(); err != nil {
		return response{err: err}
	}
	r.sent, r.reply = time.Now(), make(chan response, 1)
	h.srv.enqueue(r)
	var resp response
	select {
	case resp = <-r.reply:
	case <-ctx.Done():
		h.srv.mu.Lock()
		select {
		case resp = <-r.reply: // served meanwhile
		default:
			r.abandoned = true
			if !r.zombie {
				h.srv.dropPending(r)
			}
			resp = response{err: ctx.Err()}
		}
		h.srv.mu.Unlock()
	}
	if !resp.date.IsZero() {
		h.Publish(s3store.DateSample{Date: resp.date, Sent: r.sent, Received: time.Now()})
	}
	return resp
}

// Get implements s3store.Store.
func (h *Handle) Get(ctx context.Context, key string) (s3store.Object, error) {
	at := time.Now()
	if key == h.srv.watched && h.flaky.Load() > 0 {
		h.flaky.Add(-1)
		h.srv.mu.Lock()
		h.srv.reads = append(h.srv.reads, Read{Proc: h.proc, At: at})
		h.srv.counts["error"]++
		h.srv.tracef("%s GET %s -> error (a flaky start)", h.proc, key)
		h.srv.mu.Unlock()
		return s3store.Object{}, s3store.ErrInjected500
	}
	r := h.do(ctx, &request{op: s3store.OpGet, key: key})
	if key == h.srv.watched {
		h.srv.mu.Lock()
		h.srv.reads = append(h.srv.reads, Read{Proc: h.proc, At: at, Answered: r.err == nil || errors.Is(r.err, s3store.ErrNotFound)})
		h.srv.mu.Unlock()
	}
	return r.obj, r.err
}

// Head implements s3store.Store.
func (h *Handle) Head(ctx context.Context, key string) (s3store.ObjectInfo, error) {
	r := h.do(ctx, &request{op: s3store.OpHead, key: key})
	return r.info, r.err
}

// Put implements s3store.Store.
func (h *Handle) Put(ctx context.Context, key string, body []byte, opts s3store.PutOptions) (string, error) {
	// The copy is the server's: apply stores it as the object's body.
	r := h.do(ctx, &request{op: s3store.OpPut, key: key, body: append([]byte(nil), body...), put: opts})
	return r.etag, r.err
}

// Delete implements s3store.Store.
func (h *Handle) Delete(ctx context.Context, key string, opts s3store.DeleteOptions) error {
	return h.do(ctx, &request{op: s3store.OpDelete, key: key, del: opts}).err
}

// List implements s3store.Store.
func (h *Handle) List(ctx context.Context, prefix string, opts s3store.ListOptions) (s3store.ListPage, error) {
	r := h.do(ctx, &request{op: s3store.OpList, key: prefix, list: opts})
	return r.page, r.err
}

// Now implements s3store.Store.
func (h *Handle) Now(ctx context.Context) (time.Time, error) {
	r := h.do(ctx, &request{op: s3store.OpHead, now: true})
	return r.now, r.err
}
