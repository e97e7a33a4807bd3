package cli

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"

	"github.com/capn-dev/capn/gateway/api"
	"github.com/capn-dev/capn/gateway/client"
	"github.com/capn-dev/capn/services/daemon"
)

// reportError prints err on w, prefixed by the command's name, and returns
// the exit code: 2 for a usage mistake, 1 for everything else. A problem
// the gateway answered is printed with each bad field's path; an
// unreachable gateway or a refused token names where the address or token
// came from (conn may be nil before one is resolved).
func reportError(w io.Writer, name string, conn *connection, err error) int {
	var ue usageError
	if errors.As(err, &ue) {
		fmt.Fprintf(w, "%s: %s\nSee '%s -h' for help.\n", name, ue.msg, name)
		return daemon.ExitUsage
	}
	var ce *client.Error
	if errors.As(err, &ce) {
		printProblem(w, name, conn, ce)
		return daemon.ExitFailed
	}
	var urlErr *url.Error
	if errors.As(err, &urlErr) && conn != nil && !errors.Is(err, context.Canceled) {
		fmt.Fprintf(w, "%s: cannot reach the gateway at %s (from %s): %v\n", name, conn.Server, conn.ServerFrom, urlErr.Err)
		if strings.Contains(urlErr.Err.Error(), "connection refused") {
			fmt.Fprintf(w, "  is capn dev running? (capn dev serves the gateway on 127.0.0.1:8080)\n")
		}
		return daemon.ExitFailed
	}
	if errors.Is(err, context.Canceled) {
		fmt.Fprintf(w, "%s: interrupted\n", name)
		return daemon.ExitFailed
	}
	fmt.Fprintf(w, "%s: %v\n", name, err)
	return daemon.ExitFailed
}

// printProblem prints an RFC 9457 problem: status, title and detail on the
// first line, then one line per bad field with its path.
func printProblem(w io.Writer, name string, conn *connection, ce *client.Error) {
	p := ce.Problem
	line := fmt.Sprintf("%s: %s", name, problemTitle(ce))
	if p.Detail != "" {
		line += ": " + p.Detail
	}
	fmt.Fprintln(w, line)
	for _, f := range p.Errors {
		fmt.Fprintf(w, "  %s\n", fieldLine(f))
	}
	switch {
	case ce.StatusCode == http.StatusUnauthorized && conn != nil && conn.Token == "":
		fmt.Fprintf(w, "  no token was sent: pass --token, set %s, or use a client config with one (%s)\n", envToken, envConfig)
	case ce.StatusCode == http.StatusUnauthorized && conn != nil:
		fmt.Fprintf(w, "  the token (from %s) is not one the gateway at %s knows\n", conn.TokenFrom, conn.Server)
	case ce.RetryAfter > 0:
		fmt.Fprintf(w, "  retry after %s\n", ce.RetryAfter)
	}
}

// problemTitle is "Title (status)", the status text when the problem has
// no title.
func problemTitle(ce *client.Error) string {
	title := ce.Problem.Title
	if title == "" {
		title = http.StatusText(ce.StatusCode)
	}
	return fmt.Sprintf("%s (%d)", title, ce.StatusCode)
}

// fieldLine is one field error as capn prints it: path: "value": reason.
func fieldLine(f api.FieldViolation) string {
	if f.Value != "" {
		return fmt.Sprintf("%s: %q: %s", f.Path, f.Value, f.Reason)
	}
	return fmt.Sprintf("%s: %s", f.Path, f.Reason)
}
