// Package rnd is the queue's one source of randomness: ids, claim ids,
// jitter and shard choice are all drawn from a Source over the reader a
// service's Config.Rand names, so a seeded reader replays a run (the
// simulator's fingerprint depends on it). It must not import anything of
// the queue's own.
package rnd

import (
	"crypto/rand"
	"encoding/binary"
	"encoding/hex"
	"hash/fnv"
	"io"
	mathrand "math/rand/v2"
	"sync"
)

// Source serialises draws from one reader. A service and the components it
// builds share one Source, and their goroutines may draw at once; the
// reader, a seeded one above all, need not be safe for concurrent use.
//
// A failed read of the reader panics in Float64, Uint64, IntN and Hex: a
// source that cannot supply bytes would otherwise hand out equal claim ids
// and ids silently. Read, the one draw with an error result, returns it
// instead. crypto/rand.Reader never fails.
type Source struct {
	mu sync.Mutex
	r  io.Reader
}

// New returns a Source over r; nil means crypto/rand.Reader.
func New(r io.Reader) *Source {
	if r == nil {
		r = rand.Reader
	}
	return &Source{r: r}
}

// Read fills p from the reader (a full read, under the lock) and returns
// the reader's error if it could not.
func (s *Source) Read(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return io.ReadFull(s.r, p)
}

// Uint64 draws eight bytes, big-endian.
func (s *Source) Uint64() uint64 {
	var b [8]byte
	s.mustRead(b[:])
	return binary.BigEndian.Uint64(b[:])
}

// Float64 draws a uniform float in [0,1) from the top 53 bits of Uint64.
func (s *Source) Float64() float64 { return float64(s.Uint64()>>11) / (1 << 53) }

// IntN draws an int in [0,n) as Uint64 modulo n; the bias is below 2^-50
// for any n the queue uses (shard counts). It panics if n <= 0.
func (s *Source) IntN(n int) int { return int(s.Uint64() % uint64(n)) }

// Hex draws n bytes and returns them hex-encoded (2n characters).
func (s *Source) Hex(n int) string {
	b := make([]byte, n)
	s.mustRead(b)
	return hex.EncodeToString(b)
}

func (s *Source) mustRead(p []byte) {
	if _, err := s.Read(p); err != nil {
		panic("rnd: read random bytes: " + err.Error())
	}
}

// Keyed returns a source of uniform floats in [0,1) seeded by key alone:
// the same key gives the same draws. A worker's attempt draws its jitter
// from one keyed by its claim id (which the worker's Source drew): it
// commits from its own goroutine, and draws from a shared Source would
// depend on which attempt got there first.
func Keyed(key string) func() float64 {
	h := fnv.New64a()
	h.Write([]byte(key))
	r := mathrand.New(mathrand.NewPCG(h.Sum64(), 0x6a177e5))
	return r.Float64
}

// Locked makes draw safe for concurrent use (the draws' order among
// goroutines is theirs to decide).
func Locked(draw func() float64) func() float64 {
	var mu sync.Mutex
	return func() float64 {
		mu.Lock()
		defer mu.Unlock()
		return draw()
	}
}
