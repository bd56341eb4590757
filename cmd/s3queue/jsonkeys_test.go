package main

import (
	"encoding/json"
	"errors"
	"flag"
	"os"
	"path/filepath"
	"reflect"
	"regexp"
	"strings"
	"testing"
	"time"

	s3events "github.com/s3queue/s3queue/internal/events"
	"github.com/s3queue/s3queue/task"
)

var updateJSONKeys = flag.Bool("update-json-keys", false, "rewrite testdata/json-keys/*.txt from the commands' output")

// snakeCase is the form of every key of every --json output.
var snakeCase = regexp.MustCompile(`^[a-z][a-z0-9]*(_[a-z0-9]+)*$`)

// opaqueKeys hold user data (a task's input and result): their insides
// are the user's, not the command's.
var opaqueKeys = map[string]bool{"input": true, "result": true}

// jsonKeys adds to out the path of every key in v ("checks.requests",
// "[].deps[].id"; a key that is a number, such as a shard's, is "N"),
// and reports keys that are not snake_case.
func jsonKeys(t *testing.T, cmd string, v any, path string, out map[string]bool) {
	switch v := v.(type) {
	case map[string]any:
		for k, sub := range v {
			name := k
			if strings.Trim(k, "0123456789") == "" {
				name = "N"
			} else if !snakeCase.MatchString(k) {
				t.Errorf("%s --json: key %q at %q is not snake_case", cmd, k, path)
			}
			p := name
			if path != "" {
				p = path + "." + name
			}
			out[p] = true
			if !opaqueKeys[k] {
				jsonKeys(t, cmd, sub, p, out)
			}
		}
	case []any:
		for _, sub := range v {
			jsonKeys(t, cmd, sub, path+"[]", out)
		}
	}
}

// Every command that takes --json prints snake_case keys at every depth,
// and the same keys from one release to the next: each command's keys
// are listed in testdata/json-keys/COMMAND.txt, so a rename or a removal
// shows up as a diff there (go test ./cmd/s3queue -run TestJSONKeys
// -update-json-keys rewrites the lists after a deliberate change). A
// command that gains --json fails here until it has a case below.
func TestJSONKeys(t *testing.T) {
	store, _ := newStore(t)
	cfg := writeConfig(t, fastWorker)
	ok := submit(t, store, cfg, "ok", "--input", `{"Width": 1, "nested": {"CamelCase": true}}`, "--idempotency-key", "k1", "--key", "customer-1")
	bad := submit(t, store, cfg, "bad", "--max-attempts", "1")
	// A result over the inline limit (256 KiB): stored apart, result_ref.
	big := submit(t, store, cfg, "big")
	_, stop := background(t, "worker", "--store", store, "--config", cfg, "--exec", "ok=cat", "--exec", "bad=echo boom >&2; exit 1",
		"--exec", `big=head -c 300000 /dev/zero | tr '\0' x`)
	waitTerminal(t, store, ok)
	waitTerminal(t, store, bad)
	waitTerminal(t, store, big)
	if code := stop(); code != 0 {
		t.Fatalf("worker exit %d", code)
	}
	after := submit(t, store, cfg, "hold", "--after", ok, "--on-dep-failure", "fail")
	slot := submit(t, store, cfg, "hold", "--slot", "s1")
	canceled := submit(t, store, cfg, "hold")
	must(t, "cancel", canceled, "--store", store)
	later := submit(t, store, cfg, "hold", "--delay", "1h")
	ids := []string{ok, bad, after, slot, canceled, later, big}
	// The pause commands each have a store of their own: the cases run in
	// any order, and each must print the same keys whatever ran before.
	pauseStore, _ := newStore(t)
	pausedStore, _ := newStore(t)
	resumeStore, _ := newStore(t)
	scheduleStore, _ := newStore(t)
	for _, st := range []string{pauseStore, pausedStore, resumeStore, scheduleStore} {
		submit(t, st, cfg, "mail")
	}
	must(t, "pause", "mail", "--reason", "test", "--store", pausedStore)
	must(t, "pause", "mail", "--reason", "test", "--store", resumeStore)
	events := newEventServer(t, []s3events.Event{{Time: time.Now(), Source: s3events.SourceWorker, Origin: "w1", Kind: s3events.Failed,
		TaskID: bad, Type: "bad", Attempt: 1, Shard: 3, Pool: "p", Phase: s3events.PhaseInFlight, Key: "tasks/003/x.json", Err: errors.New("boom")}})

	cases := map[string][][]string{
		"list":   {{"list", "--store", store, "--limit", "0", "--json"}},
		"stats":  {{"stats", "--store", store, "--json"}},
		"doctor": {{"doctor", "--store", store, "--json"}},
		"cost":   {{"cost", "--json"}},
		"wait":   {{"wait", ok, bad, "--store", store, "--json"}},
		"tail":   {{"tail", "--from", events.URL, "--json"}},
		// submit --json goes with --wait; the task ends canceled by its
		// dependency on the dead one.
		"submit":  {{"submit", "--store", store, "--type", "hold", "--after", bad, "--wait", "--json"}},
		"requeue": {{"requeue", "--status", "dead", "--dry-run", "--json", "--store", store}},
		"cancel":  {{"cancel", "--type", "hold", "--status", "pending", "--dry-run", "--json", "--store", store}},
		"purge":   {{"purge", "--older-than", "1h", "--json", "--store", store}},
		"pause":   {{"pause", "mail", "--reason", "test", "--json", "--store", pauseStore}},
		"paused":  {{"paused", "--json", "--store", pausedStore}},
		"resume":  {{"resume", "--json", "--store", resumeStore}},
		"schedule": {
			{"schedule", "add", "nightly", "--cron", "0 3 * * *", "--timezone", "Europe/Paris", "--type", "mail", "--input", `{"a":1}`,
				"--max-attempts", "2", "--timeout", "1m", "--json", "--store", scheduleStore},
			{"schedule", "add", "beat", "--every", "90s", "--type", "mail", "--catch-up", "none", "--json", "--store", scheduleStore},
			{"schedule", "list", "--json", "--store", scheduleStore},
		},
	}
	for _, id := range ids {
		cases["get"] = append(cases["get"], []string{"get", id, "--store", store, "--json"})
		cases["history"] = append(cases["history"], []string{"history", id, "--store", store, "--json"})
	}
	for _, c := range commands {
		if c.json && cases[c.name] == nil {
			t.Errorf("%s takes --json but TestJSONKeys has no case for it: add one and its testdata/json-keys/%s.txt", c.name, c.name)
		}
	}
	for name, runs := range cases {
		t.Run(name, func(t *testing.T) {
			keys := map[string]bool{}
			for _, args := range runs {
				var v any
				var out string
				switch args[0] {
				case "tail": // runs until Ctrl-C: stop it after its one line
					out = runTail(t, 1, args[1:]...).stdout
				case "wait", "submit": // the exit code says how the tasks ended
					out = cli(t, "", args...).stdout
				default:
					out = must(t, args...)
				}
				if err := json.Unmarshal([]byte(out), &v); err != nil {
					t.Fatalf("%v: not JSON: %v\n%s", args, err, out)
				}
				jsonKeys(t, name, v, "", keys)
			}
			got := sortedKeys(keys)
			golden := filepath.Join("testdata", "json-keys", name+".txt")
			if *updateJSONKeys {
				os.MkdirAll(filepath.Dir(golden), 0o755)
				if err := os.WriteFile(golden, []byte(strings.Join(got, "\n")+"\n"), 0o644); err != nil {
					t.Fatal(err)
				}
				return
			}
			b, err := os.ReadFile(golden)
			if err != nil {
				t.Fatalf("%v (run with -update-json-keys to create it)", err)
			}
			want := strings.Fields(string(b))
			if strings.Join(got, "\n") != strings.Join(want, "\n") {
				t.Errorf("%s --json keys changed (a script reading them would break); got:\n%s\nwant (%s):\n%s",
					name, strings.Join(got, "\n"), golden, strings.Join(want, "\n"))
			}
		})
	}
}

// The output types' keys are snake_case even where the small queue above
// shows no value (a running task's claim, a fields left out when empty).
func TestJSONOutputTypesAreSnakeCase(t *testing.T) {
	for _, v := range []any{task.Task{}, queueStats{}, doctorReport{}, costJSON{}, outcome{}, bulkReport{}} {
		checkTypeKeys(t, reflect.TypeOf(v), reflect.TypeOf(v).Name(), map[reflect.Type]bool{})
	}
}

func checkTypeKeys(t *testing.T, typ reflect.Type, path string, seen map[reflect.Type]bool) {
	marshaler := reflect.TypeOf((*json.Marshaler)(nil)).Elem()
	for typ.Kind() == reflect.Pointer || typ.Kind() == reflect.Slice || typ.Kind() == reflect.Array || typ.Kind() == reflect.Map {
		typ = typ.Elem()
	}
	if typ.Kind() != reflect.Struct || seen[typ] || typ == reflect.TypeOf(time.Time{}) ||
		typ.Implements(marshaler) || reflect.PointerTo(typ).Implements(marshaler) {
		return
	}
	seen[typ] = true
	for i := 0; i < typ.NumField(); i++ {
		f := typ.Field(i)
		if !f.IsExported() {
			continue
		}
		name, _, _ := strings.Cut(f.Tag.Get("json"), ",")
		if name == "-" {
			continue
		}
		if name == "" {
			name = f.Name
		}
		if !snakeCase.MatchString(name) {
			t.Errorf("%s.%s: JSON key %q is not snake_case", path, f.Name, name)
		}
		checkTypeKeys(t, f.Type, path+"."+name, seen)
	}
}
