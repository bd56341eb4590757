package config

import (
	"os"
	"path/filepath"
	"reflect"
	"regexp"
	"strings"
	"testing"

	"github.com/s3queue/s3queue/internal/settings"
)

// declared returns every declared key with its default, economy value and
// doc line.
func declared() []settings.Bound {
	var c Config
	return keys(c.tables())
}

// The example file shows every key with its declared default, the keys the
// profile changes commented out with their economy value, and above each
// key a comment that starts with its doc line. Loading it gives exactly
// the defaults.
func TestExampleFileShowsEveryDeclaredKey(t *testing.T) {
	path := filepath.Join("..", "..", "queue.toml.example")
	c, err := Load(path, envMap(nil))
	if err != nil {
		t.Fatal(err)
	}
	c.Source = ""
	if !reflect.DeepEqual(c, Default()) {
		t.Errorf("queue.toml.example is not the defaults:\n got %+v\nwant %+v", c, Default())
	}
	text, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	for _, k := range declared() {
		section, name := "", k.Name
		if i := strings.LastIndex(k.Name, "."); i >= 0 {
			section, name = k.Name[:i], k.Name[i+1:]
		}
		lines := strings.Split(sectionText(string(text), section), "\n")
		line := regexp.MustCompile(`^(# )?` + regexp.QuoteMeta(name) + ` = (.*?)(   # economy: (.*))?$`)
		found := false
		for i, l := range lines {
			m := line.FindStringSubmatch(l)
			if m == nil {
				continue
			}
			found = true
			commented, value, economy := m[1] != "", m[2], m[4]
			if value != k.Default {
				t.Errorf("queue.toml.example: %s = %s, want the default %s", k.Name, value, k.Default)
			}
			if economy != k.Economy || commented != (k.Economy != "") {
				t.Errorf("queue.toml.example: %q: want %q", l, exampleLine(k))
			}
			// The comment may go on where the doc line ends its sentence.
			if doc := commentAbove(lines[:i]); !strings.HasPrefix(doc, strings.TrimSuffix(k.Doc, ".")) {
				t.Errorf("queue.toml.example: the comment above %s\n  %s\ndoes not start with its doc line\n  %s", k.Name, doc, k.Doc)
			}
			break
		}
		if !found {
			t.Errorf("queue.toml.example does not show key %s: want a line %q", k.Name, exampleLine(k))
		}
	}
}

func exampleLine(k settings.Bound) string {
	name := k.Name[strings.LastIndex(k.Name, ".")+1:]
	if k.Economy != "" {
		return "# " + name + " = " + k.Default + "   # economy: " + k.Economy
	}
	return name + " = " + k.Default
}

// commentAbove returns the paragraph of comment lines at the end of lines,
// without the "# " and joined by spaces.
func commentAbove(lines []string) string {
	var para []string
	for i := len(lines) - 1; i >= 0; i-- {
		l := lines[i]
		if l == "#" || !strings.HasPrefix(l, "# ") || regexp.MustCompile(`^# [a-z_]+ = `).MatchString(l) {
			break
		}
		para = append([]string{strings.TrimPrefix(l, "# ")}, para...)
	}
	return strings.Join(para, " ")
}

// sectionText returns the part of a TOML text in [section] ("" for the top
// level, before the first table).
func sectionText(text, section string) string {
	re := regexp.MustCompile(`(?m)^#? ?\[([a-z_.]+)\]\s*$`)
	locs := re.FindAllStringSubmatchIndex(text, -1)
	if section == "" {
		if len(locs) == 0 {
			return text
		}
		return text[:locs[0][0]]
	}
	for i, l := range locs {
		if text[l[2]:l[3]] == section {
			end := len(text)
			if i+1 < len(locs) {
				end = locs[i+1][0]
			}
			return text[l[1]:end]
		}
	}
	return ""
}

// docs/cli.md's configuration table has a row per declared key, in file
// order, with its default (and economy value), its environment variable
// and its doc line.
func TestCLIDocListsEveryDeclaredKey(t *testing.T) {
	text, err := os.ReadFile(filepath.Join("..", "..", "docs", "cli.md"))
	if err != nil {
		t.Fatal(err)
	}
	table, _, _ := strings.Cut(string(text), "\n## Environment variables")
	_, table, _ = strings.Cut(table, "\n## Configuration")
	rows := make(map[string]string)
	var order []string
	for _, l := range strings.Split(table, "\n") {
		if m := regexp.MustCompile("^\\| `([a-z_.]+)` \\|").FindStringSubmatch(l); m != nil {
			rows[m[1]] = l
			order = append(order, m[1])
		}
	}
	var want []string
	for _, k := range declared() {
		want = append(want, k.Name)
		if got, row := rows[k.Name], cliRow(k); got != row {
			t.Errorf("docs/cli.md row of %s:\n  %s\nwant\n  %s", k.Name, got, row)
		}
	}
	if !reflect.DeepEqual(order, want) {
		t.Errorf("docs/cli.md lists keys\n  %v\nwant, in file order,\n  %v", order, want)
	}
}

func cliRow(k settings.Bound) string {
	def := "`" + k.Default + "`"
	if k.Economy != "" {
		def += " (economy `" + k.Economy + "`)"
	}
	return "| `" + k.Name + "` | " + def + " | `" + EnvName(k.Name) + "` | " + k.Doc + " |"
}
