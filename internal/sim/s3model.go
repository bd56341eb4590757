package sim

import (
	"fmt"
	"math"
	"math/rand/v2"
	"sort"
	"sync"
	"time"

	"github.com/s3queue/s3queue/s3store"
)

// The modelled S3 of the scale simulation (issue 10, item 4): how long
// each request takes, and which requests a partition refuses with 503
// SlowDown because its key range is over S3's request rate.
//
// The figures and where they come from:
//
//   - Request rates. "Your application can achieve at least 3,500
//     PUT/COPY/POST/DELETE or 5,500 GET/HEAD requests per second per
//     partitioned Amazon S3 prefix" (Amazon S3 User Guide, "Best practices
//     design patterns: optimizing Amazon S3 performance",
//     https://docs.aws.amazon.com/AmazonS3/latest/userguide/optimizing-performance.html).
//     The limit is per partition, not per prefix as written: a new prefix
//     shares its partition until S3 splits it.
//   - Scaling. "The resources for this request rate aren't automatically
//     assigned when a prefix is created. Instead, as the request rate for a
//     prefix increases gradually, Amazon S3 automatically scales ... If there
//     is a fast spike in the request rate ... Amazon S3 might return 503
//     Slow Down errors while it scales in the background"
//     (https://aws.amazon.com/premiumsupport/knowledge-center/s3-503-within-request-rate-prefix/).
//     AWS publishes no figure for how long a split takes; an AWS reply on
//     re:Post under the key-naming article
//     (https://aws.amazon.com/premiumsupport/knowledge-center/s3-object-key-naming-pattern/)
//     says automatic partitioning "can take from 30 to 60 minutes", and
//     that AWS support can pre-partition a bucket. The defaults here are
//     shorter (a minute and a half from a sustained rate to a split) so
//     that a run of tens of virtual minutes reaches its steady state; set
//     SplitAfter and SplitDelay to the AWS figures to study the warm-up,
//     or Boundaries to start pre-partitioned, as AWS support would.
//   - Latency. AWS's performance whitepaper says small requests (under
//     512 KB) see median latencies "often in the range of tens of
//     milliseconds" ("Timeouts and retries for latency-sensitive
//     applications", https://docs.aws.amazon.com/whitepapers/latest/s3-optimizing-performance-best-practices/timeouts-and-retries-for-latency-sensitive-applications.html);
//     issue 10 asks for 20-80 ms per request.

// RateClass is which of S3's two per-partition request rates a request
// counts against.
type RateClass int

// Rate classes.
const (
	// PutClass: PUT, COPY, POST and DELETE, 3,500 a second per partition.
	PutClass RateClass = iota
	// GetClass: GET and HEAD, 5,500 a second per partition. A LIST is a
	// GET on the bucket and counts here too (AWS bills it with PUTs, but
	// documents no rate of its own for it).
	GetClass
	numRateClasses
)

// RateClassOf returns the rate class of a request type.
func RateClassOf(op s3store.Op) RateClass {
	if op == s3store.OpPut || op == s3store.OpDelete {
		return PutClass
	}
	return GetClass
}

// ServiceTime is the distribution of one kind of request's service time: Min
// plus a lognormal whose median is Median-Min and whose 99th percentile is
// P99-Min, clipped at Max. (A shifted lognormal: a floor of network and
// disk time, and a long right tail; the clip keeps within what issue 10
// specifies.)
type ServiceTime struct {
	Min, Median, P99, Max time.Duration
}

// draw returns one service time from rng.
func (l ServiceTime) draw(rng *rand.Rand) time.Duration {
	const z99 = 2.3263478740408408 // the standard normal's 99th percentile
	mu := math.Log(float64(l.Median - l.Min))
	sigma := math.Log(float64(l.P99-l.Min)/float64(l.Median-l.Min)) / z99
	d := l.Min + time.Duration(math.Exp(mu+sigma*rng.NormFloat64()))
	return min(d, l.Max)
}

func (l ServiceTime) validate() error {
	if !(0 <= l.Min && l.Min < l.Median && l.Median < l.P99 && l.P99 <= l.Max) {
		return fmt.Errorf("latency %+v: want 0 <= Min < Median < P99 <= Max", l)
	}
	return nil
}

// S3ModelConfig sets the modelled S3. Zero fields take the defaults.
type S3ModelConfig struct {
	// PutRate and GetRate are the requests a second one partition serves
	// of each rate class (default 3,500 and 5,500, AWS's documented
	// minimum per partitioned prefix).
	PutRate, GetRate float64
	// Burst is how many seconds' worth of its rate a partition's token
	// bucket holds (default 50 ms: 175 PUTs, 275 GETs). S3 publishes no
	// burst allowance; a small one refuses a spike at once while letting
	// Poisson arrivals at 90% of the rate through almost untouched.
	Burst time.Duration
	// SplitLoad: a second in which a partition is offered more than this
	// fraction of either rate counts as hot (default 0.5: S3 scales ahead
	// of a rate that rises gradually).
	SplitLoad float64
	// SplitAfter: a partition hot for this long, every second of it, is
	// split (default 30 s).
	SplitAfter time.Duration
	// SplitDelay: the split takes effect this long after S3 decided on it
	// (default 60 s). Until then the partition keeps its one limit.
	SplitDelay time.Duration
	// Boundaries pre-partition the bucket: each starts a partition (the
	// first partition always starts at the empty key).
	Boundaries []string
	// Service times of GET and HEAD, of PUT and DELETE, and of LIST
	// (defaults: 20 ms floor, 80 ms ceiling, medians 30, 35 and 40 ms,
	// 99th percentiles 60, 70 and 75 ms).
	GetLatency, PutLatency, ListLatency ServiceTime
}

func (c *S3ModelConfig) fill() {
	if c.PutRate == 0 {
		c.PutRate = 3500
	}
	if c.GetRate == 0 {
		c.GetRate = 5500
	}
	if c.Burst == 0 {
		c.Burst = 50 * time.Millisecond
	}
	if c.SplitLoad == 0 {
		c.SplitLoad = 0.5
	}
	if c.SplitAfter == 0 {
		c.SplitAfter = 30 * time.Second
	}
	if c.SplitDelay == 0 {
		c.SplitDelay = 60 * time.Second
	}
	ms := time.Millisecond
	if c.GetLatency == (ServiceTime{}) {
		c.GetLatency = ServiceTime{Min: 20 * ms, Median: 30 * ms, P99: 60 * ms, Max: 80 * ms}
	}
	if c.PutLatency == (ServiceTime{}) {
		c.PutLatency = ServiceTime{Min: 20 * ms, Median: 35 * ms, P99: 70 * ms, Max: 80 * ms}
	}
	if c.ListLatency == (ServiceTime{}) {
		c.ListLatency = ServiceTime{Min: 20 * ms, Median: 40 * ms, P99: 75 * ms, Max: 80 * ms}
	}
}

func (c *S3ModelConfig) validate() error {
	switch {
	case c.PutRate < 0 || c.GetRate < 0 || c.Burst < 0:
		return fmt.Errorf("s3 model: rates and burst must not be negative")
	case c.PutRate*c.Burst.Seconds() < 1 || c.GetRate*c.Burst.Seconds() < 1:
		return fmt.Errorf("s3 model: a burst of %v holds no whole request at %v PUTs or %v GETs a second", c.Burst, c.PutRate, c.GetRate)
	case c.SplitLoad < 0 || c.SplitAfter < 0 || c.SplitDelay < 0:
		return fmt.Errorf("s3 model: split load, after and delay must not be negative")
	}
	for _, l := range []ServiceTime{c.GetLatency, c.PutLatency, c.ListLatency} {
		if err := l.validate(); err != nil {
			return fmt.Errorf("s3 model: %w", err)
		}
	}
	return nil
}

// Verdict is what the modelled S3 does with one request.
type Verdict struct {
	// Latency is the request's service time: its response arrives this
	// long after the server took it, refused or not.
	Latency time.Duration
	// SlowDown: the request's partition is over its rate; S3 refuses it
	// with 503 SlowDown and applies nothing.
	SlowDown bool
	// Partition is the first key of the partition that took it.
	Partition string
}

// ClassCounts are requests and 503 SlowDowns by rate class.
type ClassCounts struct {
	Put, Get, PutSlowDowns, GetSlowDowns int64
}

func (c *ClassCounts) add(class RateClass, refused bool) {
	switch {
	case class == PutClass && refused:
		c.Put++
		c.PutSlowDowns++
	case class == PutClass:
		c.Put++
	case refused:
		c.Get++
		c.GetSlowDowns++
	default:
		c.Get++
	}
}

// PartitionStats are one live partition's key range and what it served.
type PartitionStats struct {
	// Lo and Hi bound its keys: Lo <= key < Hi ("" Hi: no upper bound).
	Lo, Hi string
	// Since is when it came to be (a split, or the model's start).
	Since time.Time
	ClassCounts
}

// Split is one partition splitting in two.
type Split struct {
	// At is when the split took effect; Decided when S3 chose it.
	At, Decided time.Time
	// Lo, Hi: the range split; Boundary: the first key of its upper half.
	Lo, Hi, Boundary string
	// Partitions is how many the bucket has after the split.
	Partitions int
	// ClassCounts: what the split partition served over its life.
	ClassCounts
}

// S3ModelStats is what the modelled S3 served, for docs/scale.md.
type S3ModelStats struct {
	// Total is every request by rate class.
	Total ClassCounts
	// Partitions are the live partitions in key order.
	Partitions []PartitionStats
	// Splits are the partitions' splits in time order: the bucket's
	// partition count over time.
	Splits []Split
}

// S3Model is a modelled S3 bucket: service times drawn from a seeded
// source, a token bucket per partition and rate class, and partitions that
// split under a sustained load. It reads no clock: the caller passes the
// time of each request (the server's virtual time), so a run replays from
// its seed. Safe for concurrent use; requests must come in time order
// (a request stamped earlier than the last is taken as at the last).
type S3Model struct {
	cfg S3ModelConfig

	mu      sync.Mutex
	rng     *rand.Rand // service times
	sampler *rand.Rand // which keys a partition samples for its split
	last    time.Time
	parts   []*partition // in key order; parts[0].lo == ""
	splits  []Split
	due     int // partitions with a split decided
	total   ClassCounts
}

// NewS3Model returns a model with cfg (zero fields: the defaults) that
// draws service times from rng and starts at start.
func NewS3Model(cfg S3ModelConfig, rng *rand.Rand, start time.Time) (*S3Model, error) {
	cfg.fill()
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	m := &S3Model{cfg: cfg, rng: rng, sampler: rand.New(rand.NewPCG(0x5a3e, 0x1e)), last: start}
	bounds := append([]string{""}, cfg.Boundaries...)
	sort.Strings(bounds)
	for i, lo := range bounds {
		if i > 0 && lo == bounds[i-1] {
			continue
		}
		m.parts = append(m.parts, m.newPartition(lo, "", start))
		if n := len(m.parts); n > 1 {
			m.parts[n-2].hi = lo
		}
	}
	return m, nil
}

// partition is one key range [lo, hi) with its own request rates.
type partition struct {
	lo, hi string
	since  time.Time
	tokens [numRateClasses]tokenBucket
	counts ClassCounts

	// The offered load of the current one-second window, by class.
	window  int64
	offered [numRateClasses]int
	// hotSince: the start of the run of hot windows this one extends.
	hotSince time.Time
	sample   keySample

	// A decided split: its time and boundary.
	splitAt  time.Time
	decided  time.Time
	boundary string
}

func (m *S3Model) newPartition(lo, hi string, at time.Time) *partition {
	p := &partition{lo: lo, hi: hi, since: at, window: at.Unix()}
	for c, rate := range [numRateClasses]float64{m.cfg.PutRate, m.cfg.GetRate} {
		size := rate * m.cfg.Burst.Seconds()
		p.tokens[c] = tokenBucket{rate: rate, size: size, tokens: size, last: at}
	}
	return p
}

// tokenBucket refills at rate a second up to size; each request served
// takes one token.
type tokenBucket struct {
	rate, size, tokens float64
	last               time.Time
}

func (b *tokenBucket) take(at time.Time) bool {
	if dt := at.Sub(b.last).Seconds(); dt > 0 {
		b.tokens = min(b.size, b.tokens+dt*b.rate)
		b.last = at
	}
	if b.tokens < 1 {
		return false
	}
	b.tokens--
	return true
}

// Serve takes one request of type op at time at, for key (for a LIST, the
// first key it can return: see ListKey), and says how long it takes and
// whether it is refused.
func (m *S3Model) Serve(at time.Time, op s3store.Op, key string) Verdict {
	m.mu.Lock()
	defer m.mu.Unlock()
	if at.Before(m.last) {
		at = m.last
	}
	m.last = at
	if m.due > 0 {
		m.applySplits(at)
	}
	class := RateClassOf(op)
	p := m.parts[m.find(key)]
	m.observe(p, at, class, key)
	refused := !p.tokens[class].take(at)
	p.counts.add(class, refused)
	m.total.add(class, refused)

	lat := m.cfg.GetLatency
	switch {
	case op == s3store.OpList:
		lat = m.cfg.ListLatency
	case class == PutClass:
		lat = m.cfg.PutLatency
	}
	return Verdict{Latency: lat.draw(m.rng), SlowDown: refused, Partition: p.lo}
}

// ListKey is the key a LIST of prefix after startAfter counts against: the
// first it can return.
func ListKey(prefix, startAfter string) string { return max(prefix, startAfter) }

// find returns the index of the partition holding key.
func (m *S3Model) find(key string) int {
	return sort.Search(len(m.parts), func(i int) bool { return m.parts[i].lo > key }) - 1
}

// observe counts a request offered to p (served or refused: S3 sees the
// load either way) and decides a split once p has been hot for SplitAfter.
func (m *S3Model) observe(p *partition, at time.Time, class RateClass, key string) {
	if w := at.Unix(); w != p.window {
		hot := w == p.window+1 &&
			(float64(p.offered[PutClass]) > m.cfg.SplitLoad*m.cfg.PutRate ||
				float64(p.offered[GetClass]) > m.cfg.SplitLoad*m.cfg.GetRate)
		switch {
		case !hot:
			p.hotSince = time.Time{}
			p.sample = keySample{}
		case p.hotSince.IsZero():
			p.hotSince = time.Unix(p.window, 0)
		}
		p.window, p.offered = w, [numRateClasses]int{}
	}
	p.offered[class]++
	p.sample.add(key, m.sampler)
	if p.hotSince.IsZero() || !p.splitAt.IsZero() || at.Sub(p.hotSince) < m.cfg.SplitAfter {
		return
	}
	b, ok := p.sample.boundary()
	if !ok {
		// One key carries the load: no boundary can split it. Look again
		// after another SplitAfter.
		p.hotSince, p.sample = at, keySample{}
		return
	}
	p.boundary, p.decided, p.splitAt = b, at, at.Add(m.cfg.SplitDelay)
	m.due++
}

// applySplits splits every partition whose split is due by at.
func (m *S3Model) applySplits(at time.Time) {
	var due []*partition
	for _, p := range m.parts {
		if !p.splitAt.IsZero() && !p.splitAt.After(at) {
			due = append(due, p)
		}
	}
	sort.Slice(due, func(i, j int) bool {
		if !due[i].splitAt.Equal(due[j].splitAt) {
			return due[i].splitAt.Before(due[j].splitAt)
		}
		return due[i].lo < due[j].lo
	})
	for _, p := range due {
		i := m.find(p.lo)
		lower := m.newPartition(p.lo, p.boundary, p.splitAt)
		upper := m.newPartition(p.boundary, p.hi, p.splitAt)
		m.parts = append(m.parts[:i], append([]*partition{lower, upper}, m.parts[i+1:]...)...)
		m.splits = append(m.splits, Split{At: p.splitAt, Decided: p.decided, Lo: p.lo, Hi: p.hi, Boundary: p.boundary,
			Partitions: len(m.parts), ClassCounts: p.counts})
		m.due--
	}
}

// Stats returns what the model served so far, with the splits due by at
// applied.
func (m *S3Model) Stats(at time.Time) S3ModelStats {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.due > 0 && !at.Before(m.last) {
		m.applySplits(at)
	}
	st := S3ModelStats{Total: m.total, Splits: append([]Split(nil), m.splits...)}
	for _, p := range m.parts {
		st.Partitions = append(st.Partitions, PartitionStats{Lo: p.lo, Hi: p.hi, Since: p.since, ClassCounts: p.counts})
	}
	return st
}

// keySample is a uniform sample of the keys of the requests a partition
// took during its current run of hot seconds (reservoir sampling). It
// draws from the model's sampling source, not the one of service times,
// so that how much a partition samples cannot move the seed's service
// times. A systematic sample (every n-th request) would not do: a workload
// that cycles through its shards aliases with the stride and samples one.
type keySample struct {
	keys []string
	seen int
}

const sampleSize = 512

func (s *keySample) add(key string, rng *rand.Rand) {
	s.seen++
	if len(s.keys) < sampleSize {
		s.keys = append(s.keys, key)
		return
	}
	if i := rng.IntN(s.seen); i < sampleSize {
		s.keys[i] = key
	}
}

// boundary chooses where to split a partition: between two neighbouring
// sampled keys in the middle half of the sample (so that each side keeps
// at least a quarter of the load), at the shortest separator, the common
// prefix of the two and the next character of the upper one. So under load
// tasks/000/ … tasks/063/ come apart at shard prefixes ("tasks/03" first,
// then "tasks/01", "tasks/05", …, "tasks/004") rather than inside a shard,
// while keys that arrive in order within one prefix split on the keys
// seen, as S3 splits a sequential key range. Failing that (most of
// the load on one key), the most even separator anywhere; it reports false
// when every sampled request is for one key, which no split can help.
func (s *keySample) boundary() (string, bool) {
	keys := append([]string(nil), s.keys...)
	sort.Strings(keys)
	n := len(keys)
	best, bestMid, bestOff := "", false, n
	for i := 1; i < n; i++ {
		lower, upper := keys[i-1], keys[i]
		if lower == upper {
			continue
		}
		lcp := 0
		for lcp < len(lower) && lower[lcp] == upper[lcp] {
			lcp++
		}
		b := upper[:lcp+1]
		mid := 4*i >= n && 4*(n-i) >= n
		off := max(i, n-i) - n/2 // how far from an even split
		better := best == "" ||
			mid && !bestMid ||
			mid == bestMid && mid && (len(b) < len(best) || len(b) == len(best) && off < bestOff) ||
			mid == bestMid && !mid && off < bestOff
		if better {
			best, bestMid, bestOff = b, mid, off
		}
	}
	return best, best != ""
}
