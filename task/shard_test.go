package task

import (
	"errors"
	"fmt"
	"testing"
)

func TestShardFor(t *testing.T) {
	t.Run("is FNV-1a 64 modulo n", func(t *testing.T) {
		// FNV-1a 64 of "" is 0xcbf29ce484222325 and of "a" 0xaf63dc4c8601ec8c.
		if got := ShardFor("", 16); got != 0x5 {
			t.Errorf(`ShardFor("") = %d`, got)
		}
		if got := ShardFor("a", 1000); got != int(uint64(0xaf63dc4c8601ec8c)%1000) {
			t.Errorf(`ShardFor("a") = %d`, got)
		}
	})
	t.Run("one shard or fewer maps to 0", func(t *testing.T) {
		for _, n := range []int{-3, 0, 1} {
			if got := ShardFor("key", n); got != 0 {
				t.Errorf("ShardFor(n=%d) = %d", n, got)
			}
		}
	})
	t.Run("spreads 10k keys evenly over 16 shards", func(t *testing.T) {
		const n, keys = 16, 10000
		var counts [n]int
		for i := range keys {
			s := ShardFor(fmt.Sprintf("customer-%d", i), n)
			if s < 0 || s >= n {
				t.Fatalf("shard %d out of range", s)
			}
			counts[s]++
		}
		want := keys / n
		for s, c := range counts {
			if c < want*8/10 || c > want*12/10 {
				t.Errorf("shard %d has %d keys, want %d ± 20%%", s, c, want)
			}
		}
	})
}

func TestKeys(t *testing.T) {
	t.Run("shard names sort numerically", func(t *testing.T) {
		for i, want := range map[int]string{0: "000", 7: "007", 15: "015", 999: "999", 1234: "1234"} {
			if got := ShardName(i); got != want {
				t.Errorf("ShardName(%d) = %s", i, got)
			}
		}
	})
	t.Run("Key and ParseKey round-trip", func(t *testing.T) {
		for _, shard := range []int{0, 5, 15, 999, 1000} {
			key := Key(shard, testID)
			s, id, err := ParseKey(key)
			if err != nil || s != shard || id != testID {
				t.Errorf("ParseKey(%s) = %d, %s, %v", key, s, id, err)
			}
		}
		if Key(3, testID) != "tasks/003/"+testID+".json" {
			t.Errorf("Key = %s", Key(3, testID))
		}
	})
	bad := map[string]string{
		"empty":             "",
		"other prefix":      "ready/003/" + testID + ".json",
		"queue prefix left": "q/tasks/003/" + testID + ".json",
		"no shard":          "tasks/" + testID + ".json",
		"short shard":       "tasks/3/" + testID + ".json",
		"signed shard":      "tasks/+03/" + testID + ".json",
		"negative shard":    "tasks/-01/" + testID + ".json",
		"padded big shard":  "tasks/01000/" + testID + ".json",
		"no extension":      "tasks/003/" + testID,
		"bad id":            "tasks/003/hello.json",
		"nested":            "tasks/003/x/" + testID + ".json",
		"folder only":       "tasks/003/",
	}
	for name, key := range bad {
		t.Run("ParseKey rejects "+name, func(t *testing.T) {
			if _, _, err := ParseKey(key); !errors.Is(err, ErrInvalid) {
				t.Errorf("ParseKey(%q) err = %v", key, err)
			}
		})
	}
}
