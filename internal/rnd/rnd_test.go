package rnd_test

import (
	"bytes"
	"encoding/binary"
	"errors"
	"hash/fnv"
	"io"
	mathrand "math/rand/v2"
	"strings"
	"sync"
	"testing"

	"github.com/s3queue/s3queue/internal/rnd"
)

// oneByte returns at most one byte per Read: a Source must still draw full
// reads from it.
type oneByte struct{ r io.Reader }

func (o oneByte) Read(p []byte) (int, error) { return o.r.Read(p[:min(1, len(p))]) }

// The draws are the reader's bytes, in order, converted as documented: a
// seeded reader replays the same ids, jitter and shard choices.
func TestDrawsAreTheReadersBytes(t *testing.T) {
	b := []byte{
		0x01, 0x02, 0x03, 0x04, 0x05, 0x06, 0x07, 0x08, // Uint64
		0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, // Float64
		0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x0b, // IntN(4)
		0xde, 0xad, 0xbe, // Hex(3)
		0x42, 0x43, // Read
	}
	s := rnd.New(oneByte{bytes.NewReader(b)})
	if got := s.Uint64(); got != 0x0102030405060708 {
		t.Errorf("Uint64 = %#x, want 0x0102030405060708", got)
	}
	if got, want := s.Float64(), 1-1.0/(1<<53); got != want {
		t.Errorf("Float64 of all ones = %v, want %v", got, want)
	}
	if got := s.IntN(4); got != 3 {
		t.Errorf("IntN(4) of 11 = %d, want 3", got)
	}
	if got := s.Hex(3); got != "deadbe" {
		t.Errorf("Hex(3) = %q, want deadbe", got)
	}
	p := make([]byte, 2)
	if n, err := s.Read(p); n != 2 || err != nil || string(p) != "BC" {
		t.Errorf("Read = %d %q %v, want 2 \"BC\" nil", n, p, err)
	}
}

func TestNilReaderIsCryptoRand(t *testing.T) {
	s := rnd.New(nil)
	if a, b := s.Hex(16), s.Hex(16); a == b || len(a) != 32 {
		t.Fatalf("two draws from crypto/rand: %q, %q", a, b)
	}
}

// A reader that runs dry makes Read return its error and the draws without
// an error result panic, rather than hand out zeros.
func TestFailedReadPanicsOrReturns(t *testing.T) {
	dry := func() *rnd.Source { return rnd.New(strings.NewReader("abc")) }
	if _, err := dry().Read(make([]byte, 8)); !errors.Is(err, io.ErrUnexpectedEOF) {
		t.Errorf("Read of a short reader: %v, want io.ErrUnexpectedEOF", err)
	}
	for name, draw := range map[string]func(*rnd.Source){
		"Uint64":  func(s *rnd.Source) { s.Uint64() },
		"Float64": func(s *rnd.Source) { s.Float64() },
		"IntN":    func(s *rnd.Source) { s.IntN(3) },
		"Hex":     func(s *rnd.Source) { s.Hex(4) },
	} {
		t.Run(name, func(t *testing.T) {
			defer func() {
				if recover() == nil {
					t.Errorf("%s of a short reader did not panic", name)
				}
			}()
			draw(dry())
		})
	}
}

// Goroutines may share a Source over a reader that is not safe for
// concurrent use (run with -race); every byte is drawn once.
func TestConcurrentDrawsTakeEachByteOnce(t *testing.T) {
	const n, each = 8, 100
	b := make([]byte, n*each*8)
	for i := 0; i < len(b); i += 8 {
		binary.BigEndian.PutUint64(b[i:], uint64(i))
	}
	s := rnd.New(bytes.NewReader(b))
	var wg sync.WaitGroup
	var mu sync.Mutex
	seen := make(map[uint64]bool)
	for range n {
		wg.Go(func() {
			for range each {
				v := s.Uint64()
				mu.Lock()
				seen[v] = true
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	if len(seen) != n*each {
		t.Fatalf("%d distinct draws, want %d", len(seen), n*each)
	}
}

// Keyed depends on its key alone: a PCG seeded by the key's FNV-1a hash.
func TestKeyedReplaysItsKey(t *testing.T) {
	a, b, c := rnd.Keyed("claim-1"), rnd.Keyed("claim-1"), rnd.Keyed("claim-2")
	h := fnv.New64a()
	h.Write([]byte("claim-1"))
	want := mathrand.New(mathrand.NewPCG(h.Sum64(), 0x6a177e5))
	same := true
	for range 10 {
		x, y, z := a(), b(), c()
		if w := want.Float64(); x != w || y != w {
			t.Fatalf("Keyed(claim-1) drew %v and %v, want %v", x, y, w)
		}
		same = same && x == z
	}
	if same {
		t.Fatal("Keyed(claim-2) drew what Keyed(claim-1) drew")
	}
}
