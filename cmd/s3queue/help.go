package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"regexp"
	"runtime"
	"runtime/debug"
	"strings"
	"text/tabwriter"

	"github.com/s3queue/s3queue/shards"
	"github.com/s3queue/s3queue/task"
)

// version is set at build time with -ldflags "-X main.version=v1.2.3";
// otherwise the module version from the build info is used.
var version = ""

// versionString is the version 's3queue version' prints and
// s3queue_build_info exports: the one set at build time, else the module's
// (go install), else "(devel)".
func versionString() string {
	if version != "" {
		return version
	}
	if bi, ok := debug.ReadBuildInfo(); ok && bi.Main.Version != "" {
		return bi.Main.Version
	}
	return "(devel)"
}

var versionCommand = &command{
	name: "version", nargs: 0, noStore: true,
	summary: "print the version",
	examples: []string{
		"s3queue version",
	},
	define: func(a *app, fs *flag.FlagSet) func(context.Context, []string) error {
		return func(context.Context, []string) error {
			fmt.Fprintf(a.stdout, "s3queue %s (%s, task format %d, layout format %d)\n", versionString(), runtime.Version(), task.FormatVersion, shards.FormatVersion)
			return nil
		}
	},
}

var helpCommand = &command{
	name: "help", args: "[COMMAND]", nargs: -1, noStore: true,
	summary: "show help for all commands or one",
	examples: []string{
		"s3queue help",
		"s3queue help submit",
	},
	define: func(a *app, fs *flag.FlagSet) func(context.Context, []string) error {
		return func(_ context.Context, args []string) error {
			switch len(args) {
			case 0:
				a.usage(a.stdout)
				return nil
			case 1:
				c := lookup(args[0])
				if c == nil {
					return fmt.Errorf("help: %w", unknownCommand(args[0]))
				}
				a.commandHelp(a.stdout, c)
				return nil
			}
			return usageError("help: want at most one command")
		}
	},
}

const exitCodesHelp = `Exit codes:
  0  ok
  1  runtime error (store unreachable, request failed, task in the wrong state, demo failed)
  2  usage or bad input (bad flags, non-JSON or oversized input, bad config, layout mismatch)
  3  not found: no task with that id, no schedule with that name, no queue in the store
  4  provider unsupported (the store does not honour conditional PUT)
  5  store unusable (bucket or directory gone, access denied, a symbolic link in a file store):
     retrying cannot help
  6  wait, submit --wait, get --watch: a task ended dead
  7  wait, submit --wait, get --watch: a task ended canceled (and none dead)
  8  wait, submit --wait: the timeout passed before every task finished
  9  submit: the outcome is unknown (the store failed after the task may have been written):
     the id is printed; submit again with --id ID to make sure the task exists, once
  130, 143  a second SIGINT or SIGTERM: exited without finishing the shutdown
`

const envHelp = `Environment:
  S3QUEUE_STORE              store URL (the --store flag wins over it; it wins over queue.toml)
  S3QUEUE_<SECTION>_<KEY>    overrides a queue.toml key, e.g. S3QUEUE_WORKER_CONCURRENCY=8
  AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY, AWS_PROFILE, AWS_REGION
                             credentials and region of s3:// stores (never in the URL)
`

func (a *app) usage(w io.Writer) {
	fmt.Fprintf(w, "s3queue: a distributed work queue whose only infrastructure is an S3 bucket.\n\n")
	fmt.Fprintf(w, "Usage: s3queue COMMAND [flags] [arguments]\n\nCommands:\n")
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	for _, c := range commands {
		fmt.Fprintf(tw, "  %s\t%s\n", strings.TrimSpace(c.name+" "+c.args), c.summary)
	}
	tw.Flush()
	fmt.Fprintf(w, "\n%s\n", globalFlagsHelp())
	fmt.Fprintf(w, `Store URLs:
  s3://BUCKET/PREFIX?endpoint=http://127.0.0.1:9000&region=us-east-1&path_style=true
  file:///absolute/directory
  mem://NAME (in this process only: demo --store and tests; other commands refuse it)

`)
	fmt.Fprint(w, envHelp)
	fmt.Fprintln(w)
	fmt.Fprint(w, exitCodesHelp)
	fmt.Fprintf(w, "\nRun 's3queue help COMMAND' for a command's flags and examples, and\n")
	fmt.Fprintf(w, "'s3queue completion bash|zsh|fish' for tab completion; see docs/cli.md.\n")
}

// globalFlagsHelp says which commands take the global flags and --json,
// from the commands themselves, so that the help cannot leave one out.
func globalFlagsHelp() string {
	var noStore, noConfig, json []string
	for _, c := range commands {
		switch {
		case c.noStore:
			noStore = append(noStore, c.name)
		case c.ownStore != "":
			noConfig = append(noConfig, c.name)
		}
		if c.json {
			name := c.name
			if c == submitCommand {
				name += " --wait"
			}
			json = append(json, name)
		}
	}
	return wrap("Global flags: --store URL, --config FILE (default ./queue.toml if it exists) and "+
		"--log-level LEVEL may come before the command's name or after it "+
		"(s3queue --store file:///var/lib/q history ID). Every command takes them but "+joinWords(noStore)+"; "+
		joinWords(noConfig)+" takes --store and --log-level but not --config. Flags beat the environment, "+
		"which beats queue.toml. A command's own flags follow its name, before, between or after its arguments.", 80) +
		wrap("--json prints JSON instead of text (snake_case keys, stable for scripts): "+joinWords(json)+".", 80) +
		wrap("--timeout is always the lease of one attempt, --wait-timeout the limit of a wait.", 80)
}

// wrap breaks text into lines of at most width columns, each ending in a
// newline.
func wrap(text string, width int) string {
	var b strings.Builder
	line := 0
	for _, word := range strings.Fields(text) {
		if line > 0 && line+1+len(word) > width {
			b.WriteString("\n")
			line = 0
		}
		if line > 0 {
			b.WriteString(" ")
			line++
		}
		b.WriteString(word)
		line += len(word)
	}
	b.WriteString("\n")
	return b.String()
}

// joinWords lists words as prose: "a, b and c".
func joinWords(words []string) string {
	if len(words) < 2 {
		return strings.Join(words, "")
	}
	return strings.Join(words[:len(words)-1], ", ") + " and " + words[len(words)-1]
}

func (a *app) commandHelp(w io.Writer, c *command) {
	fmt.Fprintf(w, "Usage: s3queue %s [flags]", c.name)
	if c.args != "" {
		fmt.Fprintf(w, " %s", c.args)
	}
	fmt.Fprintf(w, "\n\n%s.\n", upperFirst(c.summary))
	if c.details != "" {
		fmt.Fprintf(w, "\n%s\n", c.details)
	}
	// Define the flags on a scratch app only to print them.
	scratch := &app{}
	fs := scratch.flagSet(c)
	c.define(scratch, fs)
	n := 0
	fs.VisitAll(func(*flag.Flag) { n++ })
	if n > 0 {
		// Flags are spelt --name here as in errors and docs/cli.md (the
		// flag package prints -name; both work).
		var b strings.Builder
		fs.SetOutput(&b)
		fs.PrintDefaults()
		fmt.Fprintf(w, "\nFlags:\n%s", regexp.MustCompile(`(?m)^  -`).ReplaceAllString(b.String(), "  --"))
	}
	if len(c.examples) > 0 {
		fmt.Fprintf(w, "\nExamples:\n")
		for _, e := range c.examples {
			fmt.Fprintf(w, "  %s\n", e)
		}
	}
	fmt.Fprintf(w, "\n%s", exitCodesHelp)
}

func upperFirst(s string) string {
	if s == "" {
		return s
	}
	return strings.ToUpper(s[:1]) + s[1:]
}
