package main

import (
	"errors"
	"flag"
	"fmt"
	"strings"
	"time"

	"github.com/capn-dev/capn/gateway/client"
)

// newFlags makes a command's flag set: its errors and help go to stderr
// (stdout for `capn help <command>`), the help being the synopsis, the
// description and the flags.
func newFlags(e env, synopsis, description string) *flag.FlagSet {
	name, _, _ := strings.Cut(strings.TrimPrefix(synopsis, "capn "), " ")
	fs := flag.NewFlagSet("capn "+name, flag.ContinueOnError)
	fs.SetOutput(e.stderr)
	fs.Usage = func() {
		w := fs.Output()
		fmt.Fprintf(w, "usage: %s\n\n%s\n", synopsis, strings.TrimSpace(description))
		hasFlags := false
		fs.VisitAll(func(*flag.Flag) { hasFlags = true })
		if hasFlags {
			fmt.Fprint(w, "\nflags (-x and --x are the same):\n")
			fs.PrintDefaults()
		}
	}
	return fs
}

// parseArgs parses args with fs, letting flags come after the positional
// arguments as kubectl does (`capn get machines --cluster demo`); "--" ends
// the flags. It returns the positional arguments.
func parseArgs(fs *flag.FlagSet, args []string) ([]string, error) {
	var pos []string
	for {
		if err := fs.Parse(args); err != nil {
			return nil, err
		}
		rest := fs.Args()
		if consumed := len(args) - len(rest); consumed > 0 && args[consumed-1] == "--" {
			return append(pos, rest...), nil
		}
		if len(rest) == 0 {
			return pos, nil
		}
		pos = append(pos, rest[0])
		args = rest[1:]
	}
}

// usageError is a mistake in the command line: exit code 2.
type usageError struct{ msg string }

func (e usageError) Error() string { return e.msg }

func usagef(format string, args ...any) error { return usageError{fmt.Sprintf(format, args...)} }

// wantArgs checks the number of positional arguments.
func wantArgs(pos []string, names ...string) error {
	switch {
	case len(pos) < len(names):
		return usagef("missing %s", strings.Join(names[len(pos):], " and "))
	case len(pos) > len(names):
		return usagef("unexpected argument %q", pos[len(names)])
	}
	return nil
}

// apiFlags are the flags of every command that talks to the gateway.
type apiFlags struct {
	server, token string
}

func (a *apiFlags) bind(fs *flag.FlagSet) {
	fs.StringVar(&a.server, "server", "", "gateway `URL`, e.g. http://127.0.0.1:8080 (default: $CAPN_SERVER, then the client config)")
	fs.StringVar(&a.token, "token", "", "bearer `token` (default: $CAPN_TOKEN, then the client config)")
}

// waitFlags are the flags of the commands that can wait.
type waitFlags struct {
	wait    bool
	timeout time.Duration
}

func (w *waitFlags) bind(fs *flag.FlagSet, until string) {
	fs.BoolVar(&w.wait, "wait", false, "wait until "+until+", showing progress on stderr")
	fs.DurationVar(&w.timeout, "timeout", 10*time.Minute, "how long --wait waits before failing with what blocks")
}

// session is one API command's connection to the gateway.
type session struct {
	e    env
	name string // "capn apply", for messages
	conn connection
	c    *client.Client
}

// connect resolves the server and token and makes the client.
func (a *apiFlags) connect(e env, name string) (*session, error) {
	conn, err := resolveConnection(a.server, a.token, e.lookup)
	if err != nil {
		if errors.Is(err, errNoServer) {
			return nil, usageError{err.Error()}
		}
		return nil, err
	}
	opts := []client.Option{client.WithUserAgent("capn/" + versionShort())}
	if conn.Token != "" {
		opts = append(opts, client.WithToken(conn.Token))
	}
	c, err := client.New(conn.Server, opts...)
	if err != nil {
		return nil, usageError{fmt.Sprintf("%s: %v", conn.ServerFrom, err)}
	}
	return &session{e: e, name: name, conn: conn, c: c}, nil
}

// fail prints err for the user and returns the exit code.
func (s *session) fail(err error) int { return reportError(s.e.stderr, s.name, &s.conn, err) }
