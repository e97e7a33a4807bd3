package daemon

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"strconv"
	"strings"
	"time"
)

// FlagError is a mistake on a command line, worded for the user the way
// kubectl words it: "unknown flag --bogus", "--replicas: needs a value",
// `--replicas: must be a whole number, got "x"`.
type FlagError struct {
	// Flag is the flag as the user would write it ("--replicas", "-o");
	// empty for a syntax error that names no flag.
	Flag string
	// Unknown: no such flag.
	Unknown bool
	Msg     string
}

func (e *FlagError) Error() string { return e.Msg }

// ParseFlags parses args with fs without printing Go's own messages: -h
// and --help print fs.Usage to help (standard output, exit 0 for the
// caller) and return flag.ErrHelp; any other mistake is returned as a
// *FlagError and nothing is printed (neither Go's "flag provided but not
// defined" nor the whole usage), so the caller prints one line of its own.
// fs.Usage is called with fs's output set to help.
func ParseFlags(fs *flag.FlagSet, args []string, help io.Writer) error {
	out, usage := fs.Output(), fs.Usage
	fs.SetOutput(io.Discard)
	fs.Usage = func() {}
	err := fs.Parse(args)
	fs.Usage = usage
	if errors.Is(err, flag.ErrHelp) {
		fs.SetOutput(help)
		if usage != nil {
			usage()
		} else {
			fmt.Fprintf(help, "usage of %s:\n", fs.Name())
			fs.PrintDefaults()
		}
		fs.SetOutput(out)
		return err
	}
	fs.SetOutput(out)
	if err != nil {
		return flagError(fs, err)
	}
	return nil
}

// FlagName is a flag's name as the user writes it: -o, --replicas.
func FlagName(name string) string {
	if len(name) == 1 {
		return "-" + name
	}
	return "--" + name
}

// flagError rewords an error of flag.FlagSet.Parse (whose wording the
// flag package fixes: see its failf calls).
func flagError(fs *flag.FlagSet, err error) error {
	msg := err.Error()
	if name, ok := strings.CutPrefix(msg, "flag provided but not defined: -"); ok {
		return &FlagError{Flag: FlagName(name), Unknown: true, Msg: "unknown flag " + FlagName(name)}
	}
	if name, ok := strings.CutPrefix(msg, "flag needs an argument: -"); ok {
		return &FlagError{Flag: FlagName(name), Msg: FlagName(name) + ": needs a value"}
	}
	if s, ok := strings.CutPrefix(msg, "bad flag syntax: "); ok {
		return &FlagError{Msg: fmt.Sprintf("bad flag syntax %q: a flag is -x, --name or --name=value", s)}
	}
	for _, prefix := range []string{"invalid value ", "invalid boolean value "} {
		rest, ok := strings.CutPrefix(msg, prefix)
		if !ok {
			continue
		}
		q, err := strconv.QuotedPrefix(rest)
		if err != nil {
			break
		}
		value, _ := strconv.Unquote(q)
		rest = strings.TrimPrefix(strings.TrimPrefix(rest[len(q):], " for flag -"), " for -")
		name, why, _ := strings.Cut(rest, ": ")
		return &FlagError{Flag: FlagName(name), Msg: fmt.Sprintf("%s: %s, got %q", FlagName(name), valueRule(fs.Lookup(name), why), value)}
	}
	return &FlagError{Msg: msg}
}

// valueRule says what a flag's value must be: why, the Value's own
// words, unless it is the flag package's "parse error" for its built-in
// types, which says nothing of what is allowed.
func valueRule(f *flag.Flag, why string) string {
	if why == "value out of range" {
		return "out of range"
	}
	if f == nil || why != "parse error" {
		return why
	}
	g, ok := f.Value.(flag.Getter)
	if !ok {
		return why
	}
	switch g.Get().(type) {
	case bool:
		return "must be true or false"
	case int, int64:
		return "must be a whole number"
	case uint, uint64:
		return "must be a whole number, 0 or more"
	case float64:
		return "must be a number"
	case time.Duration:
		return "must be a duration such as 30s, 5m or 1h30m"
	}
	return why
}
