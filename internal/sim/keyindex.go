package sim

import (
	"sort"
	"strings"
)

// keyIndex holds the server's keys in order, so that a LIST reads only the
// keys it returns instead of every object in the bucket (a scale run holds
// hundreds of thousands). The keys are kept in chunks of at most
// keyChunk, each sorted, the chunks in order: an insert or a delete moves
// at most a chunk's worth of keys.
type keyIndex struct {
	chunks [][]string
}

const keyChunk = 512

// chunk returns the index of the chunk where key belongs: the first whose
// last key is at least key (the last chunk if none is).
func (x *keyIndex) chunk(key string) int {
	i := sort.Search(len(x.chunks), func(i int) bool {
		c := x.chunks[i]
		return c[len(c)-1] >= key
	})
	return min(i, len(x.chunks)-1)
}

// insert adds key, which must not be there yet.
func (x *keyIndex) insert(key string) {
	if len(x.chunks) == 0 {
		x.chunks = [][]string{{key}}
		return
	}
	ci := x.chunk(key)
	c := x.chunks[ci]
	i := sort.SearchStrings(c, key)
	c = append(c, "")
	copy(c[i+1:], c[i:])
	c[i] = key
	if len(c) <= keyChunk {
		x.chunks[ci] = c
		return
	}
	half := len(c) / 2
	lo := append([]string(nil), c[:half]...)
	hi := append([]string(nil), c[half:]...)
	x.chunks = append(x.chunks, nil)
	copy(x.chunks[ci+2:], x.chunks[ci+1:])
	x.chunks[ci], x.chunks[ci+1] = lo, hi
}

// remove deletes key, if it is there.
func (x *keyIndex) remove(key string) {
	if len(x.chunks) == 0 {
		return
	}
	ci := x.chunk(key)
	c := x.chunks[ci]
	i := sort.SearchStrings(c, key)
	if i == len(c) || c[i] != key {
		return
	}
	c = append(c[:i], c[i+1:]...)
	if len(c) > 0 {
		x.chunks[ci] = c
		return
	}
	x.chunks = append(x.chunks[:ci], x.chunks[ci+1:]...)
}

// list returns up to n keys that start with prefix and sort after
// startAfter, in order.
func (x *keyIndex) list(prefix, startAfter string, n int) []string {
	out := make([]string, 0, min(n, 16))
	if len(x.chunks) == 0 {
		return out
	}
	// The first key that can qualify: at least prefix, above startAfter.
	from, strict := prefix, false
	if startAfter >= prefix {
		from, strict = startAfter, true
	}
	ci := x.chunk(from)
	c := x.chunks[ci]
	i := sort.SearchStrings(c, from)
	if strict && i < len(c) && c[i] == from {
		i++
	}
	for len(out) < n {
		if i == len(c) {
			if ci++; ci == len(x.chunks) {
				break
			}
			c, i = x.chunks[ci], 0
		}
		if !strings.HasPrefix(c[i], prefix) {
			break
		}
		out = append(out, c[i])
		i++
	}
	return out
}
