// Command s3queue runs and operates an s3queue: workers that run tasks as
// external commands, the monitor, task submission and inspection, a provider
// check, and a self-contained demo. See docs/cli.md.
//
// Each command lives in its own file; this one holds dispatch, flags, exit
// codes and error reporting. Nothing imports this package.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"regexp"
	"slices"
	"strings"
	"syscall"
	"time"

	"github.com/s3queue/s3queue"
	"github.com/s3queue/s3queue/internal/config"
	"github.com/s3queue/s3queue/s3store"
	"github.com/s3queue/s3queue/s3store/storeurl"
	"github.com/s3queue/s3queue/shards"
	"github.com/s3queue/s3queue/worker"

	// The zone database, for schedules in a time zone: the FROM-scratch
	// image has no /usr/share/zoneinfo.
	_ "time/tzdata"
)

// Exit codes, documented in docs/cli.md and `s3queue help`.
const (
	exitOK          = 0
	exitRuntime     = 1 // store unreachable, a request failed, a task in the wrong state
	exitUsage       = 2 // bad flags, bad input, bad config, layout mismatch
	exitNotFound    = 3 // no task with that id, no schedule with that name, no queue in the store
	exitUnsupported = 4 // the provider does not honour conditional PUT
	exitUnusable    = 5 // the store will not heal: bucket or directory gone, access denied, a symbolic link in a file store
	// How the tasks waited for ended (wait, submit --wait, get --watch):
	exitDead     = 6 // a task ended dead
	exitCanceled = 7 // a task ended canceled (and none dead)
	exitTimeout  = 8 // the timeout passed before every task finished
	// A change whose outcome is unknown (submit): it may have been made.
	exitUnknown = 9
)

func main() {
	ctx, cancel := context.WithCancel(context.Background())
	sigs := make(chan os.Signal, 2)
	signal.Notify(sigs, os.Interrupt, syscall.SIGTERM)
	go func() {
		// The first signal stops the command (a worker drains); a second
		// one exits at once, as the default action would, but first kills
		// the process groups of the worker's running commands, which no
		// signal meant for the worker reaches.
		<-sigs
		cancel()
		sig := <-sigs
		running.killAll()
		code := exitRuntime
		if s, ok := sig.(syscall.Signal); ok {
			code = 128 + int(s)
		}
		os.Exit(code)
	}()
	os.Exit(run(ctx, os.Args[1:], os.Stdin, os.Stdout, os.Stderr))
}

// run executes one command line and returns its exit code. It never panics
// and writes errors as one line "s3queue: <message>" on stderr.
func run(ctx context.Context, args []string, stdin io.Reader, stdout, stderr io.Writer) (code int) {
	defer func() {
		if p := recover(); p != nil {
			fmt.Fprintf(stderr, "s3queue: internal error: %s\n", oneLine(fmt.Sprint(p)))
			code = exitRuntime
		}
	}()
	a := &app{stdin: stdin, stdout: stdout, stderr: stderr, environ: os.Environ, open: storeurl.Open}
	return a.report(a.dispatch(ctx, args))
}

// app is one invocation: its streams, flags and loaded configuration.
type app struct {
	stdin          io.Reader
	stdout, stderr io.Writer
	// environ lists the environment (os.Environ; tests substitute).
	environ func() []string
	// open opens a store URL (storeurl.Open; tests substitute stores).
	open func(ctx context.Context, url string) (s3store.Store, error)

	cmd        *command
	storeFlag  string
	configFlag string
	jsonOut    bool
	// overrides are the configuration keys set by flags (--log-level,
	// worker --concurrency): they win over the environment and the file.
	overrides []config.Override

	cfg config.Config
	log *slog.Logger
	// notes are printed on stderr once the command line is parsed: the
	// deprecated spellings it used.
	notes []string
}

// command is one subcommand. define registers the command's own flags and
// returns the function that runs it with the positional arguments.
type command struct {
	name    string
	args    string // positional arguments, for usage lines
	nargs   int    // exact number of positional arguments
	summary string
	details string
	// examples are 1–3 command lines shown by --help, each starting with
	// "s3queue" (a test holds every command to it and parses each one).
	examples []string
	json     bool // read command: takes --json
	noStore  bool // takes neither --store, --config nor --log-level
	// ownStore: takes --store with this usage text, but no --config, and
	// ignores S3QUEUE_STORE and queue.toml (the demo never touches a real
	// queue by accident).
	ownStore string
	define   func(a *app, fs *flag.FlagSet) func(ctx context.Context, args []string) error
}

var commands []*command

func init() {
	commands = []*command{
		workerCommand, monitorCommand, submitCommand, getCommand, resultCommand, historyCommand,
		waitCommand, tailCommand, cancelCommand, requeueCommand, purgeCommand, listCommand, statsCommand,
		pauseCommand, resumeCommand, pausedCommand, scheduleCommand, doctorCommand, reshardCommand,
		demoCommand, costCommand, completionCommand, versionCommand, helpCommand,
	}
}

// unknownCommand is the usage error of a command name that names none,
// suggesting the closest one (s3queue sumbit: did you mean "submit"?).
func unknownCommand(name string) error {
	names := make([]string, len(commands))
	for i, c := range commands {
		names[i] = c.name
	}
	if s := config.Suggest(name, names); s != "" {
		return usageError("unknown command %q (did you mean %q? run 's3queue help' for the list)", name, s)
	}
	return usageError("unknown command %q (run 's3queue help' for the list)", name)
}

// The flag package's parse errors, which name a flag -name whatever the
// user typed: flagError rewrites them.
var (
	undefinedFlagErr = regexp.MustCompile(`^flag provided but not defined: -+(.*)$`)
	invalidValueErr  = regexp.MustCompile(`(?s)^invalid (?:boolean )?value (".*") for (?:flag )?-+([^:]+): (.*)$`)
	needsValueErr    = regexp.MustCompile(`^flag needs an argument: -+(.*)$`)
)

// flagError is the usage error of a command line fs could not parse, in
// the command's own words: flags spelt --name (as the help and the docs
// spell them), a value the flag's kind cannot hold explained with an
// example of one that it can, and the closest flag to an unknown one.
func flagError(c *command, fs *flag.FlagSet, err error) error {
	msg := err.Error()
	if m := undefinedFlagErr.FindStringSubmatch(msg); m != nil {
		var names []string
		fs.VisitAll(func(f *flag.Flag) { names = append(names, f.Name) })
		if s := config.Suggest(m[1], names); s != "" {
			return usageError("%s: unknown flag --%s (did you mean --%s?)", c.name, m[1], s)
		}
		return usageError("%s: unknown flag --%s (run 's3queue help %s')", c.name, m[1], c.name)
	}
	if m := needsValueErr.FindStringSubmatch(msg); m != nil {
		return usageError("%s: --%s needs a value (run 's3queue help %s')", c.name, m[1], c.name)
	}
	if m := invalidValueErr.FindStringSubmatch(msg); m != nil {
		value, name, why := m[1], m[2], m[3]
		if f := fs.Lookup(name); f != nil {
			if hint := valueHint(f); hint != "" {
				why = hint
			}
		}
		return usageError("%s: --%s %s: %s", c.name, name, value, why)
	}
	return usageError("%s: %s (run 's3queue help %s')", c.name, strings.ReplaceAll(msg, " -", " --"), c.name)
}

// valueHint says what a value of f looks like, for the flags whose parse
// errors say only "parse error": the basic kinds (a flag of its own kind
// explains itself in its error).
func valueHint(f *flag.Flag) string {
	g, ok := f.Value.(flag.Getter)
	if !ok {
		return ""
	}
	switch g.Get().(type) {
	case time.Duration:
		return "want a duration such as 30s or 5m"
	case int, int64, uint, uint64:
		return "want a whole number such as 3"
	case float64:
		return "want a number such as 0.5"
	case bool:
		return "want true or false"
	}
	return ""
}

func lookup(name string) *command {
	for _, c := range commands {
		if c.name == name {
			return c
		}
	}
	return nil
}

func (a *app) dispatch(ctx context.Context, args []string) error {
	if len(args) == 0 {
		return usageError("no command given (run 's3queue help' for the list of commands)")
	}
	args = hoistGlobalFlags(args)
	name := args[0]
	if flagName, _, _ := strings.Cut(strings.TrimLeft(name, "-"), "="); strings.HasPrefix(name, "-") && slices.Contains(globalFlags, flagName) {
		// Only global flags: nothing to apply them to.
		return usageError("no command given (run 's3queue help' for the list of commands)")
	}
	switch name {
	case "-h", "-help", "--help":
		name = "help"
	case "-version", "--version":
		name = "version"
	}
	c := lookup(name)
	if c == nil && strings.HasPrefix(name, "-") && len(args) > 1 {
		// A command's own flag before its name.
		return usageError("%s is not a global flag: only --%s may come before the command's name; the others follow it (s3queue COMMAND %s)",
			name, strings.Join(globalFlags, ", --"), name)
	}
	if c == nil {
		return unknownCommand(name)
	}
	a.cmd = c
	fs := a.flagSet(c)
	runCmd := c.define(a, fs)
	pos, err := parseInterspersed(fs, args[1:])
	if errors.Is(err, flag.ErrHelp) {
		a.commandHelp(a.stdout, c)
		return nil
	}
	if err != nil {
		return flagError(c, fs, err)
	}
	for _, n := range a.notes {
		fmt.Fprintf(a.stderr, "s3queue: note: %s\n", n)
	}
	if c.nargs >= 0 && len(pos) != c.nargs {
		if c.nargs == 0 {
			return usageError("%s: unexpected argument %q (run 's3queue help %s')", c.name, pos[0], c.name)
		}
		return usageError("%s: want %s, got %d arguments (usage: s3queue %s %s)", c.name, c.args, len(pos), c.name, c.args)
	}
	if !c.noStore && c.ownStore == "" {
		if err := a.loadConfig(); err != nil {
			return err
		}
	} else {
		// No file and no environment, but the flags still count.
		cfg, err := config.Load("", nil, a.overrides...)
		if err != nil {
			return usageError("%v", err)
		}
		a.cfg = cfg
		a.log = a.cfg.NewLogger(a.stderr)
	}
	return runCmd(ctx, pos)
}

// flagSet makes the command's flag set with the flags every command takes.
func (a *app) flagSet(c *command) *flag.FlagSet {
	fs := flag.NewFlagSet(c.name, flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	switch {
	case c.ownStore != "":
		fs.StringVar(&a.storeFlag, "store", "", c.ownStore)
	case !c.noStore:
		fs.StringVar(&a.storeFlag, "store", "", "store `URL`; wins over S3QUEUE_STORE and queue.toml's store")
		fs.StringVar(&a.configFlag, "config", "", "configuration `file` (default ./queue.toml if it exists)")
	}
	if c.json {
		fs.BoolVar(&a.jsonOut, "json", false, "print JSON instead of text")
	}
	if !c.noStore {
		a.keyFlag(fs, "log-level", "log.level", "log `level`: debug, info, warn or error (wins over [log] level and S3QUEUE_LOG_LEVEL)")
	}
	return fs
}

// deprecatedFlag defines old, an earlier spelling of fs's flag name, as
// another way to set it. A command line that uses it works as before and
// gets a note on stderr naming the flag to use instead (why says why the
// spelling changed). Completion leaves it out; help shows it as such.
func (a *app) deprecatedFlag(fs *flag.FlagSet, old, name, why string) {
	f := fs.Lookup(name)
	arg, _ := flag.UnquoteUsage(f)
	fs.Var(&deprecatedValue{Value: f.Value, use: func() {
		a.notes = append(a.notes, fmt.Sprintf("%s --%s is deprecated: use --%s (%s)", fs.Name(), old, name, why))
	}}, old, "deprecated: the old spelling of --"+name+" `"+arg+"`")
}

// deprecatedValue is the value of a deprecated flag: the value of the
// flag it is an old spelling of.
type deprecatedValue struct {
	flag.Value
	use func()
}

// String is the value's; the flag package also calls it on a zero
// deprecatedValue, to tell a default from none.
func (d *deprecatedValue) String() string {
	if d == nil || d.Value == nil {
		return ""
	}
	return d.Value.String()
}

func (d *deprecatedValue) Set(v string) error {
	d.use()
	return d.Value.Set(v)
}

// Get returns the value as the flag it spells does (flag.Getter), so that
// a bad value is explained as for that flag.
func (d *deprecatedValue) Get() any {
	if g, ok := d.Value.(flag.Getter); ok {
		return g.Get()
	}
	return nil
}

func isDeprecated(f *flag.Flag) bool {
	_, ok := f.Value.(*deprecatedValue)
	return ok
}

// keyFlag defines a flag that sets configuration key: the value is checked
// and applied as the key's environment variable would be, after the file
// and the environment, so the flag wins over both.
func (a *app) keyFlag(fs *flag.FlagSet, name, key, usage string) {
	fs.Func(name, usage, func(v string) error {
		a.overrides = append(a.overrides, config.Override{Flag: "--" + name, Key: key, Value: v})
		return nil
	})
}

// globalFlags are the flags of the store and the configuration, which may
// also come before the command's name ("s3queue --store URL history ID",
// "s3queue --log-level debug worker"): a command that takes them reads
// them there as after its name. Every other flag follows the command's
// name.
var globalFlags = []string{"store", "config", "log-level"}

// hoistGlobalFlags moves global flags given before the command's name to
// after it, where the command's flag set parses them.
func hoistGlobalFlags(args []string) []string {
	var global []string
	for len(args) > 0 {
		name, _, hasValue := strings.Cut(strings.TrimLeft(args[0], "-"), "=")
		if !strings.HasPrefix(args[0], "-") || !slices.Contains(globalFlags, name) {
			break
		}
		n := 1
		if !hasValue && len(args) > 1 {
			n = 2
		}
		global, args = append(global, args[:n]...), args[n:]
	}
	if len(global) == 0 || len(args) == 0 {
		return append(global, args...)
	}
	return append(append([]string{args[0]}, global...), args[1:]...)
}

// parseInterspersed parses flags that may come before, between or after
// positional arguments ("get ID --json"); "--" ends the flags.
func parseInterspersed(fs *flag.FlagSet, args []string) ([]string, error) {
	var pos []string
	for {
		if err := fs.Parse(args); err != nil {
			return nil, err
		}
		rest := fs.Args()
		if len(rest) == 0 {
			return pos, nil
		}
		if consumed := len(args) - len(rest); consumed > 0 && args[consumed-1] == "--" {
			return append(pos, rest...), nil
		}
		pos = append(pos, rest[0])
		args = rest[1:]
	}
}

// loadConfig reads --config (or ./queue.toml when it exists) with the
// environment overrides and sets up the logger.
func (a *app) loadConfig() error {
	path := a.configFlag
	if path == "" {
		if _, err := os.Stat("queue.toml"); err == nil {
			path = "queue.toml"
		}
	}
	cfg, err := config.Load(path, a.environ(), a.overrides...)
	if err != nil {
		return usageError("%v", err)
	}
	a.cfg = cfg
	a.log = cfg.NewLogger(a.stderr)
	return nil
}

// exitError carries the exit code of an error.
type exitError struct {
	code int
	err  error
}

func (e *exitError) Error() string { return e.err.Error() }
func (e *exitError) Unwrap() error { return e.err }

func withCode(code int, err error) error { return &exitError{code: code, err: err} }

func usageError(format string, args ...any) error {
	return withCode(exitUsage, fmt.Errorf(format, args...))
}

// codeOf maps an error to its exit code.
func codeOf(err error) int {
	var ee *exitError
	switch {
	case err == nil:
		return exitOK
	case errors.As(err, &ee):
		return ee.code
	case errors.Is(err, s3queue.ErrNotFound):
		return exitNotFound
	case errors.Is(err, s3store.ErrUnsupportedProvider):
		return exitUnsupported
	case errors.Is(err, s3store.ErrUnusable), errors.Is(err, s3store.ErrAccessDenied):
		// Closed to this user, even for one object: retrying cannot help.
		return exitUnusable
	case errors.Is(err, shards.ErrLayoutMismatch), errors.Is(err, worker.ErrWorkerIDInUse):
		return exitUsage
	}
	return exitRuntime
}

// warnf writes a warning line on stderr, "s3queue: warning: ...": the
// command goes on.
func (a *app) warnf(format string, args ...any) {
	fmt.Fprintf(a.stderr, "s3queue: warning: %s\n", oneLine(fmt.Sprintf(format, args...)))
}

func (a *app) report(err error) int {
	code := codeOf(err)
	if err != nil {
		fmt.Fprintf(a.stderr, "s3queue: %s\n", oneLine(err.Error()))
	}
	return code
}

// oneLine keeps an error on one line, as scripts and log collectors expect.
func oneLine(s string) string {
	s = strings.TrimSpace(s)
	if !strings.ContainsAny(s, "\r\n") {
		return s
	}
	fields := strings.FieldsFunc(s, func(r rune) bool { return r == '\n' || r == '\r' })
	for i := range fields {
		fields[i] = strings.TrimSpace(fields[i])
	}
	return strings.Join(fields, " | ")
}
