package main

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// completionScript writes `s3queue completion SHELL` to a file.
func completionScript(t *testing.T, shell string) (path, text string) {
	t.Helper()
	text = must(t, "completion", shell)
	path = filepath.Join(t.TempDir(), "s3queue."+shell)
	if err := os.WriteFile(path, []byte(text), 0o644); err != nil {
		t.Fatal(err)
	}
	return path, text
}

// needShell returns the shell's path, or skips the test without it.
func needShell(t *testing.T, shell string) string {
	t.Helper()
	p, err := exec.LookPath(shell)
	if err != nil {
		t.Skipf("%s is not installed", shell)
	}
	return p
}

// Each script names every command and every flag of each, since it is
// generated from the registered commands: a command added later is
// completed without anyone editing the scripts.
func TestCompletionCoversEveryCommandAndFlag(t *testing.T) {
	specs := completionSpecs()
	for _, shell := range []string{"bash", "zsh", "fish"} {
		_, text := completionScript(t, shell)
		for _, c := range specs {
			if !strings.Contains(text, c.name) {
				t.Errorf("%s script lacks command %s", shell, c.name)
			}
			for _, f := range c.flags {
				want := "--" + f.name
				if shell == "fish" {
					want = "__fish_seen_subcommand_from " + c.name + "' -l " + f.name + " "
				}
				if !strings.Contains(text, want) {
					t.Errorf("%s script lacks %s of %s (%q)", shell, f.name, c.name, want)
				}
			}
		}
	}
	if len(specs) != len(commands) || len(specs[0].flags) == 0 {
		t.Fatalf("completionSpecs describes %d commands, want %d, with flags", len(specs), len(commands))
	}
	wantExit(t, cli(t, "", "completion", "tcsh"), exitUsage, `unknown shell "tcsh" (want bash, zsh or fish)`)
}

func TestCompletionScriptsParse(t *testing.T) {
	for _, tc := range []struct{ shell, flag string }{{"bash", "-n"}, {"zsh", "-n"}, {"fish", "--no-execute"}} {
		t.Run(tc.shell, func(t *testing.T) {
			sh := needShell(t, tc.shell)
			path, _ := completionScript(t, tc.shell)
			if out, err := exec.Command(sh, tc.flag, path).CombinedOutput(); err != nil {
				t.Errorf("%s %s: %v\n%s", tc.shell, tc.flag, err, out)
			}
		})
	}
}

// What a user gets on pressing tab, for the line before the cursor.
var completionCases = []struct {
	line string // the command line up to the cursor
	want string // one of the completions offered
}{
	{"s3queue sub", "submit"},
	{"s3queue worker --conc", "--concurrency"},
	{"s3queue list --status d", "dead"},
	{"s3queue --log-level debug wor", "worker"},
	{"s3queue stats --log-level w", "warn"},
	{"s3queue help hist", "history"},
	{"s3queue completion fi", "fish"},
	{"s3queue submit --on-dep-failure f", "fail"},
}

func TestBashCompletes(t *testing.T) {
	sh := needShell(t, "bash")
	path, _ := completionScript(t, "bash")
	for _, tc := range completionCases {
		words := strings.Fields(tc.line)
		script := `source "$1"; shift; COMP_WORDS=("$@"); COMP_CWORD=$(($# - 1)); _s3queue; printf '%s\n' "${COMPREPLY[@]}"`
		out, err := exec.Command(sh, append([]string{"-c", script, "bash", path}, words...)...).CombinedOutput()
		if err != nil {
			t.Fatalf("%q: %v\n%s", tc.line, err, out)
		}
		if !containsLine(string(out), tc.want) {
			t.Errorf("bash: %q offers %q, want %q among them", tc.line, out, tc.want)
		}
	}
}

func TestFishCompletes(t *testing.T) {
	sh := needShell(t, "fish")
	path, _ := completionScript(t, "fish")
	for _, tc := range completionCases {
		out, err := exec.Command(sh, "--no-config", "-c", `source $argv[1]; complete -C $argv[2]`, path, tc.line).CombinedOutput()
		if err != nil {
			t.Fatalf("%q: %v\n%s", tc.line, err, out)
		}
		var offered []string
		for _, l := range strings.Split(string(out), "\n") {
			w, _, _ := strings.Cut(l, "\t")
			offered = append(offered, w)
		}
		if !containsLine(strings.Join(offered, "\n"), tc.want) {
			t.Errorf("fish: %q offers %q, want %q among them", tc.line, out, tc.want)
		}
	}
}

// zshDriver types lines, each followed by a tab, into an interactive zsh
// (through a pseudo-terminal, zsh/zpty) that has sourced the script after
// compinit, and has zle append each edited line to a file: $1 script, $2
// file, the lines after. It waits for the file's lines with a deadline.
const zshDriver = `zmodload zsh/zpty
zpty z "zsh -f -i"
zpty -w z "autoload -U compinit; compinit -u -D; source ${(q)1}; dump() { print -r -- \"\$BUFFER\" >> ${(q)2}; BUFFER=; }; zle -N dump; bindkey '^E' dump"
local out=$2 line junk
shift 2
for line in "$@"; do
  zpty -n -w z "$line"$'\t\x05'
done
for i in {1..600}; do
  [[ -s $out && $(wc -l < $out) -ge $# ]] && break
  zpty -r -t z junk
  sleep 0.05
done
zpty -d z
`

func TestZshCompletes(t *testing.T) {
	sh := needShell(t, "zsh")
	path, _ := completionScript(t, "zsh")
	dir := t.TempDir()
	driver, out := filepath.Join(dir, "driver.zsh"), filepath.Join(dir, "lines")
	if err := os.WriteFile(driver, []byte(zshDriver), 0o644); err != nil {
		t.Fatal(err)
	}
	args := []string{"-f", driver, path, out}
	for _, tc := range completionCases {
		args = append(args, tc.line)
	}
	cmd := exec.Command(sh, args...)
	cmd.Env = append(os.Environ(), "HOME="+dir)
	if b, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("zsh: %v\n%s", err, b)
	}
	b, err := os.ReadFile(out)
	if err != nil {
		t.Fatalf("zsh wrote no lines within 30s: %v", err)
	}
	lines := strings.Split(strings.TrimSpace(string(b)), "\n")
	if len(lines) != len(completionCases) {
		t.Fatalf("zsh wrote %d lines, want %d:\n%s", len(lines), len(completionCases), b)
	}
	for i, tc := range completionCases {
		if !strings.Contains(lines[i], tc.want) {
			t.Errorf("zsh: tab after %q gives %q, want %q in it", tc.line, lines[i], tc.want)
		}
	}
}

func containsLine(text, line string) bool {
	for _, l := range strings.Split(text, "\n") {
		if strings.TrimSpace(l) == line {
			return true
		}
	}
	return false
}
