package harness

import (
	"context"
	"fmt"
	"net/url"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/testcontainers/testcontainers-go"
	"github.com/testcontainers/testcontainers-go/network"
)

// Network is a Docker network of one test: containers on it reach each
// other by name, as the services of a docker-compose file or the pods of a
// cluster do.
type Network struct {
	// Name is the network's name, for testcontainers' network.WithNetworkName
	// and `docker run --network`.
	Name string
}

// NewNetwork creates a Docker network removed when the test ends. It fails
// the test when no Docker engine answers: a test that needs containers of
// its own cannot run as local processes.
func NewNetwork(t testing.TB) *Network {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := dockerAvailable(ctx); err != nil {
		t.Fatalf("harness: a Docker network needs a Docker engine: %v", err)
	}
	nw, err := network.New(ctx, network.WithLabels(map[string]string{"s3queue.test": t.Name()}))
	if err != nil {
		t.Fatalf("harness: create Docker network: %v", err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		if err := nw.Remove(ctx); err != nil {
			t.Logf("harness: remove Docker network %s: %v", nw.Name, err)
		}
	})
	return &Network{Name: nw.Name}
}

// DockerAvailable reports whether a Docker engine answers, and why not.
func DockerAvailable() error {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	return dockerAvailable(ctx)
}

// StartOn starts a server of the named kind for this test alone, in a
// container on n under the host name alias, and stops it when the test
// ends. Its Endpoint is published on loopback for the test process, as
// every server's is; InNetwork is the endpoint containers on n use. The
// shared servers of Main stay on no network of a test's: a test that
// brings containers of its own gets a server of its own.
func (n *Network) StartOn(t testing.TB, name, alias string) *Server {
	t.Helper()
	sp, ok := specs[name]
	if !ok {
		t.Fatalf("harness: start %q: unknown server (want %s or %s)", name, MinIOName, VersityGWName)
	}
	if os.Getenv(sp.imageEnv) == "" {
		// The official image would have to be pulled.
		t.Logf("harness: %s unset: starting %s from %s", sp.imageEnv, name, sp.defaultImage)
	}
	accessKey, secretKey := credentialsFromEnv()
	srv, err := startContainer(context.Background(), sp, accessKey, secretKey,
		network.WithNetworkName([]string{alias}, n.Name),
		testcontainers.WithLabels(map[string]string{"s3queue.test": t.Name()}))
	if err != nil {
		t.Fatalf("harness: %v", err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
		defer cancel()
		if err := srv.Stop(ctx); err != nil {
			t.Logf("harness: stop %s: %v", name, err)
		}
	})
	port, _, _ := strings.Cut(sp.containerPort, "/")
	srv.InNetwork = fmt.Sprintf("http://%s:%s", alias, port)
	srv.How += " on network " + n.Name + " as " + alias
	return srv
}

// NetworkStoreURL is StoreURL for a process in a container on the server's
// network (see Network.StartOn): the same store, reached by the server's
// name there.
func (s *Server) NetworkStoreURL(bucket, prefix string) string {
	if s.InNetwork == "" {
		panic("harness: NetworkStoreURL of a server on no test network")
	}
	u, err := url.Parse(s.StoreURL(bucket, prefix))
	if err != nil {
		panic(err)
	}
	q := u.Query()
	q.Set("endpoint", s.InNetwork)
	u.RawQuery = q.Encode()
	return u.String()
}
