package daemon

import (
	"errors"
	"flag"
	"io"
	"strings"
	"testing"
	"time"
)

// TestParseFlags: Go's flag errors are reworded to name the flag as the
// user writes it and what its value must be, nothing is printed on a
// mistake, and -h prints the usage on the help writer.
func TestParseFlags(t *testing.T) {
	newSet := func(out io.Writer) *flag.FlagSet {
		fs := flag.NewFlagSet("t", flag.ContinueOnError)
		fs.SetOutput(out)
		fs.Int("replicas", 0, "")
		fs.Uint("count", 0, "")
		fs.Float64("ratio", 0, "")
		fs.Bool("wait", false, "")
		fs.Duration("timeout", time.Second, "")
		fs.Var(IntValue(new(int)), "limit", "")
		fs.String("o", "", "")
		return fs
	}
	tests := []struct {
		args    []string
		want    string
		flag    string
		unknown bool
	}{
		{[]string{"--bogus"}, "unknown flag --bogus", "--bogus", true},
		{[]string{"-x"}, "unknown flag -x", "-x", true},
		{[]string{"-o"}, "-o: needs a value", "-o", false},
		{[]string{"--replicas", "x"}, `--replicas: must be a whole number, got "x"`, "--replicas", false},
		{[]string{"--replicas", "99999999999999999999"}, `--replicas: out of range, got "99999999999999999999"`, "--replicas", false},
		{[]string{"--count=-1"}, `--count: must be a whole number, 0 or more, got "-1"`, "--count", false},
		{[]string{"--ratio=x"}, `--ratio: must be a number, got "x"`, "--ratio", false},
		{[]string{"--wait=x"}, `--wait: must be true or false, got "x"`, "--wait", false},
		{[]string{"--timeout", "x"}, `--timeout: must be a duration such as 30s, 5m or 1h30m, got "x"`, "--timeout", false},
		{[]string{"--limit", "x"}, `--limit: not an integer, got "x"`, "--limit", false},
		{[]string{"-=x"}, `bad flag syntax "-=x": a flag is -x, --name or --name=value`, "", false},
	}
	for _, tt := range tests {
		var out, help strings.Builder
		err := ParseFlags(newSet(&out), tt.args, &help)
		var fe *FlagError
		if !errors.As(err, &fe) || fe.Error() != tt.want || fe.Flag != tt.flag || fe.Unknown != tt.unknown {
			t.Errorf("%q: %#v, want %q", tt.args, err, tt.want)
		}
		if out.String() != "" || help.String() != "" {
			t.Errorf("%q printed %q and %q", tt.args, out.String(), help.String())
		}
	}
	var out, help strings.Builder
	fs := newSet(&out)
	if err := ParseFlags(fs, []string{"--help"}, &help); !errors.Is(err, flag.ErrHelp) {
		t.Errorf("--help: %v", err)
	}
	if !strings.Contains(help.String(), "-replicas") || out.String() != "" || fs.Output() != &out {
		t.Errorf("--help printed %q on help and %q on the output", help.String(), out.String())
	}
}
