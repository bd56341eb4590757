package local

import (
	"errors"
	"fmt"
	"io/fs"
	"strings"
)

// A key maps to a path one segment at a time: every segment but the last
// names a directory "<segment>.dir", the last names a file "<segment>.obj".
// The suffixes differ, so "a" (a.obj) and "a/b" (a.dir/b.obj) coexist and no
// object can collide with a directory. Names with neither suffix (temporary
// files, the lock directory) are invisible to List.
const (
	objSuffix = ".obj"
	dirSuffix = ".dir"
	// maxKeyLen is S3's limit, in bytes.
	maxKeyLen = 1024
	// maxNameLen is NAME_MAX on the common Linux filesystems.
	maxNameLen = 255
)

// checkKey reports why key cannot be stored, or nil. A key may end in '/'
// (an S3 "folder marker"): its last segment is empty and its file is ".obj".
func checkKey(key string) error {
	switch {
	case key == "":
		return errors.New("invalid key: empty")
	case len(key) > maxKeyLen:
		return fmt.Errorf("invalid key: longer than %d bytes", maxKeyLen)
	case strings.IndexByte(key, 0) >= 0:
		return errors.New("invalid key: contains NUL")
	case key[0] == '/':
		return errors.New("invalid key: starts with /")
	}
	segs := strings.Split(key, "/")
	for i, seg := range segs {
		switch {
		case seg == "" && i < len(segs)-1:
			return errors.New("invalid key: contains //")
		case seg == "..":
			return errors.New("invalid key: contains a .. segment")
		case len(seg)+len(objSuffix) > maxNameLen:
			return fmt.Errorf("invalid key: segment longer than %d bytes", maxNameLen-len(objSuffix))
		}
	}
	return nil
}

// keyPath returns the directories below the root, outermost first, that
// hold the file of key (which checkKey accepted), and the file's name.
func keyPath(key string) (dirs []string, name string) {
	dir, last := splitKey(key)
	return dirNames(dir), last + objSuffix
}

// dirNames returns the directories below the root, outermost first, down
// to the one holding the keys that start with dir, which is empty or ends
// in '/'.
func dirNames(dir string) []string {
	if dir == "" {
		return nil
	}
	segs := strings.Split(dir[:len(dir)-1], "/")
	for i := range segs {
		segs[i] += dirSuffix
	}
	return segs
}

// splitKey splits a key or prefix after its last '/': "a/b/c" is "a/b/" and
// "c".
func splitKey(key string) (dir, name string) {
	i := strings.LastIndexByte(key, '/')
	return key[:i+1], key[i+1:]
}

// validDir reports whether some valid key can start with dir, a prefix that
// is empty or ends in '/'.
func validDir(dir string) bool {
	if dir == "" {
		return true
	}
	// A key that is dir plus one more character is valid exactly when every
	// segment of dir is.
	return checkKey(dir+"x") == nil
}

// decodeName returns the key segment a directory entry stands for, whether
// it is a directory of further keys, and false for anything that is not part
// of the key space (temporary files, lock files, foreign files).
func decodeName(e fs.DirEntry) (seg string, isDir, ok bool) {
	name := e.Name()
	switch {
	case strings.HasSuffix(name, dirSuffix) && e.IsDir():
		seg = strings.TrimSuffix(name, dirSuffix)
		return seg, true, seg != "" && seg != ".."
	case strings.HasSuffix(name, objSuffix) && e.Type().IsRegular():
		seg = strings.TrimSuffix(name, objSuffix)
		return seg, false, seg != ".."
	}
	return "", false, false
}
