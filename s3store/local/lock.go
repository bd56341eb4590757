package local

import (
	"fmt"
	"os"
	"path/filepath"
	"sync"
)

// Writes to one key are serialized by one of lockShards lock files, picked by
// a hash of the key. One file for the whole store would serialize every
// write behind another's fsync; a file per key would litter the directory.
// With 64 shards, writes to different keys rarely wait for each other.
const (
	lockShards = 64
	lockDir    = ".locks" // no key suffix: invisible to List
)

// shardLock is one lock file. mu queues the goroutines of this process, so
// at most one of them per shard blocks an OS thread in flock.
type shardLock struct {
	mu   sync.Mutex
	path string
}

func (s *Store) initLocks() error {
	dir := filepath.Join(s.root, lockDir)
	if err := os.Mkdir(dir, 0o755); err != nil && !os.IsExist(err) {
		return err
	}
	for i := range s.locks {
		s.locks[i].path = filepath.Join(dir, fmt.Sprintf("%02d.lock", i))
	}
	return nil
}

// lock takes the lock of key's shard, for this process and every other one
// that opened the same directory, and returns the function releasing it.
// Waiting is not cancellable, but holders keep it only for a check, a rename
// and a directory fsync.
func (s *Store) lock(key string) (unlock func(), err error) {
	l := &s.locks[shardOf(key)]
	l.mu.Lock()
	// A fresh descriptor per lock: flock belongs to an open file
	// description, and closing it releases the lock even if we crash.
	f, err := os.OpenFile(l.path, os.O_RDWR|os.O_CREATE, 0o644)
	if err == nil {
		err = flockExclusive(f)
		if err != nil {
			f.Close()
		}
	}
	if err != nil {
		l.mu.Unlock()
		return nil, fmt.Errorf("lock: %w", err)
	}
	return func() {
		f.Close()
		l.mu.Unlock()
	}, nil
}

// shardOf hashes key with FNV-1a. The hash must be the same in every
// process, so no per-process seeded hash (maphash) will do.
func shardOf(key string) uint32 {
	h := uint32(2166136261)
	for i := 0; i < len(key); i++ {
		h ^= uint32(key[i])
		h *= 16777619
	}
	return h % lockShards
}
