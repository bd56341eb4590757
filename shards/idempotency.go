package shards

import (
	"crypto/sha256"
	"encoding/hex"
)

// IdempotencyKey is the object that records which task an idempotency key
// created. Keys are hashed so any string is a valid key.
func IdempotencyKey(key string) string {
	sum := sha256.Sum256([]byte(key))
	return "idempotency/" + hex.EncodeToString(sum[:16]) + ".json"
}
