package local_test

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/s3queue/s3queue/s3store"
	"github.com/s3queue/s3queue/s3store/local"
)

// tree lists every path below dir, with its permission bits, "-" marking
// a link.
func tree(t *testing.T, dir string) map[string]string {
	t.Helper()
	got := map[string]string{}
	err := filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
		if err != nil || path == dir {
			return err
		}
		fi, err := d.Info()
		if err != nil {
			return err
		}
		mode := fmt.Sprintf("%#o", fi.Mode().Perm())
		if fi.Mode()&fs.ModeSymlink != 0 {
			mode = "-"
		}
		got[strings.TrimPrefix(path, dir+"/")] = mode
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return got
}

// Opening and reading a store write nothing: a reader pointed at a
// directory that does not exist makes none, and a reader of an existing
// one makes no lock file there (a user who may only read can read).
func TestReadsCreateNothing(t *testing.T) {
	ctx := context.Background()
	reads := func(t *testing.T, s s3store.Store) {
		t.Helper()
		if _, err := s.Get(ctx, "queue.json"); !errors.Is(err, s3store.ErrNotFound) {
			t.Errorf("get: %v, want not found", err)
		}
		if _, err := s.Head(ctx, "tasks/000/x"); !errors.Is(err, s3store.ErrNotFound) {
			t.Errorf("head: %v, want not found", err)
		}
		if page, err := s.List(ctx, "tasks/", s3store.ListOptions{}); err != nil || len(page.Objects) != 0 {
			t.Errorf("list: %v %v, want an empty page", page, err)
		}
		if err := s.Delete(ctx, "tasks/000/x", s3store.DeleteOptions{}); err != nil {
			t.Errorf("delete of a missing key: %v", err)
		}
	}
	t.Run("missing directory", func(t *testing.T) {
		dir := filepath.Join(t.TempDir(), "typo", "store")
		s := open(t, dir)
		reads(t, s)
		if _, err := os.Lstat(filepath.Join(dir, "..")); !errors.Is(err, fs.ErrNotExist) {
			t.Fatalf("reads made the store's parent directory: %v", err)
		}
		put(t, s, "k", "v", s3store.PutOptions{})
		if obj, err := open(t, dir).Get(ctx, "k"); err != nil || string(obj.Body) != "v" {
			t.Fatalf("the first write did not make the store: %v", err)
		}
	})
	t.Run("existing directory", func(t *testing.T) {
		dir := t.TempDir()
		reads(t, open(t, dir))
		if got := tree(t, dir); len(got) != 0 {
			t.Fatalf("reads wrote %v", got)
		}
	})
}

// Directories are made 0700 and files 0600 whatever the umask allows:
// object files hold tasks' inputs and results.
func TestFilesArePrivate(t *testing.T) {
	old := syscall.Umask(0o022)
	defer syscall.Umask(old)
	dir := filepath.Join(t.TempDir(), "store")
	s := open(t, dir)
	put(t, s, "tasks/000/a", "input", s3store.PutOptions{IfNoneMatch: true})
	put(t, s, "b", "x", s3store.PutOptions{})
	if fi, err := os.Stat(dir); err != nil || fi.Mode().Perm() != 0o700 {
		t.Errorf("store directory: %v %v, want 0700", fi.Mode(), err)
	}
	got := tree(t, dir)
	if len(got) == 0 {
		t.Fatal("no files")
	}
	for path, mode := range got {
		fi, _ := os.Lstat(filepath.Join(dir, path))
		want := "0600"
		if fi.IsDir() {
			want = "0700"
		}
		if mode != want {
			t.Errorf("%s is %s, want %s", path, mode, want)
		}
	}
	if _, ok := got[".locks/"+lockFileOf(t, got)]; !ok {
		t.Errorf("no lock file among %v", got)
	}
}

// lockFileOf returns the name of a lock file in files.
func lockFileOf(t *testing.T, files map[string]string) string {
	for path := range files {
		if name, ok := strings.CutPrefix(path, ".locks/"); ok {
			return name
		}
	}
	return ""
}

// The store follows no symbolic link below its directory: one in the key
// space or among the lock files fails the request with ErrUnusable naming
// it, and nothing is read, written or removed through it.
func TestSymlinksAreRefused(t *testing.T) {
	ctx := context.Background()
	setup := func(t *testing.T) (s *local.Store, dir, outside string) {
		dir, outside = filepath.Join(t.TempDir(), "store"), t.TempDir()
		s = open(t, dir)
		put(t, s, "tasks/000/a", "x", s3store.PutOptions{})
		return s, dir, outside
	}
	refused := func(t *testing.T, what string, err error) {
		t.Helper()
		if !errors.Is(err, s3store.ErrUnusable) || !strings.Contains(err.Error(), "symbolic link") {
			t.Errorf("%s: %v, want ErrUnusable about a symbolic link", what, err)
		}
	}
	untouched := func(t *testing.T, outside string, want map[string]string) {
		t.Helper()
		if got := tree(t, outside); fmt.Sprint(got) != fmt.Sprint(want) {
			t.Errorf("outside the store: %v, want %v", got, want)
		}
	}
	t.Run("a directory linked out of the store", func(t *testing.T) {
		s, dir, outside := setup(t)
		if err := os.WriteFile(filepath.Join(outside, "k.obj"), []byte("theirs"), 0o600); err != nil {
			t.Fatal(err)
		}
		if err := os.Symlink(outside, filepath.Join(dir, "idempotency.dir")); err != nil {
			t.Fatal(err)
		}
		_, err := s.Put(ctx, "idempotency/new", []byte("x"), s3store.PutOptions{IfNoneMatch: true})
		refused(t, "create", err)
		_, err = s.Put(ctx, "idempotency/k", []byte("x"), s3store.PutOptions{})
		refused(t, "put", err)
		refused(t, "delete", s.Delete(ctx, "idempotency/k", s3store.DeleteOptions{}))
		_, err = s.Get(ctx, "idempotency/k")
		refused(t, "get", err)
		_, err = s.List(ctx, "idempotency/", s3store.ListOptions{})
		refused(t, "list", err)
		untouched(t, outside, map[string]string{"k.obj": "0600"})
		// A listing of the whole store passes over the link.
		if keys := listAll(t, s, "", "", 0); fmt.Sprint(keys) != "[tasks/000/a]" {
			t.Errorf("list: %v", keys)
		}
	})
	t.Run("a directory linked inside the store", func(t *testing.T) {
		s, dir, _ := setup(t)
		if err := os.Symlink("tasks.dir", filepath.Join(dir, "alias.dir")); err != nil {
			t.Fatal(err)
		}
		_, err := s.Get(ctx, "alias/000/a")
		refused(t, "get", err)
		_, err = s.Put(ctx, "alias/000/b", []byte("x"), s3store.PutOptions{})
		refused(t, "put", err)
	})
	t.Run("an object file linked out", func(t *testing.T) {
		s, dir, outside := setup(t)
		secret := filepath.Join(outside, "secret")
		if err := os.WriteFile(secret, []byte("theirs"), 0o600); err != nil {
			t.Fatal(err)
		}
		link := filepath.Join(dir, "tasks.dir", "000.dir", "b.obj")
		if err := os.Symlink(secret, link); err != nil {
			t.Fatal(err)
		}
		_, err := s.Get(ctx, "tasks/000/b")
		refused(t, "get", err)
		_, err = s.Put(ctx, "tasks/000/b", []byte("x"), s3store.PutOptions{IfNoneMatch: true})
		refused(t, "create", err)
		// An unconditional write or delete replaces or removes the link
		// itself, never its target.
		put(t, s, "tasks/000/b", "mine", s3store.PutOptions{})
		if err := s.Delete(ctx, "tasks/000/b", s3store.DeleteOptions{}); err != nil {
			t.Fatal(err)
		}
		untouched(t, outside, map[string]string{"secret": "0600"})
	})
	t.Run("a dangling lock file link", func(t *testing.T) {
		dir, outside := filepath.Join(t.TempDir(), "store"), t.TempDir()
		if err := os.MkdirAll(filepath.Join(dir, ".locks"), 0o700); err != nil {
			t.Fatal(err)
		}
		for i := range 64 {
			name := fmt.Sprintf("%02d.lock", i)
			if err := os.Symlink(filepath.Join(outside, name), filepath.Join(dir, ".locks", name)); err != nil {
				t.Fatal(err)
			}
		}
		s := open(t, dir)
		_, err := s.Put(ctx, "queue.json", []byte("{}"), s3store.PutOptions{IfNoneMatch: true})
		refused(t, "put", err)
		refused(t, "delete", s.Delete(ctx, "queue.json", s3store.DeleteOptions{}))
		untouched(t, outside, map[string]string{})
	})
	t.Run("the lock directory linked out", func(t *testing.T) {
		dir, outside := filepath.Join(t.TempDir(), "store"), t.TempDir()
		if err := os.MkdirAll(dir, 0o700); err != nil {
			t.Fatal(err)
		}
		if err := os.Symlink(outside, filepath.Join(dir, ".locks")); err != nil {
			t.Fatal(err)
		}
		_, err := open(t, dir).Put(ctx, "queue.json", []byte("{}"), s3store.PutOptions{})
		refused(t, "put", err)
		untouched(t, outside, map[string]string{})
	})
}
