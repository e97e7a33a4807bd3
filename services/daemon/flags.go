package daemon

import (
	"errors"
	"flag"
	"fmt"
	"strconv"
	"time"
)

// Flag is one setting that a program reads from a command-line flag or,
// when the flag is not given, from an environment variable. Precedence is
// always flag > environment > default (the value Value holds when the flag
// is registered). The runtime's own settings are Flags (see
// Config.RegisterFlags); a Service adds its own through FlagProvider, and
// any command can bind its own with BindFlags and ApplyFlagEnv.
type Flag struct {
	// Name is the flag name without dashes, e.g. "nats-url".
	Name string
	// Env is the environment variable, e.g. "CAPN_NATS_URL"; empty: none.
	Env string
	// Usage is the help text; BindFlags appends the variable's name.
	Usage string
	// Value is bound to the setting. Its String() when bound is the
	// default shown in the help. StringValue, IntValue, BoolValue and
	// DurationValue make one from a pointer.
	Value flag.Value
}

// BindFlags registers every flag on fs.
func BindFlags(fs *flag.FlagSet, flags ...Flag) {
	for _, f := range flags {
		usage := f.Usage
		if f.Env != "" {
			usage += " [$" + f.Env + "]"
		}
		fs.Var(f.Value, f.Name, usage)
	}
}

// ApplyFlagEnv sets every flag that was not given explicitly on fs from
// its environment variable, if that is set. fs may be nil (nothing was
// given explicitly) and it may be called before or after fs.Parse: a flag
// given explicitly wins either way. It reports every unparsable variable
// at once, each naming the variable, its flag and the value.
func ApplyFlagEnv(fs *flag.FlagSet, lookup func(string) (string, bool), flags ...Flag) error {
	explicit := map[string]bool{}
	if fs != nil {
		fs.Visit(func(f *flag.Flag) { explicit[f.Name] = true })
	}
	var errs []error
	for _, f := range flags {
		if f.Env == "" || explicit[f.Name] {
			continue
		}
		v, ok := lookup(f.Env)
		if !ok {
			continue
		}
		if err := f.Value.Set(v); err != nil {
			errs = append(errs, &FieldError{Flag: f.Name, Env: f.Env, Value: v, Problem: err.Error()})
		}
	}
	return errors.Join(errs...)
}

// FieldError is one bad setting. Its message names the flag and the
// environment variable that set it, the value, and what is allowed:
//
//	--log-level (CAPN_LOG_LEVEL) "loud": must be one of trace|debug|info|warn|error
//
// Services use it in their own Validate so every problem reads the same.
type FieldError struct {
	Flag    string // without dashes; empty for a setting that has no flag
	Env     string
	Value   string // shown quoted; use "(hidden)" for secrets
	Problem string
	Err     error // the underlying error, if any
}

func (e *FieldError) Error() string {
	var name string
	switch {
	case e.Flag != "" && e.Env != "":
		name = fmt.Sprintf("--%s (%s)", e.Flag, e.Env)
	case e.Flag != "":
		name = "--" + e.Flag
	default:
		name = e.Env
	}
	return fmt.Sprintf("%s %q: %s", name, e.Value, e.Problem)
}

func (e *FieldError) Unwrap() error { return e.Err }

// StringValue binds a string setting to p.
func StringValue(p *string) flag.Value { return (*stringValue)(p) }

// IntValue binds an int setting to p.
func IntValue(p *int) flag.Value { return (*intValue)(p) }

// BoolValue binds a boolean setting to p; the flag may be given bare
// (--skip-provision) or with a value (--skip-provision=false).
func BoolValue(p *bool) flag.Value { return (*boolValue)(p) }

// DurationValue binds a time.Duration setting to p (e.g. 5s, 1m30s).
func DurationValue(p *time.Duration) flag.Value { return (*durationValue)(p) }

type stringValue string

func (v *stringValue) Set(s string) error { *v = stringValue(s); return nil }
func (v *stringValue) String() string     { return string(*v) }

type intValue int

func (v *intValue) Set(s string) error {
	n, err := strconv.Atoi(s)
	if err != nil {
		return errors.New("not an integer")
	}
	*v = intValue(n)
	return nil
}
func (v *intValue) String() string { return strconv.Itoa(int(*v)) }

type boolValue bool

func (v *boolValue) Set(s string) error {
	b, err := strconv.ParseBool(s)
	if err != nil {
		return errors.New("not a boolean (true|false|1|0)")
	}
	*v = boolValue(b)
	return nil
}
func (v *boolValue) String() string   { return strconv.FormatBool(bool(*v)) }
func (v *boolValue) IsBoolFlag() bool { return true }

type durationValue time.Duration

func (v *durationValue) Set(s string) error {
	d, err := time.ParseDuration(s)
	if err != nil {
		return errors.New("not a duration (e.g. 500ms, 5s, 1m30s)")
	}
	*v = durationValue(d)
	return nil
}
func (v *durationValue) String() string { return time.Duration(*v).String() }
