package shards

import (
	"context"
	"fmt"
	"strings"
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
// The keeper is the fleet's first live member (the anchor). At each of its
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
				l.Renewed, l.Busy = o.LastModified, state == "busy"
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
