package harness

import (
	"context"
	"fmt"
	"os"
	"slices"
	"strings"
)

// spec says how to run one kind of server, in a container or as a process.
type spec struct {
	name string
	// binary is the executable's name in S3QUEUE_TEST_BINDIR.
	binary string
	// imageEnv names the variable holding the image; defaultImage is used
	// when it is unset.
	imageEnv, defaultImage string
	// containerPort is the S3 port inside the container.
	containerPort string
	// healthPath is polled until it answers; statusOK says which status
	// counts as up.
	healthPath string
	statusOK   func(status int) bool
	env        func(accessKey, secretKey string) map[string]string
	// containerCmd is the command after the image's entrypoint (both our
	// FROM-scratch images and the official ones take the same arguments).
	containerCmd func(accessKey, secretKey string) []string
	// processArgs runs the binary on addr (127.0.0.1:PORT) with its data in
	// dir; ports hands out further free loopback ports.
	processArgs func(addr, dir, accessKey, secretKey string, ports func() (int, error)) ([]string, error)
	// fallback, given the output of a process that did not come up, may
	// return the arguments of one more attempt.
	fallback func(output string, args []string, dir string) ([]string, bool)
}

var specs = map[string]spec{
	MinIOName: {
		name:          MinIOName,
		binary:        "minio",
		imageEnv:      EnvMinIOImage,
		defaultImage:  "minio/minio:latest",
		containerPort: "9000/tcp",
		healthPath:    "/minio/health/live",
		statusOK:      func(status int) bool { return status == 200 },
		env: func(accessKey, secretKey string) map[string]string {
			return map[string]string{
				"MINIO_ROOT_USER":     accessKey,
				"MINIO_ROOT_PASSWORD": secretKey,
				// Per-API request counters at /minio/v2/metrics/cluster,
				// for tests that count requests.
				"MINIO_PROMETHEUS_AUTH_TYPE": "public",
				// No web console: one listener fewer, faster start.
				"MINIO_BROWSER": "off",
				"MINIO_UPDATE":  "off",
			}
		},
		containerCmd: func(_, _ string) []string {
			return []string{"server", "/data", "--address", ":9000"}
		},
		processArgs: func(addr, dir, _, _ string, ports func() (int, error)) ([]string, error) {
			// MinIO picks a console port on all interfaces unless told;
			// with MINIO_BROWSER=off nothing listens there, but pin it to
			// loopback all the same.
			console, err := ports()
			if err != nil {
				return nil, err
			}
			return []string{
				"server", dir + "/data",
				"--address", addr,
				"--console-address", fmt.Sprintf("127.0.0.1:%d", console),
				"--certs-dir", dir + "/certs",
				"--quiet",
			}, nil
		},
	},
	VersityGWName: {
		name:          VersityGWName,
		binary:        "versitygw",
		imageEnv:      EnvVersityGWImage,
		defaultImage:  "versity/versitygw:v1.8.0",
		containerPort: "7070/tcp",
		healthPath:    "/",
		// An anonymous GET / is refused (403): any HTTP answer means up.
		statusOK: func(int) bool { return true },
		env:      func(_, _ string) map[string]string { return nil },
		containerCmd: func(accessKey, secretKey string) []string {
			return []string{"--port", ":7070", "--access", accessKey, "--secret", secretKey, "--quiet", "posix", "/data"}
		},
		processArgs: func(addr, dir, accessKey, secretKey string, _ func() (int, error)) ([]string, error) {
			return []string{"--port", addr, "--access", accessKey, "--secret", secretKey, "--quiet", "posix", dir + "/data"}, nil
		},
		fallback: func(output string, args []string, dir string) ([]string, bool) {
			// The posix backend keeps metadata (ETags among it) in xattrs;
			// where the temp dir's filesystem has none (tmpfs before Linux
			// 6.6), it can keep them in a sidecar directory instead.
			if !strings.Contains(output, "xattr") || slices.Contains(args, "--sidecar") {
				return nil, false
			}
			i := slices.Index(args, "posix")
			return slices.Concat(args[:i+1], []string{"--sidecar", dir + "/meta"}, args[i+1:]), true
		},
	},
}

// Start starts (or, with S3QUEUE_TEST_ENDPOINT, connects to) the server
// named name and returns it once it answers authenticated S3 requests. The
// caller must Stop it. The error says why no server could be had and what
// to do about it.
func Start(ctx context.Context, name string) (*Server, error) {
	sp, ok := specs[name]
	if !ok {
		return nil, fmt.Errorf("start %q: unknown server (want %s or %s)", name, MinIOName, VersityGWName)
	}
	accessKey, secretKey := credentialsFromEnv()

	if endpoint := os.Getenv(EnvEndpoint); endpoint != "" {
		provider := os.Getenv(EnvProvider)
		if provider == "" {
			return nil, fmt.Errorf("start %s: %s is set but %s is not: set it to the server's kind (%s or %s)",
				name, EnvEndpoint, EnvProvider, MinIOName, VersityGWName)
		}
		if _, known := specs[provider]; !known {
			return nil, fmt.Errorf("start %s: %s=%q: want %s or %s", name, EnvProvider, provider, MinIOName, VersityGWName)
		}
		if provider == name {
			return startExternal(ctx, name, endpoint, accessKey, secretKey)
		}
		// The external server is another kind: start this one as usual.
	}

	docker, dockerErr := useDocker(ctx, sp)
	if docker {
		return startContainer(ctx, sp, accessKey, secretKey)
	}
	if dir := os.Getenv(EnvBinDir); dir != "" {
		return startProcess(ctx, sp, dir, accessKey, secretKey)
	}
	return nil, fmt.Errorf("start %s: no Docker engine (%v) and %s unset: run `make test`, which builds the servers "+
		"and sets it, or point %s and %s at a running server", name, dockerErr, EnvBinDir, EnvEndpoint, EnvProvider)
}

func startExternal(ctx context.Context, name, endpoint, accessKey, secretKey string) (*Server, error) {
	endpoint = strings.TrimRight(endpoint, "/")
	ctx, cancel := context.WithTimeout(ctx, startTimeout)
	defer cancel()
	client, err := newClient(ctx, endpoint, accessKey, secretKey)
	if err != nil {
		return nil, fmt.Errorf("use %s from %s: %w", name, EnvEndpoint, err)
	}
	return &Server{
		Name: name, Endpoint: endpoint, AccessKey: accessKey, SecretKey: secretKey, Region: Region,
		How: "external", client: client,
	}, nil
}
