package config

import (
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/BurntSushi/toml"

	"github.com/s3queue/s3queue/internal/schedule"
	"github.com/s3queue/s3queue/internal/settings"
	"github.com/s3queue/s3queue/task"
	"github.com/s3queue/s3queue/worker"
)

// handlersTable is the table of task types and their commands.
const handlersTable = "handlers"

// scheduleTable is the array of [[schedule]] tables.
const scheduleTable = "schedule"

// poolsTable holds a table per pool of task types ([pools.NAME]).
const poolsTable = "pools"

// rateLimitsTable maps task types to their rate limits ([rate_limits]).
const rateLimitsTable = "rate_limits"

// decodeFile applies the TOML text of the file at path, recording in src
// the keys it set.
func (c *Config) decodeFile(path, text string, tables []settings.Table, src map[string]string) error {
	var doc map[string]any
	md, err := toml.Decode(text, &doc)
	if err != nil {
		return tomlError(path, err)
	}
	sections := map[string]map[string]any{"": doc}
	for _, name := range append(tableNames(tables), handlersTable, poolsTable, rateLimitsTable) {
		// A dotted name is a table within a table ([queue.direct_dispatch]).
		table, where := doc, ""
		for _, part := range strings.Split(name, ".") {
			where = strings.TrimPrefix(where+"."+part, ".")
			v, ok := table[part]
			if !ok {
				table = nil
				break
			}
			sub, isTable := v.(map[string]any)
			if !isTable {
				return fmt.Errorf("%s: %s: want a table [%s], got %s", path, where, where, settings.Describe(v))
			}
			table = sub
		}
		if table != nil {
			sections[name] = table
		}
	}
	if err := unknownKeys(path, md.Keys(), keys(tables)); err != nil {
		return err
	}
	for _, t := range tables {
		for _, k := range t.Keys {
			raw, ok := sections[t.Name][strings.TrimPrefix(k.Name, t.Name+".")]
			if !ok {
				continue
			}
			if err := k.SetTOML(raw); err != nil {
				return fmt.Errorf("%s: %s: %w", path, k.Name, err)
			}
			src[k.Name] = path
		}
	}
	if err := c.decodePools(path, sections[poolsTable]); err != nil {
		return err
	}
	if err := c.decodeRateLimits(path, sections[rateLimitsTable]); err != nil {
		return err
	}
	if err := c.decodeSchedules(path, doc[scheduleTable]); err != nil {
		return err
	}
	return c.decodeHandlers(path, sections[handlersTable])
}

// decodePools reads the [pools.NAME] tables, in name order, each with
// settings.Of[worker.Pool]() and its list of types.
func (c *Config) decodePools(path string, table map[string]any) error {
	names := slices.Sorted(maps.Keys(table))
	c.WorkerSection.Pools = nil
	for _, name := range names {
		where := poolsTable + "." + quoteKey(name)
		keys, ok := table[name].(map[string]any)
		if !ok {
			return fmt.Errorf("%s: %s: want a table [%s], got %s", path, where, where, settings.Describe(table[name]))
		}
		p := worker.Pool{Name: name}
		bound := settings.Of[worker.Pool]().Bind(&p)
		for k, raw := range keys {
			if k == "types" {
				list, ok := raw.([]any)
				if !ok {
					return fmt.Errorf("%s: %s.types: want an array of task types, got %s", path, where, settings.Describe(raw))
				}
				for _, v := range list {
					typ, ok := v.(string)
					if !ok {
						return fmt.Errorf("%s: %s.types: want quoted task types, got %s", path, where, settings.Describe(v))
					}
					if err := task.ValidType(typ); err != nil {
						return fmt.Errorf("%s: %s.types: %v", path, where, err)
					}
					p.Types = append(p.Types, typ)
				}
				continue
			}
			i := slices.IndexFunc(bound.Keys, func(b settings.Bound) bool { return b.Name == settings.Of[worker.Pool]().Name+"."+k })
			if i < 0 {
				return fmt.Errorf("%s: %s.%s: unknown key: a pool has types, max_in_flight, max_queue_depth and queue_policy", path, where, k)
			}
			if err := bound.Keys[i].SetTOML(raw); err != nil {
				return fmt.Errorf("%s: %s.%s: %w", path, where, k, err)
			}
		}
		c.WorkerSection.Pools = append(c.WorkerSection.Pools, p)
	}
	return nil
}

// decodeRateLimits reads [rate_limits]: task type = "N/INTERVAL".
func (c *Config) decodeRateLimits(path string, table map[string]any) error {
	if len(table) == 0 {
		return nil
	}
	limits := make(map[string]worker.RateLimit, len(table))
	types := slices.Sorted(maps.Keys(table))
	for _, typ := range types {
		key := rateLimitsTable + "." + quoteKey(typ)
		v, ok := table[typ].(string)
		if !ok {
			return fmt.Errorf("%s: %s: want a quoted limit such as \"100/1m\", got %s", path, key, settings.Describe(table[typ]))
		}
		if err := task.ValidType(typ); err != nil {
			return fmt.Errorf("%s: %s: %v", path, key, err)
		}
		l, err := worker.ParseRateLimit(v)
		if err != nil {
			return fmt.Errorf("%s: %s: %v", path, key, err)
		}
		limits[typ] = l
	}
	c.WorkerSection.RateLimits = limits
	return nil
}

// tableNames returns the names of the sections that are tables.
func tableNames(tables []settings.Table) []string {
	var out []string
	for _, t := range tables {
		if t.Name != "" {
			out = append(out, t.Name)
		}
	}
	return out
}

// decodeSchedules reads the [[schedule]] tables, in file order, and
// validates each: one error naming the schedule (or its position).
func (c *Config) decodeSchedules(path string, raw any) error {
	c.Schedules = nil
	if raw == nil {
		return nil
	}
	list, ok := raw.([]map[string]any)
	if !ok {
		return fmt.Errorf("%s: schedule: want [[schedule]] tables, got %s", path, settings.Describe(raw))
	}
	for i, t := range list {
		where := fmt.Sprintf("schedule #%d", i+1)
		if name, ok := t["name"].(string); ok {
			where = fmt.Sprintf("schedule %q", name)
		}
		d, err := scheduleFrom(t)
		if err == nil {
			err = d.Validate()
			if err != nil {
				return fmt.Errorf("%s: %w", path, err)
			}
		}
		if err != nil {
			return fmt.Errorf("%s: %s: %w", path, where, err)
		}
		for _, o := range c.Schedules {
			if o.Name == d.Name {
				return fmt.Errorf("%s: %s is defined twice", path, where)
			}
		}
		c.Schedules = append(c.Schedules, d)
	}
	return nil
}

// scheduleFrom reads one [[schedule]] table.
func scheduleFrom(t map[string]any) (schedule.Definition, error) {
	var d schedule.Definition
	str := func(k string, v any) (string, error) {
		s, ok := v.(string)
		if !ok {
			return "", fmt.Errorf("%s: want a quoted string, got %s", k, settings.Describe(v))
		}
		return s, nil
	}
	dur := func(k string, v any) (task.Duration, error) {
		s, err := str(k, v)
		if err != nil {
			return 0, err
		}
		x, err := time.ParseDuration(s)
		if err != nil {
			return 0, fmt.Errorf("%s: %v", k, err)
		}
		return task.Duration(x), nil
	}
	keys := make([]string, 0, len(t))
	for k := range t {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		v := t[k]
		var err error
		switch k {
		case "name":
			d.Name, err = str(k, v)
		case "cron":
			d.Cron, err = str(k, v)
		case "every":
			if d.Every, err = dur(k, v); err == nil {
				err = schedule.CheckEvery(d.Every.D())
			}
		case "timezone":
			d.Timezone, err = str(k, v)
		case "type":
			d.Type, err = str(k, v)
		case "catch_up":
			d.CatchUp, err = str(k, v)
		case "timeout":
			d.Timeout, err = dur(k, v)
		case "max_attempts":
			n, ok := v.(int64)
			if !ok {
				err = fmt.Errorf("%s: want a number, got %s", k, settings.Describe(v))
			}
			d.MaxAttempts = int(n)
		case "input":
			// A string is JSON text; any other value is taken as JSON.
			if s, ok := v.(string); ok {
				if !json.Valid([]byte(s)) {
					err = fmt.Errorf("input: not valid JSON: %.40q", s)
				}
				d.Input = json.RawMessage(s)
			} else {
				d.Input, err = json.Marshal(v)
			}
		default:
			err = fmt.Errorf("unknown key %s: a schedule has name, cron or every, timezone, type, input, max_attempts, timeout and catch_up", k)
		}
		if err != nil {
			return d, err
		}
	}
	return d, nil
}

func (c *Config) decodeHandlers(path string, table map[string]any) error {
	types := slices.Sorted(maps.Keys(table))
	for _, typ := range types {
		key := handlersTable + "." + quoteKey(typ)
		cmd, ok := table[typ].(string)
		if !ok {
			return fmt.Errorf("%s: %s: want a quoted command line, got %s", path, key, settings.Describe(table[typ]))
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

// unknownKeys reports the keys of the file (in file order) that name no
// declared key, no section and nothing in [handlers].
func unknownKeys(path string, inFile []toml.Key, declared []settings.Bound) error {
	isKey := make(map[string]bool)
	sections := map[string]bool{handlersTable: true, poolsTable: true, rateLimitsTable: true, scheduleTable: true}
	var names []string
	for _, k := range declared {
		isKey[k.Name] = true
		// Every table above the key is a section: [queue] and
		// [queue.direct_dispatch] for queue.direct_dispatch.worker_selection.
		for i := range len(k.Name) {
			if k.Name[i] == '.' {
				sections[k.Name[:i]] = true
			}
		}
		names = append(names, k.Name)
	}
	// known: a key, a section, or inside a key's value (a table where a
	// value should be, which the key's type check reports) or [handlers].
	known := func(k toml.Key) bool {
		if sections[k.String()] || k[0] == handlersTable || k[0] == poolsTable || k[0] == rateLimitsTable || k[0] == scheduleTable {
			return true
		}
		for i := 1; i <= len(k); i++ {
			if isKey[toml.Key(k[:i]).String()] {
				return true
			}
		}
		return false
	}
	seen := make(map[string]bool)
	var msgs []string
	for _, k := range inFile {
		name := k.String()
		if known(k) {
			continue
		}
		// Report a whole unknown table once, not each key inside it.
		if len(k) > 1 && seen[toml.Key(k[:len(k)-1]).String()] {
			seen[name] = true
			continue
		}
		seen[name] = true
		msgs = append(msgs, unknown("key", name, names))
	}
	if len(msgs) == 0 {
		return nil
	}
	return fmt.Errorf("%s: %s", path, strings.Join(msgs, "; "))
}

func quoteKey(s string) string {
	for _, r := range s {
		if !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '_' || r == '-') {
			return strconv.Quote(s)
		}
	}
	return s
}

// unknown reports an unknown key or variable (what) called name, with the
// closest of names as a suggestion when one is close.
func unknown(what, name string, names []string) string {
	msg := "unknown " + what + " " + name
	if s := Suggest(name, names); s != "" {
		msg += fmt.Sprintf(" (did you mean %s?)", s)
	}
	return msg
}

// Suggest returns the name among names closest to name by edit distance,
// if one is within two edits, or "": the "did you mean" of unknown keys,
// variables, commands and flags.
func Suggest(name string, names []string) string {
	best, bestD := "", 3
	for _, n := range names {
		if d := editDistance(name, n); d < bestD {
			best, bestD = n, d
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
