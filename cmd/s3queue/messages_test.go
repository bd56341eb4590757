package main

import (
	"fmt"
	"os"
	"regexp"
	"strings"
	"testing"

	"github.com/s3queue/s3queue/task"
)

// A value a flag cannot hold is a usage error that spells the flag as
// the help does (--delay, not -delay) and says what a good value looks
// like, instead of the flag package's "parse error".
func TestFlagErrorsSpellTheFlagAndHint(t *testing.T) {
	store, _ := newStore(t)
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"submit", "--type", "x", "--delay", "fast"}, `submit: --delay "fast": want a duration such as 30s or 5m`},
		{[]string{"submit", "--type", "x", "--delay=fast"}, `submit: --delay "fast": want a duration such as 30s or 5m`},
		{[]string{"submit", "--type", "x", "-timeout", "soon"}, `submit: --timeout "soon": want a duration such as 30s or 5m`},
		{[]string{"submit", "--type", "x", "--max-attempts", "many"}, `submit: --max-attempts "many": want a whole number such as 3`},
		{[]string{"submit", "--type", "x", "--wait=maybe"}, `submit: --wait "maybe": want true or false`},
		{[]string{"reshard", "--shards", "x"}, `reshard: --shards "x": want a whole number`},
		{[]string{"submit", "--type"}, "submit: --type needs a value"},
		{[]string{"submit", "--tpye", "x"}, "submit: unknown flag --tpye (did you mean --type?)"},
		{[]string{"worker", "--exec", "nocommand"}, `worker: --exec "nocommand": want TYPE=COMMAND`},
	} {
		r := cli(t, "", append([]string{tc.args[0], "--store", store}, tc.args[1:]...)...)
		wantExit(t, r, exitUsage, tc.want)
		if regexp.MustCompile(`\s-[a-z]`).MatchString(r.stderr) || strings.Contains(r.stderr, "parse error") {
			t.Errorf("%v: stderr %q spells a flag -name or says only \"parse error\"", tc.args, r.stderr)
		}
	}
}

// An input over the limit names the one limit a task's input has, not
// the bound at which the command stopped reading.
func TestOversizedInputNamesOneLimit(t *testing.T) {
	store, _ := newStore(t)
	file := t.TempDir() + "/big.json"
	if err := os.WriteFile(file, []byte(strings.Repeat(" ", 10<<20)+"1"), 0o644); err != nil {
		t.Fatal(err)
	}
	want := fmt.Sprintf("s3queue: submit: input is over the limit of %d bytes (256 KiB) of compact JSON\n", task.MaxInputBytes)
	for _, args := range [][]string{{"--input-file", file}, {"--input-file", "-"}} {
		stdin := ""
		if args[1] == "-" {
			stdin = strings.Repeat(" ", 10<<20) + "1"
		}
		r := cli(t, stdin, append([]string{"submit", "--store", store, "--type", "x"}, args...)...)
		if r.code != exitUsage || r.stderr != want {
			t.Errorf("%v: exit %d, stderr %q; want exit 2 and %q", args, r.code, r.stderr, want)
		}
	}
}

// A submit refused for a deadline its own delay passes names no task id:
// no task was created, and an id would send the user looking for one.
func TestRefusedSubmitNamesNoTaskID(t *testing.T) {
	store, dir := newStore(t)
	id := regexp.MustCompile(`[0-9A-Z]{26}`)
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--deadline", "1s", "--delay", "1h"}, "submit: --deadline 1s is not after the task's availability (--delay 1h)"},
		{[]string{"--deadline", "2030-01-01T00:00:00Z", "--at", "2031-01-01T00:00:00Z"}, "submit: --deadline 2030-01-01T00:00:00Z is not after the task's availability (--at 2031-01-01T00:00:00Z)"},
	} {
		r := cli(t, "", append([]string{"submit", "--store", store, "--type", "x"}, tc.args...)...)
		wantExit(t, r, exitUsage, tc.want)
		if id.MatchString(r.stderr) {
			t.Errorf("%v: stderr names a task id that was never created: %s", tc.args, r.stderr)
		}
	}
	if entries, _ := os.ReadDir(dir); len(entries) != 0 {
		t.Errorf("a refused submit wrote to the store: %v", entries)
	}
	// A deadline only S3 time can judge is refused by the producer; its
	// error names no id either.
	must(t, "submit", "--store", store, "--type", "x")
	r := cli(t, "", "submit", "--store", store, "--type", "x", "--deadline", "2020-01-01T00:00:00Z")
	wantExit(t, r, exitUsage, "deadline 2020-01-01T00:00:00Z is not after the submit")
	if id.MatchString(r.stderr) {
		t.Errorf("stderr names a task id that was never created: %s", r.stderr)
	}
}

// schedule add --every 0s says that every must be positive, not that
// neither cron nor every was given.
func TestScheduleEveryZero(t *testing.T) {
	store, _ := newStore(t)
	must(t, "submit", "--store", store, "--type", "job")
	for _, every := range []string{"0s", "-5s"} {
		r := cli(t, "", "schedule", "add", "bad", "--every", every, "--type", "job", "--store", store)
		wantExit(t, r, exitUsage, "every "+every+": must be positive, at least 1s")
		if strings.Contains(r.stderr, "neither") {
			t.Errorf("--every %s: %s", every, r.stderr)
		}
	}
}
