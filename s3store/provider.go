package s3store

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"strings"
	"time"
)

// ErrUnsupportedProvider reports a server that does not honour a
// conditional write the queue relies on; the queue refuses to run on it.
// The error wrapping it says what was measured.
var ErrUnsupportedProvider = errors.New("unsupported provider")

// Conditional DELETE behaviours.
const (
	DeleteHonoured = "honoured" // a stale If-Match DELETE is refused (AWS, versitygw, SeaweedFS)
	DeleteIgnored  = "ignored"  // the object is deleted anyway (MinIO, gofakes3)
)

// Answers to a PUT with If-Match on a missing key that leave the key
// missing. The queue treats both alike: a write that cannot land because
// the object it read is gone.
const (
	MissingNotFound     = "404" // AWS, MinIO, versitygw, SeaweedFS
	MissingPrecondition = "412" // gofakes3 ("the object does not exist")
)

// ProviderReport is what CheckProvider found.
type ProviderReport struct {
	CreateIfAbsent bool // a second If-None-Match: * PUT was refused with 412
	StaleIfMatch   bool // a PUT with a stale If-Match was refused with 412
	// IfMatchMissingKey: a PUT with If-Match on a missing key was refused
	// and did not create the key; IfMatchMissing says how (MissingNotFound
	// or MissingPrecondition), or what happened instead.
	IfMatchMissingKey bool
	IfMatchMissing    string
	ConditionalDelete string        // DeleteHonoured or DeleteIgnored
	ServerTime        time.Time     // from the server
	Skew              time.Duration // server time minus this machine's wall clock (informational)
	Requests          int           // requests the check made
}

// Supported returns nil when the queue can run on the provider, or an
// error that says exactly what was measured to be missing.
func (r ProviderReport) Supported() error {
	var missing []string
	if !r.CreateIfAbsent {
		missing = append(missing, "a second PUT with If-None-Match: * overwrote the object instead of failing with 412")
	}
	if !r.StaleIfMatch {
		missing = append(missing, "a PUT with a stale If-Match overwrote the object instead of failing with 412")
	}
	if !r.IfMatchMissingKey {
		missing = append(missing, "a PUT with If-Match on a missing key "+r.IfMatchMissing+" instead of failing with 404 or 412")
	}
	if len(missing) == 0 {
		return nil
	}
	what := "it does not honour conditional PUT"
	if r.CreateIfAbsent && r.StaleIfMatch {
		what = "it honours conditional PUT on existing keys, but not on a missing one"
	}
	return fmt.Errorf("%w: %s: %s; s3queue cannot claim tasks safely on this server", ErrUnsupportedProvider, what, strings.Join(missing, "; "))
}

// CheckProvider verifies, on scratch keys under prefix, that the server
// honours conditional PUT, and records what it does with a conditional
// DELETE. It cleans up after itself and makes about ten requests. An error
// means the check could not run (unreachable, access denied); a report
// whose Supported() fails means the server answered but ignores conditions.
func CheckProvider(ctx context.Context, st Store, prefix string) (ProviderReport, error) {
	var r ProviderReport
	var nonce [6]byte
	rand.Read(nonce[:])
	base := prefix + hex.EncodeToString(nonce[:])
	key, missing := base+"/cas", base+"/missing"
	defer func() {
		// Best effort: scratch keys must not outlive the check.
		cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
		defer cancel()
		st.Delete(cctx, key, DeleteOptions{})
		st.Delete(cctx, missing, DeleteOptions{})
	}()
	fail := func(step string, err error) (ProviderReport, error) {
		return r, fmt.Errorf("provider check: %s: %w", step, err)
	}

	r.Requests++
	e1, err := st.Put(ctx, key, []byte("v1"), PutOptions{IfNoneMatch: true})
	if err != nil {
		return fail("create scratch object", err)
	}
	r.Requests++
	_, err = st.Put(ctx, key, []byte("v1-again"), PutOptions{IfNoneMatch: true})
	switch {
	case LostRace(err):
		r.CreateIfAbsent = true
	case err != nil:
		return fail("create scratch object twice", err)
	}

	r.Requests++
	cur, err := st.Get(ctx, key)
	if err != nil {
		return fail("read scratch object", err)
	}
	r.Requests++
	e2, err := st.Put(ctx, key, []byte("v2"), PutOptions{IfMatch: cur.ETag})
	if err != nil {
		return fail("update with the current ETag", err)
	}
	stale := e1
	if stale == cur.ETag || stale == e2 {
		stale = "00000000000000000000000000000000"
	}
	r.Requests++
	_, err = st.Put(ctx, key, []byte("v3"), PutOptions{IfMatch: stale})
	switch {
	case LostRace(err):
		r.StaleIfMatch = true
	case err != nil:
		return fail("update with a stale ETag", err)
	}

	r.Requests++
	_, err = st.Put(ctx, missing, []byte("x"), PutOptions{IfMatch: e2})
	switch {
	case errors.Is(err, ErrNotFound):
		r.IfMatchMissingKey, r.IfMatchMissing = true, MissingNotFound
	case err == nil:
		r.IfMatchMissing = "created the key"
	case LostRace(err):
		// gofakes3 answers 412 "the object does not exist". As good as a
		// 404 if nothing was created: every caller takes a 412 as "the
		// object changed", re-reads, and finds it gone.
		r.Requests++
		_, herr := st.Head(ctx, missing)
		switch {
		case errors.Is(herr, ErrNotFound):
			r.IfMatchMissingKey, r.IfMatchMissing = true, MissingPrecondition
		case herr == nil:
			r.IfMatchMissing = "failed with 412 but created the key"
		default:
			return fail("look for the missing key after a 412", herr)
		}
	default:
		return fail("update a missing key", err)
	}

	r.Requests++
	err = st.Delete(ctx, key, DeleteOptions{IfMatch: stale})
	switch {
	case LostRace(err):
		r.ConditionalDelete = DeleteHonoured
	case err == nil:
		r.Requests++
		if _, gerr := st.Head(ctx, key); errors.Is(gerr, ErrNotFound) {
			r.ConditionalDelete = DeleteIgnored
		} else {
			r.ConditionalDelete = DeleteHonoured
		}
	default:
		return fail("conditional delete", err)
	}

	r.Requests++
	local := time.Now()
	r.ServerTime, err = st.Now(ctx)
	if err != nil {
		return fail("read server time", err)
	}
	r.Skew = r.ServerTime.Sub(local).Round(time.Second)
	return r, nil
}
