package worker

import (
	"crypto/rand"
	"encoding/binary"
	"encoding/hex"
	"io"
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

// randFloat returns a uniform float in [0,1) for jitter (retry delays,
// standby reads), drawn from the worker's source.
func (w *Worker) randFloat() float64 {
	var b [8]byte
	if _, err := io.ReadFull(w.rand, b[:]); err != nil {
		panic("worker: read random bytes: " + err.Error())
	}
	return float64(binary.BigEndian.Uint64(b[:])>>11) / (1 << 53)
}
