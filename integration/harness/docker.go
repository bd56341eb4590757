package harness

import (
	"context"
	"fmt"
	"io"
	"net/netip"
	"os"
	"strings"
	"sync"
	"time"

	"github.com/moby/moby/api/types/container"
	"github.com/moby/moby/api/types/mount"
	"github.com/moby/moby/api/types/network"
	"github.com/moby/moby/client"
	"github.com/testcontainers/testcontainers-go"
	tclog "github.com/testcontainers/testcontainers-go/log"
	"github.com/testcontainers/testcontainers-go/wait"
)

var (
	dockerOnce sync.Once
	dockerErr  error
)

// dockerAvailable reports (once per process) whether testcontainers can
// reach a Docker engine, and why not.
func dockerAvailable(ctx context.Context) error {
	dockerOnce.Do(func() {
		tclog.SetDefault(tcLog)
		// Ports are published on the engine's 127.0.0.1 only. Left to
		// itself, testcontainers reaches them through the bridge gateway
		// whenever /.dockerenv exists (as in a docker-in-docker CI
		// machine), where nothing listens.
		if _, ok := os.LookupEnv("TESTCONTAINERS_HOST_OVERRIDE"); !ok {
			os.Setenv("TESTCONTAINERS_HOST_OVERRIDE", "127.0.0.1")
		}
		ctx, cancel := context.WithTimeout(ctx, 15*time.Second)
		defer cancel()
		if host := os.Getenv("DOCKER_HOST"); host != "" {
			// testcontainers falls back to the default socket when
			// DOCKER_HOST does not answer; the docker CLI (and so `make
			// test`) does not. Agree with the CLI.
			cli, err := client.New(client.FromEnv)
			if err != nil {
				dockerErr = fmt.Errorf("DOCKER_HOST=%s: %w", host, err)
				return
			}
			_, err = cli.Ping(ctx, client.PingOptions{})
			_ = cli.Close()
			if err != nil {
				dockerErr = fmt.Errorf("DOCKER_HOST=%s: %w", host, err)
				return
			}
		}
		cli, err := testcontainers.NewDockerClientWithOpts(ctx)
		if err != nil {
			dockerErr = err
			return
		}
		_ = cli.Close()
	})
	return dockerErr
}

// useDocker decides between a container and a local process: Docker when an
// engine answers, unless S3QUEUE_TEST_BINDIR is set and no image was chosen
// for this server (then the official image would have to be pulled, and the
// test command found no engine it could build images on).
func useDocker(ctx context.Context, sp spec) (bool, error) {
	err := dockerAvailable(ctx)
	if err != nil {
		return false, err
	}
	if os.Getenv(EnvBinDir) != "" && os.Getenv(sp.imageEnv) == "" {
		return false, nil
	}
	return true, nil
}

func startContainer(ctx context.Context, sp spec, accessKey, secretKey string, extra ...testcontainers.ContainerCustomizer) (*Server, error) {
	image := os.Getenv(sp.imageEnv)
	if image == "" {
		image = sp.defaultImage
	}
	ctx, cancel := context.WithTimeout(ctx, startTimeout)
	defer cancel()

	port := network.MustParsePort(sp.containerPort)
	startLog := &tailLogger{}
	opts := []testcontainers.ContainerCustomizer{
		testcontainers.WithLogger(startLog),
		testcontainers.WithExposedPorts(sp.containerPort),
		testcontainers.WithEnv(sp.env(accessKey, secretKey)),
		testcontainers.WithCmd(sp.containerCmd(accessKey, secretKey)...),
		testcontainers.WithLabels(map[string]string{"s3queue.test": sp.name}),
		testcontainers.WithHostConfigModifier(func(hc *container.HostConfig) {
			// Published on loopback only, never on the host's interfaces.
			hc.PortBindings = network.PortMap{
				port: {{HostIP: netip.MustParseAddr("127.0.0.1"), HostPort: "0"}},
			}
			// An anonymous volume for the data: a real filesystem (with
			// the xattrs versitygw's posix backend needs) instead of the
			// container's overlay, created even where the image lacks
			// /data, and removed with the container.
			hc.Mounts = append(hc.Mounts, mount.Mount{Type: mount.TypeVolume, Target: "/data"})
		}),
		testcontainers.WithWaitStrategyAndDeadline(startTimeout,
			wait.ForHTTP(sp.healthPath).
				WithPort(sp.containerPort).
				WithForcedIPv4LocalHost().
				WithStatusCodeMatcher(sp.statusOK).
				WithPollInterval(100*time.Millisecond)),
	}
	ctr, err := testcontainers.Run(ctx, image, append(opts, extra...)...)
	terminate := func(ctx context.Context) error {
		if ctr == nil {
			return nil
		}
		return ctr.Terminate(ctx, testcontainers.StopTimeout(5*time.Second))
	}
	logs := func() string { return containerLogs(ctr) }
	fail := func(err error) (*Server, error) {
		out := logs()
		stopCtx, stopCancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer stopCancel()
		_ = terminate(stopCtx)
		hint := ""
		if image == sp.defaultImage {
			hint = fmt.Sprintf(" (%s unset, so the official image was used: run `make test` to build a local one)", sp.imageEnv)
		}
		return nil, fmt.Errorf("start %s in docker from %s%s: %w%s", sp.name, image, hint, err, outputSuffix(out, startLog.String()))
	}
	if err != nil {
		return fail(err)
	}
	mapped, err := ctr.MappedPort(ctx, sp.containerPort)
	if err != nil {
		return fail(fmt.Errorf("mapped port: %w", err))
	}
	endpoint := fmt.Sprintf("http://127.0.0.1:%d", mapped.Num())
	client, err := newClient(ctx, endpoint, accessKey, secretKey)
	if err != nil {
		return fail(err)
	}
	return &Server{
		Name: sp.name, Endpoint: endpoint, AccessKey: accessKey, SecretKey: secretKey, Region: Region,
		How: "docker " + image, client: client, stop: terminate, logs: logs,
	}, nil
}

// containerLogs returns the tail of a container's output, or "".
func containerLogs(ctr *testcontainers.DockerContainer) string {
	if ctr == nil {
		return ""
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	rc, err := ctr.Logs(ctx)
	if err != nil {
		return ""
	}
	defer rc.Close()
	var tail tailBuffer
	_, _ = io.Copy(&tail, rc)
	return tail.String()
}

// outputSuffix formats captured output for an error message.
func outputSuffix(outputs ...string) string {
	var b strings.Builder
	for _, out := range outputs {
		if out = strings.TrimSpace(out); out != "" {
			b.WriteString("\n--- output ---\n")
			b.WriteString(out)
		}
	}
	return b.String()
}

// tcLog takes testcontainers' chatter outside a container start.
var tcLog = &tailLogger{}

// tailLogger collects testcontainers' chatter: shown when a start fails (or
// with S3QUEUE_TEST_VERBOSE=1), kept out of passing test output otherwise.
type tailLogger struct{ buf tailBuffer }

func (l *tailLogger) Printf(format string, v ...any) {
	line := fmt.Sprintf(format, v...)
	if !strings.HasSuffix(line, "\n") {
		line += "\n"
	}
	if verbose() {
		fmt.Fprint(os.Stderr, "testcontainers: "+line)
	}
	_, _ = l.buf.Write([]byte(line))
}

func (l *tailLogger) String() string { return l.buf.String() }

// tailBuffer keeps the last tailSize bytes written to it.
type tailBuffer struct {
	mu  sync.Mutex
	buf []byte
}

const tailSize = 16 << 10

func (b *tailBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.buf = append(b.buf, p...)
	if len(b.buf) > tailSize {
		b.buf = append(b.buf[:0], b.buf[len(b.buf)-tailSize:]...)
	}
	return len(p), nil
}

func (b *tailBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return string(b.buf)
}
