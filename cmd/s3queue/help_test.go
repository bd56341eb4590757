package main

import (
	"regexp"
	"strings"
	"testing"
)

// Every command shows 1–3 examples in its --help, and each example is a
// command line the command accepts: its flags exist and it has the right
// number of arguments. A command added without examples fails here.
func TestEveryCommandHasExamples(t *testing.T) {
	for _, c := range commands {
		t.Run(c.name, func(t *testing.T) {
			if n := len(c.examples); n < 1 || n > 3 {
				t.Fatalf("%s has %d examples, want 1 to 3 (the examples field of its command)", c.name, n)
			}
			help := must(t, c.name, "--help")
			if strings.Contains(help, "panic") || regexp.MustCompile(`(?m)^  -[a-z]`).MatchString(help) {
				t.Errorf("%s --help panics or spells its flags -name:\n%s", c.name, help)
			}
			if !strings.Contains(help, "\nExamples:\n") {
				t.Errorf("%s --help shows no examples:\n%s", c.name, help)
			}
			for _, e := range c.examples {
				if !strings.Contains(help, "  "+e+"\n") {
					t.Errorf("%s --help lacks the example %q", c.name, e)
				}
				if err := parseExample(c, e); err != nil {
					t.Errorf("example %q: %v", e, err)
				}
			}
		})
	}
}

// The check above would catch a stale example.
func TestParseExampleRefusesBadLines(t *testing.T) {
	for _, line := range []string{
		"s3queue get --bogus 01M8AHG5TJ57JN0X6S7S5PM513",
		"s3queue get",
		"s3queue list 01M8AHG5TJ57JN0X6S7S5PM513",
		"s3queue stats",
		"s3queue get 'unterminated",
	} {
		if err := parseExample(getCommand, line); err == nil {
			t.Errorf("parseExample(get, %q) accepted it", line)
		}
	}
}

// parseExample parses an example's command line (up to a pipe) as
// dispatch would, without running it.
func parseExample(c *command, line string) error {
	words, err := shellWords(strings.TrimSpace(cutAny(line, " | ", " > ")))
	if err != nil {
		return err
	}
	if len(words) < 2 || words[0] != "s3queue" {
		return errorf("does not start with s3queue COMMAND")
	}
	args := hoistGlobalFlags(words[1:])
	if args[0] != c.name {
		return errorf("runs %q, not %s", args[0], c.name)
	}
	a := &app{}
	fs := a.flagSet(c)
	c.define(a, fs)
	pos, err := parseInterspersed(fs, args[1:])
	if err != nil {
		return err
	}
	if c.nargs >= 0 && len(pos) != c.nargs {
		return errorf("%d arguments, want %d", len(pos), c.nargs)
	}
	return nil
}

func errorf(format string, args ...any) error { return usageError(format, args...) }

// shellWords splits a command line as sh would for the simple quoting the
// examples use: single quotes, double quotes, and spaces between words.
func shellWords(s string) ([]string, error) {
	var words []string
	var cur strings.Builder
	inWord := false
	var quote rune
	for _, r := range s {
		switch {
		case quote != 0 && r == quote:
			quote = 0
		case quote != 0:
			cur.WriteRune(r)
		case r == '\'' || r == '"':
			quote, inWord = r, true
		case r == ' ':
			if inWord {
				words = append(words, cur.String())
				cur.Reset()
				inWord = false
			}
		default:
			cur.WriteRune(r)
			inWord = true
		}
	}
	if quote != 0 {
		return nil, errorf("unterminated quote")
	}
	if inWord {
		words = append(words, cur.String())
	}
	return words, nil
}

func TestDidYouMean(t *testing.T) {
	store, _ := newStore(t)
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"sumbit", "--type", "x"}, `unknown command "sumbit" (did you mean "submit"?`},
		{[]string{"lst"}, `unknown command "lst" (did you mean "list"?`},
		{[]string{"help", "hsitory"}, `help: unknown command "hsitory" (did you mean "history"?`},
		{[]string{"submit", "--store", store, "--tpye", "x"}, "unknown flag --tpye (did you mean --type?)"},
		{[]string{"get", "--jsn", "01M8AHG5TJ57JN0X6S7S5PM513"}, "(did you mean --json?)"},
		{[]string{"worker", "--concurency", "3"}, "(did you mean --concurrency?)"},
	} {
		wantExit(t, cli(t, "", tc.args...), exitUsage, tc.want)
	}
	// Nothing close: no suggestion, a pointer to the help instead.
	for _, args := range [][]string{{"frobnicate"}, {"stats", "--store", store, "--bogus"}} {
		r := cli(t, "", args...)
		wantExit(t, r, exitUsage, "run 's3queue help")
		if strings.Contains(r.stderr, "did you mean") {
			t.Errorf("%v: far-fetched suggestion: %s", args, r.stderr)
		}
	}
}

// cutAny returns line up to the first of seps (a pipe, a redirection).
func cutAny(line string, seps ...string) string {
	for _, sep := range seps {
		line, _, _ = strings.Cut(line, sep)
	}
	return line
}
