package gateway

import (
	"errors"
	"net"
	"net/http"
	"net/url"
	"strings"

	"github.com/capn-dev/capn/gateway/api"
)

// The gateway's edge against browsers (CSRF and DNS rebinding), one check
// for token, cookie and anonymous requests alike:
//
//   - Host must name the gateway (hostPolicy): a page whose DNS name was
//     rebound to 127.0.0.1 sends its own name as Host and gets 421, so it
//     cannot talk to a loopback gateway (anonymous access included).
//   - A request that changes state and carries Origin (every browser sends
//     one on POST, PUT and DELETE) must come from the gateway's own origin;
//     Sec-Fetch-Site, when sent, must be same-origin (or none: typed by the
//     user). A request authenticated by the session cookie must carry
//     Origin (authenticateCookie). Scripts send neither and are not
//     concerned: they hold a token or run where anonymous access is meant.
//   - Body-taking endpoints read YAML or JSON only (body.go): the content
//     types a cross-origin form or fetch may send without a preflight are
//     refused.

// hostPolicy tells which Host headers name this gateway. Safe for
// concurrent use once built.
type hostPolicy struct {
	// names are host names allowed whatever the listen address
	// (--allowed-hosts), lower case; "*" allows any.
	names map[string]bool
	// loopback: the gateway listens on a loopback address; any loopback
	// IP and "localhost" name it.
	loopback bool
	// ip is the address it listens on when that is one address.
	ip net.IP
	// wildcard: it listens on every interface; any IP literal, and a
	// single-label name (a container's or host's name, which public DNS
	// cannot rebind), name it.
	wildcard bool
}

// newHostPolicy is the policy of a gateway listening on listen (host:port,
// as the listener reports it) with more names allowed.
func newHostPolicy(listen string, names []string) hostPolicy {
	p := hostPolicy{names: map[string]bool{}}
	for _, n := range names {
		if n = strings.ToLower(strings.TrimSpace(n)); n != "" {
			p.names[strings.Trim(hostOnly(n), "[]")] = true
		}
	}
	host := hostOnly(listen)
	ip := net.ParseIP(strings.Trim(host, "[]"))
	switch {
	case host == "" || ip != nil && ip.IsUnspecified():
		p.wildcard = true
	case strings.EqualFold(host, "localhost") || ip != nil && ip.IsLoopback():
		p.loopback = true
	case ip != nil:
		p.ip = ip
	default:
		p.names[strings.ToLower(host)] = true
	}
	return p
}

// hostOnly strips the port of host:port, leaving a bare host alone.
func hostOnly(hp string) string {
	if h, _, err := net.SplitHostPort(hp); err == nil {
		return h
	}
	return hp
}

// allows reports whether the Host header host names this gateway.
func (p hostPolicy) allows(host string) bool {
	h := strings.ToLower(strings.Trim(hostOnly(host), "[]"))
	if h == "" {
		return false
	}
	if p.names["*"] || p.names[h] {
		return true
	}
	ip := net.ParseIP(h)
	switch {
	case h == "localhost" || ip != nil && ip.IsLoopback():
		return p.loopback || p.wildcard
	case p.wildcard:
		return ip != nil || !strings.Contains(h, ".")
	case p.ip != nil:
		return ip != nil && ip.Equal(p.ip)
	}
	return false
}

// checkEdge is the Host check of every request and the Origin check of
// the ones that change state; nil when the request may go on.
func (s *server) checkEdge(r *http.Request) *problemError {
	if !s.hosts.allows(r.Host) {
		return problem(http.StatusMisdirectedRequest, api.ProblemMisdirected, "Misdirected request",
			"this gateway does not serve Host %q: reach it by its listen address or a name given with --allowed-hosts", r.Host)
	}
	if changesState(r) && r.Header.Get("Origin") != "" {
		if err := sameOrigin(r); err != nil {
			return problem(http.StatusForbidden, api.ProblemForbidden, "Forbidden", "%v", err)
		}
	}
	return nil
}

// changesState: every method but GET, HEAD and OPTIONS.
func changesState(r *http.Request) bool {
	switch r.Method {
	case http.MethodGet, http.MethodHead, http.MethodOptions:
		return false
	}
	return true
}

// sameOrigin checks that a browser's request comes from a page of this
// gateway: its Origin header names the host it was sent to (which
// checkEdge checked is the gateway's), and Sec-Fetch-Site, when sent, is
// same-origin.
func sameOrigin(r *http.Request) error {
	o := r.Header.Get("Origin")
	if o == "" {
		return errors.New("a request authenticated by the session cookie that changes state must carry an Origin header (browsers send one); scripts send a bearer token instead")
	}
	u, err := url.Parse(o)
	if err != nil || u.Host == "" || !strings.EqualFold(u.Host, r.Host) {
		return errors.New("cross-origin request refused: Origin " + o + " is not this gateway (" + r.Host + ")")
	}
	if site := r.Header.Get("Sec-Fetch-Site"); site != "" && site != "same-origin" {
		return errors.New("cross-origin request refused: Sec-Fetch-Site is " + site)
	}
	return nil
}
