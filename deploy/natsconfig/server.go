package natsconfig

import (
	"fmt"
	"net"
	"path"
	"strconv"
	"strings"

	"github.com/nats-io/nkeys"
)

// Files of a node's directory (nats/<server>/ of a render).
const (
	ServerConfigFile = "nats.conf"
	ServerCertFile   = "server.pem"
	ServerKeyFile    = "server-key.pem"
	RouteCertFile    = "route.pem"
	RouteKeyFile     = "route-key.pem"
	CAFile           = "ca.pem"       // verifies clients and the client port
	RouteCAFile      = "route-ca.pem" // verifies routes only
)

// ServerConfig is the nats-server configuration of server name: its
// JetStream store, the cluster's routes, TLS (files in dir, as the server
// sees them) and the account with every user of d, each authenticated by
// its public nkey (pubKeys[user]). With d.NodeAgents, every other login
// goes to the bootstrapper's auth callout, whose answers calloutIssuer
// (a public account nkey) signs; the static users are its auth_users and
// never wait for it. It is a pure function of its inputs.
func (d Deployment) ServerConfig(name, dir string, pubKeys map[string]string, calloutIssuer string) (string, error) {
	var s *Server
	for i := range d.Servers {
		if d.Servers[i].Name == name {
			s = &d.Servers[i]
		}
	}
	if s == nil {
		return "", fmt.Errorf("natsconfig: no server %q in the deployment", name)
	}
	var w confWriter
	w.comment("capn NATS node %s of cluster %s, rendered by capn-nats-config: re-render, do not edit.", s.Name, d.Cluster)
	w.kv("server_name", quote(s.Name))
	w.kv("listen", quote(hostPort(s.Listen, s.ClientPort)))
	if s.MonitorPort > 0 {
		// The monitoring endpoint has no authentication (it lists
		// connections, subjects and accounts): loopback only, whatever
		// the client and route ports bind.
		w.comment("Monitoring has no authentication: loopback only.")
		w.kv("http", quote(hostPort("127.0.0.1", s.MonitorPort)))
	}
	w.open("jetstream")
	w.kv("store_dir", quote(s.StoreDir))
	if d.MaxMemoryStore > 0 {
		w.kv("max_memory_store", strconv.FormatInt(d.MaxMemoryStore, 10))
	}
	if d.MaxFileStore > 0 {
		w.kv("max_file_store", strconv.FormatInt(d.MaxFileStore, 10))
	}
	w.close()
	if d.TLS {
		w.comment("Clients need a certificate from the capn CA as well as their nkey (machines: their login).")
		w.tls(path.Join(dir, ServerCertFile), path.Join(dir, ServerKeyFile), path.Join(dir, CAFile))
	}
	if len(d.Servers) > 1 {
		w.open("cluster")
		w.kv("name", quote(d.Cluster))
		w.kv("listen", quote(hostPort(s.Listen, s.RoutePort)))
		routes := make([]string, len(d.Servers))
		for i, o := range d.Servers {
			routes[i] = quote("nats-route://" + hostPort(o.Host, o.RoutePort))
		}
		w.list("routes", routes)
		if d.TLS {
			w.comment("Routes trust only the route CA: a client certificate cannot open a route.")
			w.tls(path.Join(dir, RouteCertFile), path.Join(dir, RouteKeyFile), path.Join(dir, RouteCAFile))
		}
		w.close()
	}

	if d.NodeAgents {
		if !nkeys.IsValidPublicAccountKey(calloutIssuer) {
			return "", fmt.Errorf("natsconfig: the auth callout issuer %q is not a public account nkey", calloutIssuer)
		}
		// auth_users skip the callout, and a static user missing here
		// would be sent to it even with the right nkey: every user is.
		var authUsers []string
		for _, u := range d.Users() {
			key, ok := pubKeys[u.Name]
			if !ok {
				return "", fmt.Errorf("natsconfig: no public nkey for user %s", u.Name)
			}
			authUsers = append(authUsers, quote(key))
		}
		w.comment("Machines have no user here: every login that is not one of the users of %s", d.Account)
		w.comment("(the auth_users) is asked of the bootstrapper (%s), which logs", SubjectAuthCallout)
		w.comment("machine.<cluster>.<machine> in with that machine's own secret and subjects.")
		w.open("authorization")
		w.open("auth_callout")
		w.kv("issuer", quote(calloutIssuer))
		w.kv("account", quote(d.Account))
		w.list("auth_users", authUsers)
		w.close()
		w.close()
	}

	w.open("accounts")
	w.open(d.Account)
	w.kv("jetstream", "enabled")
	w.openList("users")
	for _, u := range d.Users() {
		key, ok := pubKeys[u.Name]
		if !ok {
			return "", fmt.Errorf("natsconfig: no public nkey for user %s", u.Name)
		}
		w.comment("%s: %s", u.Name, u.Role)
		w.open("")
		w.kv("nkey", quote(key))
		w.open("permissions")
		w.open("publish")
		if len(u.Perms.PublishAllow) > 0 {
			w.list("allow", quoteAll(u.Perms.PublishAllow))
		} else {
			w.list("deny", []string{quote(">")})
		}
		if len(u.Perms.PublishDeny) > 0 {
			w.list("deny", quoteAll(u.Perms.PublishDeny))
		}
		w.close()
		w.open("subscribe")
		w.list("allow", quoteAll(u.Perms.SubscribeAllow))
		w.close()
		if u.Perms.Responses {
			w.kv("allow_responses", "true")
		}
		w.close()
		w.close()
	}
	w.closeList()
	w.close()
	w.close()
	return w.String(), nil
}

func hostPort(host string, port int) string { return net.JoinHostPort(host, strconv.Itoa(port)) }

// quote writes s as a quoted string of the configuration language, where
// nothing inside double quotes is expanded ($ starts a variable only in
// bare words). Subjects, names and paths never hold '"' or '\'.
func quote(s string) string { return strconv.Quote(s) }

func quoteAll(s []string) []string {
	out := make([]string, len(s))
	for i, v := range s {
		out[i] = quote(v)
	}
	return out
}

// confWriter writes nats-server's configuration language, indented.
type confWriter struct {
	b     strings.Builder
	depth int
}

func (w *confWriter) line(s string) {
	w.b.WriteString(strings.Repeat("  ", w.depth))
	w.b.WriteString(s)
	w.b.WriteByte('\n')
}

func (w *confWriter) comment(format string, a ...any) { w.line("# " + fmt.Sprintf(format, a...)) }
func (w *confWriter) kv(k, v string)                  { w.line(k + ": " + v) }

func (w *confWriter) open(name string) {
	if name == "" {
		w.line("{")
	} else {
		w.line(name + " {")
	}
	w.depth++
}

func (w *confWriter) close() { w.depth--; w.line("}") }

func (w *confWriter) openList(name string) { w.line(name + ": ["); w.depth++ }
func (w *confWriter) closeList()           { w.depth--; w.line("]") }

func (w *confWriter) list(name string, items []string) {
	w.openList(name)
	for _, it := range items {
		w.line(it)
	}
	w.closeList()
}

func (w *confWriter) tls(cert, key, ca string) {
	w.open("tls")
	w.kv("cert_file", quote(cert))
	w.kv("key_file", quote(key))
	w.kv("ca_file", quote(ca))
	w.kv("verify", "true")
	w.kv("timeout", "5")
	w.close()
}

func (w *confWriter) String() string { return w.b.String() }
