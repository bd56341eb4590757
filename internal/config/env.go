package config

import (
	"fmt"
	"slices"
	"sort"
	"strings"

	"github.com/s3queue/s3queue/internal/settings"
)

// EnvPrefix starts every environment override: S3QUEUE_<SECTION>_<KEY>.
const EnvPrefix = "S3QUEUE_"

// EnvStore names the store URL's environment variable.
const EnvStore = EnvPrefix + "STORE"

// The variables the worker command sets for the commands it runs: the
// task's id, its attempt (1 for the first; a snooze gives its attempt
// back, so a run after one is the same attempt), how many times it has
// snoozed (exit 75) before this run, and its type. A handler may itself
// run s3queue, so they are not configuration keys, and not errors.
const (
	EnvTaskID   = EnvPrefix + "TASK_ID"
	EnvAttempt  = EnvPrefix + "ATTEMPT"
	EnvSnoozes  = EnvPrefix + "SNOOZES"
	EnvTaskType = EnvPrefix + "TASK_TYPE"
)

// EnvDashboardToken holds the action token of the monitor's dashboard
// (s3queue monitor --http; docs/dashboard.md). A secret, so not a key of
// queue.toml, and never printed.
const EnvDashboardToken = EnvPrefix + "DASHBOARD_TOKEN"

// reservedEnv are the S3QUEUE_* variables that name no key and are no
// mistake, in one place: those the worker command sets for handlers, and
// those of the test suites, the simulator, the benchmarks, the chaos suite
// (integration/chaos) and the test servers (integration/harness). A name ending in "_" reserves every
// variable it starts.
var reservedEnv = []string{
	EnvTaskID, EnvAttempt, EnvSnoozes, EnvTaskType, EnvDashboardToken,
	EnvPrefix + "TEST_", EnvPrefix + "SIM_", EnvPrefix + "BENCH_", EnvPrefix + "CHAOS_",
	EnvPrefix + "MINIO_IMAGE", EnvPrefix + "VERSITYGW_IMAGE",
}

// EnvName is the environment variable that overrides key ("worker.poll_min"
// → S3QUEUE_WORKER_POLL_MIN).
func EnvName(key string) string {
	return EnvPrefix + strings.ToUpper(strings.ReplaceAll(key, ".", "_"))
}

// applyEnv applies the variables that name keys, recording in src the keys
// they set. names, if not nil, are all the S3QUEUE_* variables set: one
// that names no key and is not reserved is an error.
func applyEnv(keys []settings.Bound, env func(string) string, names []string, src map[string]string) error {
	if err := unknownEnv(keys, env, names); err != nil {
		return err
	}
	for _, k := range keys {
		name := EnvName(k.Name)
		v := env(name)
		if v == "" {
			continue
		}
		if err := k.SetText(v); err != nil {
			return fmt.Errorf("%s: %w", name, err)
		}
		src[k.Name] = name
	}
	return nil
}

// applyOverrides applies the command-line overrides, recording in src the
// keys they set under the flag's name, so that a cross-key error blames
// the flag.
func applyOverrides(keys []settings.Bound, overrides []Override, src map[string]string) error {
	for _, o := range overrides {
		i := slices.IndexFunc(keys, func(k settings.Bound) bool { return k.Name == o.Key })
		if i < 0 {
			// A programming error in the command, not the user's.
			return fmt.Errorf("%s: no configuration key %s", o.Flag, o.Key)
		}
		if err := keys[i].SetText(o.Value); err != nil {
			return fmt.Errorf("%s: %w", o.Flag, err)
		}
		src[o.Key] = o.Flag
	}
	return nil
}

func unknownEnv(keys []settings.Bound, env func(string) string, names []string) error {
	known := make(map[string]bool, len(keys))
	vars := make([]string, 0, len(keys))
	for _, k := range keys {
		known[EnvName(k.Name)] = true
		vars = append(vars, EnvName(k.Name))
	}
	var msgs []string
	sort.Strings(names)
	for _, name := range names {
		// An empty variable overrides nothing, so it cannot mislead.
		if known[name] || reserved(name) || env(name) == "" {
			continue
		}
		msgs = append(msgs, unknown("variable", name, vars))
	}
	if len(msgs) == 0 {
		return nil
	}
	return fmt.Errorf("environment: %s", strings.Join(msgs, "; "))
}

func reserved(name string) bool {
	for _, r := range reservedEnv {
		if name == r || strings.HasSuffix(r, "_") && strings.HasPrefix(name, r) {
			return true
		}
	}
	return false
}
