package task

import (
	"fmt"
	"hash/fnv"
	"strconv"
	"strings"
)

// ShardFor maps key to one of n shards with FNV-1a 64 modulo n. Producers
// hash the task's ShardKey (or its id when there is none). n <= 1 yields 0.
func ShardFor(key string, n int) int {
	if n <= 1 {
		return 0
	}
	h := fnv.New64a()
	h.Write([]byte(key))
	return int(h.Sum64() % uint64(n))
}

// ShardName is the path segment of shard i: at least three digits,
// zero-padded, so shard folders sort numerically up to 999.
func ShardName(i int) string {
	return fmt.Sprintf("%03d", i)
}

// ParseShardName is the inverse of ShardName.
func ParseShardName(name string) (int, error) {
	n, err := strconv.Atoi(name)
	if err != nil || n < 0 || ShardName(n) != name {
		return 0, fmt.Errorf("%w: bad shard name %q", ErrInvalid, name)
	}
	return n, nil
}

// Key is the canonical object key of a task, relative to the queue prefix:
// tasks/{shard}/{id}.json (invariant 1). shard must be >= 0.
func Key(shard int, id string) string {
	return "tasks/" + ShardName(shard) + "/" + id + ".json"
}

// ParseKey is the inverse of Key. key is relative to the queue prefix (strip
// the prefix first). It accepts only canonical keys: a shard name exactly as
// ShardName writes it and a valid task id.
func ParseKey(key string) (shard int, id string, err error) {
	rest, ok := strings.CutPrefix(key, "tasks/")
	if !ok {
		return 0, "", fmt.Errorf("parse task key %q: %w: want tasks/{shard}/{id}.json", key, ErrInvalid)
	}
	name, file, ok := strings.Cut(rest, "/")
	if !ok {
		return 0, "", fmt.Errorf("parse task key %q: %w: want tasks/{shard}/{id}.json", key, ErrInvalid)
	}
	n, convErr := strconv.Atoi(name)
	if convErr != nil || n < 0 || ShardName(n) != name {
		return 0, "", fmt.Errorf("parse task key %q: %w: bad shard %q", key, ErrInvalid, name)
	}
	id, ok = strings.CutSuffix(file, ".json")
	if !ok || !ValidID(id) {
		return 0, "", fmt.Errorf("parse task key %q: %w: bad task id file %q", key, ErrInvalid, file)
	}
	return n, id, nil
}
