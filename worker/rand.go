package worker

import (
	"crypto/rand"
	"encoding/binary"
)

// randFloat returns a uniform float in [0,1) for retry jitter.
func randFloat() float64 {
	var b [8]byte
	rand.Read(b[:])
	return float64(binary.BigEndian.Uint64(b[:])>>11) / (1 << 53)
}
