package s3store

import (
	"context"
	"errors"
	"time"
)

// Sentinel errors. Every backend translates provider errors into these in
// exactly one place; callers test for them with errors.Is.
var (
	// ErrNotFound: the key does not exist (S3 404 NoSuchKey). A conditional
	// PUT with IfMatch on a missing key returns ErrNotFound too.
	ErrNotFound = errors.New("not found")
	// ErrPreconditionFailed: an If-Match / If-None-Match condition did not
	// hold (S3 412). It is never retried blindly: the caller must re-read.
	ErrPreconditionFailed = errors.New("precondition failed")
	// ErrConflict: a concurrent conditional write won the race (S3 409
	// ConditionalRequestConflict). Callers treat it as a lost race.
	ErrConflict = errors.New("conflict")
	// ErrUnusable: the store cannot serve this request and retrying will
	// not help (the bucket or the local root is gone, access is denied).
	// Backends wrap their own configuration errors with it; services stop
	// with one clear message instead of retrying.
	ErrUnusable = errors.New("store unusable")
	// ErrAccessDenied: the provider refused this caller the request (S3
	// 403 AccessDenied, a file store's permission denied). It comes with
	// ErrUnusable, except for a read of one object, which may be closed
	// to us alone: one foreign object must not stop a process.
	ErrAccessDenied = errors.New("access denied")
)

// Object is a stored object with its body.
type Object struct {
	Key  string
	Body []byte
	// ETag identifies this version of the object, without quotes.
	ETag         string
	LastModified time.Time
}

// ObjectInfo describes an object without its body.
type ObjectInfo struct {
	Key          string
	ETag         string
	Size         int64
	LastModified time.Time
}

// PutOptions makes a PUT conditional. At most one of IfMatch and IfNoneMatch
// may be set.
type PutOptions struct {
	// IfMatch: write only if the current ETag equals this one.
	IfMatch string
	// IfNoneMatch: write only if the key does not exist (If-None-Match: *).
	IfNoneMatch bool
}

// DeleteOptions makes a DELETE conditional. Providers differ (MinIO ignores
// If-Match on DELETE), so correctness must never depend on it.
type DeleteOptions struct {
	IfMatch string
}

// ListOptions bounds one LIST request.
type ListOptions struct {
	// StartAfter: return keys strictly after this one (lexicographic).
	StartAfter string
	// MaxKeys: page size; 0 means the backend default (1000).
	MaxKeys int
}

// ListPage is one page of a listing, in lexicographic key order.
type ListPage struct {
	Objects []ObjectInfo
	// Truncated reports that more keys follow; pass the last key as the
	// next StartAfter.
	Truncated bool
}

// DefaultMaxKeys is the page size used when ListOptions.MaxKeys is 0.
const DefaultMaxKeys = 1000

// Store is the storage contract. Keys are relative to the store's root
// (bucket and prefix are part of how a store is opened, not of its keys).
// Every method is safe for concurrent use.
type Store interface {
	// Get returns the object's body and ETag, or ErrNotFound.
	Get(ctx context.Context, key string) (Object, error)
	// Head returns the object's metadata, or ErrNotFound.
	Head(ctx context.Context, key string) (ObjectInfo, error)
	// Put writes body under key and returns the new ETag. With IfMatch it
	// fails with ErrPreconditionFailed when the ETag differs and ErrNotFound
	// when the key is missing; with IfNoneMatch it fails with
	// ErrPreconditionFailed when the key exists. ErrConflict reports a lost
	// race with a concurrent conditional write.
	Put(ctx context.Context, key string, body []byte, opts PutOptions) (etag string, err error)
	// Delete removes key. Deleting a missing key is not an error. With
	// IfMatch a backend may return ErrPreconditionFailed, or may ignore the
	// condition (see docs/storage.md).
	Delete(ctx context.Context, key string, opts DeleteOptions) error
	// List returns one page of keys under prefix, in lexicographic order.
	List(ctx context.Context, prefix string, opts ListOptions) (ListPage, error)
	// Now asks the server for its current time (one request on remote
	// stores). Prefer clock.Authoritative, which reuses the Date header of
	// responses already flowing.
	Now(ctx context.Context) (time.Time, error)
}

// DateSample is the server's Date header seen on one response, with the
// local instants the request was sent and its response received. Backends
// publish it as soon as the response arrives; consumers use only the round
// trip, Received.Sub(Sent), and stamp the arrival with their own clock.
type DateSample struct {
	Date     time.Time
	Sent     time.Time
	Received time.Time
}

// DateWatcher is implemented by stores that can report the server time of
// responses as they flow. Wrappers forward it to the store they wrap.
type DateWatcher interface {
	// WatchDates registers fn to be called with every response's Date. fn
	// must be fast and must not call the store.
	WatchDates(fn func(DateSample))
}

// WatchDates registers fn on s if s reports response dates, and reports
// whether it did.
func WatchDates(s Store, fn func(DateSample)) bool {
	w, ok := s.(DateWatcher)
	if ok {
		w.WatchDates(fn)
	}
	return ok
}
