package settings

import (
	"fmt"
	"time"
)

// Positive checks that a duration is more than zero.
func Positive[D ~int64](d D) error {
	if d <= 0 {
		return fmt.Errorf("duration %v must be positive", time.Duration(d))
	}
	return nil
}

// NotNegative checks that a duration is zero or more.
func NotNegative[D ~int64](d D) error {
	if d < 0 {
		return fmt.Errorf("duration %v must not be negative", time.Duration(d))
	}
	return nil
}

// Within checks that a duration is in lo..hi.
func Within[D ~int64](lo, hi D) func(D) error {
	return func(d D) error {
		if d < lo || d > hi {
			return fmt.Errorf("duration %v out of range %v..%v", time.Duration(d), time.Duration(lo), time.Duration(hi))
		}
		return nil
	}
}

// IntRange checks that an integer is in lo..hi.
func IntRange(lo, hi int) func(int) error {
	return func(n int) error {
		if n < lo || n > hi {
			if n < 0 && lo >= 0 {
				return fmt.Errorf("%d must not be negative", n)
			}
			return fmt.Errorf("%d out of range %d..%d", n, lo, hi)
		}
		return nil
	}
}

// FloatRange checks that a number is in lo..hi.
func FloatRange(lo, hi float64) func(float64) error {
	return func(f float64) error {
		if f < lo || f > hi {
			return fmt.Errorf("%v out of range %v..%v", f, lo, hi)
		}
		return nil
	}
}

// AtLeast checks that a number is lo or more.
func AtLeast(lo float64) func(float64) error {
	return func(f float64) error {
		if f < lo {
			return fmt.Errorf("%v must be at least %v", f, lo)
		}
		return nil
	}
}

// OneOf checks that a string is one of the choices; what names the value
// in the error ("level", "format").
func OneOf(what string, choices ...string) func(string) error {
	return func(s string) error {
		for _, c := range choices {
			if s == c {
				return nil
			}
		}
		return fmt.Errorf("invalid %s %q (want %s)", what, s, orList(choices))
	}
}

// orList writes "a, b or c".
func orList(s []string) string {
	if len(s) == 1 {
		return s[0]
	}
	out := ""
	for i, c := range s[:len(s)-1] {
		if i > 0 {
			out += ", "
		}
		out += c
	}
	return out + " or " + s[len(s)-1]
}
