// Package mem is an in-memory s3store.Store for tests and mem:// URLs. It
// honours the same conditional semantics as S3 and reports a server time that
// tests can control.
package mem

import (
	"context"
	"crypto/md5"
	"encoding/hex"
	"fmt"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/s3queue/s3queue/s3store"
)

// Store keeps objects in a map. The zero value is not usable; call New.
type Store struct {
	s3store.DateFanout

	mu      sync.Mutex
	objects map[string]object
	gen     uint64
	now     func() time.Time
}

type object struct {
	body     []byte
	etag     string
	modified time.Time
}

var _ s3store.Store = (*Store)(nil)

// New returns an empty store whose server time is this machine's clock.
func New() *Store {
	return &Store{objects: make(map[string]object), now: time.Now}
}

// SetNow replaces the store's server clock (for tests that move S3 time).
func (s *Store) SetNow(now func() time.Time) {
	s.mu.Lock()
	s.now = now
	s.mu.Unlock()
}

// serverTime returns the server clock and publishes it as a response Date,
// as every S3 response carries one. Callers must not hold s.mu.
func (s *Store) serverTime() time.Time {
	s.mu.Lock()
	now := s.now
	s.mu.Unlock()
	t := now()
	local := time.Now()
	s.Publish(s3store.DateSample{Date: t, Sent: local, Received: local})
	return t
}

// Get implements s3store.Store.
func (s *Store) Get(ctx context.Context, key string) (s3store.Object, error) {
	if err := ctx.Err(); err != nil {
		return s3store.Object{}, err
	}
	s.serverTime()
	s.mu.Lock()
	defer s.mu.Unlock()
	o, ok := s.objects[key]
	if !ok {
		return s3store.Object{}, fmt.Errorf("mem: get %q: %w", key, s3store.ErrNotFound)
	}
	return s3store.Object{Key: key, Body: append([]byte(nil), o.body...), ETag: o.etag, LastModified: o.modified}, nil
}

// Head implements s3store.Store.
func (s *Store) Head(ctx context.Context, key string) (s3store.ObjectInfo, error) {
	if err := ctx.Err(); err != nil {
		return s3store.ObjectInfo{}, err
	}
	s.serverTime()
	s.mu.Lock()
	defer s.mu.Unlock()
	o, ok := s.objects[key]
	if !ok {
		return s3store.ObjectInfo{}, fmt.Errorf("mem: head %q: %w", key, s3store.ErrNotFound)
	}
	return s3store.ObjectInfo{Key: key, ETag: o.etag, Size: int64(len(o.body)), LastModified: o.modified}, nil
}

// Put implements s3store.Store. ETags change on every write, even of
// identical bytes, so tests catch code that relies on S3's MD5 ETags.
func (s *Store) Put(ctx context.Context, key string, body []byte, opts s3store.PutOptions) (string, error) {
	if err := ctx.Err(); err != nil {
		return "", err
	}
	if key == "" {
		return "", fmt.Errorf("mem: put: empty key")
	}
	now := s.serverTime()
	s.mu.Lock()
	defer s.mu.Unlock()
	cur, exists := s.objects[key]
	switch {
	case opts.IfNoneMatch && exists:
		return "", fmt.Errorf("mem: put %q: %w", key, s3store.ErrPreconditionFailed)
	case opts.IfMatch != "" && !exists:
		return "", fmt.Errorf("mem: put %q: %w", key, s3store.ErrNotFound)
	case opts.IfMatch != "" && cur.etag != opts.IfMatch:
		return "", fmt.Errorf("mem: put %q: %w", key, s3store.ErrPreconditionFailed)
	}
	s.gen++
	sum := md5.Sum(body)
	etag := fmt.Sprintf("%s-%d", hex.EncodeToString(sum[:8]), s.gen)
	s.objects[key] = object{body: append([]byte(nil), body...), etag: etag, modified: now}
	return etag, nil
}

// Delete implements s3store.Store. A conditional delete is honoured, as AWS
// does.
func (s *Store) Delete(ctx context.Context, key string, opts s3store.DeleteOptions) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	s.serverTime()
	s.mu.Lock()
	defer s.mu.Unlock()
	cur, exists := s.objects[key]
	if exists && opts.IfMatch != "" && cur.etag != opts.IfMatch {
		return fmt.Errorf("mem: delete %q: %w", key, s3store.ErrPreconditionFailed)
	}
	delete(s.objects, key)
	return nil
}

// List implements s3store.Store.
func (s *Store) List(ctx context.Context, prefix string, opts s3store.ListOptions) (s3store.ListPage, error) {
	if err := ctx.Err(); err != nil {
		return s3store.ListPage{}, err
	}
	s.serverTime()
	max := opts.MaxKeys
	if max <= 0 {
		max = s3store.DefaultMaxKeys
	}
	s.mu.Lock()
	keys := make([]string, 0, 64)
	for k := range s.objects {
		if strings.HasPrefix(k, prefix) && k > opts.StartAfter {
			keys = append(keys, k)
		}
	}
	sort.Strings(keys)
	var page s3store.ListPage
	if len(keys) > max {
		keys, page.Truncated = keys[:max], true
	}
	for _, k := range keys {
		o := s.objects[k]
		page.Objects = append(page.Objects, s3store.ObjectInfo{Key: k, ETag: o.etag, Size: int64(len(o.body)), LastModified: o.modified})
	}
	s.mu.Unlock()
	return page, nil
}

// Now implements s3store.Store.
func (s *Store) Now(ctx context.Context) (time.Time, error) {
	if err := ctx.Err(); err != nil {
		return time.Time{}, err
	}
	return s.serverTime(), nil
}

// Len reports how many objects the store holds.
func (s *Store) Len() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.objects)
}
