package task

import (
	"crypto/rand"
	"errors"
	"io"
	"sort"
	"strings"
	"testing"
	"time"
)

func TestNewID(t *testing.T) {
	t.Run("is a valid id carrying its millisecond", func(t *testing.T) {
		now := t0.Add(123*time.Millisecond + 456*time.Microsecond)
		id, err := NewID(now, seededReader(1))
		must(t, err)
		if len(id) != IDLen || !ValidID(id) {
			t.Fatalf("id %q is not valid", id)
		}
		got, err := IDTime(id)
		must(t, err)
		if !got.Equal(now.Truncate(time.Millisecond)) {
			t.Errorf("IDTime = %s, want %s", got, now.Truncate(time.Millisecond))
		}
	})
	t.Run("sorts in time order", func(t *testing.T) {
		r := seededReader(2)
		var ids []string
		now := t0
		for i := range 2000 {
			id, err := NewID(now, r)
			must(t, err)
			ids = append(ids, id)
			now = now.Add(time.Duration(1+i%7) * time.Millisecond)
			if i%100 == 0 {
				now = now.Add(97 * 24 * time.Hour) // big jumps carry across digits
			}
		}
		if !sort.StringsAreSorted(ids) {
			t.Error("ids made at increasing times do not sort lexicographically")
		}
	})
	t.Run("is unique within one millisecond", func(t *testing.T) {
		seen := make(map[string]bool, 10000)
		for range 10000 {
			id, err := NewID(t0, rand.Reader)
			must(t, err)
			if seen[id] {
				t.Fatalf("duplicate id %s", id)
			}
			seen[id] = true
		}
	})
	t.Run("reports a failing randomness source", func(t *testing.T) {
		_, err := NewID(t0, strings.NewReader("short"))
		if !errors.Is(err, io.ErrUnexpectedEOF) {
			t.Errorf("err = %v", err)
		}
		if _, err := NewID(t0, nil); err == nil {
			t.Error("nil reader accepted")
		}
	})
	t.Run("refuses times outside 48 bits of milliseconds", func(t *testing.T) {
		for _, now := range []time.Time{time.UnixMilli(-1), time.UnixMilli(1 << 48)} {
			if _, err := NewID(now, rand.Reader); err == nil {
				t.Errorf("accepted %s", now)
			}
		}
	})
}

func TestIDEncoding(t *testing.T) {
	t.Run("decodes Crockford base32 timestamps", func(t *testing.T) {
		// Expected values computed independently: each of the first ten
		// characters is one base32 digit of the millisecond timestamp.
		tests := map[string]int64{
			"01ARZ3NDEKTSV4RRFFQ69G5FAV": 1469922850259,
			"0000000001ZZZZZZZZZZZZZZZZ": 1,
			"00000000Z00000000000000000": 31 * 32,
			"7ZZZZZZZZZ0000000000000000": 1<<48 - 1,
		}
		for id, want := range tests {
			got, err := IDTime(id)
			must(t, err)
			if got.UnixMilli() != want {
				t.Errorf("IDTime(%s) = %d, want %d", id, got.UnixMilli(), want)
			}
		}
	})
	t.Run("extremes", func(t *testing.T) {
		var zero, ones [16]byte
		for i := range ones {
			ones[i] = 0xff
		}
		if got := encodeID(zero); got != strings.Repeat("0", IDLen) {
			t.Errorf("zero = %s", got)
		}
		if got := encodeID(ones); got != "7"+strings.Repeat("Z", IDLen-1) {
			t.Errorf("max = %s", got)
		}
	})
	t.Run("decode inverts encode", func(t *testing.T) {
		r := seededReader(3)
		for range 1000 {
			var b [16]byte
			r.Read(b[:])
			back, ok := decodeID(encodeID(b))
			if !ok || back != b {
				t.Fatalf("%x → %s → %x", b, encodeID(b), back)
			}
		}
	})
	invalid := map[string]string{
		"empty":            "",
		"too short":        testID[:IDLen-1],
		"too long":         testID + "0",
		"lower case":       strings.ToLower(testID),
		"letter I":         "01HZZZZZZZZZZZZZZZZZZZZZZI",
		"letter U":         "01HZZZZZZZZZZZZZZZZZZZZZZU",
		"overflowing head": "8" + testID[1:],
		"path separator":   "01HZZZZZZZZZZZZZZZZZZZZZ/Z",
		"non-ASCII":        "01HZZZZZZZZZZZZZZZZZZZZZé",
	}
	for name, id := range invalid {
		t.Run("rejects "+name, func(t *testing.T) {
			if ValidID(id) {
				t.Errorf("ValidID(%q) = true", id)
			}
			if _, err := IDTime(id); !errors.Is(err, ErrInvalid) {
				t.Errorf("IDTime(%q) err = %v", id, err)
			}
		})
	}
}
