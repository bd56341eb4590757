package local

import (
	"path/filepath"
	"strings"
	"testing"
	"time"
)

func TestCheckKey(t *testing.T) {
	valid := []string{
		"a",
		"a/b",
		"a/",
		"a/b/",
		".",
		"./a",
		"a/./b",
		"...",
		"a/..b/c..",
		".hidden/.x",
		"a.obj",
		"a.dir/b.obj",
		".obj",
		".dir/.dir",
		"with space/and more  spaces ",
		"x=y:z+w~v@u_1-2.3",
		"ünïcödé/键",
		strings.Repeat("s", maxNameLen-len(objSuffix)),
		strings.Repeat("a/", maxKeyLen/2-1) + "bb",
	}
	for _, key := range valid {
		if err := checkKey(key); err != nil {
			t.Errorf("checkKey(%q) = %v, want valid", key, err)
		}
	}
	invalid := map[string]string{
		"":       "empty",
		"/a":     "starts with /",
		"/":      "starts with /",
		"a//b":   "//",
		"a//":    "//",
		"..":     "..",
		"../a":   "..",
		"a/../b": "..",
		"a/..":   "..",
		"a\x00b": "NUL",
		strings.Repeat("s", maxNameLen-len(objSuffix)+1): "segment longer",
		strings.Repeat("a/", maxKeyLen/2) + "b":          "longer than",
	}
	for key, want := range invalid {
		err := checkKey(key)
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("checkKey(%.40q) = %v, want an error mentioning %q", key, err, want)
		}
	}
}

func TestObjectPathsNeverCollide(t *testing.T) {
	objectPath := func(key string) string {
		dirs, name := keyPath(key)
		return filepath.Join(append(append([]string{"/store"}, dirs...), name)...)
	}
	keys := []string{
		"a", "a/", "a/b", "a.obj", "a.dir", "a.dir/b", "a.obj/b", "a/b.obj", ".obj", ".dir",
		"a/.obj", "a/.dir", ".", "./a", "a/.", "a b", "a-b", "a/b/c", "a/b/",
	}
	seen := make(map[string]string)
	dirs := make(map[string]bool)
	for _, key := range keys {
		p := objectPath(key)
		if other, ok := seen[p]; ok {
			t.Errorf("keys %q and %q share the file %s", key, other, p)
		}
		seen[p] = key
		dir, _ := splitKey(key)
		names := dirNames(dir)
		for i := range names {
			dirs[filepath.Join(append([]string{"/store"}, names[:i+1]...)...)] = true
		}
	}
	for p, key := range seen {
		if dirs[p] {
			t.Errorf("the file of %q, %s, is also a directory of another key", key, p)
		}
	}
	if got, want := objectPath("a/b c/d"), "/store/a.dir/b c.dir/d.obj"; got != want {
		t.Errorf("objectPath = %s, want %s", got, want)
	}
	if got, want := objectPath("a/"), "/store/a.dir/.obj"; got != want {
		t.Errorf("objectPath = %s, want %s", got, want)
	}
}

func TestHeaderRoundTrip(t *testing.T) {
	h := newHeader([]byte("body"), time.Unix(0, 1_780_000_000_123_456_789))
	b := h.encode()
	if len(b) != headerLen {
		t.Fatalf("header is %d bytes, want %d: %q", len(b), headerLen, b)
	}
	got, ok := parseHeader(b)
	if !ok || got.etag != h.etag || !got.modified.Equal(h.modified) {
		t.Fatalf("parseHeader = %+v %v, want %+v", got, ok, h)
	}
	if !got.bodyMatches([]byte("body")) || got.bodyMatches([]byte("bodY")) {
		t.Fatal("bodyMatches does not tell the written body from another")
	}
	for _, bad := range [][]byte{nil, b[:headerLen-1], append([]byte("x"), b[1:]...), []byte(strings.Repeat("z", headerLen))} {
		if _, ok := parseHeader(bad); ok {
			t.Errorf("parseHeader(%q) accepted a damaged header", bad)
		}
	}
}
