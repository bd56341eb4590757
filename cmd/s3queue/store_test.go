package main

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/s3queue/s3queue/s3store"
	"github.com/s3queue/s3queue/s3store/awss3"
	"github.com/s3queue/s3queue/task"
)

// storeTree lists every path below dir with its permission bits.
func storeTree(t *testing.T, dir string) map[string]fs.FileMode {
	t.Helper()
	got := map[string]fs.FileMode{}
	err := filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
		if err != nil || path == dir {
			return err
		}
		fi, err := d.Info()
		if err != nil {
			return err
		}
		got[strings.TrimPrefix(path, dir+"/")] = fi.Mode()
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return got
}

// Every command that needs a queue answers a store without one the same
// way: one line naming the store, exit 3, nothing on stdout, and nothing
// created, not even the directory of a mistyped file:// URL or a lock
// file in an existing one.
func TestNoQueueIsOneAnswer(t *testing.T) {
	id, _ := task.NewID(time.Now(), strings.NewReader(strings.Repeat("z", 64)))
	commands := [][]string{
		{"list"}, {"list", "--json"}, {"stats"}, {"stats", "--json"},
		{"get", id}, {"get", id, "--json"}, {"result", id}, {"history", id}, {"wait", id},
		{"paused"}, {"resume"}, {"schedule", "list"}, {"schedule", "remove", "nightly"},
		{"schedule", "pause", "nightly"}, {"schedule", "resume", "nightly"},
		{"cancel", id}, {"requeue", id}, {"cancel", "--status", "pending"}, {"requeue", "--status", "dead"},
		{"purge"}, {"reshard", "--shards", "32"},
	}
	check := func(t *testing.T, store string, args []string) {
		t.Helper()
		r := cli(t, "", append(args, "--store", store)...)
		wantExit(t, r, exitNotFound, "no queue in "+store+" (no queue.json): check --store")
		if r.stdout != "" {
			t.Errorf("stdout %q, want nothing", r.stdout)
		}
	}
	t.Run("a directory that does not exist", func(t *testing.T) {
		dir := filepath.Join(t.TempDir(), "typo")
		for _, args := range commands {
			t.Run(strings.Join(args, " "), func(t *testing.T) {
				check(t, "file://"+dir, args)
				if _, err := os.Lstat(dir); !errors.Is(err, fs.ErrNotExist) {
					t.Fatalf("the command made %s (%v)", dir, err)
				}
			})
		}
	})
	t.Run("an empty directory", func(t *testing.T) {
		store, dir := newStore(t)
		for _, args := range commands {
			t.Run(strings.Join(args, " "), func(t *testing.T) {
				check(t, store, args)
				if got := storeTree(t, dir); len(got) != 0 {
					t.Fatalf("the command wrote %v", got)
				}
			})
		}
	})
}

// Every command that puts something new into the queue creates it on a
// fresh store, as submit does (the provider check included: see
// TestUnsupportedProviderIsExit4), and the store's files are the user's
// alone whatever the umask allows.
func TestWritesCreateTheQueue(t *testing.T) {
	old := syscall.Umask(0o022)
	defer syscall.Umask(old)
	for _, args := range [][]string{
		{"submit", "--type", "x"},
		{"schedule", "add", "nightly", "--every", "1h", "--type", "x"},
		{"pause"},
		{"pause", "mail"},
	} {
		t.Run(strings.Join(args, " "), func(t *testing.T) {
			dir := filepath.Join(t.TempDir(), "new")
			store := "file://" + dir
			must(t, append(args, "--store", store)...)
			if out := must(t, "stats", "--store", store); !strings.Contains(out, "in 16 shards") {
				t.Errorf("stats after %s: %s", args[0], out)
			}
			if fi, err := os.Stat(dir); err != nil || fi.Mode().Perm() != 0o700 {
				t.Errorf("store directory: %v %v, want 0700", fi.Mode(), err)
			}
			for path, mode := range storeTree(t, dir) {
				want := fs.FileMode(0o600)
				if mode.IsDir() {
					want = 0o700
				}
				if mode.Perm() != want {
					t.Errorf("%s is %v, want %v", path, mode.Perm(), want)
				}
			}
		})
	}
}

// --events FILE is created 0600: the events name tasks, types and errors.
func TestEventsFileIsPrivate(t *testing.T) {
	old := syscall.Umask(0o022)
	defer syscall.Umask(old)
	store, _ := newStore(t)
	path := filepath.Join(t.TempDir(), "events.jsonl")
	_, stop := background(t, "monitor", "--store", store, "--events", path)
	waitFor(t, "the events file", func() bool {
		_, err := os.Stat(path)
		return err == nil
	})
	stop() // its exit code is another test's: it may be stopped while it starts
	if fi, err := os.Stat(path); err != nil || fi.Mode().Perm() != 0o600 {
		t.Errorf("events file: %v %v, want 0600", fi.Mode(), err)
	}
}

// A store closed to this user is exit 5, whichever provider says so and
// whatever the request: retrying cannot help.
func TestAccessDeniedIsExit5(t *testing.T) {
	for name, err := range map[string]error{
		"file store write":  fmt.Errorf("local: put %q: %w: %w (%w)", "k", s3store.ErrUnusable, s3store.ErrAccessDenied, fs.ErrPermission),
		"file store read":   fmt.Errorf("local: get %q: %w (%w)", "k", s3store.ErrAccessDenied, fs.ErrPermission),
		"S3 object read":    fmt.Errorf("read task: %w", awss3.ErrAccessDenied),
		"S3 bucket request": fmt.Errorf("list: %w: %w", awss3.ErrAccessDenied, s3store.ErrUnusable),
	} {
		if code := codeOf(err); code != exitUnusable {
			t.Errorf("%s: exit %d, want %d", name, code, exitUnusable)
		}
	}
}

// A user who may read a file store but not write it runs every read
// command and leaves nothing behind; a command that writes is refused with
// exit 5 and the reason. Root passes every permission check, so as root
// the commands run as nobody.
func TestReadOnlyUser(t *testing.T) {
	runAs := readOnlyUser(t)
	base, err := os.MkdirTemp("", "s3queue-readonly-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(base) })
	if err := os.Chmod(base, 0o755); err != nil {
		t.Fatal(err)
	}
	dir := filepath.Join(base, "store")
	store := "file://" + dir
	id := strings.TrimSpace(must(t, "submit", "--store", store, "--type", "x", "--input", `{"a":1}`))
	must(t, "schedule", "add", "nightly", "--every", "1h", "--type", "x", "--store", store)
	// Readable by all, writable by none: what an operator grants a viewer.
	chmodTree(t, dir, 0o555, 0o444)
	t.Cleanup(func() { chmodTree(t, dir, 0o700, 0o600) })
	before := storeTree(t, dir)

	for _, args := range [][]string{
		{"stats"}, {"list"}, {"get", id}, {"history", id}, {"paused"}, {"schedule", "list"},
	} {
		r := runAs(append(args, "--store", store)...)
		if r.code != 0 || r.stdout == "" {
			t.Errorf("%s: exit %d\nstdout: %s\nstderr: %s", args[0], r.code, r.stdout, r.stderr)
		}
	}
	for _, args := range [][]string{
		{"submit", "--type", "x"}, {"cancel", id}, {"pause"}, {"schedule", "add", "hourly", "--every", "1h", "--type", "x"},
	} {
		r := runAs(append(args, "--store", store)...)
		wantExit(t, r, exitUnusable, "permission denied")
	}
	if after := storeTree(t, dir); fmt.Sprint(after) != fmt.Sprint(before) {
		t.Errorf("the store changed:\nbefore %v\nafter  %v", before, after)
	}
}

func chmodTree(t *testing.T, dir string, dirMode, fileMode fs.FileMode) {
	t.Helper()
	err := filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			return os.Chmod(path, dirMode)
		}
		return os.Chmod(path, fileMode)
	})
	if err != nil {
		t.Fatal(err)
	}
}

// readOnlyUser returns a function running s3queue as a user to whom a
// tree chmodded a-w is read-only: this process, unless it runs as root;
// then this test binary as nobody (its main, S3QUEUE_TEST_RUN_MAIN).
func readOnlyUser(t *testing.T) func(args ...string) cliResult {
	t.Helper()
	if os.Geteuid() != 0 {
		return func(args ...string) cliResult { return cli(t, "", args...) }
	}
	const nobody = 65534
	// The test binary lives in a directory only root may enter: a copy
	// nobody may run.
	dir, err := os.MkdirTemp("", "s3queue-bin-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	bin := filepath.Join(dir, "s3queue")
	if err := copyFile(os.Args[0], bin); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	run := func(args ...string) cliResult {
		cmd := exec.Command(bin, args...)
		cmd.Dir = dir
		cmd.Env = append(os.Environ(), "S3QUEUE_TEST_RUN_MAIN=1", "HOME="+dir)
		cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: nobody, Gid: nobody}}
		var out, errb strings.Builder
		cmd.Stdout, cmd.Stderr = &out, &errb
		err := cmd.Run()
		var exit *exec.ExitError
		switch {
		case errors.As(err, &exit):
			return cliResult{exit.ExitCode(), out.String(), errb.String()}
		case err != nil:
			return cliResult{-1, out.String(), err.Error()}
		}
		return cliResult{0, out.String(), errb.String()}
	}
	if r := run("version"); r.code != 0 {
		t.Skipf("cannot run the command as nobody (uid %d) here: %s", nobody, r.stderr)
	}
	return run
}

func copyFile(from, to string) error {
	src, err := os.Open(from)
	if err != nil {
		return err
	}
	defer src.Close()
	dst, err := os.OpenFile(to, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o755)
	if err != nil {
		return err
	}
	if _, err := io.Copy(dst, src); err != nil {
		dst.Close()
		return err
	}
	return dst.Close()
}

// A file store follows no symbolic link below its directory: a command
// that meets one is refused with exit 5 naming it, and nothing outside the
// store is created or removed through it.
func TestSymlinkInTheStoreIsExit5(t *testing.T) {
	setup := func(t *testing.T, link string) (store, outside string) {
		store, dir := newStore(t)
		must(t, "submit", "--store", store, "--type", "x")
		outside = t.TempDir()
		if err := os.WriteFile(filepath.Join(outside, "nightly.json.obj"), []byte("theirs"), 0o600); err != nil {
			t.Fatal(err)
		}
		if err := os.Symlink(outside, filepath.Join(dir, link)); err != nil {
			t.Fatal(err)
		}
		return store, outside
	}
	untouched := func(t *testing.T, outside string) {
		t.Helper()
		if got := storeTree(t, outside); len(got) != 1 {
			t.Errorf("outside the store: %v, want only the file that was there", got)
		}
	}
	t.Run("idempotency records", func(t *testing.T) {
		store, outside := setup(t, "idempotency.dir")
		r := cli(t, "", "submit", "--store", store, "--type", "x", "--idempotency-key", "k")
		wantExit(t, r, exitUnusable, "idempotency.dir: a symbolic link, which the file store never follows")
		untouched(t, outside)
	})
	t.Run("schedules", func(t *testing.T) {
		store, outside := setup(t, "schedules.dir")
		wantExit(t, cli(t, "", "schedule", "add", "nightly", "--every", "1h", "--type", "x", "--store", store),
			exitUnusable, "symbolic link")
		wantExit(t, cli(t, "", "schedule", "remove", "nightly", "--store", store), exitUnusable, "symbolic link")
		untouched(t, outside)
	})
	t.Run("a dangling lock file", func(t *testing.T) {
		store, dir := newStore(t)
		outside := t.TempDir()
		if err := os.Mkdir(filepath.Join(dir, ".locks"), 0o700); err != nil {
			t.Fatal(err)
		}
		for i := range 64 {
			name := fmt.Sprintf("%02d.lock", i)
			if err := os.Symlink(filepath.Join(outside, name), filepath.Join(dir, ".locks", name)); err != nil {
				t.Fatal(err)
			}
		}
		wantExit(t, cli(t, "", "submit", "--store", store, "--type", "x"), exitUnusable, "symbolic link")
		if got := storeTree(t, outside); len(got) != 0 {
			t.Errorf("a submit created %v outside the store", got)
		}
	})
}
