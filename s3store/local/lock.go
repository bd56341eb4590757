package local

import (
	"fmt"
	"os"
)

// Writes to one key are serialized by one of lockShards lock files, picked by
// a hash of the key. One file for the whole store would serialize every
// write behind another's fsync; a file per key would litter the directory.
// With 64 shards, writes to different keys rarely wait for each other.
//
// The lock directory and its files are made by the first write that needs
// them: reading takes no lock, so a reader needs no write access and
// leaves nothing behind.
const (
	lockShards = 64
	lockDir    = ".locks" // no key suffix: invisible to List
)

// lockNames are the names of the lock files in lockDir.
var lockNames = func() (names [lockShards]string) {
	for i := range names {
		names[i] = fmt.Sprintf("%02d.lock", i)
	}
	return names
}()

// lock takes the lock of key's shard, for this process and every other one
// that opened the same directory, and returns the function releasing it.
// root is the store's directory, open. Waiting is not cancellable, but
// holders keep it only for a check, a rename and a directory fsync.
//
// The store's mutex of the shard queues the goroutines of this process, so
// at most one of them per shard blocks an OS thread in flock.
func (s *Store) lock(root dirFD, key string) (unlock func(), err error) {
	shard := shardOf(key)
	mu := &s.locks[shard]
	mu.Lock()
	// A fresh descriptor per lock: flock belongs to an open file
	// description, and closing it releases the lock even if we crash.
	f, err := openLock(root, shard)
	if err == nil {
		err = flockExclusive(f)
		if err != nil {
			f.Close()
		}
	}
	if err != nil {
		mu.Unlock()
		return nil, fmt.Errorf("lock: %w", err)
	}
	return func() {
		f.Close()
		mu.Unlock()
	}, nil
}

// openLock opens the lock file of shard, making it (0600) and its
// directory (0700) if missing. A link in their place is refused
// (O_NOFOLLOW), so a planted one cannot make a write create a file
// elsewhere.
func openLock(root dirFD, shard uint32) (*os.File, error) {
	d, err := openOrMake(root, lockDir, true)
	if err != nil {
		return nil, err
	}
	defer d.close()
	return d.openFile(lockNames[shard], os.O_RDWR|os.O_CREATE, 0o600)
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
