package main

import (
	"encoding/json"
	"regexp"
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

// --store, --config and --log-level are global flags: before the
// command's name as after it, for every command that takes them.
func TestGlobalFlagsBeforeTheCommand(t *testing.T) {
	store, _ := newStore(t)
	id := strings.TrimSpace(must(t, "--store", store, "submit", "--type", "x"))
	cfg := writeConfig(t, "store = \""+store+"\"\n")
	for _, args := range [][]string{
		{"--store", store, "history", id},
		{"--store=" + store, "history", id},
		{"--store", store, "--log-level", "warn", "history", id},
		{"--log-level=warn", "--store", store, "history", id, "--json"},
		{"--config", cfg, "history", id},
		{"--config=" + cfg, "--log-level", "error", "get", id},
	} {
		if out := must(t, args...); !strings.Contains(out, id) && !strings.Contains(out, "submitted") {
			t.Errorf("%v printed %q", args, out)
		}
	}
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--store", store}, "no command given"},
		{[]string{"--store", store, "version"}, "version: unknown flag --store"},
		{[]string{"--config", cfg, "demo"}, "demo: unknown flag --config"},
		{[]string{"--type", "x", "submit", "--store", store}, "--type is not a global flag: only --store, --config, --log-level may come before the command's name"},
	} {
		wantExit(t, cli(t, "", tc.args...), exitUsage, tc.want)
	}
}

// The old spellings of renamed flags work, with a note on stderr naming
// the flag to use: list --after (now --cursor) and wait --timeout (now
// --wait-timeout, as in submit --wait).
func TestDeprecatedFlagsWorkWithANote(t *testing.T) {
	store, _ := newStore(t)
	id := strings.TrimSpace(must(t, "submit", "--store", store, "--type", "x"))
	r := cli(t, "", "wait", id, "--store", store, "--timeout", "100ms", "--poll-max", "20ms")
	wantExit(t, r, exitTimeout, "not finished after 100ms")
	if !strings.HasPrefix(r.stderr, "s3queue: note: wait --timeout is deprecated: use --wait-timeout (submit --timeout is the lease of an attempt)\n") {
		t.Errorf("wait --timeout: stderr %q, want a note first", r.stderr)
	}
	r = cli(t, "", "wait", id, "--store", store, "--timeout", "soon")
	wantExit(t, r, exitUsage, `wait: --timeout "soon": want a duration such as 30s or 5m`)
	if r := cli(t, "", "list", "--store", store, "--after", id); r.code != 0 || r.stderr != "s3queue: note: list --after is deprecated: use --cursor (submit --after is a dependency)\n" {
		t.Errorf("list --after: exit %d, stderr %q", r.code, r.stderr)
	}
	// Help shows them as such, spelt --name as every flag is there.
	for _, cmd := range []string{"list", "wait"} {
		help := must(t, "help", cmd)
		if strings.Contains(help, "panic") || !strings.Contains(help, "deprecated: the old spelling of --") || regexp.MustCompile(`(?m)^  -[a-z]`).MatchString(help) {
			t.Errorf("help %s:\n%s", cmd, help)
		}
	}
	// Completion offers the new spellings only.
	out := must(t, "completion", "bash")
	if !strings.Contains(out, "--cursor") || !strings.Contains(out, "--wait-timeout") {
		t.Errorf("completion lacks --cursor or --wait-timeout")
	}
	for _, c := range completionSpecs() {
		for _, f := range c.flags {
			if (c.name == "list" && f.name == "after") || (c.name == "wait" && f.name == "timeout") {
				t.Errorf("completion offers the deprecated %s --%s", c.name, f.name)
			}
		}
	}
}

// s3queue help says which commands take the global flags and --json from
// the commands themselves: none is left out.
func TestHelpListsTheCommandsOfEachCommonFlag(t *testing.T) {
	help := strings.Join(strings.Fields(must(t, "help")), " ")
	_, jsonLine, _ := strings.Cut(help, "--json prints JSON instead of text")
	jsonLine, _, _ = strings.Cut(jsonLine, ".")
	_, but, _ := strings.Cut(help, "Every command takes them but ")
	but, _, _ = strings.Cut(but, ";")
	for _, c := range commands {
		if c.json != strings.Contains(jsonLine, " "+c.name) {
			t.Errorf("help's --json list %q and %s's json = %v disagree", jsonLine, c.name, c.json)
		}
		if c.noStore != strings.Contains(but, c.name) {
			t.Errorf("help's list of commands without the global flags %q and %s's noStore = %v disagree", but, c.name, c.noStore)
		}
	}
	for _, name := range []string{"pause", "resume", "paused", "schedule"} {
		if !strings.Contains(jsonLine, " "+name) {
			t.Errorf("help's --json list lacks %s: %q", name, jsonLine)
		}
	}
}
