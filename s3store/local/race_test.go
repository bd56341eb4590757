package local_test

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/s3queue/s3queue/s3store"
	"github.com/s3queue/s3queue/s3store/local"
)

const (
	childEnv     = "LOCAL_STORE_CHILD"
	childDirEnv  = "LOCAL_STORE_DIR"
	childIncsEnv = "LOCAL_STORE_INCREMENTS"
	counterKey   = "race/counter"
)

// race is one contender: it tries to create the counter (reporting whether
// it won), then adds increments to it by read-modify-write with If-Match,
// re-reading after each lost race. It returns the number of lost races.
func race(ctx context.Context, s s3store.Store, increments int) (created bool, retries int, err error) {
	_, err = s.Put(ctx, counterKey, []byte("0"), s3store.PutOptions{IfNoneMatch: true})
	switch {
	case err == nil:
		created = true
	case !errors.Is(err, s3store.ErrPreconditionFailed):
		return false, 0, fmt.Errorf("create: %w", err)
	}
	for i := 0; i < increments; {
		obj, err := s.Get(ctx, counterKey)
		if err != nil {
			return created, retries, fmt.Errorf("read: %w", err)
		}
		n, err := strconv.Atoi(string(obj.Body))
		if err != nil {
			return created, retries, fmt.Errorf("read: counter %q: %w", obj.Body, err)
		}
		_, err = s.Put(ctx, counterKey, []byte(strconv.Itoa(n+1)), s3store.PutOptions{IfMatch: obj.ETag})
		switch {
		case err == nil:
			i++
		case errors.Is(err, s3store.ErrPreconditionFailed):
			retries++
		default:
			return created, retries, fmt.Errorf("increment: %w", err)
		}
	}
	return created, retries, nil
}

func counter(t *testing.T, s s3store.Store) int {
	t.Helper()
	obj, err := s.Get(context.Background(), counterKey)
	if err != nil {
		t.Fatalf("get counter: %v", err)
	}
	n, err := strconv.Atoi(string(obj.Body))
	if err != nil {
		t.Fatalf("counter %q: %v", obj.Body, err)
	}
	return n
}

// TestGoroutinesOnTwoStores races goroutines on two Stores over one
// directory, so that only the lock files (not a shared mutex) keep them
// apart, while a reader checks that no Get sees a partial write.
func TestGoroutinesOnTwoStores(t *testing.T) {
	dir := t.TempDir()
	stores := []*local.Store{open(t, dir), open(t, dir)}
	const workers, increments = 6, 15
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()

	readerDone := make(chan error, 1)
	stopReader := make(chan struct{})
	go func() { readerDone <- readMonotonic(ctx, stores[1], stopReader) }()

	var wg sync.WaitGroup
	start := make(chan struct{})
	var mu sync.Mutex
	wins, retries := 0, 0
	for w := 0; w < workers; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-start
			created, r, err := race(ctx, stores[w%2], increments)
			if err != nil {
				t.Errorf("worker %d: %v", w, err)
			}
			mu.Lock()
			defer mu.Unlock()
			retries += r
			if created {
				wins++
			}
		}()
	}
	close(start)
	wg.Wait()
	close(stopReader)
	if err := <-readerDone; err != nil {
		t.Fatal(err)
	}
	if wins != 1 {
		t.Fatalf("%d creates won, want exactly 1", wins)
	}
	if got := counter(t, stores[0]); got != workers*increments {
		t.Fatalf("counter = %d, want %d: increments were lost", got, workers*increments)
	}
	t.Logf("%d lost races retried", retries)
}

// readMonotonic reads the counter until stop closes, failing on any read
// error other than not-yet-created, and on the counter going backwards.
func readMonotonic(ctx context.Context, s s3store.Store, stop <-chan struct{}) error {
	last := 0
	for {
		select {
		case <-stop:
			return nil
		default:
		}
		obj, err := s.Get(ctx, counterKey)
		if errors.Is(err, s3store.ErrNotFound) {
			continue
		}
		if err != nil {
			return fmt.Errorf("reader: %w", err)
		}
		n, err := strconv.Atoi(string(obj.Body))
		if err != nil {
			return fmt.Errorf("reader saw counter %q: %w", obj.Body, err)
		}
		if n < last {
			return fmt.Errorf("reader saw the counter go from %d to %d", last, n)
		}
		last = n
	}
}

// TestProcessesRace runs the race in separate OS processes (this test
// binary, re-executed as a child), which share nothing but the directory.
func TestProcessesRace(t *testing.T) {
	if testing.Short() {
		t.Skip("spawns processes")
	}
	dir := t.TempDir()
	const processes, increments = 4, 20
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()

	type child struct {
		cmd    *exec.Cmd
		stdin  io.WriteCloser
		stdout bytes.Buffer
		stderr bytes.Buffer
	}
	children := make([]*child, processes)
	for i := range children {
		c := &child{cmd: exec.CommandContext(ctx, os.Args[0])}
		c.cmd.Env = append(os.Environ(), childEnv+"=1", childDirEnv+"="+dir, childIncsEnv+"="+strconv.Itoa(increments))
		c.cmd.Stdout, c.cmd.Stderr = &c.stdout, &c.stderr
		var err error
		if c.stdin, err = c.cmd.StdinPipe(); err != nil {
			t.Fatal(err)
		}
		if err := c.cmd.Start(); err != nil {
			t.Fatalf("start child %d: %v", i, err)
		}
		children[i] = c
	}
	// Children wait for their stdin to close, so they start racing together.
	for _, c := range children {
		c.stdin.Close()
	}
	wins, retries := 0, 0
	for i, c := range children {
		if err := c.cmd.Wait(); err != nil {
			t.Fatalf("child %d: %v\nstderr:\n%s", i, err, c.stderr.String())
		}
		created, r, err := parseChildReport(c.stdout.String())
		if err != nil {
			t.Fatalf("child %d: %v", i, err)
		}
		if created {
			wins++
		}
		retries += r
	}
	if wins != 1 {
		t.Fatalf("%d processes won the create, want exactly 1", wins)
	}
	if got := counter(t, open(t, dir)); got != processes*increments {
		t.Fatalf("counter = %d, want %d: increments were lost", got, processes*increments)
	}
	t.Logf("%d lost races retried across %d processes", retries, processes)
}

// runChild is the body of a child process of TestProcessesRace. It reports
// "created=<bool> retries=<n>" on stdout and returns the exit code.
func runChild() int {
	s, err := local.Open(os.Getenv(childDirEnv))
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	increments, err := strconv.Atoi(os.Getenv(childIncsEnv))
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	io.Copy(io.Discard, os.Stdin)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	created, retries, err := race(ctx, s, increments)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	fmt.Printf("created=%t retries=%d\n", created, retries)
	return 0
}

func parseChildReport(out string) (created bool, retries int, err error) {
	sc := bufio.NewScanner(strings.NewReader(out))
	for sc.Scan() {
		if _, err := fmt.Sscanf(sc.Text(), "created=%t retries=%d", &created, &retries); err == nil {
			return created, retries, nil
		}
	}
	return false, 0, fmt.Errorf("no report in output %q", out)
}

// Deleting the last objects of a directory at once never fails: the delete
// that prunes the emptied directory may do so before another delete of a
// sibling has synced it (seen as an edge DELETE failing with "no such file
// or directory" while a worker settled two dependents at once).
func TestConcurrentDeletesOfSiblingsSucceed(t *testing.T) {
	ctx := context.Background()
	s := open(t, t.TempDir())
	for round := range 200 {
		keys := make([]string, 4)
		for i := range keys {
			keys[i] = fmt.Sprintf("deps/p%d/c%d", round, i)
			if _, err := s.Put(ctx, keys[i], nil, s3store.PutOptions{}); err != nil {
				t.Fatal(err)
			}
		}
		var wg sync.WaitGroup
		errs := make(chan error, len(keys))
		for _, k := range keys {
			wg.Go(func() { errs <- s.Delete(ctx, k, s3store.DeleteOptions{}) })
		}
		wg.Wait()
		close(errs)
		for err := range errs {
			if err != nil {
				t.Fatalf("round %d: %v", round, err)
			}
		}
	}
}
