package main

import (
	"encoding/json"
	"strings"
	"testing"
)

// startedLog runs a worker until it logs "worker started" and returns that
// line's fields (the config logs JSON).
func startedLog(t *testing.T, args ...string) map[string]any {
	t.Helper()
	stderr, stop := background(t, args...)
	waitFor(t, "the worker to start", func() bool {
		if strings.Contains(stderr.String(), "s3queue: ") {
			t.Fatalf("s3queue %s failed: %s", strings.Join(args, " "), stderr)
		}
		return strings.Contains(stderr.String(), "worker started")
	})
	stop()
	for _, line := range strings.Split(stderr.String(), "\n") {
		if strings.Contains(line, "worker started") {
			var m map[string]any
			if err := json.Unmarshal([]byte(line), &m); err != nil {
				t.Fatalf("log line is not JSON: %q", line)
			}
			return m
		}
	}
	t.Fatalf("no worker started line in:\n%s", stderr)
	return nil
}

// worker --concurrency beats S3QUEUE_WORKER_CONCURRENCY, which beats
// queue.toml, which beats the default of 4.
func TestConcurrencyPrecedence(t *testing.T) {
	store, _ := newStore(t)
	noFile := writeConfig(t, "[log]\nformat = \"json\"\n")
	cfg := writeConfig(t, "[worker]\nconcurrency = 2\n[log]\nformat = \"json\"\n")
	args := func(cfg string, extra ...string) []string {
		return append([]string{"worker", "--store", store, "--config", cfg, "--exec", "x=cat"}, extra...)
	}
	check := func(what string, got map[string]any, want float64) {
		t.Helper()
		if got["concurrency"] != want {
			t.Errorf("%s: worker started with concurrency %v, want %v", what, got["concurrency"], want)
		}
	}
	check("default", startedLog(t, args(noFile)...), 4)
	check("queue.toml", startedLog(t, args(cfg)...), 2)
	t.Setenv("S3QUEUE_WORKER_CONCURRENCY", "3")
	check("environment over queue.toml", startedLog(t, args(cfg)...), 3)
	check("flag over environment", startedLog(t, args(cfg, "--concurrency", "5")...), 5)
	check("flag=value form", startedLog(t, args(cfg, "--concurrency=6")...), 6)
}

// --log-level beats [log] level, before or after the command's name.
func TestLogLevelFlag(t *testing.T) {
	store, _ := newStore(t)
	cfg := writeConfig(t, fastWorker+"[log]\nformat = \"json\"\nlevel = \"debug\"\n")
	t.Setenv("S3QUEUE_LOG_LEVEL", "info")
	for _, args := range [][]string{
		{"worker", "--log-level", "warn", "--store", store, "--config", cfg, "--exec", "x=cat"},
		{"--log-level=warn", "worker", "--store", store, "--config", cfg, "--exec", "x=cat"},
	} {
		id := submit(t, store, cfg, "x")
		stderr, stop := background(t, args...)
		waitTerminal(t, store, id)
		if code := stop(); code != 0 {
			t.Fatalf("%v: exit %d:\n%s", args, code, stderr)
		}
		for _, line := range strings.Split(strings.TrimSpace(stderr.String()), "\n") {
			if strings.Contains(line, `"level":"INFO"`) || strings.Contains(line, `"level":"DEBUG"`) {
				t.Errorf("%v: --log-level warn let through %s", args, line)
			}
		}
	}
}

func TestBadFlagValuesAreUsageErrors(t *testing.T) {
	store, _ := newStore(t)
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"stats", "--store", store, "--log-level", "loud"}, `--log-level: invalid level "loud" (want debug, info, warn or error)`},
		{[]string{"--log-level", "loud", "stats", "--store", store}, `--log-level: invalid level "loud"`},
		{[]string{"demo", "--log-level", "loud"}, `--log-level: invalid level "loud"`},
		{[]string{"worker", "--store", store, "--exec", "x=cat", "--concurrency", "0"}, "--concurrency: "},
		{[]string{"worker", "--store", store, "--exec", "x=cat", "--concurrency", "lots"}, "--concurrency: "},
		{[]string{"version", "--log-level", "debug"}, "unknown flag --log-level"},
		{[]string{"--log-level", "debug"}, "no command given"},
		{[]string{"--log-level=debug"}, "no command given"},
	} {
		wantExit(t, cli(t, "", tc.args...), exitUsage, tc.want)
	}
}
