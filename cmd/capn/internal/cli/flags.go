package cli

import (
	"errors"
	"flag"
	"fmt"
	"strings"
	"time"

	"github.com/capn-dev/capn/gateway/client"
	"github.com/capn-dev/capn/services/daemon"
)

// flagSet is a command's flags and the env it prints to.
type flagSet struct {
	*flag.FlagSet
	e env
}

// newFlags makes a command's flag set; its help (-h) is the synopsis, the
// description and the flags, printed on stdout.
func newFlags(e env, synopsis, description string) *flagSet {
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
	return &flagSet{fs, e}
}

// parseArgs parses a command's arguments (see parseCommandLine).
func parseArgs(fs *flagSet, args []string) ([]string, error) {
	return parseCommandLine(fs.e, fs.FlagSet, args)
}

// parseCommandLine is how every capn command parses its arguments. Flags
// may come after the positional arguments, as with kubectl (`capn get
// machines --cluster demo`); "--" ends the flags. It returns the
// positional arguments. -h and --help print the command's help on stdout
// and return flag.ErrHelp (exitFor: 0). A mistake (an unknown flag, a
// flag without its value, a bad value) is printed on stderr as one line
// naming the flag and one pointing at the command's -h, and returned
// (exitFor: 2).
func parseCommandLine(e env, fs *flag.FlagSet, args []string) ([]string, error) {
	var pos []string
	for {
		if err := daemon.ParseFlags(fs, args, e.stdout); err != nil {
			if !errors.Is(err, flag.ErrHelp) {
				reportError(e.stderr, fs.Name(), nil, flagMistake(err))
			}
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

// flagMistake is a flag error as a usage error; -A, which kubectl users
// type out of habit, says why capn has no use for it here.
func flagMistake(err error) usageError {
	var fe *daemon.FlagError
	if errors.As(err, &fe) && fe.Unknown && (fe.Flag == "-A" || fe.Flag == "--all-namespaces") {
		return usageError{fe.Flag + ": capn has no namespaces; only the commands that list (capn get) accept -A, and ignore it"}
	}
	return usageError{err.Error()}
}

// allNamespaces binds -A and --all-namespaces, which a command that lists
// accepts and ignores: capn has no namespaces.
func allNamespaces(fs *flagSet) {
	var ignored bool
	fs.BoolVar(&ignored, "A", false, "accepted and ignored: capn has no namespaces (for kubectl habits)")
	fs.BoolVar(&ignored, "all-namespaces", false, "same as -A")
}

// given says whether the flag was on the command line.
func given(fs *flagSet, name string) bool {
	found := false
	fs.Visit(func(f *flag.Flag) { found = found || f.Name == name })
	return found
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

func (a *apiFlags) bind(fs *flagSet) {
	fs.StringVar(&a.server, "server", "", "gateway `URL`, e.g. http://127.0.0.1:8080 (default: $CAPN_SERVER, then the client config)")
	fs.StringVar(&a.token, "token", "", "bearer `token` (default: $CAPN_TOKEN, then the client config)")
}

// waitFlags are the flags of the commands that can wait.
type waitFlags struct {
	wait    bool
	timeout time.Duration
}

func (w *waitFlags) bind(fs *flagSet, until string) {
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
	opts := []client.Option{client.WithUserAgent("capn/" + versionShort()),
		client.WithWarnings(func(text string) { fmt.Fprintln(e.stderr, "Warning: "+text) })}
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
