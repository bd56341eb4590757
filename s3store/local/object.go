package local

import (
	"crypto/md5"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strconv"
	"syscall"
	"time"
)

// An object file is a fixed-size header line followed by the body:
//
//	s3qobj1 <md5 of body>-<random nonce> <unix nanoseconds, 19 digits>\n<body>
//
// The ETag is the middle field. The nonce makes it change on every write even
// when the bytes do not (S3 would keep the same ETag), so a compare-and-swap
// can never mistake a rewrite for no change. The header and body travel in
// one file, so one rename publishes both.
const (
	magic     = "s3qobj1 "
	etagLen   = 2*md5.Size + 1 + 16
	stampLen  = 19
	headerLen = len(magic) + etagLen + 1 + stampLen + 1
)

// A file in the key space that this package did not write whole (empty,
// cut inside its header, written by something else) is still an object, as
// any S3 object is: its body is the file's bytes, its size the file's size,
// and its ETag is made from the file's size and modification time, so it
// changes when the file does and a conditional write or delete can replace
// it. Such an object never stops a listing, and a reader sees bytes it
// cannot decode (a corrupt task, reported and skipped) instead of a store
// failure. A file whose header is whole but whose body does not match the
// header's checksum keeps the header's ETag, so listings need not read
// bodies; its body is the whole file, header included, so that no reader
// mistakes damaged bytes for what was written.
const rawETagPrefix = "raw-"

type header struct {
	etag     string
	modified time.Time
}

func newHeader(body []byte, now time.Time) header {
	sum := md5.Sum(body)
	return header{
		etag:     fmt.Sprintf("%s-%016x", hex.EncodeToString(sum[:]), rand.Uint64()),
		modified: now,
	}
}

// rawHeader is the header of a file without one of ours.
func rawHeader(fi fs.FileInfo) header {
	return header{
		etag:     fmt.Sprintf("%s%x-%x", rawETagPrefix, fi.Size(), fi.ModTime().UnixNano()),
		modified: fi.ModTime().UTC(),
	}
}

func (h header) encode() []byte {
	return fmt.Appendf(make([]byte, 0, headerLen), "%s%s %0*d\n", magic, h.etag, stampLen, h.modified.UnixNano())
}

// parseHeader parses the header at the start of b; ok is false when b does
// not start with a whole header of ours.
func parseHeader(b []byte) (h header, ok bool) {
	if len(b) < headerLen || string(b[:len(magic)]) != magic ||
		b[len(magic)+etagLen] != ' ' || b[headerLen-1] != '\n' {
		return header{}, false
	}
	nanos, err := strconv.ParseInt(string(b[headerLen-1-stampLen:headerLen-1]), 10, 64)
	if err != nil {
		return header{}, false
	}
	return header{
		etag:     string(b[len(magic) : len(magic)+etagLen]),
		modified: time.Unix(0, nanos).UTC(),
	}, true
}

// bodyMatches reports whether body is the one h was written for: the ETag
// carries its MD5, which catches a file damaged outside this package.
func (h header) bodyMatches(body []byte) bool {
	sum := md5.Sum(body)
	return hex.EncodeToString(sum[:]) == h.etag[:2*md5.Size]
}

// readObject reads a whole object file, or returns errNoObject.
func readObject(path string) (header, []byte, error) {
	f, err := os.Open(path)
	if errors.Is(err, fs.ErrNotExist) {
		return header{}, nil, errNoObject
	}
	if err != nil {
		return header{}, nil, err
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return header{}, nil, err
	}
	data, err := io.ReadAll(f)
	if err != nil {
		return header{}, nil, err
	}
	h, ok := parseHeader(data)
	switch {
	case !ok:
		return rawHeader(fi), data, nil
	case !h.bodyMatches(data[headerLen:]):
		return h, data, nil
	}
	return h, data[headerLen:], nil
}

// readInfo reads an object file's header and body size, or returns
// errNoObject. It reads no body.
func readInfo(path string) (header, int64, error) {
	f, err := os.Open(path)
	if errors.Is(err, fs.ErrNotExist) {
		return header{}, 0, errNoObject
	}
	if err != nil {
		return header{}, 0, err
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return header{}, 0, err
	}
	var buf [headerLen]byte
	if _, err := io.ReadFull(f, buf[:]); err != nil {
		if errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) {
			return rawHeader(fi), fi.Size(), nil
		}
		return header{}, 0, err
	}
	h, ok := parseHeader(buf[:])
	if !ok {
		return rawHeader(fi), fi.Size(), nil
	}
	return h, fi.Size() - int64(headerLen), nil
}

// writeTemp writes an object file under a temporary name in dir, synced to
// disk, creating dir if needed. The name has neither key suffix, so List
// never shows it, and it lives in dir so the rename that publishes it stays
// within one filesystem.
func (s *Store) writeTemp(dir string, h header, body []byte) (string, error) {
	// A delete of the last key in a directory removes the directory
	// (pruneDirs), possibly between our mkdir and our create: retry then.
	const attempts = 10
	for i := 0; ; i++ {
		f, err := createTemp(dir)
		if err == nil {
			return f.Name(), writeAndClose(f, h.encode(), body)
		}
		if !errors.Is(err, fs.ErrNotExist) || i == attempts {
			return "", err
		}
		if err := s.makeDirs(dir); err != nil && !errors.Is(err, fs.ErrNotExist) {
			return "", err
		}
	}
}

func createTemp(dir string) (*os.File, error) {
	for {
		name := filepath.Join(dir, fmt.Sprintf(".put-%016x.tmp", rand.Uint64()))
		f, err := os.OpenFile(name, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o644)
		if !errors.Is(err, fs.ErrExist) {
			return f, err
		}
	}
}

// writeAndClose writes the header and body to f and syncs it; on failure it
// removes the file.
func writeAndClose(f *os.File, head, body []byte) error {
	_, err := f.Write(head)
	if err == nil {
		_, err = f.Write(body)
	}
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		os.Remove(f.Name())
	}
	return err
}

// makeDirs creates dir and its missing parents below the root, syncing each
// parent that gained an entry so the new directory survives a crash.
func (s *Store) makeDirs(dir string) error {
	var missing []string
	for d := dir; d != s.root; d = filepath.Dir(d) {
		missing = append(missing, d)
	}
	for i := len(missing) - 1; i >= 0; i-- {
		err := os.Mkdir(missing[i], 0o755)
		if errors.Is(err, fs.ErrExist) {
			continue
		}
		if err != nil {
			return err
		}
		if err := syncDir(filepath.Dir(missing[i])); err != nil {
			return err
		}
	}
	return nil
}

// pruneDirs removes dir and its parents below the root while they are
// empty, so deleted keys do not leave an ever-growing tree behind. rmdir
// fails on a non-empty directory, which is what stops it.
func (s *Store) pruneDirs(dir string) {
	for d := dir; d != s.root; d = filepath.Dir(d) {
		if syscall.Rmdir(d) != nil {
			return
		}
	}
}

// syncDir makes the entries of dir (a rename, a removal, a new directory)
// durable.
func syncDir(dir string) error {
	f, err := os.Open(dir)
	if err != nil {
		return err
	}
	err = f.Sync()
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	return err
}
