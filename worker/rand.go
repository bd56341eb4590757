package worker

import (
	"crypto/rand"
	"encoding/binary"
	"encoding/hex"
	"hash/fnv"
	"io"
	mathrand "math/rand/v2"
	"sync"
)

// lockedRand serialises draws from the configured source: handlers commit
// from their own goroutines, and a seeded source (the simulator's) need not
// be safe for concurrent use.
type lockedRand struct {
	mu sync.Mutex
	r  io.Reader
}

func (l *lockedRand) Read(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return io.ReadFull(l.r, p)
}

// randSource is cfg.Rand, or crypto/rand.Reader when it is nil.
func randSource(r io.Reader) io.Reader {
	if r == nil {
		return rand.Reader
	}
	return r
}

// randHex returns n random bytes from r, hex-encoded.
func randHex(r io.Reader, n int) string {
	b := make([]byte, n)
	if _, err := io.ReadFull(r, b); err != nil {
		panic("worker: read random bytes: " + err.Error())
	}
	return hex.EncodeToString(b)
}

// randFloat returns a uniform float in [0,1) for jitter (standby reads,
// back-off), drawn from the worker's source. Only the Run goroutine calls
// it: draws from several goroutines would come in an order the Go
// scheduler picks, and a seeded run would not replay.
func (w *Worker) randFloat() float64 {
	var b [8]byte
	if _, err := io.ReadFull(w.rand, b[:]); err != nil {
		panic("worker: read random bytes: " + err.Error())
	}
	return float64(binary.BigEndian.Uint64(b[:])>>11) / (1 << 53)
}

// claimRand is one attempt's own source of jitter (its retry delay),
// seeded by its claim id, which the worker's source drew: an attempt
// commits from its own goroutine, and draws from the shared source would
// depend on which attempt got there first.
func claimRand(claimID string) func() float64 {
	h := fnv.New64a()
	h.Write([]byte(claimID))
	r := mathrand.New(mathrand.NewPCG(h.Sum64(), 0x6a177e5))
	return r.Float64
}
