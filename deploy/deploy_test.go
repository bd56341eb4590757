// Package deploy holds the deployment files (Dockerfile, docker-compose.yml,
// Kubernetes manifests, systemd units, IAM policies); its tests check what
// can be checked without a cluster: the files parse, the configuration they
// carry is valid, and every stop timeout covers the worker's drain.
package deploy

import (
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/s3queue/s3queue/internal/config"
)

// drainBound is how long a worker may take to stop after SIGTERM beyond
// its shutdown_grace: leaving the fleet (bounded at 10s) before the grace,
// and waiting for cancelled handlers (at most 10s) after it (worker.Run).
const drainBound = 20 * time.Second

func read(t *testing.T, path string) string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// match returns the first submatch of re in s, failing the test without one.
func match(t *testing.T, what, re, s string) string {
	t.Helper()
	m := regexp.MustCompile(re).FindStringSubmatch(s)
	if m == nil {
		t.Fatalf("%s: no match for %s", what, re)
	}
	return m[1]
}

// configMapTOML is the queue.toml of k8s/configmap.yaml, unindented.
func configMapTOML(t *testing.T) string {
	t.Helper()
	doc := read(t, "k8s/configmap.yaml")
	_, block, ok := strings.Cut(doc, "queue.toml: |\n")
	if !ok {
		t.Fatal("k8s/configmap.yaml has no queue.toml block")
	}
	var lines []string
	for _, l := range strings.Split(block, "\n") {
		if l != "" && !strings.HasPrefix(l, "    ") {
			break
		}
		lines = append(lines, strings.TrimPrefix(l, "    "))
	}
	return strings.Join(lines, "\n")
}

// The ConfigMap's queue.toml is a valid configuration: the command would
// start with it.
func TestConfigMapIsAValidConfig(t *testing.T) {
	path := filepath.Join(t.TempDir(), "queue.toml")
	if err := os.WriteFile(path, []byte(configMapTOML(t)), 0o644); err != nil {
		t.Fatal(err)
	}
	cfg, err := config.Load(path, nil)
	if err != nil {
		t.Fatalf("k8s/configmap.yaml's queue.toml: %v", err)
	}
	if cfg.Store == "" || len(cfg.Handlers) == 0 {
		t.Errorf("k8s/configmap.yaml's queue.toml: store %q, handlers %v; want both", cfg.Store, cfg.Handlers)
	}
}

// Every way of stopping a worker gives it time to drain: the SIGKILL comes
// only after shutdown_grace plus the rest of the drain.
func TestStopTimeoutsCoverTheDrain(t *testing.T) {
	path := filepath.Join(t.TempDir(), "queue.toml")
	if err := os.WriteFile(path, []byte(configMapTOML(t)), 0o644); err != nil {
		t.Fatal(err)
	}
	cfg, err := config.Load(path, nil)
	if err != nil {
		t.Fatal(err)
	}
	k8sNeed := cfg.Worker().ShutdownGrace + drainBound
	defaultNeed := config.Default().Worker().ShutdownGrace + drainBound
	seconds := func(what, s string) time.Duration {
		n, err := strconv.Atoi(s)
		if err != nil {
			t.Fatalf("%s: %q", what, s)
		}
		return time.Duration(n) * time.Second
	}
	for _, c := range []struct {
		what string
		got  time.Duration
		need time.Duration
	}{
		{"k8s/worker.yaml terminationGracePeriodSeconds", seconds("k8s", match(t, "k8s/worker.yaml", `terminationGracePeriodSeconds: (\d+)`, read(t, "k8s/worker.yaml"))), k8sNeed},
		{"systemd/s3queue-worker.service TimeoutStopSec", seconds("systemd", match(t, "systemd", `(?m)^TimeoutStopSec=(\d+)$`, read(t, "systemd/s3queue-worker.service"))), defaultNeed},
		{"docker-compose.yml stop_grace_period", func() time.Duration {
			d, err := time.ParseDuration(match(t, "compose", `stop_grace_period: (\S+)`, read(t, "docker-compose.yml")))
			if err != nil {
				t.Fatal(err)
			}
			return d
		}(), defaultNeed},
	} {
		if c.got < c.need {
			t.Errorf("%s is %v: a worker may take shutdown_grace + %v = %v to drain", c.what, c.got, drainBound, c.need)
		}
	}
	unit := read(t, "systemd/s3queue-worker.service")
	for _, want := range []string{"KillSignal=SIGTERM", "KillMode=mixed", "EnvironmentFile="} {
		if !strings.Contains(unit, want+"") {
			t.Errorf("systemd/s3queue-worker.service lacks %s", want)
		}
	}
}

// Every YAML document of the manifests names its API and kind, and the
// files hold no tabs (YAML forbids them in indentation).
func TestManifestsAreWellFormed(t *testing.T) {
	files, _ := filepath.Glob("k8s/*.yaml")
	files = append(files, "docker-compose.yml")
	for _, f := range files {
		text := read(t, f)
		if strings.Contains(text, "\t") {
			t.Errorf("%s contains a tab", f)
		}
		if f == "docker-compose.yml" || filepath.Base(f) == "kustomization.yaml" {
			continue
		}
		for i, doc := range strings.Split(text, "\n---\n") {
			for _, key := range []string{"apiVersion:", "kind:", "metadata:"} {
				if !regexp.MustCompile(`(?m)^` + key).MatchString(doc) {
					t.Errorf("%s, document %d: no %s", f, i+1, key)
				}
			}
		}
	}
}

// The IAM policies are JSON of the 2012-10-17 language, every resource is
// under BUCKET/PREFIX, and no role but the monitor's and the operator's
// may delete task objects.
func TestIAMPoliciesParse(t *testing.T) {
	type statement struct {
		Effect   string
		Action   []string
		Resource []string
	}
	for _, role := range []string{"producer", "worker", "monitor", "operator", "viewer"} {
		var p struct {
			Version   string
			Statement []statement
		}
		if err := json.Unmarshal([]byte(read(t, "iam/"+role+".json")), &p); err != nil {
			t.Fatalf("iam/%s.json: %v", role, err)
		}
		if p.Version != "2012-10-17" || len(p.Statement) == 0 {
			t.Errorf("iam/%s.json: version %q, %d statements", role, p.Version, len(p.Statement))
		}
		for _, s := range p.Statement {
			for _, r := range s.Resource {
				if r != "arn:aws:s3:::BUCKET" && !strings.HasPrefix(r, "arn:aws:s3:::BUCKET/PREFIX/") {
					t.Errorf("iam/%s.json: resource %s outside the queue's prefix", role, r)
				}
				deletesTasks := strings.HasPrefix(r, "arn:aws:s3:::BUCKET/PREFIX/tasks/") && !strings.HasSuffix(r, ".ready") ||
					r == "arn:aws:s3:::BUCKET/PREFIX/*"
				for _, a := range s.Action {
					if a == "s3:DeleteObject" && deletesTasks && role != "monitor" && role != "operator" {
						t.Errorf("iam/%s.json: %s may delete task objects (%s)", role, role, r)
					}
				}
			}
		}
	}
}

// docker compose (or docker-compose) accepts docker-compose.yml.
func TestComposeFileValidates(t *testing.T) {
	var cmd []string
	if exec.Command("docker", "compose", "version").Run() == nil {
		cmd = []string{"docker", "compose"}
	} else if _, err := exec.LookPath("docker-compose"); err == nil {
		cmd = []string{"docker-compose"}
	} else {
		t.Skip("neither docker compose nor docker-compose is installed")
	}
	out, err := exec.Command(cmd[0], append(cmd[1:], "-f", "docker-compose.yml", "config", "-q")...).CombinedOutput()
	if err != nil {
		t.Errorf("%s config: %v\n%s", strings.Join(cmd, " "), err, out)
	}
}

// docs/security.md shows each role's policy as it is in iam/.
func TestSecurityDocShowsThePolicies(t *testing.T) {
	doc := read(t, "../docs/security.md")
	for _, role := range []string{"producer", "worker", "monitor", "operator", "viewer"} {
		_, rest, ok := strings.Cut(doc, "\n### "+role+"\n")
		if !ok {
			t.Errorf("docs/security.md has no section ### %s", role)
			continue
		}
		_, rest, _ = strings.Cut(rest, "```json\n")
		block, _, _ := strings.Cut(rest, "```")
		if block != read(t, "iam/"+role+".json") {
			t.Errorf("docs/security.md shows another %s policy than iam/%s.json", role, role)
		}
	}
}
