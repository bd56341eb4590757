// Package config reads queue.toml, the configuration file of the s3queue
// command, applies S3QUEUE_* environment overrides and maps the result onto
// the service configs (worker.Config, monitor.Config, producer.Options).
//
// TOML is parsed here and nowhere else (services take Go structs). Every
// key is declared once, in the keys table, which drives file decoding, the
// environment overrides and validation, so a key cannot be parsed without
// also being applied. An unknown key or an invalid value is an error naming
// the key and where it came from.
package config

import (
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math"
	"os"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/BurntSushi/toml"

	"github.com/s3queue/s3queue/monitor"
	"github.com/s3queue/s3queue/producer"
	"github.com/s3queue/s3queue/shards"
	"github.com/s3queue/s3queue/task"
	"github.com/s3queue/s3queue/worker"
)

// EnvPrefix starts every environment override: S3QUEUE_<SECTION>_<KEY>.
const EnvPrefix = "S3QUEUE_"

// EnvStore names the store URL's environment variable.
const EnvStore = EnvPrefix + "STORE"

// Config is a loaded queue.toml with its environment overrides applied.
// Zero Config is not useful; start from Default or Load.
type Config struct {
	// Source is the file the config was read from ("" if none).
	Source string
	// Store is the store URL (key store, env S3QUEUE_STORE).
	Store string
	// Shards is the queue's shard count; 0 accepts whatever the queue has
	// (16 for a new queue).
	Shards int
	// Profile is "default" or "economy": the operating point of the cost
	// and latency trade-off (see docs/performance.md). It sets the defaults
	// of the keys in EconomyProfile; keys set explicitly win.
	Profile string

	WorkerSection  WorkerSection
	MonitorSection MonitorSection
	SubmitSection  SubmitSection
	LogSection     LogSection
	// Handlers maps a task type to the shell command the worker command
	// runs for it ([handlers]).
	Handlers map[string]string
}

// WorkerSection is [worker].
type WorkerSection struct {
	ID             string
	Concurrency    int
	PollMin        time.Duration
	PollMax        time.Duration
	PollMultiplier float64
	PollBatch      float64
	ScanLag        time.Duration
	ScanLookback   time.Duration
	LeaseMargin    time.Duration
	ShutdownGrace  time.Duration
	// OwnShards pins the worker to these shards; it takes no part in the
	// fleet. Empty means the worker shares the shards with the fleet.
	OwnShards []int
	// Dedicated workers are always fleet members: they never stand by and
	// never leave when idle.
	Dedicated   bool
	MemberTTL   time.Duration
	StandbyPoll time.Duration
	IdleLeave   time.Duration
	SleepAfter  time.Duration
	BellPoll    time.Duration
	SleepScan   time.Duration
	// AwakeGrace must exceed shards.FleetCacheTTL.
	AwakeGrace time.Duration
	DrainMax   time.Duration
}

// MonitorSection is [monitor].
type MonitorSection struct {
	Interval      time.Duration
	PageSize      int
	ShardsPerTick int
	LeaseMargin   time.Duration
	RepairAfter   time.Duration
	StaleAfter    time.Duration
	SweepMax      time.Duration
	FullSweep     time.Duration
	// Leader elects one sweeping monitor with a lease.
	Leader bool
	// Retention 0 keeps finished tasks forever.
	Retention time.Duration
}

// SubmitSection is [submit]: the defaults of `s3queue submit`.
type SubmitSection struct {
	MaxAttempts     int
	Timeout         time.Duration
	RetryInitial    time.Duration
	RetryMax        time.Duration
	RetryMultiplier float64
	RetryJitter     float64
}

// LogSection is [log].
type LogSection struct {
	Level  slog.Level
	Format string // "text" or "json"
}

// Default returns the configuration used when no file and no environment
// variable says otherwise.
func Default() Config {
	return Config{
		Profile: "default",
		WorkerSection: WorkerSection{
			Concurrency:    4,
			PollMin:        200 * time.Millisecond,
			PollMax:        5 * time.Second,
			PollMultiplier: 2,
			PollBatch:      3,
			ScanLag:        5 * time.Second,
			ScanLookback:   time.Hour,
			LeaseMargin:    2 * time.Second,
			ShutdownGrace:  30 * time.Second,
			MemberTTL:      30 * time.Second,
			StandbyPoll:    25 * time.Second,
			IdleLeave:      time.Minute,
			SleepAfter:     30 * time.Second,
			BellPoll:       2 * time.Second,
			SleepScan:      time.Minute,
			AwakeGrace:     5 * time.Second,
			DrainMax:       10 * time.Minute,
		},
		MonitorSection: MonitorSection{
			Interval:    5 * time.Second,
			PageSize:    1000,
			LeaseMargin: 2 * time.Second,
			RepairAfter: time.Minute,
			StaleAfter:  10 * time.Second,
			SweepMax:    10 * time.Minute,
			FullSweep:   6 * time.Hour,
			Retention:   7 * 24 * time.Hour,
		},
		SubmitSection: SubmitSection{
			MaxAttempts:     task.DefaultMaxAttempts,
			Timeout:         task.DefaultTimeout,
			RetryInitial:    time.Second,
			RetryMax:        5 * time.Minute,
			RetryMultiplier: 2,
			RetryJitter:     0.2,
		},
		LogSection: LogSection{Level: slog.LevelInfo, Format: "text"},
		Handlers:   map[string]string{},
	}
}

// Load reads the TOML file at path (none when path is ""), then applies the
// environment overrides read through env (os.Getenv in production; a
// variable that is unset or empty overrides nothing) and validates the
// result. Errors name the file or variable and the key:
//
//	queue.toml: worker.poll_min: invalid duration "fast"
func Load(path string, env func(string) string) (Config, error) {
	c := Default()
	src := make(map[string]string) // key -> where its value came from
	if path != "" {
		b, err := os.ReadFile(path)
		if err != nil {
			return Config{}, fmt.Errorf("read config: %w", err)
		}
		if err := c.decodeFile(path, string(b), src); err != nil {
			return Config{}, err
		}
		c.Source = path
	}
	if env != nil {
		if err := c.applyEnv(env, src); err != nil {
			return Config{}, err
		}
	}
	c.applyProfile(src)
	if err := c.crossCheck(src); err != nil {
		return Config{}, err
	}
	return c, nil
}

// rawValue holds a TOML value as decoded, so that type errors are reported
// by this package with the key's name instead of by the decoder.
type rawValue struct {
	v   any
	set bool
}

// UnmarshalTOML implements toml.Unmarshaler.
func (r *rawValue) UnmarshalTOML(v any) error {
	r.v, r.set = v, true
	return nil
}

// file mirrors queue.toml. Keys not in it are reported through
// MetaData.Undecoded.
type file struct {
	Store   rawValue `toml:"store"`
	Shards  rawValue `toml:"shards"`
	Profile rawValue `toml:"profile"`
	Worker  struct {
		ID             rawValue `toml:"id"`
		Concurrency    rawValue `toml:"concurrency"`
		PollMin        rawValue `toml:"poll_min"`
		PollMax        rawValue `toml:"poll_max"`
		PollMultiplier rawValue `toml:"poll_multiplier"`
		PollBatch      rawValue `toml:"poll_batch"`
		ScanLag        rawValue `toml:"scan_lag"`
		ScanLookback   rawValue `toml:"scan_lookback"`
		LeaseMargin    rawValue `toml:"lease_margin"`
		ShutdownGrace  rawValue `toml:"shutdown_grace"`
		OwnShards      rawValue `toml:"own_shards"`
		Dedicated      rawValue `toml:"dedicated"`
		MemberTTL      rawValue `toml:"member_ttl"`
		StandbyPoll    rawValue `toml:"standby_poll"`
		IdleLeave      rawValue `toml:"idle_leave"`
		SleepAfter     rawValue `toml:"sleep_after"`
		BellPoll       rawValue `toml:"bell_poll"`
		SleepScan      rawValue `toml:"sleep_scan"`
		AwakeGrace     rawValue `toml:"awake_grace"`
		DrainMax       rawValue `toml:"drain_max"`
	} `toml:"worker"`
	Handlers map[string]rawValue `toml:"handlers"`
	Monitor  struct {
		Interval      rawValue `toml:"interval"`
		PageSize      rawValue `toml:"page_size"`
		ShardsPerTick rawValue `toml:"shards_per_tick"`
		LeaseMargin   rawValue `toml:"lease_margin"`
		RepairAfter   rawValue `toml:"repair_after"`
		StaleAfter    rawValue `toml:"stale_after"`
		SweepMax      rawValue `toml:"sweep_max"`
		FullSweep     rawValue `toml:"full_sweep"`
		Leader        rawValue `toml:"leader"`
		Retention     rawValue `toml:"retention"`
	} `toml:"monitor"`
	Submit struct {
		MaxAttempts     rawValue `toml:"max_attempts"`
		Timeout         rawValue `toml:"timeout"`
		RetryInitial    rawValue `toml:"retry_initial"`
		RetryMax        rawValue `toml:"retry_max"`
		RetryMultiplier rawValue `toml:"retry_multiplier"`
		RetryJitter     rawValue `toml:"retry_jitter"`
	} `toml:"submit"`
	Log struct {
		Level  rawValue `toml:"level"`
		Format rawValue `toml:"format"`
	} `toml:"log"`
}

func (c *Config) decodeFile(path, text string, src map[string]string) error {
	// A first pass into a map reports syntax errors and sections that are
	// not tables, which the struct decoder would describe in Go terms.
	var generic map[string]any
	if _, err := toml.Decode(text, &generic); err != nil {
		return tomlError(path, err)
	}
	for _, section := range []string{"worker", "handlers", "monitor", "submit", "log"} {
		if v, ok := generic[section]; ok {
			if _, isTable := v.(map[string]any); !isTable {
				return fmt.Errorf("%s: %s: want a table [%s], got %s", path, section, section, describe(v))
			}
		}
	}
	var f file
	md, err := toml.Decode(text, &f)
	if err != nil {
		return tomlError(path, err)
	}
	if err := unknownKeys(path, md.Undecoded()); err != nil {
		return err
	}
	for _, k := range keys {
		r := k.file(&f)
		if !r.set {
			continue
		}
		if err := k.setTOML(c, r.v); err != nil {
			return fmt.Errorf("%s: %s: %w", path, k.name, err)
		}
		src[k.name] = path
	}
	names := make([]string, 0, len(f.Handlers))
	for name := range f.Handlers {
		names = append(names, name)
	}
	sort.Strings(names)
	for _, typ := range names {
		key := "handlers." + quoteKey(typ)
		cmd, ok := f.Handlers[typ].v.(string)
		if !ok {
			return fmt.Errorf("%s: %s: want a quoted command line, got %s", path, key, describe(f.Handlers[typ].v))
		}
		if err := task.ValidType(typ); err != nil {
			return fmt.Errorf("%s: %s: %v", path, key, err)
		}
		if strings.TrimSpace(cmd) == "" {
			return fmt.Errorf("%s: %s: empty command", path, key)
		}
		c.Handlers[typ] = cmd
	}
	return nil
}

func tomlError(path string, err error) error {
	var pe toml.ParseError
	if errors.As(err, &pe) {
		msg := strings.TrimPrefix(pe.Message, "toml: ")
		if pe.Position.Line > 0 {
			return fmt.Errorf("%s: line %d: %s", path, pe.Position.Line, msg)
		}
		return fmt.Errorf("%s: %s", path, msg)
	}
	return fmt.Errorf("%s: %s", path, strings.TrimPrefix(err.Error(), "toml: "))
}

func unknownKeys(path string, undecoded []toml.Key) error {
	seen := make(map[string]bool)
	var names []string
	for _, k := range undecoded {
		name := k.String()
		// Report a whole unknown table once, not each key inside it.
		if len(k) > 1 && seen[toml.Key(k[:len(k)-1]).String()] {
			seen[name] = true
			continue
		}
		seen[name] = true
		msg := "unknown key " + name
		if s := suggest(name); s != "" {
			msg += fmt.Sprintf(" (did you mean %s?)", s)
		}
		names = append(names, msg)
	}
	if len(names) == 0 {
		return nil
	}
	return fmt.Errorf("%s: %s", path, strings.Join(names, "; "))
}

// suggest returns the known key closest to name, if any is close.
func suggest(name string) string {
	best, bestD := "", 3
	for _, k := range keys {
		if d := editDistance(name, k.name); d < bestD {
			best, bestD = k.name, d
		}
	}
	return best
}

func editDistance(a, b string) int {
	prev := make([]int, len(b)+1)
	cur := make([]int, len(b)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(a); i++ {
		cur[0] = i
		for j := 1; j <= len(b); j++ {
			cost := 1
			if a[i-1] == b[j-1] {
				cost = 0
			}
			cur[j] = min(prev[j]+1, cur[j-1]+1, prev[j-1]+cost)
		}
		prev, cur = cur, prev
	}
	return prev[len(b)]
}

func quoteKey(s string) string {
	for _, r := range s {
		if !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '_' || r == '-') {
			return strconv.Quote(s)
		}
	}
	return s
}

// EnvName is the environment variable that overrides key ("worker.poll_min"
// → S3QUEUE_WORKER_POLL_MIN).
func EnvName(key string) string {
	return EnvPrefix + strings.ToUpper(strings.ReplaceAll(key, ".", "_"))
}

func (c *Config) applyEnv(env func(string) string, src map[string]string) error {
	for _, k := range keys {
		name := EnvName(k.name)
		v := env(name)
		if v == "" {
			continue
		}
		if err := k.setEnv(c, v); err != nil {
			return fmt.Errorf("%s: %w", name, err)
		}
		src[k.name] = name
	}
	return nil
}

// crossCheck validates constraints between keys, naming the key whose value
// breaks it and where that value came from.
func (c *Config) crossCheck(src map[string]string) error {
	// origin prefixes a message about key with where its value came from.
	origin := func(key string) string {
		switch s := src[key]; {
		case strings.HasPrefix(s, EnvPrefix):
			return s + ": "
		case s != "":
			return s + ": " + key + ": "
		}
		return key + ": "
	}
	// blame picks the key the user set (the first if both were).
	blame := func(a, b string) string {
		if _, ok := src[a]; !ok {
			if _, ok := src[b]; ok {
				return origin(b)
			}
		}
		return origin(a)
	}
	w := c.WorkerSection
	if w.PollMin > w.PollMax {
		return fmt.Errorf("%sworker.poll_min (%v) is more than worker.poll_max (%v)", blame("worker.poll_min", "worker.poll_max"), w.PollMin, w.PollMax)
	}
	// A member renews its fleet entry every third of member_ttl and counts
	// as live only until its expiry minus lease_margin.
	if w.MemberTTL < 3*w.LeaseMargin {
		return fmt.Errorf("%sworker.member_ttl (%v) is less than 3 × worker.lease_margin (3 × %v = %v)", blame("worker.member_ttl", "worker.lease_margin"), w.MemberTTL, w.LeaseMargin, 3*w.LeaseMargin)
	}
	s := c.SubmitSection
	if s.RetryInitial > s.RetryMax {
		return fmt.Errorf("%ssubmit.retry_initial (%v) is more than submit.retry_max (%v)", blame("submit.retry_initial", "submit.retry_max"), s.RetryInitial, s.RetryMax)
	}
	if c.Shards > 0 {
		for _, sh := range w.OwnShards {
			if sh >= c.Shards {
				return fmt.Errorf("%sshard %d out of range 0..%d (shards = %d)", origin("worker.own_shards"), sh, c.Shards-1, c.Shards)
			}
		}
	}
	return nil
}

// Worker maps the configuration onto worker.Config. Logger, Clock and
// OnEvent are left for the caller.
func (c Config) Worker() worker.Config {
	w := c.WorkerSection
	var own []int
	if len(w.OwnShards) > 0 {
		own = slices.Clone(w.OwnShards)
	}
	return worker.Config{
		ID:             w.ID,
		Concurrency:    w.Concurrency,
		Shards:         c.Shards,
		OwnShards:      own,
		PollMin:        w.PollMin,
		PollMax:        w.PollMax,
		PollMultiplier: w.PollMultiplier,
		PollBatch:      w.PollBatch,
		ScanLag:        w.ScanLag,
		ScanLookback:   w.ScanLookback,
		LeaseMargin:    w.LeaseMargin,
		ShutdownGrace:  w.ShutdownGrace,
		Dedicated:      w.Dedicated,
		MemberTTL:      w.MemberTTL,
		StandbyPoll:    w.StandbyPoll,
		IdleLeave:      w.IdleLeave,
		SleepAfter:     w.SleepAfter,
		BellPoll:       w.BellPoll,
		SleepScan:      w.SleepScan,
		AwakeGrace:     w.AwakeGrace,
		DrainMax:       w.DrainMax,
	}
}

// Monitor maps the configuration onto monitor.Config. Logger and Clock are
// left for the caller.
func (c Config) Monitor() monitor.Config {
	m := c.MonitorSection
	return monitor.Config{
		Shards:        c.Shards,
		Interval:      m.Interval,
		PageSize:      m.PageSize,
		ShardsPerTick: m.ShardsPerTick,
		LeaseMargin:   m.LeaseMargin,
		RepairAfter:   m.RepairAfter,
		StaleAfter:    m.StaleAfter,
		SweepMax:      m.SweepMax,
		FullSweep:     m.FullSweep,
		Leader:        m.Leader,
		Retention:     m.Retention,
		KeepForever:   m.Retention == 0,
	}
}

// Producer maps the configuration onto producer.Config. Logger and Clock
// are left for the caller. Its LeaseMargin is worker.lease_margin: the
// producer judges which fleet members are live by the workers' margin.
func (c Config) Producer() producer.Config {
	return producer.Config{Shards: c.Shards, LeaseMargin: c.WorkerSection.LeaseMargin}
}

// SubmitOptions returns the per-task defaults of [submit].
func (c Config) SubmitOptions() producer.Options {
	s := c.SubmitSection
	return producer.Options{
		MaxAttempts: s.MaxAttempts,
		Timeout:     s.Timeout,
		Retry: &task.RetryPolicy{
			InitialDelay: task.Duration(s.RetryInitial),
			MaxDelay:     task.Duration(s.RetryMax),
			Multiplier:   s.RetryMultiplier,
			Jitter:       s.RetryJitter,
		},
	}
}

// NewLogger returns the slog logger [log] asks for, writing to w.
func (c Config) NewLogger(w io.Writer) *slog.Logger {
	opts := &slog.HandlerOptions{Level: c.LogSection.Level}
	if c.LogSection.Format == "json" {
		return slog.New(slog.NewJSONHandler(w, opts))
	}
	return slog.New(slog.NewTextHandler(w, opts))
}

// key is one configuration key: where it sits in the file, how its value
// is parsed and checked, and which field it sets.
type key struct {
	name string // dotted, as in the file: "worker.poll_min"
	file func(*file) *rawValue
	kind kind
	// check validates the parsed value (nil: any value of the kind).
	check func(any) error
	set   func(*Config, any)
}

type kind int

const (
	kindString kind = iota
	kindInt
	kindFloat
	kindDuration
	kindIntList
	kindBool
)

func (k key) setTOML(c *Config, raw any) error {
	v, err := fromTOML(k.kind, raw)
	if err != nil {
		return err
	}
	return k.apply(c, v)
}

func (k key) setEnv(c *Config, s string) error {
	v, err := fromString(k.kind, s)
	if err != nil {
		return err
	}
	return k.apply(c, v)
}

func (k key) apply(c *Config, v any) error {
	if k.check != nil {
		if err := k.check(v); err != nil {
			return err
		}
	}
	k.set(c, v)
	return nil
}

func describe(v any) string {
	switch v := v.(type) {
	case string:
		return fmt.Sprintf("string %q", v)
	case int64:
		return fmt.Sprintf("integer %d", v)
	case float64:
		return fmt.Sprintf("number %v", v)
	case bool:
		return fmt.Sprintf("boolean %v", v)
	case []any:
		return "an array"
	case map[string]any:
		return "a table"
	}
	return fmt.Sprintf("%T", v)
}

func fromTOML(k kind, raw any) (any, error) {
	switch k {
	case kindString:
		s, ok := raw.(string)
		if !ok {
			return nil, fmt.Errorf("want a quoted string, got %s", describe(raw))
		}
		return s, nil
	case kindInt:
		n, ok := raw.(int64)
		if !ok {
			return nil, fmt.Errorf("want an integer, got %s", describe(raw))
		}
		if n > math.MaxInt32 || n < math.MinInt32 {
			return nil, fmt.Errorf("%d is out of range", n)
		}
		return int(n), nil
	case kindFloat:
		switch n := raw.(type) {
		case float64:
			if math.IsNaN(n) || math.IsInf(n, 0) {
				return nil, fmt.Errorf("want a finite number, got %v", n)
			}
			return n, nil
		case int64:
			return float64(n), nil
		}
		return nil, fmt.Errorf("want a number, got %s", describe(raw))
	case kindDuration:
		s, ok := raw.(string)
		if !ok {
			return nil, fmt.Errorf("invalid duration %s: write a quoted Go duration like \"500ms\", \"5s\" or \"168h\"", describe(raw))
		}
		return parseDuration(s)
	case kindIntList:
		arr, ok := raw.([]any)
		if !ok {
			return nil, fmt.Errorf("want an array of integers like [0, 1], got %s", describe(raw))
		}
		out := make([]int, 0, len(arr))
		for _, e := range arr {
			n, ok := e.(int64)
			if !ok {
				return nil, fmt.Errorf("want an array of integers like [0, 1], found %s", describe(e))
			}
			if n > math.MaxInt32 || n < math.MinInt32 {
				return nil, fmt.Errorf("%d is out of range", n)
			}
			out = append(out, int(n))
		}
		return out, nil
	case kindBool:
		b, ok := raw.(bool)
		if !ok {
			return nil, fmt.Errorf("want true or false, got %s", describe(raw))
		}
		return b, nil
	}
	panic("config: unknown kind")
}

func fromString(k kind, s string) (any, error) {
	s = strings.TrimSpace(s)
	switch k {
	case kindString:
		return s, nil
	case kindInt:
		n, err := strconv.ParseInt(s, 10, 32)
		if err != nil {
			return nil, fmt.Errorf("invalid integer %q", s)
		}
		return int(n), nil
	case kindFloat:
		f, err := strconv.ParseFloat(s, 64)
		if err != nil || math.IsNaN(f) || math.IsInf(f, 0) {
			return nil, fmt.Errorf("invalid number %q", s)
		}
		return f, nil
	case kindDuration:
		return parseDuration(s)
	case kindIntList:
		out := []int{}
		for _, part := range strings.Split(s, ",") {
			part = strings.TrimSpace(part)
			if part == "" {
				continue
			}
			n, err := strconv.ParseInt(part, 10, 32)
			if err != nil {
				return nil, fmt.Errorf("invalid integer list %q: want comma-separated integers like 0,1,2", s)
			}
			out = append(out, int(n))
		}
		return out, nil
	case kindBool:
		switch strings.ToLower(s) {
		case "true", "1":
			return true, nil
		case "false", "0":
			return false, nil
		}
		return nil, fmt.Errorf("invalid boolean %q: want true or false", s)
	}
	panic("config: unknown kind")
}

func parseDuration(s string) (time.Duration, error) {
	d, err := time.ParseDuration(s)
	if err != nil {
		return 0, fmt.Errorf("invalid duration %q: write a Go duration like \"500ms\", \"5s\" or \"168h\"", s)
	}
	return d, nil
}

func positiveDuration(v any) error {
	if d := v.(time.Duration); d <= 0 {
		return fmt.Errorf("duration %v must be positive", d)
	}
	return nil
}

func nonNegativeDuration(v any) error {
	if d := v.(time.Duration); d < 0 {
		return fmt.Errorf("duration %v must not be negative", d)
	}
	return nil
}

func durationRange(lo, hi time.Duration) func(any) error {
	return func(v any) error {
		if d := v.(time.Duration); d < lo || d > hi {
			return fmt.Errorf("duration %v out of range %v..%v", d, lo, hi)
		}
		return nil
	}
}

// awakeGrace checks worker.awake_grace against the producers' fleet cache:
// a member that marked itself asleep keeps scanning this long, so that a
// producer still holding an older view of the fleet (one it did not ring
// the doorbell for) cannot leave a task unseen.
func awakeGrace(v any) error {
	if d := v.(time.Duration); d <= shards.FleetCacheTTL {
		return fmt.Errorf("duration %v must be more than %v, the producers' fleet cache TTL: a member going to sleep keeps scanning this long, until no producer can still see it awake and skip ringing the doorbell", d, shards.FleetCacheTTL)
	}
	return nil
}

func intRange(lo, hi int) func(any) error {
	return func(v any) error {
		if n := v.(int); n < lo || n > hi {
			if n < 0 && lo >= 0 {
				return fmt.Errorf("%d must not be negative", n)
			}
			return fmt.Errorf("%d out of range %d..%d", n, lo, hi)
		}
		return nil
	}
}

func floatRange(lo, hi float64) func(any) error {
	return func(v any) error {
		if f := v.(float64); f < lo || f > hi {
			return fmt.Errorf("%v out of range %v..%v", f, lo, hi)
		}
		return nil
	}
}

func atLeast(lo float64) func(any) error {
	return func(v any) error {
		if f := v.(float64); f < lo {
			return fmt.Errorf("%v must be at least %v", f, lo)
		}
		return nil
	}
}

func shardList(v any) error {
	seen := make(map[int]bool)
	for _, s := range v.([]int) {
		if s < 0 || s >= shards.MaxShards {
			return fmt.Errorf("shard %d out of range 0..%d", s, shards.MaxShards-1)
		}
		if seen[s] {
			return fmt.Errorf("shard %d listed twice", s)
		}
		seen[s] = true
	}
	return nil
}

func logLevel(v any) error {
	_, err := parseLevel(v.(string))
	return err
}

func parseLevel(s string) (slog.Level, error) {
	switch strings.ToLower(s) {
	case "debug":
		return slog.LevelDebug, nil
	case "info":
		return slog.LevelInfo, nil
	case "warn", "warning":
		return slog.LevelWarn, nil
	case "error":
		return slog.LevelError, nil
	}
	return 0, fmt.Errorf("invalid level %q (want debug, info, warn or error)", s)
}

func profileName(v any) error {
	switch v.(string) {
	case "default", "economy":
		return nil
	}
	return fmt.Errorf("invalid profile %q (want default or economy)", v)
}

// EconomyProfile is what profile = "economy" changes: fewer requests for
// slower pickup (p50 within a minute at light load) and slower failover.
var EconomyProfile = map[string]func(c *Config){
	"worker.poll_batch":   func(c *Config) { c.WorkerSection.PollBatch = 30 },
	"worker.poll_max":     func(c *Config) { c.WorkerSection.PollMax = time.Minute },
	"worker.bell_poll":    func(c *Config) { c.WorkerSection.BellPoll = 30 * time.Second },
	"worker.member_ttl":   func(c *Config) { c.WorkerSection.MemberTTL = 90 * time.Second },
	"worker.standby_poll": func(c *Config) { c.WorkerSection.StandbyPoll = 2 * time.Minute },
	"worker.sleep_scan":   func(c *Config) { c.WorkerSection.SleepScan = 5 * time.Minute },
	"monitor.interval":    func(c *Config) { c.MonitorSection.Interval = 30 * time.Second },
	"monitor.full_sweep":  func(c *Config) { c.MonitorSection.FullSweep = 24 * time.Hour },
	// Tasks wait up to a poll_max for the member's listing: the repair must
	// not take that wait for a lost announcement.
	"monitor.repair_after": func(c *Config) { c.MonitorSection.RepairAfter = 3 * time.Minute },
}

// applyProfile sets the profile's defaults for keys not set explicitly.
func (c *Config) applyProfile(src map[string]string) {
	if c.Profile != "economy" {
		return
	}
	for key, set := range EconomyProfile {
		if _, explicit := src[key]; !explicit {
			set(c)
		}
	}
}

func logFormat(v any) error {
	switch v.(string) {
	case "text", "json":
		return nil
	}
	return fmt.Errorf("invalid format %q (want text or json)", v)
}

func workerID(v any) error {
	s := v.(string)
	if len(s) > 128 {
		return fmt.Errorf("worker id is %d bytes, over 128", len(s))
	}
	for _, r := range s {
		if r < 0x21 || r > 0x7e {
			return fmt.Errorf("worker id %q must be printable ASCII without spaces", s)
		}
	}
	return nil
}

// Zero means "the default" to the worker and monitor for these durations, so
// the file cannot ask for zero: it must say what it means.
var keys = []key{
	{name: "store", kind: kindString,
		file: func(f *file) *rawValue { return &f.Store },
		set:  func(c *Config, v any) { c.Store = v.(string) }},
	{name: "shards", kind: kindInt, check: intRange(0, shards.MaxShards),
		file: func(f *file) *rawValue { return &f.Shards },
		set:  func(c *Config, v any) { c.Shards = v.(int) }},
	{name: "profile", kind: kindString, check: profileName,
		file: func(f *file) *rawValue { return &f.Profile },
		set:  func(c *Config, v any) { c.Profile = v.(string) }},

	{name: "worker.id", kind: kindString, check: workerID,
		file: func(f *file) *rawValue { return &f.Worker.ID },
		set:  func(c *Config, v any) { c.WorkerSection.ID = v.(string) }},
	{name: "worker.concurrency", kind: kindInt, check: intRange(1, 10000),
		file: func(f *file) *rawValue { return &f.Worker.Concurrency },
		set:  func(c *Config, v any) { c.WorkerSection.Concurrency = v.(int) }},
	{name: "worker.poll_min", kind: kindDuration, check: positiveDuration,
		file: func(f *file) *rawValue { return &f.Worker.PollMin },
		set:  func(c *Config, v any) { c.WorkerSection.PollMin = v.(time.Duration) }},
	{name: "worker.poll_max", kind: kindDuration, check: positiveDuration,
		file: func(f *file) *rawValue { return &f.Worker.PollMax },
		set:  func(c *Config, v any) { c.WorkerSection.PollMax = v.(time.Duration) }},
	{name: "worker.poll_multiplier", kind: kindFloat, check: floatRange(1, 100),
		file: func(f *file) *rawValue { return &f.Worker.PollMultiplier },
		set:  func(c *Config, v any) { c.WorkerSection.PollMultiplier = v.(float64) }},
	{name: "worker.poll_batch", kind: kindFloat, check: floatRange(0.01, 100000),
		file: func(f *file) *rawValue { return &f.Worker.PollBatch },
		set:  func(c *Config, v any) { c.WorkerSection.PollBatch = v.(float64) }},
	{name: "worker.scan_lag", kind: kindDuration, check: positiveDuration,
		file: func(f *file) *rawValue { return &f.Worker.ScanLag },
		set:  func(c *Config, v any) { c.WorkerSection.ScanLag = v.(time.Duration) }},
	{name: "worker.scan_lookback", kind: kindDuration, check: positiveDuration,
		file: func(f *file) *rawValue { return &f.Worker.ScanLookback },
		set:  func(c *Config, v any) { c.WorkerSection.ScanLookback = v.(time.Duration) }},
	{name: "worker.lease_margin", kind: kindDuration, check: positiveDuration,
		file: func(f *file) *rawValue { return &f.Worker.LeaseMargin },
		set:  func(c *Config, v any) { c.WorkerSection.LeaseMargin = v.(time.Duration) }},
	{name: "worker.shutdown_grace", kind: kindDuration, check: positiveDuration,
		file: func(f *file) *rawValue { return &f.Worker.ShutdownGrace },
		set:  func(c *Config, v any) { c.WorkerSection.ShutdownGrace = v.(time.Duration) }},
	{name: "worker.own_shards", kind: kindIntList, check: shardList,
		file: func(f *file) *rawValue { return &f.Worker.OwnShards },
		set: func(c *Config, v any) {
			if l := v.([]int); len(l) > 0 {
				c.WorkerSection.OwnShards = l
			} else {
				c.WorkerSection.OwnShards = nil
			}
		}},
	{name: "worker.dedicated", kind: kindBool,
		file: func(f *file) *rawValue { return &f.Worker.Dedicated },
		set:  func(c *Config, v any) { c.WorkerSection.Dedicated = v.(bool) }},
	{name: "worker.member_ttl", kind: kindDuration, check: positiveDuration,
		file: func(f *file) *rawValue { return &f.Worker.MemberTTL },
		set:  func(c *Config, v any) { c.WorkerSection.MemberTTL = v.(time.Duration) }},
	{name: "worker.standby_poll", kind: kindDuration, check: positiveDuration,
		file: func(f *file) *rawValue { return &f.Worker.StandbyPoll },
		set:  func(c *Config, v any) { c.WorkerSection.StandbyPoll = v.(time.Duration) }},
	{name: "worker.idle_leave", kind: kindDuration, check: positiveDuration,
		file: func(f *file) *rawValue { return &f.Worker.IdleLeave },
		set:  func(c *Config, v any) { c.WorkerSection.IdleLeave = v.(time.Duration) }},
	{name: "worker.sleep_after", kind: kindDuration, check: positiveDuration,
		file: func(f *file) *rawValue { return &f.Worker.SleepAfter },
		set:  func(c *Config, v any) { c.WorkerSection.SleepAfter = v.(time.Duration) }},
	{name: "worker.bell_poll", kind: kindDuration, check: positiveDuration,
		file: func(f *file) *rawValue { return &f.Worker.BellPoll },
		set:  func(c *Config, v any) { c.WorkerSection.BellPoll = v.(time.Duration) }},
	{name: "worker.sleep_scan", kind: kindDuration, check: positiveDuration,
		file: func(f *file) *rawValue { return &f.Worker.SleepScan },
		set:  func(c *Config, v any) { c.WorkerSection.SleepScan = v.(time.Duration) }},
	{name: "worker.awake_grace", kind: kindDuration, check: awakeGrace,
		file: func(f *file) *rawValue { return &f.Worker.AwakeGrace },
		set:  func(c *Config, v any) { c.WorkerSection.AwakeGrace = v.(time.Duration) }},
	{name: "worker.drain_max", kind: kindDuration, check: positiveDuration,
		file: func(f *file) *rawValue { return &f.Worker.DrainMax },
		set:  func(c *Config, v any) { c.WorkerSection.DrainMax = v.(time.Duration) }},

	{name: "monitor.interval", kind: kindDuration, check: positiveDuration,
		file: func(f *file) *rawValue { return &f.Monitor.Interval },
		set:  func(c *Config, v any) { c.MonitorSection.Interval = v.(time.Duration) }},
	{name: "monitor.page_size", kind: kindInt, check: intRange(1, 1000),
		file: func(f *file) *rawValue { return &f.Monitor.PageSize },
		set:  func(c *Config, v any) { c.MonitorSection.PageSize = v.(int) }},
	{name: "monitor.shards_per_tick", kind: kindInt, check: intRange(0, shards.MaxShards),
		file: func(f *file) *rawValue { return &f.Monitor.ShardsPerTick },
		set:  func(c *Config, v any) { c.MonitorSection.ShardsPerTick = v.(int) }},
	{name: "monitor.lease_margin", kind: kindDuration, check: positiveDuration,
		file: func(f *file) *rawValue { return &f.Monitor.LeaseMargin },
		set:  func(c *Config, v any) { c.MonitorSection.LeaseMargin = v.(time.Duration) }},
	{name: "monitor.repair_after", kind: kindDuration, check: positiveDuration,
		file: func(f *file) *rawValue { return &f.Monitor.RepairAfter },
		set:  func(c *Config, v any) { c.MonitorSection.RepairAfter = v.(time.Duration) }},
	{name: "monitor.stale_after", kind: kindDuration, check: positiveDuration,
		file: func(f *file) *rawValue { return &f.Monitor.StaleAfter },
		set:  func(c *Config, v any) { c.MonitorSection.StaleAfter = v.(time.Duration) }},
	{name: "monitor.sweep_max", kind: kindDuration, check: positiveDuration,
		file: func(f *file) *rawValue { return &f.Monitor.SweepMax },
		set:  func(c *Config, v any) { c.MonitorSection.SweepMax = v.(time.Duration) }},
	{name: "monitor.full_sweep", kind: kindDuration, check: positiveDuration,
		file: func(f *file) *rawValue { return &f.Monitor.FullSweep },
		set:  func(c *Config, v any) { c.MonitorSection.FullSweep = v.(time.Duration) }},
	{name: "monitor.leader", kind: kindBool,
		file: func(f *file) *rawValue { return &f.Monitor.Leader },
		set:  func(c *Config, v any) { c.MonitorSection.Leader = v.(bool) }},
	{name: "monitor.retention", kind: kindDuration, check: nonNegativeDuration,
		file: func(f *file) *rawValue { return &f.Monitor.Retention },
		set:  func(c *Config, v any) { c.MonitorSection.Retention = v.(time.Duration) }},

	{name: "submit.max_attempts", kind: kindInt, check: intRange(1, task.MaxAttemptsLimit),
		file: func(f *file) *rawValue { return &f.Submit.MaxAttempts },
		set:  func(c *Config, v any) { c.SubmitSection.MaxAttempts = v.(int) }},
	{name: "submit.timeout", kind: kindDuration, check: durationRange(task.MinTimeout, task.MaxTimeout),
		file: func(f *file) *rawValue { return &f.Submit.Timeout },
		set:  func(c *Config, v any) { c.SubmitSection.Timeout = v.(time.Duration) }},
	{name: "submit.retry_initial", kind: kindDuration, check: positiveDuration,
		file: func(f *file) *rawValue { return &f.Submit.RetryInitial },
		set:  func(c *Config, v any) { c.SubmitSection.RetryInitial = v.(time.Duration) }},
	{name: "submit.retry_max", kind: kindDuration, check: positiveDuration,
		file: func(f *file) *rawValue { return &f.Submit.RetryMax },
		set:  func(c *Config, v any) { c.SubmitSection.RetryMax = v.(time.Duration) }},
	{name: "submit.retry_multiplier", kind: kindFloat, check: atLeast(1),
		file: func(f *file) *rawValue { return &f.Submit.RetryMultiplier },
		set:  func(c *Config, v any) { c.SubmitSection.RetryMultiplier = v.(float64) }},
	{name: "submit.retry_jitter", kind: kindFloat, check: floatRange(0, 1),
		file: func(f *file) *rawValue { return &f.Submit.RetryJitter },
		set:  func(c *Config, v any) { c.SubmitSection.RetryJitter = v.(float64) }},

	{name: "log.level", kind: kindString, check: logLevel,
		file: func(f *file) *rawValue { return &f.Log.Level },
		set: func(c *Config, v any) {
			c.LogSection.Level, _ = parseLevel(v.(string))
		}},
	{name: "log.format", kind: kindString, check: logFormat,
		file: func(f *file) *rawValue { return &f.Log.Format },
		set:  func(c *Config, v any) { c.LogSection.Format = v.(string) }},
}

// Keys lists every configuration key in file order ("store",
// "worker.poll_min", ...), excluding the [handlers] table whose keys are
// task types.
func Keys() []string {
	out := make([]string, len(keys))
	for i, k := range keys {
		out[i] = k.name
	}
	return out
}
