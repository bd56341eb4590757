package config

import (
	"strings"
	"testing"
	"time"
)

func TestSchedules(t *testing.T) {
	text := `
[[schedule]]
name = "report"
cron = "0 9 * * 1-5"
timezone = "Europe/Paris"
type = "report"
input = '{"kind":"daily"}'
max_attempts = 5
timeout = "2m"

[[schedule]]
name = "heartbeat"
every = "90s"
type = "ping"
input = { n = 1 }
catch_up = "none"
`
	c, err := Load(write(t, text), envMap(nil))
	if err != nil {
		t.Fatal(err)
	}
	if len(c.Schedules) != 2 {
		t.Fatalf("schedules %+v", c.Schedules)
	}
	r, h := c.Schedules[0], c.Schedules[1]
	if r.Name != "report" || r.Cron != "0 9 * * 1-5" || r.Timezone != "Europe/Paris" || string(r.Input) != `{"kind":"daily"}` ||
		r.MaxAttempts != 5 || r.Timeout.D() != 2*time.Minute || r.CatchUpMode() != "one" {
		t.Errorf("report: %+v", r)
	}
	if h.Every.D() != 90*time.Second || string(h.Input) != `{"n":1}` || h.CatchUp != "none" {
		t.Errorf("heartbeat: %+v", h)
	}
}

func TestBadSchedulesAreOneErrorNamingTheSchedule(t *testing.T) {
	for _, tc := range []struct{ text, want string }{
		{"[[schedule]]\nname = \"a\"\ncron = \"* * *\"\ntype = \"t\"\n", `queue.toml: schedule "a": bad cron "* * *"`},
		{"[[schedule]]\nname = \"a\"\ncron = \"@daily\"\ntimezone = \"Nowhere/City\"\ntype = \"t\"\n", `queue.toml: schedule "a": unknown time zone "Nowhere/City"`},
		{"[[schedule]]\nname = \"a\"\ncron = \"@daily\"\nevery = \"1m\"\ntype = \"t\"\n", `queue.toml: schedule "a": both cron and every are set`},
		{"[[schedule]]\nname = \"a\"\ntype = \"t\"\n", `queue.toml: schedule "a": neither cron nor every is set`},
		{"[[schedule]]\nname = \"a\"\nevery = \"soon\"\ntype = \"t\"\n", `queue.toml: schedule "a": every: time: invalid duration`},
		{"[[schedule]]\nname = \"a\"\nevery = \"0s\"\ntype = \"t\"\n", `queue.toml: schedule "a": every 0s: must be positive, at least 1s`},
		{"[[schedule]]\nname = \"a\"\nevery = \"1m\"\ntype = \"t\"\ncolour = \"red\"\n", `queue.toml: schedule "a": unknown key colour`},
		{"[[schedule]]\nevery = \"1m\"\ntype = \"t\"\n", `queue.toml: invalid schedule name ""`},
		{"[[schedule]]\nname = \"a\"\nevery = \"1m\"\ntype = \"t\"\n[[schedule]]\nname = \"a\"\nevery = \"2m\"\ntype = \"t\"\n", `queue.toml: schedule "a" is defined twice`},
	} {
		_, err := Load(write(t, tc.text), envMap(nil))
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: error %v, want one containing %q", tc.text, err, tc.want)
		}
	}
}
