package cli

import (
	"context"
	"errors"
	"fmt"
	"os/exec"
	"runtime"
	"strings"
	"time"

	"github.com/capn-dev/capn/services/daemon"
)

const dashboardHelp = `
Opens the gateway's dashboard in your browser, logged in, so that nobody
has to paste a token into the page. capn asks the gateway for a one-time
login link (POST /v1/logins with your token), prints it on standard
output and opens it with xdg-open (open on macOS). The link works once,
within 60 seconds; the browser then holds a session cookie for 12 hours
with your token's scopes (the page's "Log out" ends it).

With --no-open, or where there is no browser to open (no DISPLAY or
WAYLAND_DISPLAY, e.g. over ssh), it only prints the link. Without a token
it prints the dashboard's address (enough when the gateway allows
anonymous access).

Examples:
  capn dashboard
  capn dashboard --no-open     # print the link, open it yourself
`

// openBrowser opens url in the user's browser; tests replace it.
var openBrowser = func(ctx context.Context, lookup func(string) (string, bool), url string) error {
	argv, err := browserCommand(runtime.GOOS, lookup)
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(ctx, 15*time.Second)
	defer cancel()
	out, err := exec.CommandContext(ctx, argv[0], append(argv[1:], url)...).CombinedOutput()
	if err != nil {
		return fmt.Errorf("%s: %v %s", argv[0], err, strings.TrimSpace(string(out)))
	}
	return nil
}

// browserCommand is the program that opens a URL on goos, or why there is
// none.
func browserCommand(goos string, lookup func(string) (string, bool)) ([]string, error) {
	name := "xdg-open"
	switch goos {
	case "darwin":
		name = "open"
	case "windows":
		return nil, errors.New("opening a browser is not supported on windows")
	default:
		d, _ := lookup("DISPLAY")
		wl, _ := lookup("WAYLAND_DISPLAY")
		if d == "" && wl == "" {
			return nil, errors.New("no DISPLAY or WAYLAND_DISPLAY: no browser to open here")
		}
	}
	p, err := exec.LookPath(name)
	if err != nil {
		return nil, fmt.Errorf("no %s on PATH", name)
	}
	return []string{p}, nil
}

func cmdDashboard(ctx context.Context, e env, args []string) int {
	fs := newFlags(e, "capn dashboard [--no-open]", dashboardHelp)
	var a apiFlags
	a.bind(fs)
	var noOpen bool
	fs.BoolVar(&noOpen, "no-open", false, "print the login link without opening a browser")
	const name = "capn dashboard"
	pos, err := parseArgs(fs, args)
	if err != nil {
		return exitFor(err)
	}
	if err := wantArgs(pos); err != nil {
		return reportError(e.stderr, name, nil, err)
	}
	s, err := a.connect(e, name)
	if err != nil {
		return reportError(e.stderr, name, nil, err)
	}
	link := strings.TrimSuffix(s.conn.Server, "/") + "/"
	if s.conn.Token == "" {
		fmt.Fprintf(e.stderr, "%s: no token (pass --token, set %s or use capn dev's client config): the page will ask for one unless the gateway allows anonymous access\n", name, envToken)
	} else {
		l, err := s.c.Login(ctx)
		if err != nil {
			return s.fail(err)
		}
		link = s.c.LoginURL(l)
		fmt.Fprintf(e.stderr, "login link for the dashboard at %s (works once, until %s):\n", s.conn.Server, l.ExpiresAt.Local().Format(time.TimeOnly))
	}
	fmt.Fprintln(e.stdout, link)
	if noOpen {
		return daemon.ExitOK
	}
	if err := openBrowser(ctx, e.lookup, link); err != nil {
		fmt.Fprintf(e.stderr, "%s: could not open a browser (%v): open the link above yourself\n", name, err)
	}
	return daemon.ExitOK
}
