package harness

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"time"
)

// startProcess runs the server's binary from binDir as a child process on a
// free 127.0.0.1 port, with its data in a fresh temporary directory.
func startProcess(ctx context.Context, sp spec, binDir, accessKey, secretKey string) (*Server, error) {
	path := filepath.Join(ModuleRelative(binDir), sp.binary)
	if _, err := os.Stat(path); err != nil {
		return nil, fmt.Errorf("start %s: %s=%s has no %s binary (%v): run `make servers` or `make test`",
			sp.name, EnvBinDir, binDir, sp.binary, err)
	}
	ctx, cancel := context.WithTimeout(ctx, startTimeout)
	defer cancel()

	var lastErr error
	// The free port is found by listening and closing, so another process
	// can take it before the server binds it: try again on that one error.
	for range 3 {
		srv, err := runProcess(ctx, sp, path, accessKey, secretKey)
		if err == nil {
			return srv, nil
		}
		lastErr = err
		if !errors.Is(err, errAddrInUse) {
			break
		}
	}
	return nil, fmt.Errorf("start %s from %s: %w", sp.name, path, lastErr)
}

var errAddrInUse = errors.New("address already in use")

func runProcess(ctx context.Context, sp spec, path, accessKey, secretKey string) (*Server, error) {
	port, err := freePort()
	if err != nil {
		return nil, err
	}
	addr := fmt.Sprintf("127.0.0.1:%d", port)
	dir, err := os.MkdirTemp("", "s3queue-"+sp.name+"-")
	if err != nil {
		return nil, err
	}
	for _, sub := range []string{"data", "tmp", "meta"} {
		if err := os.Mkdir(filepath.Join(dir, sub), 0o755); err != nil {
			_ = os.RemoveAll(dir)
			return nil, err
		}
	}
	args, err := sp.processArgs(addr, dir, accessKey, secretKey, freePort)
	if err != nil {
		_ = os.RemoveAll(dir)
		return nil, err
	}
	// A clean environment: the user's MINIO_* or VGW_* settings must not
	// change the server under test.
	env := []string{"HOME=" + dir, "TMPDIR=" + filepath.Join(dir, "tmp"), "PATH=" + os.Getenv("PATH")}
	for k, v := range sp.env(accessKey, secretKey) {
		env = append(env, k+"="+v)
	}

	endpoint := "http://" + addr
	var p *process
	for attempt := 0; ; attempt++ {
		p, err = spawn(path, args, env, dir)
		if err != nil {
			_ = os.RemoveAll(dir)
			return nil, err
		}
		err = waitHTTP(ctx, endpoint+sp.healthPath, sp.statusOK, p.exited)
		if err == nil {
			break
		}
		_ = p.stop()
		out := p.output.String()
		if attempt == 0 && sp.fallback != nil {
			if next, ok := sp.fallback(out, args, dir); ok {
				args = next
				continue
			}
		}
		_ = os.RemoveAll(dir)
		if strings.Contains(out, "address already in use") {
			return nil, fmt.Errorf("%w: %v%s", errAddrInUse, err, outputSuffix(out))
		}
		return nil, fmt.Errorf("%w%s", err, outputSuffix(out))
	}
	stop := func(context.Context) error {
		err := p.stop()
		if rmErr := os.RemoveAll(dir); rmErr != nil && err == nil {
			err = rmErr
		}
		return err
	}
	client, err := newClient(ctx, endpoint, accessKey, secretKey)
	if err != nil {
		_ = stop(ctx)
		return nil, fmt.Errorf("%w%s", err, outputSuffix(p.output.String()))
	}
	return &Server{
		Name: sp.name, Endpoint: endpoint, AccessKey: accessKey, SecretKey: secretKey, Region: Region,
		How: "process " + path, client: client, stop: stop, logs: p.output.String,
	}, nil
}

// process is a running child server.
type process struct {
	cmd    *exec.Cmd
	output *tailBuffer
	// exited is closed when the process has exited.
	exited chan struct{}
}

func spawn(path string, args, env []string, dir string) (*process, error) {
	p := &process{output: &tailBuffer{}, exited: make(chan struct{})}
	cmd := exec.Command(path, args...)
	cmd.Env = env
	cmd.Dir = dir
	var out = p.output
	if verbose() {
		cmd.Stdout = teeStderr{out}
	} else {
		cmd.Stdout = out
	}
	cmd.Stderr = cmd.Stdout
	p.cmd = cmd
	if err := startChild(cmd); err != nil {
		return nil, fmt.Errorf("run %s: %w", path, err)
	}
	go func() {
		_ = cmd.Wait()
		close(p.exited)
	}()
	return p, nil
}

// stop asks the server to shut down and kills it if it has not within 10s.
func (p *process) stop() error {
	select {
	case <-p.exited:
		return nil
	default:
	}
	_ = p.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-p.exited:
		return nil
	case <-time.After(10 * time.Second):
	}
	if err := p.cmd.Process.Kill(); err != nil {
		return fmt.Errorf("kill %s: %w", p.cmd.Path, err)
	}
	<-p.exited
	return nil
}

// waitHTTP polls url until its status satisfies ok, the process exits, or
// ctx ends.
func waitHTTP(ctx context.Context, url string, ok func(int) bool, exited <-chan struct{}) error {
	client := &http.Client{Timeout: 2 * time.Second}
	var lastErr error
	for {
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
		if err != nil {
			return err
		}
		resp, err := client.Do(req)
		if err == nil {
			_ = resp.Body.Close()
			if ok(resp.StatusCode) {
				return nil
			}
			err = fmt.Errorf("GET %s: status %d", url, resp.StatusCode)
		}
		lastErr = err
		select {
		case <-exited:
			return fmt.Errorf("server exited before answering %s", url)
		case <-ctx.Done():
			return fmt.Errorf("server not ready: %w", lastErr)
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// freePort returns a TCP port that was free on 127.0.0.1 a moment ago.
func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, fmt.Errorf("find a free port: %w", err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

// teeStderr writes to the buffer and to stderr (S3QUEUE_TEST_VERBOSE=1).
type teeStderr struct{ buf *tailBuffer }

func (t teeStderr) Write(p []byte) (int, error) {
	_, _ = os.Stderr.Write(p)
	return t.buf.Write(p)
}

// ModuleRelative resolves a relative path against the module root (the
// nearest folder with a go.mod above the working directory): go test runs
// each package in its own folder, but S3QUEUE_TEST_BINDIR=.cache/bin means
// the repository's .cache.
func ModuleRelative(path string) string {
	if filepath.IsAbs(path) {
		return path
	}
	wd, err := os.Getwd()
	if err != nil {
		return path
	}
	for dir := wd; ; dir = filepath.Dir(dir) {
		if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
			return filepath.Join(dir, path)
		}
		if filepath.Dir(dir) == dir {
			return filepath.Join(wd, path)
		}
	}
}
