package shards

import (
	"context"
	"encoding/json"
	"fmt"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/s3queue/s3queue/clock"
	"github.com/s3queue/s3queue/lease"
	"github.com/s3queue/s3queue/s3store"
)

// Leased members: membership that scales.
//
// The first RootMembers members renew their entries in the fleet object,
// as a small fleet does. Members that join beyond them are leased: each
// renews an empty object of its own, LeaseKey, with a plain PUT, and writes
// the fleet object only to join, leave, convert to a root member when one
// of those places is free, or ask for more members. Writes to the fleet
// object therefore come from at most RootMembers renewals and one keeper,
// however large the fleet: no 412 grows with it.
//
// The keeper is the fleet's first live root member (its first live member
// when none is left). At each of its
// renewals it lists LeasePrefix (one LIST per 1,000 members) and, in the
// same fleet write, prunes the leased members whose lease has certainly
// lapsed by the S3 time of their last renewal (the object's LastModified),
// and extends the others' ExpiresAt. That ExpiresAt runs a grace past the
// lease (MemberTTL plus the margin): if the keeper dies, the next member
// becomes the keeper before any live leased entry lapses in the fleet
// object. A leased member itself counts on its lease alone (by the earliest
// S3 time of its PUT), so it stops polling before the keeper can prune it.

// LeasePrefix holds the lease objects of leased members.
const LeasePrefix = "fleet/leases/"

// DefaultRootMembers is how many members renew in the fleet object by
// default (the worker's root_members).
const DefaultRootMembers = 16

// LeaseKey is the lease object of member id; the key says whether the
// member was busy at its renewal, so that the keeper's listing carries it.
func LeaseKey(id string, busy bool) string {
	if busy {
		return LeasePrefix + "busy/" + id
	}
	return LeasePrefix + "idle/" + id
}

// Lease is a leased member's lease object as a listing shows it.
type Lease struct {
	Renewed time.Time // S3 time of the last renewal (LastModified)
	ETag    string    // of that renewal's object
	Busy    bool
	Keys    []string // every lease object of the member (two after a busy flip whose DELETE failed)
}

// ReadLeases lists the lease objects, by member id: one LIST per 1,000.
func ReadLeases(ctx context.Context, st s3store.Store) (map[string]Lease, error) {
	out := make(map[string]Lease)
	after := ""
	for {
		page, err := st.List(ctx, LeasePrefix, s3store.ListOptions{StartAfter: after})
		if err != nil {
			return nil, fmt.Errorf("list the fleet's leases: %w", err)
		}
		for _, o := range page.Objects {
			rest := strings.TrimPrefix(o.Key, LeasePrefix)
			state, id, ok := strings.Cut(rest, "/")
			if !ok || id == "" || state != "busy" && state != "idle" {
				continue
			}
			l := out[id]
			l.Keys = append(l.Keys, o.Key)
			if !o.LastModified.Before(l.Renewed) {
				l.Renewed, l.ETag, l.Busy = o.LastModified, o.ETag, state == "busy"
			}
			out[id] = l
		}
		if !page.Truncated || len(page.Objects) == 0 {
			return out, nil
		}
		after = page.Objects[len(page.Objects)-1].Key
	}
}

// lastModifiedSlack covers the precision of LastModified: S3 lists it to
// the second, so a renewal may be stamped up to a second before it landed.
const lastModifiedSlack = time.Second

// LeaseLapse is when leased member m's lease lapses, by S3 time, given the
// listing's view of its lease object (ok: there is one): TTL after its last
// renewal, or after it joined when it has not renewed yet.
func (m Member) LeaseLapse(l Lease, ok bool) time.Time {
	last := m.Joined
	if ok && l.Renewed.After(last) {
		last = l.Renewed
	}
	return last.Add(lastModifiedSlack + m.TTL)
}

// LeasedExpiry is the ExpiresAt the fleet object gives a leased member
// whose lease lapses at lapse: a grace of ttl + margin beyond, in which a
// new keeper takes over from a dead one.
func LeasedExpiry(lapse time.Time, ttl, margin time.Duration) time.Time {
	return lapse.Add(ttl + margin)
}

// Keep is the keeper's update of the leased entries from a listing of the
// lease objects, at S3 time now: it prunes those whose lease certainly
// lapsed (beyond margin) and extends the others' ExpiresAt, copying their
// busy state. ttl is the keeper's MemberTTL, the grace. It returns the
// pruned members' ids and whether the fleet changed.
func (f *Fleet) Keep(leases map[string]Lease, now clock.Interval, ttl, margin time.Duration) (pruned []string, changed bool) {
	kept := f.Members[:0]
	for _, m := range f.Members {
		if !m.Leased {
			kept = append(kept, m)
			continue
		}
		l, ok := leases[m.ID]
		lapse := m.LeaseLapse(l, ok)
		if lease.Expired(lapse, now, margin) {
			pruned, changed = append(pruned, m.ID), true
			continue
		}
		if exp := LeasedExpiry(lapse, ttl, margin); exp.After(m.ExpiresAt) {
			m.ExpiresAt, changed = exp, true
		}
		if ok && l.Busy != m.Busy {
			m.Busy, changed = l.Busy, true
		}
		kept = append(kept, m)
	}
	f.Members = kept
	return pruned, changed
}

// HasLeased reports whether any entry is a leased member's.
func (f Fleet) HasLeased() bool {
	for _, m := range f.Members {
		if m.Leased {
			return true
		}
	}
	return false
}

// Keeper returns the id of the fleet's keeper at now: its first live root
// member, or with none its first live member ("" in an empty fleet).
func (f Fleet) Keeper(now clock.Interval, margin time.Duration) string {
	live := f.Live(now, margin)
	for _, m := range live {
		if !m.Leased {
			return m.ID
		}
	}
	if len(live) > 0 {
		return live[0].ID
	}
	return ""
}

// RootLive counts the live members that renew in the fleet object.
func (f Fleet) RootLive(now clock.Interval, margin time.Duration) int {
	n := 0
	for _, m := range f.Live(now, margin) {
		if !m.Leased {
			n++
		}
	}
	return n
}

// Application is what a worker that joins beyond the root members writes
// in its lease object: it applies, and the keeper admits it in its next
// write of the fleet object (with those of every other applicant), so that
// a fleet of hundreds starting at once does not race for the fleet object.
type Application struct {
	ID        string        `json:"-"`
	Applied   time.Time     `json:"-"` // S3 time of the lease object's last write
	ETag      string        `json:"-"` // of the object read
	Types     []string      `json:"types,omitempty"`
	Dedicated bool          `json:"dedicated,omitempty"`
	TTL       time.Duration `json:"ttl"`
}

// ReadApplications reads the applications among leases, those of workers
// with no entry in f whose lease has not lapsed by now: one GET each, up
// to 16 at a time, but none for an object whose ETag the caller's known
// (the applications it read before, by worker id; ReadApplications keeps
// it current) already holds: an applicant renews its application with the
// same bytes every third of its TTL. An object that cannot be read is left
// for the next listing; one that is not an application (a pruned member's
// empty lease) is remembered as none.
func ReadApplications(ctx context.Context, st s3store.Store, f Fleet, leases map[string]Lease, now clock.Interval, margin time.Duration, known map[string]Application) []Application {
	var ids []string
	for id, l := range leases {
		if _, ok := f.Member(id); ok || l.Busy {
			continue
		}
		if lease.Expired(l.Renewed.Add(lastModifiedSlack+maxApplicationTTL), now, margin) {
			continue // too old to be a standing application, whatever its TTL
		}
		ids = append(ids, id)
	}
	sort.Strings(ids)
	apps := make([]Application, len(ids))
	read := make([]bool, len(ids))
	var wg sync.WaitGroup
	sem := make(chan struct{}, 16)
	for i, id := range ids {
		if k, ok := known[id]; ok && k.ETag == leases[id].ETag {
			apps[i], read[i] = k, true
			continue
		}
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer func() { <-sem; wg.Done() }()
			obj, err := st.Get(ctx, LeaseKey(id, false))
			if err != nil {
				return
			}
			if json.Unmarshal(obj.Body, &apps[i]) != nil {
				apps[i] = Application{} // not an application: remembered as none
			}
			apps[i].ETag, read[i] = obj.ETag, true
		}()
	}
	wg.Wait()
	var out []Application
	for i, id := range ids {
		if !read[i] {
			continue
		}
		known[id] = apps[i]
		a := apps[i]
		a.ID, a.Applied = id, leases[id].Renewed
		if a.TTL > 0 && !lease.Expired(a.Applied.Add(lastModifiedSlack+a.TTL), now, margin) {
			out = append(out, a)
		}
	}
	for id := range known {
		if _, ok := leases[id]; !ok {
			delete(known, id)
		}
	}
	return out
}

// maxApplicationTTL bounds the TTL ReadApplications assumes before it has
// read an application: older lease objects are not read.
const maxApplicationTTL = time.Hour

// Admit adds the applicants the fleet needs to f as leased members, in the
// order they applied, joined at now.Latest: dedicated workers, and others while the members ask
// for more (Want) or one runs a type no live member runs. keeperTTL is the
// grace of their entries (LeasedExpiry). It returns the ids admitted.
func (f *Fleet) Admit(apps []Application, now clock.Interval, keeperTTL, margin time.Duration) []string {
	sort.Slice(apps, func(i, j int) bool {
		if !apps[i].Applied.Equal(apps[j].Applied) {
			return apps[i].Applied.Before(apps[j].Applied)
		}
		return apps[i].ID < apps[j].ID
	})
	var admitted []string
	for _, a := range apps {
		if _, ok := f.Member(a.ID); ok {
			continue
		}
		live := f.Live(now, margin)
		need := a.Dedicated || len(live) == 0 || f.Want > len(live)
		for _, t := range a.Types {
			need = need || !f.Covers(t, now, margin)
		}
		if !need {
			continue
		}
		// Joined at admission: after every member already in the fleet
		// (the application's LastModified is to the second, and would sort
		// it before members that joined in that second).
		m := Member{ID: a.ID, Joined: f.JoinTime(now), Types: a.Types, Dedicated: a.Dedicated, Leased: true, TTL: a.TTL}
		m.ExpiresAt = LeasedExpiry(m.LeaseLapse(Lease{}, false), keeperTTL, margin)
		f.Members = append(f.Members, m)
		admitted = append(admitted, a.ID)
	}
	return admitted
}

// Member returns member id's entry.
func (f Fleet) Member(id string) (Member, bool) {
	for _, m := range f.Members {
		if m.ID == id {
			return m, true
		}
	}
	return Member{}, false
}

// Has reports whether id has an entry.
func (f Fleet) Has(id string) bool {
	_, ok := f.Member(id)
	return ok
}
