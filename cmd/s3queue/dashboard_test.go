package main

import (
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// The dashboard's flags fail early and clearly, before the store is
// opened, and never quote the token.
func TestMonitorDashboardFlagsAreChecked(t *testing.T) {
	store, _ := newStore(t)
	dir := t.TempDir()
	empty := filepath.Join(dir, "empty")
	if err := os.WriteFile(empty, []byte("  \n"), 0o600); err != nil {
		t.Fatal(err)
	}
	twoLines := filepath.Join(dir, "two")
	if err := os.WriteFile(twoLines, []byte("secret-one\nsecret-two\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	used := ln.Addr().String()

	r := cli(t, "", "monitor", "--store", store, "--token-file", empty)
	wantExit(t, r, exitUsage, "monitor: --token-file needs --http")
	r = cli(t, "", "monitor", "--store", store, "--http", "127.0.0.1:0", "--token-file", empty)
	wantExit(t, r, exitUsage, "monitor: --token-file "+empty+" is empty")
	r = cli(t, "", "monitor", "--store", store, "--http", "127.0.0.1:0", "--token-file", twoLines)
	wantExit(t, r, exitUsage, "holds more than one line")
	if strings.Contains(r.stderr, "secret") {
		t.Fatalf("the error quotes the token file's content: %s", r.stderr)
	}
	short := filepath.Join(dir, "short")
	if err := os.WriteFile(short, []byte("secret-15-bytes\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	r = cli(t, "", "monitor", "--store", store, "--http", "127.0.0.1:0", "--token-file", short)
	wantExit(t, r, exitUsage, "monitor: the dashboard token (--token-file "+short+") is too short: it must be at least 16 bytes; make one with `openssl rand -hex 32`")
	if strings.Contains(r.stderr, "secret") {
		t.Fatalf("the error quotes the token: %s", r.stderr)
	}
	t.Setenv(tokenEnv, "secret-15-bytes")
	r = cli(t, "", "monitor", "--store", store, "--http", "127.0.0.1:0")
	wantExit(t, r, exitUsage, "monitor: the dashboard token ("+tokenEnv+") is too short: it must be at least 16 bytes")
	if strings.Contains(r.stderr, "secret") {
		t.Fatalf("the error quotes the token: %s", r.stderr)
	}
	t.Setenv(tokenEnv, "")
	r = cli(t, "", "monitor", "--store", store, "--http", "127.0.0.1:0", "--token-file", filepath.Join(dir, "missing"))
	wantExit(t, r, exitUsage, "monitor: --token-file: open")
	r = cli(t, "", "monitor", "--store", store, "--http", used)
	wantExit(t, r, exitUsage, "monitor: --http "+used+": listen tcp "+used+": bind: address already in use")
	r = cli(t, "", "monitor", "--store", store, "--http", "nonsense")
	wantExit(t, r, exitUsage, "monitor: --http nonsense: listen tcp: address nonsense: missing port in address")
}
