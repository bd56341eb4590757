package chaos

// The suite's infrastructure: a MinIO of its own that it can kill -9 and
// start again on the same data, a TCP proxy per s3queue process through
// which the suite cuts that process off from MinIO, and the s3queue binary
// built from the code under test.

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/minio/minio-go/v7"
	"github.com/minio/minio-go/v7/pkg/credentials"

	"github.com/s3queue/s3queue/integration/harness"
)

const (
	accessKey = "s3queue-chaos"
	secretKey = "s3queue-chaos-secret"
	region    = "us-east-1"
)

// Children get SIGKILL when the test process dies (Pdeathsig), so no
// MinIO or worker outlives a run; the signal fires when the thread that
// forked the child exits, so every child is forked from one goroutine
// locked to a thread that never exits.
var spawnRequests = make(chan spawnRequest)

type spawnRequest struct {
	cmd  *exec.Cmd
	done chan error
}

func init() {
	go func() {
		runtime.LockOSThread()
		for req := range spawnRequests {
			req.done <- req.cmd.Start()
		}
	}()
}

func startChild(cmd *exec.Cmd) error {
	if cmd.SysProcAttr == nil {
		cmd.SysProcAttr = &syscall.SysProcAttr{}
	}
	cmd.SysProcAttr.Pdeathsig = syscall.SIGKILL
	done := make(chan error, 1)
	spawnRequests <- spawnRequest{cmd: cmd, done: done}
	return <-done
}

// minioServer is a MinIO process on a fixed loopback port and data folder,
// so that a restart after kill -9 serves the same objects at the same
// address.
type minioServer struct {
	bin, dir, addr string
	logPath        string

	mu   sync.Mutex
	cmd  *exec.Cmd
	done chan struct{}
}

// minioBinary finds the MinIO binary `make test` builds: in
// S3QUEUE_TEST_BINDIR, else in the module's .cache/bin (scripts/servers.sh
// builds it there whether or not Docker is used for the other tests).
func minioBinary() (string, error) {
	var tried []string
	if dir := os.Getenv("S3QUEUE_TEST_BINDIR"); dir != "" {
		p := filepath.Join(harness.ModuleRelative(dir), "minio")
		if _, err := os.Stat(p); err == nil {
			return p, nil
		}
		tried = append(tried, p)
	}
	p := filepath.Join(harness.ModuleRelative(".cache/bin"), "minio")
	if _, err := os.Stat(p); err == nil {
		return p, nil
	}
	tried = append(tried, p)
	return "", fmt.Errorf("no MinIO binary at %v: the chaos suite kills MinIO and starts it again, so it runs its own from the binary that `make servers` (or `make test`) builds into .cache/bin", tried)
}

func startMinIO(t *testing.T, dir string) *minioServer {
	t.Helper()
	bin, err := minioBinary()
	if err != nil {
		t.Fatal(err)
	}
	port, err := freePort()
	if err != nil {
		t.Fatal(err)
	}
	s := &minioServer{bin: bin, dir: dir, addr: fmt.Sprintf("127.0.0.1:%d", port), logPath: filepath.Join(dir, "minio.log")}
	for _, sub := range []string{"data", "tmp", "certs"} {
		if err := os.MkdirAll(filepath.Join(dir, sub), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	if err := s.start(context.Background()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.kill() })
	return s
}

// start runs MinIO and waits until it answers.
func (s *minioServer) start(ctx context.Context) error {
	console, err := freePort()
	if err != nil {
		return err
	}
	logf, err := os.OpenFile(s.logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return err
	}
	cmd := exec.Command(s.bin, "server", filepath.Join(s.dir, "data"), "--address", s.addr,
		"--console-address", fmt.Sprintf("127.0.0.1:%d", console), "--certs-dir", filepath.Join(s.dir, "certs"), "--quiet")
	cmd.Env = []string{"HOME=" + s.dir, "TMPDIR=" + filepath.Join(s.dir, "tmp"), "PATH=" + os.Getenv("PATH"),
		"MINIO_ROOT_USER=" + accessKey, "MINIO_ROOT_PASSWORD=" + secretKey,
		"MINIO_BROWSER=off", "MINIO_UPDATE=off"}
	cmd.Stdout, cmd.Stderr = logf, logf
	if err := startChild(cmd); err != nil {
		logf.Close()
		return fmt.Errorf("start minio: %w", err)
	}
	done := make(chan struct{})
	go func() { _ = cmd.Wait(); logf.Close(); close(done) }()
	s.mu.Lock()
	s.cmd, s.done = cmd, done
	s.mu.Unlock()
	ctx, cancel := context.WithTimeout(ctx, 90*time.Second)
	defer cancel()
	client := &http.Client{Timeout: 2 * time.Second}
	for {
		resp, err := client.Get("http://" + s.addr + "/minio/health/ready")
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return nil
			}
		}
		select {
		case <-done:
			out, _ := os.ReadFile(s.logPath)
			return fmt.Errorf("minio exited before it was ready:\n%s", tail(string(out), 2000))
		case <-ctx.Done():
			return fmt.Errorf("minio not ready at %s: %v", s.addr, err)
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// kill ends MinIO with SIGKILL and waits for it to exit.
func (s *minioServer) kill() {
	s.mu.Lock()
	cmd, done := s.cmd, s.done
	s.mu.Unlock()
	if cmd == nil {
		return
	}
	_ = cmd.Process.Signal(syscall.SIGKILL)
	<-done
}

func (s *minioServer) client(t *testing.T) *minio.Client {
	t.Helper()
	c, err := minio.New(s.addr, &minio.Options{Creds: credentials.NewStaticV4(accessKey, secretKey, ""),
		Region: region, BucketLookup: minio.BucketLookupPath})
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// proxy forwards TCP connections from a loopback port to MinIO. Cut drops
// every connection and black-holes new ones (accepted, never answered)
// until Heal: to the process behind it, the network is gone, requests hang
// until their own timeouts.
type proxy struct {
	ln     net.Listener
	target string

	mu    sync.Mutex
	cut   bool
	conns map[net.Conn]struct{}
	held  []net.Conn
}

func newProxy(t *testing.T, target string) *proxy {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &proxy{ln: ln, target: target, conns: map[net.Conn]struct{}{}}
	go p.serve()
	t.Cleanup(func() { ln.Close(); p.Cut(); p.Heal() })
	return p
}

func (p *proxy) Endpoint() string { return "http://" + p.ln.Addr().String() }

func (p *proxy) serve() {
	for {
		c, err := p.ln.Accept()
		if err != nil {
			return
		}
		p.mu.Lock()
		if p.cut {
			p.held = append(p.held, c)
			p.mu.Unlock()
			continue
		}
		p.mu.Unlock()
		go p.forward(c)
	}
}

func (p *proxy) forward(c net.Conn) {
	up, err := net.DialTimeout("tcp", p.target, 2*time.Second)
	if err != nil {
		// MinIO is down: the client sees its connection reset.
		if tc, ok := c.(*net.TCPConn); ok {
			_ = tc.SetLinger(0)
		}
		c.Close()
		return
	}
	p.mu.Lock()
	if p.cut {
		p.mu.Unlock()
		up.Close()
		c.Close()
		return
	}
	p.conns[c], p.conns[up] = struct{}{}, struct{}{}
	p.mu.Unlock()
	var wg sync.WaitGroup
	pipe := func(dst, src net.Conn) {
		defer wg.Done()
		_, _ = io.Copy(dst, src)
		if tc, ok := dst.(*net.TCPConn); ok {
			_ = tc.CloseWrite()
		}
	}
	wg.Add(2)
	go pipe(up, c)
	go pipe(c, up)
	wg.Wait()
	c.Close()
	up.Close()
	p.mu.Lock()
	delete(p.conns, c)
	delete(p.conns, up)
	p.mu.Unlock()
}

// Cut drops every open connection and black-holes new ones.
func (p *proxy) Cut() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.cut = true
	for c := range p.conns {
		c.Close()
	}
}

// Heal forwards again; connections black-holed meanwhile are closed.
func (p *proxy) Heal() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.cut = false
	for _, c := range p.held {
		c.Close()
	}
	p.held = nil
}

// storeURL is the s3:// URL of the queue in bucket, through endpoint.
func storeURL(endpoint, bucket string) string {
	q := url.Values{}
	q.Set("endpoint", endpoint)
	q.Set("region", region)
	q.Set("path_style", "true")
	return (&url.URL{Scheme: "s3", Host: bucket, Path: "/" + queuePrefix, RawQuery: q.Encode()}).String()
}

// buildBinary builds cmd/s3queue from the code under test (without -race:
// the suite measures the binary users run).
func buildBinary(dir string) (string, error) {
	bin := filepath.Join(dir, "s3queue")
	cmd := exec.Command("go", "build", "-o", bin, "github.com/s3queue/s3queue/cmd/s3queue")
	if out, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("go build ./cmd/s3queue: %v\n%s", err, out)
	}
	return bin, nil
}

func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, fmt.Errorf("find a free port: %w", err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

func tail(s string, n int) string {
	if len(s) > n {
		return s[len(s)-n:]
	}
	return s
}
