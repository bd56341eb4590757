package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"sort"
	"strings"

	"github.com/s3queue/s3queue/internal/cost"
	"github.com/s3queue/s3queue/task"
)

var completionCommand = &command{
	name: "completion", args: "bash|zsh|fish", nargs: 1, noStore: true,
	summary: "print a shell completion script for bash, zsh or fish",
	examples: []string{
		"s3queue completion bash > /etc/bash_completion.d/s3queue",
		`s3queue completion zsh > "${fpath[1]}/_s3queue"`,
		"s3queue completion fish > ~/.config/fish/completions/s3queue.fish",
	},
	details: "The script completes command names, each command's flags, and the values of the flags that\n" +
		"take one of a few words (--log-level, list --status, ...). It is generated from the commands\n" +
		"this binary has, so regenerate it after an upgrade. In bash, `source <(s3queue completion bash)`\n" +
		"in ~/.bashrc also works; see docs/cli.md for each shell.",
	define: func(a *app, fs *flag.FlagSet) func(context.Context, []string) error {
		return func(_ context.Context, args []string) error {
			gen, ok := completionScripts[args[0]]
			if !ok {
				return usageError("completion: unknown shell %q (want bash, zsh or fish)", args[0])
			}
			gen(a.stdout, completionSpecs())
			return nil
		}
	},
}

// completionScripts writes each shell's script.
var completionScripts = map[string]func(io.Writer, []compCommand){
	"bash": bashCompletion,
	"zsh":  zshCompletion,
	"fish": fishCompletion,
}

// compCommand is what a completion script knows of a command.
type compCommand struct {
	name, summary string
	flags         []compFlag
	// words completes the positional arguments (help's command names,
	// completion's shells); nil completes file names.
	words []string
}

// compFlag is what a completion script knows of a flag.
type compFlag struct {
	name, usage string
	// arg names the flag's value ("URL", "N"); "" for a boolean flag.
	arg string
	// values are the words its value is one of, if few.
	values []string
}

// flagValues are the values of the flags that take one of a few words,
// whatever the command.
func flagValues() map[string][]string {
	statusNames := make([]string, len(statuses))
	for i, s := range statuses {
		statusNames[i] = string(s)
	}
	var profiles []string
	for _, p := range cost.Profiles() {
		profiles = append(profiles, p.Name)
	}
	return map[string][]string{
		"log-level":      {"debug", "info", "warn", "error"},
		"status":         statusNames,
		"admission":      {"queue", "replace", "drop-if-running"},
		"on-dep-failure": {string(task.DepCancel), string(task.DepFail)},
		"profile":        profiles,
	}
}

// completionSpecs describes the registered commands and their flags, as
// --help sees them, so a command or flag added later is completed without
// touching this file.
func completionSpecs() []compCommand {
	values := flagValues()
	names := make([]string, len(commands))
	for i, c := range commands {
		names[i] = c.name
	}
	out := make([]compCommand, 0, len(commands))
	for _, c := range commands {
		cc := compCommand{name: c.name, summary: c.summary}
		switch c.name {
		case "help":
			cc.words = names
		case "completion":
			cc.words = sortedKeys(completionScripts)
		}
		scratch := &app{}
		fs := scratch.flagSet(c)
		c.define(scratch, fs)
		fs.VisitAll(func(f *flag.Flag) {
			if isDeprecated(f) {
				return // works, but is not offered
			}
			arg, usage := flag.UnquoteUsage(f)
			if b, ok := f.Value.(interface{ IsBoolFlag() bool }); ok && b.IsBoolFlag() {
				arg = ""
			} else if arg == "" {
				arg = "value"
			}
			usage, _, _ = strings.Cut(usage, "\n")
			cc.flags = append(cc.flags, compFlag{name: f.Name, usage: usage, arg: arg, values: values[f.Name]})
		})
		out = append(out, cc)
	}
	return out
}

func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}

// describe makes a summary or a flag's usage plain text for a completion
// menu: no backslashes, backquotes or brackets (which zsh's _arguments
// would read).
func describe(s string) string {
	return strings.NewReplacer("\\", "", "`", "", "[", "(", "]", ")", "\t", " ").Replace(s)
}

// shQuote quotes s as one single-quoted word of sh, bash and zsh.
func shQuote(s string) string {
	return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
}

// fishQuote quotes s as one single-quoted word of fish.
func fishQuote(s string) string {
	return "'" + strings.NewReplacer(`\`, `\\`, "'", `\'`).Replace(s) + "'"
}

// argName makes a flag's value name safe for a zsh message.
func argName(s string) string {
	return strings.Map(func(r rune) rune {
		switch {
		case r >= 'a' && r <= 'z', r >= 'A' && r <= 'Z', r >= '0' && r <= '9', strings.ContainsRune("_=.,-", r):
			return r
		}
		return -1
	}, s)
}

func commandNames(cmds []compCommand) string {
	names := make([]string, len(cmds))
	for i, c := range cmds {
		names[i] = c.name
	}
	return strings.Join(names, " ")
}

func bashCompletion(w io.Writer, cmds []compCommand) {
	fmt.Fprintf(w, `# bash completion for s3queue, generated by "s3queue completion bash".
# Install: s3queue completion bash > /etc/bash_completion.d/s3queue
#      or: source <(s3queue completion bash)   (in ~/.bashrc)
_s3queue() {
    local cur prev cmd i flags valueflags words
    cur="${COMP_WORDS[COMP_CWORD]}"
    prev="${COMP_WORDS[COMP_CWORD-1]}"
    cmd=""
    for ((i = 1; i < COMP_CWORD; i++)); do
        case "${COMP_WORDS[i]}" in
            --log-level|-log-level) ((i++)) ;;
            -*) ;;
            *) cmd="${COMP_WORDS[i]}"; break ;;
        esac
    done
    case "$prev" in
`)
	// Flag values first: after a flag that takes one of a few words.
	values := map[string][]string{}
	for _, c := range cmds {
		for _, f := range c.flags {
			if len(f.values) > 0 {
				values[f.name] = f.values
			}
		}
	}
	for _, name := range sortedKeys(values) {
		fmt.Fprintf(w, "        --%s|-%s) COMPREPLY=($(compgen -W %q -- \"$cur\")); return ;;\n", name, name, strings.Join(values[name], " "))
	}
	fmt.Fprintf(w, `    esac
    if [[ -z "$cmd" ]]; then
        if [[ "$cur" == -* ]]; then
            COMPREPLY=($(compgen -W "--log-level --help --version" -- "$cur"))
        else
            COMPREPLY=($(compgen -W %q -- "$cur"))
        fi
        return
    fi
    case "$cmd" in
`, commandNames(cmds))
	for _, c := range cmds {
		var flags, valueFlags []string
		for _, f := range c.flags {
			flags = append(flags, "--"+f.name)
			if f.arg != "" {
				valueFlags = append(valueFlags, "--"+f.name, "-"+f.name)
			}
		}
		flags = append(flags, "--help")
		fmt.Fprintf(w, "        %s) flags=%q; valueflags=%q; words=%q ;;\n", c.name,
			strings.Join(flags, " "), strings.Join(valueFlags, " "), strings.Join(c.words, " "))
	}
	fmt.Fprint(w, `        *) return ;;
    esac
    if [[ " $valueflags " == *" $prev "* ]]; then
        # A flag's value: file names (the default).
        COMPREPLY=()
        return
    fi
    if [[ "$cur" == -* ]]; then
        COMPREPLY=($(compgen -W "$flags" -- "$cur"))
    elif [[ -n "$words" ]]; then
        COMPREPLY=($(compgen -W "$words" -- "$cur"))
    fi
}
complete -o default -F _s3queue s3queue
`)
}

func zshCompletion(w io.Writer, cmds []compCommand) {
	fmt.Fprint(w, `#compdef s3queue
# zsh completion for s3queue, generated by "s3queue completion zsh".
# Install: s3queue completion zsh > "${fpath[1]}/_s3queue"   (then restart zsh)
#      or: source <(s3queue completion zsh)   (in ~/.zshrc, after compinit)

_s3queue() {
  local curcontext="$curcontext" state line
  local -a commands
  commands=(
`)
	for _, c := range cmds {
		fmt.Fprintf(w, "    %s\n", shQuote(c.name+":"+describe(c.summary)))
	}
	fmt.Fprint(w, `  )
  _arguments -C \
    '--log-level=[log level]:level:(debug info warn error)' \
    '1: :->command' \
    '*:: :->args'
  case $state in
    command)
      _describe -t commands 's3queue command' commands
      ;;
    args)
      case $words[1] in
`)
	for _, c := range cmds {
		fmt.Fprintf(w, "        %s)\n          _arguments -S \\\n", c.name)
		for _, f := range c.flags {
			var spec string
			switch {
			case f.arg == "":
				spec = fmt.Sprintf("--%s[%s]", f.name, describe(f.usage))
			case len(f.values) > 0:
				spec = fmt.Sprintf("*--%s=[%s]:%s:(%s)", f.name, describe(f.usage), argName(f.arg), strings.Join(f.values, " "))
			default:
				spec = fmt.Sprintf("*--%s=[%s]:%s:_files", f.name, describe(f.usage), argName(f.arg))
			}
			fmt.Fprintf(w, "            %s \\\n", shQuote(spec))
		}
		if c.words != nil {
			fmt.Fprintf(w, "            '1:argument:(%s)'\n", strings.Join(c.words, " "))
		} else {
			fmt.Fprint(w, "            '*:file:_files'\n")
		}
		fmt.Fprint(w, "          ;;\n")
	}
	fmt.Fprint(w, `      esac
      ;;
  esac
}

if [ "$funcstack[1]" = "_s3queue" ]; then
  _s3queue "$@"
else
  compdef _s3queue s3queue
fi
`)
}

func fishCompletion(w io.Writer, cmds []compCommand) {
	fmt.Fprintf(w, `# fish completion for s3queue, generated by "s3queue completion fish".
# Install: s3queue completion fish > ~/.config/fish/completions/s3queue.fish
set -l s3queue_commands %s
complete -c s3queue -n "not __fish_seen_subcommand_from $s3queue_commands" -l log-level -x -a 'debug info warn error' -d 'log level'
`, commandNames(cmds))
	for _, c := range cmds {
		fmt.Fprintf(w, "complete -c s3queue -f -n \"not __fish_seen_subcommand_from $s3queue_commands\" -a %s -d %s\n", c.name, fishQuote(describe(c.summary)))
	}
	for _, c := range cmds {
		cond := fmt.Sprintf("'__fish_seen_subcommand_from %s'", c.name)
		for _, f := range c.flags {
			switch {
			case f.arg == "":
				fmt.Fprintf(w, "complete -c s3queue -n %s -l %s -d %s\n", cond, f.name, fishQuote(describe(f.usage)))
			case len(f.values) > 0:
				fmt.Fprintf(w, "complete -c s3queue -n %s -l %s -x -a '%s' -d %s\n", cond, f.name, strings.Join(f.values, " "), fishQuote(describe(f.usage)))
			default:
				fmt.Fprintf(w, "complete -c s3queue -n %s -l %s -r -d %s\n", cond, f.name, fishQuote(describe(f.usage)))
			}
		}
		if c.words != nil {
			fmt.Fprintf(w, "complete -c s3queue -n %s -f -a '%s'\n", cond, strings.Join(c.words, " "))
		}
	}
}
