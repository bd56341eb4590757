// Package settings declares configuration keys once. A key is one line
// next to the Config struct it sets: its name in queue.toml, the field it
// sets, its default, its value under the economy profile, its check and a
// doc line. Everything else derives from that line: the service fills its
// zero fields with the defaults and validates with the checks
// (Section.Fill, Section.Validate), and internal/config parses queue.toml
// and S3QUEUE_* variables through the same keys (Section.Bind).
//
// The package is a leaf: the services import it, and it imports nothing of
// the queue.
package settings

import (
	"fmt"
	"math"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"
)

// Section is a table of queue.toml ([worker], [monitor]...) whose values
// live in a struct S: the service's Config or Options.
type Section[S any] struct {
	// Name is the table's name; "" for the keys at the top of the file.
	Name string
	// Keys in the order queue.toml.example shows them.
	Keys []Key[S]
	// Rules check constraints between keys, after the keys' own checks.
	Rules []Rule[S]
	// NegativeUnset makes Fill treat a negative number like zero: it takes
	// the default (the monitor's convention).
	NegativeUnset bool
}

// Key is one declared key of S. Declare keys with String, Int, Float,
// Bool, Duration, Ints, Strings or Text.
type Key[S any] interface {
	// Name is the key's name within its section ("poll_min").
	Name() string
	decl() keyDecl[S]
}

// Rule is a check between keys of one section.
type Rule[S any] struct {
	// Keys are the keys the rule reads, the one to blame first.
	Keys []string
	// Check returns an error naming the keys by their queue.toml names.
	Check func(*S) error
}

// keyDecl is a key with its value type erased.
type keyDecl[S any] struct {
	doc, def, economy string // economy: "" when the profile leaves the key alone
	reset             func(*S)
	fill              func(s *S, negativeUnset bool)
	applyEconomy      func(*S)
	setTOML           func(s *S, raw any) error
	setText           func(s *S, text string) error
	check             func(*S) error
}

// qualified returns the key's dotted name: "worker.poll_min", or "store"
// at the top level.
func (sec *Section[S]) qualified(name string) string {
	if sec.Name == "" {
		return name
	}
	return sec.Name + "." + name
}

// Fill sets each unset key of s to its default: a zero value (nil for a
// list), or a negative number with NegativeUnset, unless the key declares
// its own test with Unset.
func (sec *Section[S]) Fill(s *S) {
	for _, k := range sec.Keys {
		k.decl().fill(s, sec.NegativeUnset)
	}
}

// Validate runs every key's check, then the rules, and returns the first
// error, prefixed with the key's dotted name for a key's check.
func (sec *Section[S]) Validate(s *S) error {
	for _, k := range sec.Keys {
		if err := k.decl().check(s); err != nil {
			return fmt.Errorf("%s: %w", sec.qualified(k.Name()), err)
		}
	}
	for _, r := range sec.Rules {
		if err := r.Check(s); err != nil {
			return err
		}
	}
	return nil
}

// Bound is a key bound to one value of its struct: what a parser needs.
type Bound struct {
	// Name is the dotted name: "worker.poll_min".
	Name string
	// Doc is the key's doc line.
	Doc string
	// Default is the default as a queue.toml value: "5s" is `"5s"`.
	Default string
	// Economy is the value under the economy profile, as Default, or ""
	// when the profile does not change the key.
	Economy string

	reset        func()
	setTOML      func(raw any) error
	setText      func(text string) error
	applyEconomy func()
}

// Reset sets the default.
func (b Bound) Reset() { b.reset() }

// SetTOML parses a value decoded from queue.toml, checks it and sets it.
func (b Bound) SetTOML(raw any) error { return b.setTOML(raw) }

// SetText parses an environment variable's value, checks it and sets it.
func (b Bound) SetText(text string) error { return b.setText(text) }

// ApplyEconomy sets the economy profile's value, if the key has one.
func (b Bound) ApplyEconomy() {
	if b.applyEconomy != nil {
		b.applyEconomy()
	}
}

// BoundRule is a rule bound to one value of its struct.
type BoundRule struct {
	// Keys are the dotted names of the keys the rule reads.
	Keys  []string
	Check func() error
}

// Table is a section bound to one value of its struct.
type Table struct {
	// Name is the section's name ("" for the top of the file).
	Name  string
	Keys  []Bound
	Rules []BoundRule
}

// Bind returns the section bound to s: its keys in declaration order, and
// its rules.
func (sec *Section[S]) Bind(s *S) Table {
	t := Table{Name: sec.Name}
	for _, k := range sec.Keys {
		d := k.decl()
		b := Bound{Name: sec.qualified(k.Name()), Doc: d.doc, Default: d.def, Economy: d.economy,
			reset:   func() { d.reset(s) },
			setTOML: func(raw any) error { return d.setTOML(s, raw) },
			setText: func(text string) error { return d.setText(s, text) },
		}
		if d.applyEconomy != nil {
			b.applyEconomy = func() { d.applyEconomy(s) }
		}
		t.Keys = append(t.Keys, b)
	}
	for _, r := range sec.Rules {
		keys := make([]string, len(r.Keys))
		for i, k := range r.Keys {
			keys[i] = sec.qualified(k)
		}
		check := r.Check
		t.Rules = append(t.Rules, BoundRule{Keys: keys, Check: func() error { return check(s) }})
	}
	return t
}

// Typed is the declaration of one key of S holding a V. Its methods add
// to the declaration and return it, so a declaration reads as one
// expression.
type Typed[S, V any] struct {
	name, doc string
	kind      kind[V]
	field     func(*S) *V
	def       V
	economy   *V
	check     func(V) error
	unset     func(*S) bool
}

// Name returns the key's name within its section.
func (k *Typed[S, V]) Name() string { return k.name }

// Economy sets the key's value under profile = "economy".
func (k *Typed[S, V]) Economy(v V) *Typed[S, V] {
	k.economy = &v
	return k
}

// Must sets the check every value of the key must pass.
func (k *Typed[S, V]) Must(check func(V) error) *Typed[S, V] {
	k.check = check
	return k
}

// Unset replaces Fill's test of whether the key was left out, for a key
// whose zero value can be meant (with another field saying so).
func (k *Typed[S, V]) Unset(unset func(*S) bool) *Typed[S, V] {
	k.unset = unset
	return k
}

func (k *Typed[S, V]) decl() keyDecl[S] {
	d := keyDecl[S]{
		doc: k.doc,
		def: k.kind.format(k.def),
		reset: func(s *S) {
			*k.field(s) = k.kind.clone(k.def)
		},
		fill: func(s *S, negativeUnset bool) {
			v := *k.field(s)
			unset := k.kind.zero(v) || negativeUnset && k.kind.negative != nil && k.kind.negative(v)
			if k.unset != nil {
				unset = k.unset(s)
			}
			if unset {
				*k.field(s) = k.kind.clone(k.def)
			}
		},
		setTOML: func(s *S, raw any) error {
			v, err := k.kind.decode(raw)
			if err != nil {
				return err
			}
			return k.set(s, v)
		},
		setText: func(s *S, text string) error {
			v, err := k.kind.parse(strings.TrimSpace(text))
			if err != nil {
				return err
			}
			return k.set(s, v)
		},
		check: func(s *S) error {
			if k.check == nil {
				return nil
			}
			return k.check(*k.field(s))
		},
	}
	if k.economy != nil {
		d.economy = k.kind.format(*k.economy)
		d.applyEconomy = func(s *S) { *k.field(s) = k.kind.clone(*k.economy) }
	}
	return d
}

func (k *Typed[S, V]) set(s *S, v V) error {
	if k.check != nil {
		if err := k.check(v); err != nil {
			return err
		}
	}
	*k.field(s) = v
	return nil
}

// kind is how values of type V are written in queue.toml and in
// environment variables.
type kind[V any] struct {
	decode   func(raw any) (V, error) // a value as the TOML decoder returns it
	parse    func(text string) (V, error)
	format   func(V) string // as a queue.toml value
	zero     func(V) bool
	negative func(V) bool // nil: not a number
	clone    func(V) V
}

func same[V any](v V) V { return v }

func declare[S, V any](k kind[V], name string, field func(*S) *V, def V, doc string) *Typed[S, V] {
	if k.clone == nil {
		k.clone = same[V]
	}
	return &Typed[S, V]{name: name, doc: doc, kind: k, field: field, def: def}
}

// String declares a key holding a quoted string.
func String[S any](name string, field func(*S) *string, def, doc string) *Typed[S, string] {
	return declare(kind[string]{
		decode: func(raw any) (string, error) {
			s, ok := raw.(string)
			if !ok {
				return "", fmt.Errorf("want a quoted string, got %s", Describe(raw))
			}
			return s, nil
		},
		parse:  func(s string) (string, error) { return s, nil },
		format: strconv.Quote,
		zero:   func(s string) bool { return s == "" },
	}, name, field, def, doc)
}

// Text declares a key written as a quoted string and held as a V: parse
// reads it, format writes it back.
func Text[S any, V comparable](name string, field func(*S) *V, def V, parse func(string) (V, error), format func(V) string, doc string) *Typed[S, V] {
	var zero V
	return declare(kind[V]{
		decode: func(raw any) (V, error) {
			s, ok := raw.(string)
			if !ok {
				return zero, fmt.Errorf("want a quoted string, got %s", Describe(raw))
			}
			return parse(s)
		},
		parse:  parse,
		format: func(v V) string { return strconv.Quote(format(v)) },
		zero:   func(v V) bool { return v == zero },
	}, name, field, def, doc)
}

// Int declares a key holding an integer.
func Int[S any](name string, field func(*S) *int, def int, doc string) *Typed[S, int] {
	return declare(kind[int]{
		decode: func(raw any) (int, error) {
			n, ok := raw.(int64)
			if !ok {
				return 0, fmt.Errorf("want an integer, got %s", Describe(raw))
			}
			if n > math.MaxInt32 || n < math.MinInt32 {
				return 0, fmt.Errorf("%d is out of range", n)
			}
			return int(n), nil
		},
		parse: func(s string) (int, error) {
			n, err := strconv.ParseInt(s, 10, 32)
			if err != nil {
				return 0, fmt.Errorf("invalid integer %q", s)
			}
			return int(n), nil
		},
		format:   strconv.Itoa,
		zero:     func(n int) bool { return n == 0 },
		negative: func(n int) bool { return n < 0 },
	}, name, field, def, doc)
}

// Seconds declares a key holding a duration written as a whole number of
// seconds (the seed's *_secs keys), held as a time.Duration.
func Seconds[S any](name string, field func(*S) *time.Duration, def time.Duration, doc string) *Typed[S, time.Duration] {
	const max = 365 * 24 * 3600
	secs := func(n int64) (time.Duration, error) {
		if n > max || n < -max {
			return 0, fmt.Errorf("%d seconds is out of range", n)
		}
		return time.Duration(n) * time.Second, nil
	}
	return declare(kind[time.Duration]{
		decode: func(raw any) (time.Duration, error) {
			n, ok := raw.(int64)
			if !ok {
				return 0, fmt.Errorf("want a whole number of seconds, got %s", Describe(raw))
			}
			return secs(n)
		},
		parse: func(s string) (time.Duration, error) {
			n, err := strconv.ParseInt(s, 10, 64)
			if err != nil {
				return 0, fmt.Errorf("invalid number of seconds %q", s)
			}
			return secs(n)
		},
		format:   func(d time.Duration) string { return strconv.FormatInt(int64(d/time.Second), 10) },
		zero:     func(d time.Duration) bool { return d == 0 },
		negative: func(d time.Duration) bool { return d < 0 },
	}, name, field, def, doc)
}

// Limit declares a key holding a bound: a positive integer, "unbounded"
// (or 0, in queue.toml and the environment) for none, held as unbounded,
// or "auto" for a default another key decides, held as 0 (the zero value,
// which Fill leaves for the service to fill).
func Limit[S any](name string, field func(*S) *int, unbounded int, doc string) *Typed[S, int] {
	parse := func(s string) (int, error) {
		switch s {
		case "unbounded", "0":
			return unbounded, nil
		case "auto":
			return 0, nil
		}
		n, err := strconv.ParseInt(s, 10, 32)
		if err != nil || n < 0 {
			return 0, fmt.Errorf("invalid limit %q: want a positive integer, \"unbounded\" (or 0) or \"auto\"", s)
		}
		return int(n), nil
	}
	return declare(kind[int]{
		decode: func(raw any) (int, error) {
			switch v := raw.(type) {
			case int64:
				return parse(strconv.FormatInt(v, 10))
			case string:
				return parse(v)
			}
			return 0, fmt.Errorf("want a positive integer, \"unbounded\" (or 0) or \"auto\", got %s", Describe(raw))
		},
		parse: parse,
		format: func(n int) string {
			switch n {
			case unbounded:
				return `"unbounded"`
			case 0:
				return `"auto"`
			}
			return strconv.Itoa(n)
		},
		zero: func(n int) bool { return n == 0 },
	}, name, field, 0, doc)
}

// Float declares a key holding a finite number.
func Float[S any](name string, field func(*S) *float64, def float64, doc string) *Typed[S, float64] {
	return declare(kind[float64]{
		decode: func(raw any) (float64, error) {
			switch n := raw.(type) {
			case float64:
				if math.IsNaN(n) || math.IsInf(n, 0) {
					return 0, fmt.Errorf("want a finite number, got %v", n)
				}
				return n, nil
			case int64:
				return float64(n), nil
			}
			return 0, fmt.Errorf("want a number, got %s", Describe(raw))
		},
		parse: func(s string) (float64, error) {
			f, err := strconv.ParseFloat(s, 64)
			if err != nil || math.IsNaN(f) || math.IsInf(f, 0) {
				return 0, fmt.Errorf("invalid number %q", s)
			}
			return f, nil
		},
		format: func(f float64) string {
			s := strconv.FormatFloat(f, 'f', -1, 64)
			if !strings.Contains(s, ".") {
				s += ".0"
			}
			return s
		},
		zero:     func(f float64) bool { return f == 0 },
		negative: func(f float64) bool { return f < 0 },
	}, name, field, def, doc)
}

// Bool declares a key holding true or false.
func Bool[S any](name string, field func(*S) *bool, def bool, doc string) *Typed[S, bool] {
	return declare(kind[bool]{
		decode: func(raw any) (bool, error) {
			b, ok := raw.(bool)
			if !ok {
				return false, fmt.Errorf("want true or false, got %s", Describe(raw))
			}
			return b, nil
		},
		parse: func(s string) (bool, error) {
			switch strings.ToLower(s) {
			case "true", "1":
				return true, nil
			case "false", "0":
				return false, nil
			}
			return false, fmt.Errorf("invalid boolean %q: want true or false", s)
		},
		format: strconv.FormatBool,
		zero:   func(b bool) bool { return !b },
	}, name, field, def, doc)
}

// Duration declares a key holding a duration, written as a quoted Go
// duration ("500ms"). D is time.Duration or a type like it.
func Duration[S any, D ~int64](name string, field func(*S) *D, def D, doc string) *Typed[S, D] {
	return declare(kind[D]{
		decode: func(raw any) (D, error) {
			s, ok := raw.(string)
			if !ok {
				return 0, fmt.Errorf("invalid duration %s: write a quoted Go duration like \"500ms\", \"5s\" or \"168h\"", Describe(raw))
			}
			return parseDuration[D](s)
		},
		parse:    parseDuration[D],
		format:   func(d D) string { return strconv.Quote(ShortDuration(time.Duration(d))) },
		zero:     func(d D) bool { return d == 0 },
		negative: func(d D) bool { return d < 0 },
	}, name, field, def, doc)
}

func parseDuration[D ~int64](s string) (D, error) {
	d, err := time.ParseDuration(s)
	if err != nil {
		return 0, fmt.Errorf("invalid duration %q: write a Go duration like \"500ms\", \"5s\" or \"168h\"", s)
	}
	return D(d), nil
}

// ShortDuration formats d like time.Duration.String without the zero
// units at its end: "1h", "10m", "1m30s", as queue.toml and messages
// write durations.
func ShortDuration(d time.Duration) string {
	s := d.String()
	if strings.HasSuffix(s, "m0s") {
		s = strings.TrimSuffix(s, "0s")
	}
	if strings.HasSuffix(s, "h0m") {
		s = strings.TrimSuffix(s, "0m")
	}
	return s
}

// Ints declares a key holding a list of integers: an array in queue.toml,
// commas in the environment (0,1,2). An empty list is nil.
func Ints[S any](name string, field func(*S) *[]int, def []int, doc string) *Typed[S, []int] {
	return declare(kind[[]int]{
		decode: func(raw any) ([]int, error) {
			arr, ok := raw.([]any)
			if !ok {
				return nil, fmt.Errorf("want an array of integers like [0, 1], got %s", Describe(raw))
			}
			var out []int
			for _, e := range arr {
				n, ok := e.(int64)
				if !ok {
					return nil, fmt.Errorf("want an array of integers like [0, 1], found %s", Describe(e))
				}
				if n > math.MaxInt32 || n < math.MinInt32 {
					return nil, fmt.Errorf("%d is out of range", n)
				}
				out = append(out, int(n))
			}
			return out, nil
		},
		parse: func(s string) ([]int, error) {
			var out []int
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
		},
		format: func(l []int) string {
			parts := make([]string, len(l))
			for i, n := range l {
				parts[i] = strconv.Itoa(n)
			}
			return "[" + strings.Join(parts, ", ") + "]"
		},
		// An empty list that is not nil is a choice (a worker pinned to no
		// shard), so only nil takes the default.
		zero:  func(l []int) bool { return l == nil },
		clone: slices.Clone[[]int],
	}, name, field, def, doc)
}

// Strings declares a key holding a list of strings: an array in queue.toml,
// commas in the environment and on the command line (a,b). An empty list
// is nil.
func Strings[S any](name string, field func(*S) *[]string, def []string, doc string) *Typed[S, []string] {
	return declare(kind[[]string]{
		decode: func(raw any) ([]string, error) {
			arr, ok := raw.([]any)
			if !ok {
				return nil, fmt.Errorf("want an array of strings like [\"a\", \"b\"], got %s", Describe(raw))
			}
			var out []string
			for _, e := range arr {
				s, ok := e.(string)
				if !ok {
					return nil, fmt.Errorf("want an array of strings like [\"a\", \"b\"], found %s", Describe(e))
				}
				out = append(out, s)
			}
			return out, nil
		},
		parse: func(s string) ([]string, error) {
			var out []string
			for _, part := range strings.Split(s, ",") {
				if part = strings.TrimSpace(part); part != "" {
					out = append(out, part)
				}
			}
			return out, nil
		},
		format: func(l []string) string {
			parts := make([]string, len(l))
			for i, s := range l {
				parts[i] = strconv.Quote(s)
			}
			return "[" + strings.Join(parts, ", ") + "]"
		},
		zero:  func(l []string) bool { return len(l) == 0 },
		clone: slices.Clone[[]string],
	}, name, field, def, doc)
}

// Describe names a value decoded from TOML for an error message: `string
// "4"`, `integer 5`.
func Describe(v any) string {
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

// published holds the sections the public packages keep unexported (their
// queue.toml key tables), by the type of the struct they bind, for
// internal/config and cmd/s3queue.
var published sync.Map // reflect.Type -> *Section[T]

// Publish registers s as the section of T: a package calls it from init
// for each of its unexported key tables.
func Publish[T any](s *Section[T]) { published.Store(reflect.TypeFor[T](), s) }

// Of returns the section Published for T; it panics if none was.
func Of[T any]() *Section[T] {
	s, ok := published.Load(reflect.TypeFor[T]())
	if !ok {
		panic(fmt.Sprintf("settings: no section published for %v", reflect.TypeFor[T]()))
	}
	return s.(*Section[T])
}
