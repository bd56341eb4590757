package settings_test

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/s3queue/s3queue/internal/settings"
)

type conf struct {
	Name  string
	N     int
	F     float64
	On    bool
	Wait  time.Duration
	List  []int
	Names []string
	Never bool // with Wait 0: Wait 0 is meant
}

var section = &settings.Section[conf]{
	Name: "s",
	Keys: []settings.Key[conf]{
		settings.String("name", func(c *conf) *string { return &c.Name }, "x", "The name."),
		settings.Int("n", func(c *conf) *int { return &c.N }, 4, "A count.").Must(settings.IntRange(1, 10)),
		settings.Float("f", func(c *conf) *float64 { return &c.F }, 2, "A factor.").Economy(8),
		settings.Bool("on", func(c *conf) *bool { return &c.On }, false, "A switch."),
		settings.Duration("wait", func(c *conf) *time.Duration { return &c.Wait }, 90*time.Second, "A wait.").
			Must(settings.NotNegative).Unset(func(c *conf) bool { return c.Wait == 0 && !c.Never }),
		settings.Ints("list", func(c *conf) *[]int { return &c.List }, nil, "A list."),
		settings.Strings("names", func(c *conf) *[]string { return &c.Names }, nil, "Names."),
	},
	Rules: []settings.Rule[conf]{{Keys: []string{"n", "f"}, Check: func(c *conf) error {
		if float64(c.N) < c.F {
			return errors.New("s.n is less than s.f")
		}
		return nil
	}}},
}

func TestBindParsesChecksAndFormats(t *testing.T) {
	var c conf
	tab := section.Bind(&c)
	want := map[string]struct{ def, economy string }{
		"s.name": {`"x"`, ""}, "s.n": {"4", ""}, "s.f": {"2.0", "8.0"}, "s.on": {"false", ""},
		"s.wait": {`"1m30s"`, ""}, "s.list": {"[]", ""}, "s.names": {"[]", ""},
	}
	for _, k := range tab.Keys {
		k.Reset()
		if w := want[k.Name]; k.Default != w.def || k.Economy != w.economy {
			t.Errorf("%s: default %s economy %q, want %s %q", k.Name, k.Default, k.Economy, w.def, w.economy)
		}
	}
	if c.Name != "x" || c.N != 4 || c.F != 2 || c.Wait != 90*time.Second || c.List != nil {
		t.Fatalf("Reset: %+v", c)
	}
	for _, tc := range []struct {
		key  string
		toml any
		text string
		err  string // the errors of toml and text, joined by "|"
	}{
		{"s.n", int64(7), "7", ""},
		{"s.n", int64(11), "11", "11 out of range 1..10"},
		{"s.n", "7", "seven", "want an integer, got string \"7\"|invalid integer \"seven\""},
		{"s.f", int64(3), "3", ""},
		{"s.on", true, "true", ""},
		{"s.wait", "5s", "5s", ""},
		{"s.wait", "-5s", "-5s", "duration -5s must not be negative"},
		{"s.list", []any{int64(1), int64(2)}, "1, 2", ""},
		{"s.names", []any{"a.example", "b"}, " a.example, b ", ""},
	} {
		for i, k := range tab.Keys {
			if k.Name != tc.key {
				continue
			}
			errs := []error{tab.Keys[i].SetTOML(tc.toml), tab.Keys[i].SetText(tc.text)}
			for _, err := range errs {
				if tc.err == "" && err != nil || tc.err != "" && (err == nil || !strings.Contains(tc.err, err.Error())) {
					t.Errorf("%s = %v / %q: error %v, want %q", tc.key, tc.toml, tc.text, err, tc.err)
				}
			}
		}
	}
	if c.N != 7 || c.F != 3 || !c.On || c.Wait != 5*time.Second || len(c.List) != 2 || strings.Join(c.Names, " ") != "a.example b" {
		t.Errorf("values not set: %+v", c)
	}
	for _, k := range tab.Keys {
		k.ApplyEconomy()
	}
	if c.F != 8 || c.N != 7 {
		t.Errorf("economy: %+v", c)
	}
	if err := tab.Rules[0].Check(); err == nil || tab.Rules[0].Keys[1] != "s.f" {
		t.Errorf("rule: %v %v", err, tab.Rules[0].Keys)
	}
}

func TestFillAndValidate(t *testing.T) {
	var c conf
	section.Fill(&c)
	if c.Name != "x" || c.N != 4 || c.F != 2 || c.Wait != 90*time.Second || c.List != nil {
		t.Errorf("Fill: %+v", c)
	}
	if err := section.Validate(&c); err != nil {
		t.Errorf("Validate defaults: %v", err)
	}
	kept := conf{Never: true, List: []int{}, N: -3}
	section.Fill(&kept)
	if kept.Wait != 0 || kept.List == nil || kept.N != -3 {
		t.Errorf("Fill changed what was set: %+v", kept)
	}
	if err := section.Validate(&kept); err == nil || err.Error() != "s.n: -3 must not be negative" {
		t.Errorf("Validate: %v", err)
	}
}
