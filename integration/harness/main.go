package harness

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"slices"
	"sync"
	"syscall"
	"testing"
	"time"
)

// The servers of this test process, started by Main and shared by its tests.
var (
	mu       sync.Mutex
	mainRan  bool
	declared []string
	started  = map[string]*startResult{}
)

type startResult struct {
	once sync.Once
	srv  *Server
	err  error
}

// Main starts the named servers (in parallel), runs the tests, stops the
// servers and returns the exit code for os.Exit:
//
//	func TestMain(m *testing.M) { os.Exit(harness.Main(m, harness.MinIOName, harness.VersityGWName)) }
//
// A server that cannot be started is reported on stderr and fails every
// test that asks for it (MinIO, Versity, Get, ForEach) with the reason; tests
// of the other servers still run. Servers a test asks for that were not named
// here are started on first use. Main also points AWS_ACCESS_KEY_ID and
// AWS_SECRET_ACCESS_KEY at the servers' credentials.
func Main(m *testing.M, names ...string) int {
	flag.Parse()
	mu.Lock()
	mainRan = true
	declared = slices.Clone(names)
	mu.Unlock()
	setCredentialEnv()

	// Ctrl-C or a kill must not leave containers behind (processes die
	// with us anyway).
	sigs := make(chan os.Signal, 1)
	signal.Notify(sigs, os.Interrupt, syscall.SIGTERM)
	go func() {
		sig := <-sigs
		fmt.Fprintf(os.Stderr, "harness: %v: stopping servers\n", sig)
		stopAll()
		os.Exit(2)
	}()
	defer stopAll()

	var wg sync.WaitGroup
	for _, name := range names {
		wg.Go(func() {
			srv, err := server(name)
			switch {
			case err != nil:
				fmt.Fprintf(os.Stderr, "harness: %v\n", err)
			case testing.Verbose():
				fmt.Fprintf(os.Stderr, "harness: %s at %s (%s)\n", srv.Name, srv.Endpoint, srv.How)
			}
		})
	}
	wg.Wait()
	return m.Run()
}

// setCredentialEnv makes the AWS SDK's default chain find the test servers'
// credentials and nothing else.
func setCredentialEnv() {
	accessKey, secretKey := credentialsFromEnv()
	os.Setenv("AWS_ACCESS_KEY_ID", accessKey)
	os.Setenv("AWS_SECRET_ACCESS_KEY", secretKey)
	os.Unsetenv("AWS_SESSION_TOKEN")
	os.Unsetenv("AWS_PROFILE")
	os.Setenv("AWS_REGION", Region)
	os.Setenv("AWS_EC2_METADATA_DISABLED", "true")
}

// server starts the named server once per process and returns it.
func server(name string) (*Server, error) {
	mu.Lock()
	r, ok := started[name]
	if !ok {
		r = &startResult{}
		started[name] = r
	}
	mu.Unlock()
	r.once.Do(func() {
		r.srv, r.err = Start(context.Background(), name)
	})
	return r.srv, r.err
}

func stopAll() {
	mu.Lock()
	results := make([]*startResult, 0, len(started))
	for _, r := range started {
		results = append(results, r)
	}
	mu.Unlock()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	var wg sync.WaitGroup
	for _, r := range results {
		wg.Go(func() {
			// Waits for a start still in progress, then stops its server.
			r.once.Do(func() {})
			if r.srv == nil {
				return
			}
			if err := r.srv.Stop(ctx); err != nil {
				fmt.Fprintf(os.Stderr, "harness: stop %s: %v\n", r.srv.Name, err)
			}
		})
	}
	wg.Wait()
}

// Get returns the named server of this test process, or fails t with the
// reason it could not be started.
func Get(t testing.TB, name string) *Server {
	t.Helper()
	mu.Lock()
	ran := mainRan
	mu.Unlock()
	if !ran {
		t.Fatalf("harness: no server for %s: the test package's TestMain must call harness.Main", name)
	}
	srv, err := server(name)
	if err != nil {
		t.Fatalf("harness: %v", err)
	}
	return srv
}

// MinIO returns the MinIO server of this test process.
func MinIO(t testing.TB) *Server {
	t.Helper()
	return Get(t, MinIOName)
}

// Versity returns the versitygw server of this test process.
func Versity(t testing.TB) *Server {
	t.Helper()
	return Get(t, VersityGWName)
}

// ForEach runs fn as a subtest, named for the server, once per server named
// in Main.
func ForEach(t *testing.T, fn func(t *testing.T, srv *Server)) {
	t.Helper()
	mu.Lock()
	names := slices.Clone(declared)
	mu.Unlock()
	if len(names) == 0 {
		t.Fatal("harness: ForEach needs the servers named in harness.Main")
	}
	for _, name := range names {
		t.Run(name, func(t *testing.T) {
			fn(t, Get(t, name))
		})
	}
}
