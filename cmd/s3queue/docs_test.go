package main

import (
	"encoding/json"
	"flag"
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"reflect"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/s3queue/s3queue/task"
)

// The tests of this file hold docs/cli.md's tables to the binary: the exit
// codes, the flags of each command, the commands of each common flag, the
// flag names that mean one thing everywhere, and the keys of each --json
// output. A flag, an exit code or a key added, renamed or dropped in one
// and not the other fails here.

// cliDoc is docs/cli.md.
func cliDoc(t *testing.T) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("..", "..", "docs", "cli.md"))
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// docSection returns the text under the heading of level "## " or "### "
// titled title, up to the next heading of that level or above.
func docSection(t *testing.T, doc, heading string) string {
	t.Helper()
	level := heading[:strings.Index(heading, " ")+1]
	_, rest, ok := strings.Cut(doc, "\n"+heading+"\n")
	if !ok {
		t.Fatalf("docs/cli.md has no heading %q", heading)
	}
	for i := 0; i < len(rest); i++ {
		if i == 0 || rest[i-1] == '\n' {
			line := rest[i:]
			for l := len("##"); l <= len(level)-1; l++ {
				if strings.HasPrefix(line, strings.Repeat("#", l)+" ") {
					return rest[:i]
				}
			}
		}
	}
	return rest
}

// tableRows returns the cells of the rows of the Markdown table whose
// header row starts with header ("| flag |"), in text.
func tableRows(text, header string) [][]string {
	var rows [][]string
	for _, table := range strings.Split(text, "\n"+header)[1:] {
		lines := strings.Split(table, "\n")
		for _, l := range lines[2:] { // the rest of the header, the separator
			if !strings.HasPrefix(l, "|") {
				break
			}
			rows = append(rows, splitRow(l))
		}
	}
	return rows
}

// splitRow splits a table row into its cells, unescaping \|.
func splitRow(line string) []string {
	line = strings.ReplaceAll(strings.TrimSpace(line), `\|`, "\x00")
	line = strings.TrimSuffix(strings.TrimPrefix(line, "|"), "|")
	cells := strings.Split(line, "|")
	for i := range cells {
		cells[i] = strings.ReplaceAll(strings.TrimSpace(cells[i]), "\x00", "|")
	}
	return cells
}

var (
	flagName   = regexp.MustCompile(`--([a-z][a-z0-9-]*)`)
	backquoted = regexp.MustCompile("`([^`]*)`")
)

// commandFlags returns the flags of c, as its --help shows them, and
// which of them are deprecated spellings.
func commandFlags(c *command) (flags map[string]bool, deprecated map[string]bool) {
	a := &app{}
	fs := a.flagSet(c)
	c.define(a, fs)
	flags, deprecated = map[string]bool{}, map[string]bool{}
	fs.VisitAll(func(f *flag.Flag) {
		flags[f.Name] = true
		if isDeprecated(f) {
			deprecated[f.Name] = true
		}
	})
	return flags, deprecated
}

// commonFlags reads the table of common flags: each flag and the commands
// that take it ("all but a, b" or a list).
func commonFlags(t *testing.T, doc string) map[string][]string {
	t.Helper()
	out := map[string][]string{}
	for _, row := range tableRows(docSection(t, doc, "## Common flags"), "| flag | commands | meaning |") {
		name := flagName.FindStringSubmatch(row[0])[1]
		var cmds []string
		if but, ok := strings.CutPrefix(row[1], "all but "); ok {
			var except []string
			for _, m := range backquoted.FindAllStringSubmatch(but, -1) {
				except = append(except, m[1])
			}
			for _, c := range commands {
				if !slices.Contains(except, c.name) {
					cmds = append(cmds, c.name)
				}
			}
		} else {
			for _, m := range backquoted.FindAllStringSubmatch(row[1], -1) {
				cmds = append(cmds, strings.Fields(m[1])[0]) // "submit --wait": submit
			}
		}
		slices.Sort(cmds)
		out[name] = cmds
	}
	if len(out) < 6 {
		t.Fatalf("read %d common flags from docs/cli.md: the parse is wrong", len(out))
	}
	return out
}

// The table of common flags names, for each flag, exactly the commands
// that take it.
func TestDocsCommonFlagsTable(t *testing.T) {
	for name, documented := range commonFlags(t, cliDoc(t)) {
		var have []string
		for _, c := range commands {
			if flags, _ := commandFlags(c); flags[name] {
				have = append(have, c.name)
			}
		}
		slices.Sort(have)
		if !slices.Equal(have, documented) {
			t.Errorf("docs/cli.md's common flag --%s is for\n  %v\nthe commands that take it are\n  %v", name, documented, have)
		}
	}
}

// bulkCommands share docs/cli.md's section "Bulk operations".
var bulkCommands = []*command{cancelCommand, requeueCommand, purgeCommand}

// commandDocs returns the part of docs/cli.md about command c: its section
// (a "### " heading that names it, and its subsections), and for cancel,
// requeue and purge the section they share.
func commandDocs(t *testing.T, doc string, c *command) (own, shared string) {
	t.Helper()
	for _, l := range strings.Split(doc, "\n") {
		title, ok := strings.CutPrefix(l, "### ")
		if ok && slices.Contains(strings.Split(title, ", "), c.name) {
			own += docSection(t, doc, l)
		}
	}
	if slices.Contains(bulkCommands, c) {
		shared = docSection(t, doc, "### Bulk operations")
	}
	return own, shared
}

// synopsisFlags returns the flags of the synopsis lines of c in text (the
// lines of code blocks that start "s3queue NAME") and of the first column
// of its flag tables.
func synopsisFlags(text string, c *command) map[string]bool {
	out := map[string]bool{}
	inCode, inSynopsis := false, false
	for _, l := range strings.Split(text, "\n") {
		switch {
		case strings.HasPrefix(l, "```"):
			inCode, inSynopsis = !inCode, false
			continue
		case !inCode:
			if strings.HasPrefix(l, "| `--") {
				for _, m := range flagName.FindAllStringSubmatch(splitRow(l)[0], -1) {
					out[m[1]] = true
				}
			}
			continue
		}
		trimmed := strings.TrimSpace(strings.TrimPrefix(l, "$ "))
		if strings.HasPrefix(trimmed, "s3queue "+c.name+" ") || trimmed == "s3queue "+c.name {
			inSynopsis = !strings.Contains(l, "$ ") // an example's flags are checked by running it
		} else if !strings.HasPrefix(l, " ") {
			inSynopsis = false
		}
		if inSynopsis {
			for _, m := range flagName.FindAllStringSubmatch(l, -1) {
				out[m[1]] = true
			}
		}
	}
	return out
}

// Each command's section of docs/cli.md documents every flag the command
// takes (in its synopsis, a flag table, or its text; the common ones in
// their table), and its synopsis and flag tables name no flag it lacks.
func TestDocsFlagsOfEachCommand(t *testing.T) {
	doc := cliDoc(t)
	common := commonFlags(t, doc)
	for _, c := range commands {
		t.Run(c.name, func(t *testing.T) {
			flags, deprecated := commandFlags(c)
			own, shared := commandDocs(t, doc, c)
			text := own + shared
			if text == "" {
				if c == versionCommand || c == helpCommand {
					// A row of the command table: no flag of its own.
					for f := range flags {
						t.Errorf("%s takes --%s, and docs/cli.md has no section for it", c.name, f)
					}
					return
				}
				t.Fatalf("docs/cli.md has no section for %s", c.name)
			}
			mentioned := map[string]bool{}
			for _, m := range flagName.FindAllStringSubmatch(text, -1) {
				mentioned[m[1]] = true
			}
			for f := range flags {
				if slices.Contains(common[f], c.name) {
					continue
				}
				if !mentioned[f] {
					t.Errorf("%s takes --%s, which its section of docs/cli.md does not mention", c.name, f)
				}
				if deprecated[f] && !regexp.MustCompile("`--"+f+"[^`]*` \\| [^|]*\\| deprecated").MatchString(text) {
					t.Errorf("%s --%s is deprecated: its flag table should have a row saying so", c.name, f)
				}
			}
			for f := range synopsisFlags(own, c) {
				if !flags[f] {
					t.Errorf("docs/cli.md's synopsis or flag table of %s names --%s, which it does not take", c.name, f)
				}
			}
		})
	}
	// The shared table of the bulk operations names flags one of them
	// takes at least.
	for f := range synopsisFlags(docSection(t, doc, "### Bulk operations"), cancelCommand) {
		taken := false
		for _, c := range bulkCommands {
			flags, _ := commandFlags(c)
			taken = taken || flags[f]
		}
		if !taken {
			t.Errorf("docs/cli.md's table of bulk operations names --%s, which none of cancel, requeue and purge takes", f)
		}
	}
}

// The table of flag names that mean one thing lists, for each flag, every
// command that takes it (under its current spelling).
func TestDocsOneNameOneMeaning(t *testing.T) {
	doc := cliDoc(t)
	rows := tableRows(doc, "| flag | means | in |")
	if len(rows) < 5 {
		t.Fatalf("read %d rows of the one-name table: the parse is wrong", len(rows))
	}
	for _, row := range rows {
		name := flagName.FindStringSubmatch(row[0])[1]
		var documented []string
		for _, m := range backquoted.FindAllStringSubmatch(row[2], -1) {
			documented = append(documented, strings.Fields(m[1])[0])
		}
		var have []string
		for _, c := range commands {
			if flags, deprecated := commandFlags(c); flags[name] && !deprecated[name] {
				have = append(have, c.name)
			}
		}
		slices.Sort(documented)
		documented = slices.Compact(documented)
		slices.Sort(have)
		if !slices.Equal(have, documented) {
			t.Errorf("docs/cli.md says --%s (%s) is in\n  %v\nthe commands that take it are\n  %v", name, row[1], documented, have)
		}
	}
}

// exitConstants returns the exit codes main.go declares, by name.
func exitConstants(t *testing.T) map[int]string {
	t.Helper()
	f, err := parser.ParseFile(token.NewFileSet(), "main.go", nil, 0)
	if err != nil {
		t.Fatal(err)
	}
	out := map[int]string{}
	ast.Inspect(f, func(n ast.Node) bool {
		vs, ok := n.(*ast.ValueSpec)
		if !ok {
			return true
		}
		for i, id := range vs.Names {
			if i >= len(vs.Values) {
				break
			}
			if lit, ok := vs.Values[i].(*ast.BasicLit); ok && strings.HasPrefix(id.Name, "exit") {
				n, _ := strconv.Atoi(lit.Value)
				out[n] = id.Name
			}
		}
		return true
	})
	return out
}

// docs/cli.md's table of exit codes, `s3queue help`'s and main.go's
// constants list the same codes, with the same meanings.
func TestDocsExitCodes(t *testing.T) {
	rows := tableRows(docSection(t, cliDoc(t), "## Exit codes"), "| code | meaning | examples |")
	help := map[string]string{}
	for _, l := range strings.Split(exitCodesHelp, "\n") {
		if m := regexp.MustCompile(`^  (\d+(?:, \d+)*)  (.*)$`).FindStringSubmatch(l); m != nil {
			help[m[1]] = m[2]
		}
	}
	constants := exitConstants(t)
	if len(constants) < 10 || len(rows) != len(help) {
		t.Fatalf("%d constants, %d rows in docs/cli.md, %d codes in the help: the parse is wrong, or they differ", len(constants), len(rows), len(help))
	}
	documented := map[int]bool{}
	for _, row := range rows {
		code, meaning := row[0], row[1]
		line, ok := help[code]
		if !ok {
			t.Errorf("docs/cli.md has exit code %s, s3queue help has not", code)
			continue
		}
		for _, w := range strings.Fields(meaning) {
			if !strings.Contains(line, w) {
				t.Errorf("exit code %s: docs/cli.md says %q, s3queue help %q (without %q)", code, meaning, line, w)
			}
		}
		if n, err := strconv.Atoi(code); err == nil {
			documented[n] = true
		}
	}
	for n, name := range constants {
		if !documented[n] {
			t.Errorf("%s = %d is not in docs/cli.md's exit codes", name, n)
		}
	}
	for n := range documented {
		if _, ok := constants[n]; !ok {
			t.Errorf("docs/cli.md documents exit code %d, which main.go does not declare", n)
		}
	}
}

// jsonTags returns every JSON key of v's type, at any depth.
func jsonTags(typ reflect.Type, out map[string]bool) {
	for typ.Kind() == reflect.Pointer || typ.Kind() == reflect.Slice || typ.Kind() == reflect.Map {
		typ = typ.Elem()
	}
	if typ.Kind() != reflect.Struct || typ == reflect.TypeOf(time.Time{}) {
		return
	}
	for i := 0; i < typ.NumField(); i++ {
		f := typ.Field(i)
		name, _, _ := strings.Cut(f.Tag.Get("json"), ",")
		if !f.IsExported() || name == "-" {
			continue
		}
		if name == "" {
			name = f.Name
		}
		if !out[name] {
			out[name] = true
			jsonTags(f.Type, out)
		}
	}
}

// documentedJSONKeys returns the keys docs/cli.md gives for --json in
// text: the snake_case words of the `{…}` spans of the paragraphs that
// mention --json.
func documentedJSONKeys(text string) map[string]bool {
	out := map[string]bool{}
	for i := 0; ; {
		j := strings.Index(text[i:], "`--json`")
		if j < 0 {
			return out
		}
		i += j + 1
		para, _, _ := strings.Cut(text[i:], "\n\n")
		for _, m := range regexp.MustCompile("(?s)`([^`]*\\{[^`]*)`").FindAllStringSubmatch(para, -1) {
			for _, w := range regexp.MustCompile(`[a-z][a-z0-9_]*`).FindAllString(m[1], -1) {
				out[w] = true
			}
		}
	}
}

// Each command's --json keys in docs/cli.md are keys the command prints,
// and every key it prints at the top (testdata/json-keys) is documented.
func TestDocsJSONKeys(t *testing.T) {
	doc := cliDoc(t)
	statusKeys := map[string]bool{}
	for _, s := range statuses {
		statusKeys[string(s)] = true
	}
	outputs := map[string]struct {
		typ any
		// all: the docs list every key (not "the task object as stored").
		all bool
		// mapKeys are documented keys of maps: not in the type.
		mapKeys map[string]bool
	}{
		"wait":     {outcome{}, true, nil},
		"history":  {task.Transition{}, true, nil},
		"cancel":   {bulkReport{}, true, nil},
		"requeue":  {bulkReport{}, true, nil},
		"purge":    {bulkReport{}, true, nil},
		"stats":    {queueStats{}, true, statusKeys},
		"pause":    {pauseJSON{}, true, nil},
		"resume":   {pauseJSON{}, true, nil},
		"paused":   {pauseJSON{}, true, nil},
		"schedule": {scheduleJSON{}, true, map[string]bool{"removed": true}},
		"doctor":   {doctorReport{}, true, nil},
		"cost":     {costJSON{}, true, nil},
		"get":      {task.Task{}, false, nil},
	}
	// Documented elsewhere: submit --wait prints what wait does, list the
	// tasks as get does, tail the events of docs/events.md (below).
	elsewhere := map[string]bool{"submit": true, "list": true, "tail": true}
	for _, c := range commands {
		if !c.json {
			continue
		}
		out, ok := outputs[c.name]
		if !ok {
			if !elsewhere[c.name] {
				t.Errorf("%s takes --json: add its output type to TestDocsJSONKeys", c.name)
			}
			continue
		}
		t.Run(c.name, func(t *testing.T) {
			own, shared := commandDocs(t, doc, c)
			documented := documentedJSONKeys(own + shared)
			if len(documented) == 0 {
				t.Fatalf("docs/cli.md's section of %s gives no --json keys", c.name)
			}
			tags := map[string]bool{}
			jsonTags(reflect.TypeOf(out.typ), tags)
			for k := range documented {
				if !tags[k] && !out.mapKeys[k] {
					t.Errorf("docs/cli.md gives %s --json the key %q, which it does not print", c.name, k)
				}
			}
			if out.all {
				for _, k := range goldenKeys(t, c.name) {
					if !documented[k] {
						t.Errorf("%s --json prints the key %q, which docs/cli.md does not give", c.name, k)
					}
				}
			}
		})
	}
	// tail --json prints the events' keys: docs/events.md's table.
	events, err := os.ReadFile(filepath.Join("..", "..", "docs", "events.md"))
	if err != nil {
		t.Fatal(err)
	}
	documented := map[string]bool{}
	for _, row := range tableRows(string(events), "| key | type | |") {
		documented[strings.Trim(row[0], "`")] = true
	}
	for _, k := range goldenKeys(t, "tail") {
		if !documented[k] {
			t.Errorf("tail --json prints the key %q, which docs/events.md's table of keys does not give", k)
		}
	}
}

// goldenKeys returns the keys testdata/json-keys/NAME.txt has at the top
// of the output (or of its array's elements).
func goldenKeys(t *testing.T, name string) []string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("testdata", "json-keys", name+".txt"))
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, p := range strings.Fields(string(b)) {
		p = strings.TrimPrefix(p, "[].")
		if !strings.ContainsAny(p, ".[") {
			out = append(out, p)
		}
	}
	return out
}

// The helpers above read what they should: a table, a section.
func TestDocsParsers(t *testing.T) {
	text := "intro\n\n| flag | default | meaning |\n| --- | --- | --- |\n| `--a N` | 1 | x \\| y |\n| `--b` | | z |\n\nafter\n"
	rows := tableRows(text, "| flag | default | meaning |")
	if got, _ := json.Marshal(rows); string(got) != `[["`+"`--a N`"+`","1","x | y"],["`+"`--b`"+`","","z"]]` {
		t.Errorf("tableRows: %s", got)
	}
	doc := "# t\n\n## A\n\na\n\n### B\n\nb\n\n#### C\n\nc\n\n### D\n\nd\n\n## E\n"
	if got := docSection(t, doc, "### B"); got != "\nb\n\n#### C\n\nc\n\n" {
		t.Errorf("docSection(### B) = %q", got)
	}
	if got := docSection(t, doc, "## A"); !strings.Contains(got, "### D") || strings.Contains(got, "## E") {
		t.Errorf("docSection(## A) = %q", got)
	}
}
