package task

import (
	"fmt"
	"io"
	"time"
)

// IDLen is the length of a task id.
const IDLen = 26

// crockford is Crockford's base32 alphabet (no I, L, O, U).
const crockford = "0123456789ABCDEFGHJKMNPQRSTVWXYZ"

// maxIDMillis is the largest timestamp a 48-bit id prefix can hold.
const maxIDMillis = 1<<48 - 1

var crockfordIndex = func() (idx [256]int8) {
	for i := range idx {
		idx[i] = -1
	}
	for i := 0; i < len(crockford); i++ {
		idx[crockford[i]] = int8(i)
	}
	return idx
}()

// NewID returns a time-sortable task id in the ULID layout: 26 characters of
// upper-case Crockford base32 encoding 48 bits of now in Unix milliseconds
// followed by 80 bits read from rnd. Ids sort lexicographically in time
// order (millisecond resolution), so a LIST of a shard returns the oldest
// tasks first. Pass now from S3 time and a crypto-strength rnd.
func NewID(now time.Time, rnd io.Reader) (string, error) {
	ms := now.UnixMilli()
	if ms < 0 || ms > maxIDMillis {
		return "", fmt.Errorf("new task id: time %s is outside the id range", now.UTC().Format(time.RFC3339))
	}
	var b [16]byte
	for i := 0; i < 6; i++ {
		b[i] = byte(ms >> (8 * (5 - i)))
	}
	if rnd == nil {
		return "", fmt.Errorf("new task id: no randomness source")
	}
	if _, err := io.ReadFull(rnd, b[6:]); err != nil {
		return "", fmt.Errorf("new task id: read randomness: %w", err)
	}
	return encodeID(b), nil
}

// encodeID writes 128 bits as 26 base32 digits; the first digit carries
// only 3 bits, so it is at most '7'.
func encodeID(b [16]byte) string {
	var hi, lo uint64
	for i := 0; i < 8; i++ {
		hi = hi<<8 | uint64(b[i])
		lo = lo<<8 | uint64(b[8+i])
	}
	var out [IDLen]byte
	for i := IDLen - 1; i >= 0; i-- {
		out[i] = crockford[lo&31]
		lo = lo>>5 | hi<<59
		hi >>= 5
	}
	return string(out[:])
}

// decodeID is the inverse of encodeID; ok is false for anything that is not a
// canonical id (wrong length, lower case, letters outside the alphabet, or a
// first digit above '7', which would overflow 128 bits).
func decodeID(id string) (b [16]byte, ok bool) {
	if len(id) != IDLen || id[0] > '7' {
		return b, false
	}
	var hi, lo uint64
	for i := 0; i < IDLen; i++ {
		v := crockfordIndex[id[i]]
		if v < 0 {
			return b, false
		}
		hi = hi<<5 | lo>>59
		lo = lo<<5 | uint64(v)
	}
	for i := 0; i < 8; i++ {
		b[i] = byte(hi >> (8 * (7 - i)))
		b[8+i] = byte(lo >> (8 * (7 - i)))
	}
	return b, true
}

// ValidID reports whether id is a canonical task id as made by NewID.
func ValidID(id string) bool {
	_, ok := decodeID(id)
	return ok
}

// IDTime returns the millisecond timestamp encoded in id, in UTC.
func IDTime(id string) (time.Time, error) {
	b, ok := decodeID(id)
	if !ok {
		return time.Time{}, fmt.Errorf("parse task id %q: %w: want 26 upper-case Crockford base32 characters", id, ErrInvalid)
	}
	var ms int64
	for i := 0; i < 6; i++ {
		ms = ms<<8 | int64(b[i])
	}
	return time.UnixMilli(ms).UTC(), nil
}
