// Package natsconfigtest runs a rendered capn NATS deployment in the test's
// process: every node a real nats-server started from the configuration
// file natsconfig rendered (accounts, users, permissions, TLS, routes),
// listening on 127.0.0.1 ports outside the ephemeral range, and clients
// that connect as a deployment's users and record every permission
// violation the server reports to them.
package natsconfigtest

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/rs/zerolog"

	"github.com/capn-dev/capn/deploy/natsconfig"
	"github.com/capn-dev/capn/internal/testkit"
	"github.com/capn-dev/capn/services/daemon"
)

// Ports are chosen in [portLow, portHigh): below Linux's ephemeral range
// (32768-60999), so that no outgoing connection can hold one.
const (
	portLow  = 20000
	portHigh = 32000
)

// Cluster is a rendered deployment running in the test's process.
type Cluster struct {
	t        testing.TB
	D        natsconfig.Deployment
	Rendered *natsconfig.Rendered

	mu      sync.Mutex
	servers []*server.Server
	logs    []*serverLog
}

// Start renders d (moved to 127.0.0.1, with free ports and store
// directories in the test's temporary directory) and starts every node; it
// returns once the nodes are routed and JetStream has a meta leader.
// Everything stops at the test's end.
func Start(t testing.TB, d natsconfig.Deployment) *Cluster {
	t.Helper()
	dir := t.TempDir()
	n := len(d.Servers)
	ports := make([][3]int, n)
	stores := make([]string, n)
	free := freePorts(t, 2*n)
	for i := range n {
		ports[i] = [3]int{free[2*i], free[2*i+1], 0}
		stores[i] = filepath.Join(dir, "store", d.Servers[i].Name)
	}
	d = d.Loopback(ports, stores)
	r, err := natsconfig.Render(d, filepath.Join(dir, "deploy"))
	if err != nil {
		t.Fatal(err)
	}
	c := &Cluster{t: t, D: d, Rendered: r, servers: make([]*server.Server, n), logs: make([]*serverLog, n)}
	t.Cleanup(c.stopAll)
	var wg sync.WaitGroup
	errs := make([]error, n)
	for i := range n {
		wg.Add(1)
		go func() { defer wg.Done(); errs[i] = c.start(i) }()
	}
	wg.Wait()
	for _, err := range errs {
		if err != nil {
			t.Fatal(err)
		}
	}
	c.WaitMetaLeader(30 * time.Second)
	return c
}

// start starts node i from its rendered configuration file.
func (c *Cluster) start(i int) error {
	name := c.D.Servers[i].Name
	opts, err := server.ProcessConfigFile(c.Rendered.ServerConfig(name))
	if err != nil {
		return fmt.Errorf("%s: config: %w", name, err)
	}
	opts.NoSigs = true
	s, err := server.NewServer(opts)
	if err != nil {
		return fmt.Errorf("%s: %w", name, err)
	}
	log := &serverLog{name: name, t: c.t, verbose: os.Getenv("CAPN_TEST_SERVER_LOG") != ""}
	s.SetLoggerV2(log, false, false, false)
	go s.Start()
	if !s.ReadyForConnections(30 * time.Second) {
		s.Shutdown()
		return fmt.Errorf("%s: not ready for connections within 30s", name)
	}
	c.mu.Lock()
	c.servers[i], c.logs[i] = s, log
	c.mu.Unlock()
	return nil
}

// Server is node i, nil while it is stopped.
func (c *Cluster) Server(i int) *server.Server {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.servers[i]
}

// Stop shuts node i down (like a crash of its process: clients see the
// connection drop; its files stay).
func (c *Cluster) Stop(i int) {
	c.mu.Lock()
	s := c.servers[i]
	c.servers[i] = nil
	c.mu.Unlock()
	if s != nil {
		s.Shutdown()
		s.WaitForShutdown()
	}
}

// Restart starts node i again on its files.
func (c *Cluster) Restart(i int) {
	c.t.Helper()
	if err := c.start(i); err != nil {
		c.t.Fatal(err)
	}
}

func (c *Cluster) stopAll() {
	for i := range c.servers {
		c.Stop(i)
	}
}

// MetaLeader is the index of the JetStream meta leader, or -1.
func (c *Cluster) MetaLeader() int {
	for i := range c.servers {
		if s := c.Server(i); s != nil && s.JetStreamIsLeader() {
			return i
		}
	}
	return -1
}

// WaitMetaLeader waits until the running nodes have a JetStream meta leader
// and every running node is current with it.
func (c *Cluster) WaitMetaLeader(timeout time.Duration) {
	c.t.Helper()
	err := testkit.Poll(timeout, 50*time.Millisecond, func() error {
		if c.MetaLeader() < 0 {
			return errors.New("no JetStream meta leader")
		}
		for i := range c.servers {
			if s := c.Server(i); s != nil && !s.JetStreamIsCurrent() {
				return fmt.Errorf("node %d is not current with the meta leader", i)
			}
		}
		return nil
	})
	if err != nil {
		c.t.Fatalf("after %s: %v", timeout, err)
	}
}

// URLs are the client URLs of every node, node first first (the rest in
// order): a client given them connects to node first and fails over to
// the others.
func (c *Cluster) URLs(first int) string {
	urls := strings.Split(c.D.ClientURLs(), ",")
	out := []string{urls[first]}
	for i, u := range urls {
		if i != first {
			out = append(out, u)
		}
	}
	return strings.Join(out, ",")
}

// NATSConfig is the runtime configuration of user, preferring node first:
// what its rendered env file sets (nkey, TLS files, inbox prefix).
func (c *Cluster) NATSConfig(user string, first int) daemon.NATSConfig {
	l := c.Rendered.Layout
	n := daemon.NATSConfig{
		URL:           c.URLs(first),
		NKeySeedFile:  l.UserFile(user, natsconfig.UserSeedFile),
		ReconnectWait: 500 * time.Millisecond,
		InboxPrefix:   natsconfig.InboxPrefix(user),
	}
	if c.D.TLS {
		n.TLSCert = l.UserFile(user, natsconfig.UserCertFile)
		n.TLSKey = l.UserFile(user, natsconfig.UserKeyFile)
		n.TLSCA = l.UserFile(user, natsconfig.UserCAFile)
	}
	return n
}

// Options are the nats.go options a client of user needs beyond
// daemon.Connect's: node first first, and a handler that records
// permission violations in v.
func (c *Cluster) Options(user string, v *Violations) []nats.Option {
	return []nats.Option{
		nats.DontRandomize(),
		nats.ErrorHandler(func(_ *nats.Conn, _ *nats.Subscription, err error) { v.add(err) }),
	}
}

// Connect connects as user to node first (failing over to the others) the
// way a capn program does (daemon.Connect) with the user's inbox prefix.
// The connection closes at the test's end.
func (c *Cluster) Connect(user string, first int) (*nats.Conn, jetstream.JetStream, *Violations) {
	c.t.Helper()
	v := &Violations{}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	nc, err := daemon.Connect(ctx, c.NATSConfig(user, first), user, quietLogger(), c.Options(user, v)...)
	if err != nil {
		c.t.Fatalf("connect as %s: %v", user, err)
	}
	c.t.Cleanup(nc.Close)
	js, err := jetstream.New(nc)
	if err != nil {
		c.t.Fatal(err)
	}
	return nc, js, v
}

// ServerViolations are the permission violations the nodes logged so far
// (each "<user's client> - Permissions Violation for ...").
func (c *Cluster) ServerViolations() []string {
	c.mu.Lock()
	defer c.mu.Unlock()
	var out []string
	for _, l := range c.logs {
		if l != nil {
			out = append(out, l.violations()...)
		}
	}
	return out
}

// Violations records the permission violations one client was told of.
type Violations struct {
	mu   sync.Mutex
	errs []string
}

func (v *Violations) add(err error) {
	if err == nil || !strings.Contains(strings.ToLower(err.Error()), "permissions violation") {
		return
	}
	v.mu.Lock()
	v.errs = append(v.errs, err.Error())
	v.mu.Unlock()
}

// All are the violations so far.
func (v *Violations) All() []string {
	v.mu.Lock()
	defer v.mu.Unlock()
	return append([]string(nil), v.errs...)
}

// Wait waits up to timeout for a violation of subject and reports whether
// one came. subject may hold '*' tokens, each matching any one token of the
// violation's subject (a consumer's random name, say).
func (v *Violations) Wait(subject string, timeout time.Duration) bool {
	return testkit.Poll(timeout, 10*time.Millisecond, func() error {
		for _, e := range v.All() {
			if m := subjectRe.FindStringSubmatch(e); m != nil && matches(subject, m[1]) {
				return nil
			}
		}
		return errors.New("no violation yet")
	}) == nil
}

// subjectRe finds the subject a server's violation names.
var subjectRe = regexp.MustCompile(`(?:Publish|Subscription) (?:to|with Reply of) "([^"]+)"`)

// matches tells whether subject has pattern's tokens, '*' matching any.
func matches(pattern, subject string) bool {
	p, s := strings.Split(pattern, "."), strings.Split(subject, ".")
	if len(p) != len(s) {
		return false
	}
	for i := range p {
		if p[i] != "*" && p[i] != s[i] {
			return false
		}
	}
	return true
}

// serverLog keeps a node's permission violations; with verbose (set
// CAPN_TEST_SERVER_LOG=1) it also logs the node's notices, warnings and
// errors to the test.
type serverLog struct {
	name    string
	t       testing.TB
	verbose bool
	mu      sync.Mutex
	viol    []string
}

var violationRe = regexp.MustCompile(`Permissions Violation for [^\n]*`)

func (l *serverLog) record(level, format string, v ...any) {
	s := fmt.Sprintf(format, v...)
	if l.verbose {
		l.t.Logf("%s %s [%s] %s", time.Now().Format("15:04:05.000"), l.name, level, s)
	}
	if violationRe.MatchString(s) {
		l.mu.Lock()
		l.viol = append(l.viol, l.name+": "+s)
		l.mu.Unlock()
	}
}

func (l *serverLog) violations() []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]string(nil), l.viol...)
}

func (l *serverLog) Noticef(format string, v ...any) {
	if l.verbose {
		l.record("INF", format, v...)
	}
}
func (l *serverLog) Warnf(format string, v ...any)  { l.record("WRN", format, v...) }
func (l *serverLog) Fatalf(format string, v ...any) { l.record("FTL", format, v...) }
func (l *serverLog) Errorf(format string, v ...any) { l.record("ERR", format, v...) }
func (l *serverLog) Debugf(format string, v ...any) {}
func (l *serverLog) Tracef(format string, v ...any) {}

// freePorts finds n distinct ports in [portLow, portHigh) that 127.0.0.1
// can listen on now.
func freePorts(t testing.TB, n int) []int {
	t.Helper()
	seen := map[int]bool{}
	var out []int
	for tries := 0; len(out) < n; tries++ {
		if tries > 1000 {
			t.Fatalf("no %d free ports in %d..%d", n, portLow, portHigh)
		}
		p := portLow + rand.IntN(portHigh-portLow)
		if seen[p] {
			continue
		}
		seen[p] = true
		ln, err := net.Listen("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(p)))
		if err != nil {
			continue
		}
		ln.Close()
		out = append(out, p)
	}
	return out
}

// FreePort is one free port in [20000, 32000) on 127.0.0.1.
func FreePort(t testing.TB) int { return freePorts(t, 1)[0] }

func quietLogger() zerolog.Logger { return zerolog.Nop() }

// Provision creates capn's streams and buckets (natsconfig.Topology, with
// the deployment's replicas) as the init user, as the init job does.
func (c *Cluster) Provision() {
	c.t.Helper()
	_, js, v := c.Connect(natsconfig.Init, 0)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	if err := natsconfig.Provision(ctx, js, c.D.Replicas); err != nil {
		c.t.Fatalf("provision as %s: %v (violations: %v)", natsconfig.Init, err, v.All())
	}
}
