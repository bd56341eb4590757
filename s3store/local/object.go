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
	"strconv"
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

// rawHeader is the header of a file without one of ours, of this size and
// modification time.
func rawHeader(size int64, modified time.Time) header {
	return header{
		etag:     fmt.Sprintf("%s%x-%x", rawETagPrefix, size, modified.UnixNano()),
		modified: modified.UTC(),
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

// readObject reads the whole object file name in d, or returns errNoObject.
func readObject(d dirFD, name string) (header, []byte, error) {
	f, err := d.openFile(name, os.O_RDONLY, 0)
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
		return rawHeader(fi.Size(), fi.ModTime()), data, nil
	case !h.bodyMatches(data[headerLen:]):
		return h, data, nil
	}
	return h, data[headerLen:], nil
}

// readInfo reads the header and body size of the object file name in d, or
// returns errNoObject. It reads no body.
func readInfo(d dirFD, name string) (header, int64, error) {
	f, err := d.openFile(name, os.O_RDONLY, 0)
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
			return rawHeader(fi.Size(), fi.ModTime()), fi.Size(), nil
		}
		return header{}, 0, err
	}
	h, ok := parseHeader(buf[:])
	if !ok {
		return rawHeader(fi.Size(), fi.ModTime()), fi.Size(), nil
	}
	return h, fi.Size() - int64(headerLen), nil
}

// writeTemp writes an object file under a temporary name in d, synced to
// disk, and returns the name. The name has neither key suffix, so List
// never shows it, and it lives in the object's directory so the rename
// that publishes it stays within one filesystem. The file is private to
// this user (0600, narrowed by the umask): it holds a task's input or
// result.
func writeTemp(d dirFD, h header, body []byte) (string, error) {
	for {
		name := fmt.Sprintf(".put-%016x.tmp", rand.Uint64())
		f, err := d.openFile(name, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
		if errors.Is(err, fs.ErrExist) {
			continue
		}
		if err != nil {
			return "", err
		}
		if err := writeAndClose(f, h.encode(), body); err != nil {
			d.remove(name)
			return "", err
		}
		return name, nil
	}
}

// writeAndClose writes the header and body to f, syncs and closes it.
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
	return err
}
