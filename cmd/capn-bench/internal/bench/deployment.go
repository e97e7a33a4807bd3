package bench

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"runtime/pprof"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/rs/zerolog"

	"github.com/capn-dev/capn/deploy/natsconfig"
	"github.com/capn-dev/capn/providers/sim"
	"github.com/capn-dev/capn/secrets/seal"
	"github.com/capn-dev/capn/services/daemon"
)

// deployment is capn as the rendered deployment runs it, in the
// benchmark's process: nats-server nodes started from the configuration
// files capn-nats-config renders for docker-compose.yaml
// (natsconfig.Compose: TLS on client and route ports, one nkey user per
// component with its least permissions, the auth callout), moved to
// 127.0.0.1; streams and buckets provisioned by the init user with one
// replica per node; and each service connected over TCP and TLS as its
// own user to a node of its own (round robin), with --skip-provision.
// The benchmark itself connects as the gateway (it creates the clusters
// in desired and watches observed, as the gateway may).
type deployment struct {
	Nodes   int
	dir     string
	servers []*server.Server
	stop    func()
	fleetEnv

	mu         sync.Mutex
	violations []string // permission violations any client was told of
}

// Ports are chosen in [deployPortLow, deployPortHigh): below Linux's
// ephemeral range (32768-60999), so that no outgoing connection holds one
// (natsconfigtest's choice).
const (
	deployPortLow  = 20000
	deployPortHigh = 32000
)

// composeOn is natsconfig.Compose with nodes servers and as many
// replicas, on 127.0.0.1 ports from ports and with stores under dir.
func composeOn(nodes int, ports []int, dir string) (natsconfig.Deployment, error) {
	d := natsconfig.Compose()
	if nodes < 1 || nodes > len(d.Servers) {
		return d, fmt.Errorf("--replicated-nodes: %d: the rendered deployment has 1 to %d nodes", nodes, len(d.Servers))
	}
	if len(ports) != 2*nodes {
		return d, fmt.Errorf("%d ports for %d nodes, want %d", len(ports), nodes, 2*nodes)
	}
	d.Servers, d.Replicas = d.Servers[:nodes], nodes
	// The store bound of a container (4 GiB a node) would fit 1,000
	// clusters; the benchmark's nodes share this machine's disk.
	d.MaxFileStore = 0
	p := make([][3]int, nodes)
	stores := make([]string, nodes)
	for i := range nodes {
		p[i] = [3]int{ports[2*i], ports[2*i+1], 0}
		stores[i] = filepath.Join(dir, "store", d.Servers[i].Name)
	}
	return d.Loopback(p, stores), d.Validate()
}

// startDeployment renders and starts a deployment of nodes nodes (1 or 3)
// with R<nodes> streams and buckets and the fleet create's services.
func startDeployment(ctx context.Context, nodes int) (_ *deployment, err error) {
	dir, err := os.MkdirTemp("", "capn-bench-deploy-")
	if err != nil {
		return nil, err
	}
	dp := &deployment{Nodes: nodes, dir: dir}
	var stops []func()
	dp.stop = func() {
		for i := len(stops) - 1; i >= 0; i-- {
			stops[i]()
		}
		_ = os.RemoveAll(dir)
	}
	defer func() {
		if err != nil {
			dp.stop()
		}
	}()
	ports, err := freeDeployPorts(2 * nodes)
	if err != nil {
		return nil, err
	}
	d, err := composeOn(nodes, ports, dir)
	if err != nil {
		return nil, err
	}
	r, err := natsconfig.Render(d, filepath.Join(dir, "deploy"))
	if err != nil {
		return nil, err
	}
	dp.servers = make([]*server.Server, nodes)
	errs := make([]error, nodes)
	var wg sync.WaitGroup
	for i := range nodes {
		wg.Add(1)
		go func() {
			defer wg.Done()
			dp.servers[i], errs[i] = startNode(r.ServerConfig(d.Servers[i].Name))
		}()
	}
	wg.Wait()
	stops = append(stops, func() {
		for _, s := range dp.servers {
			if s != nil {
				s.Shutdown()
				s.WaitForShutdown()
			}
		}
	})
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	if err := waitMetaLeader(ctx, dp.servers, time.Minute); err != nil {
		return nil, err
	}
	quiet := zerolog.New(io.Discard)
	urls := d.ClientURLs()
	natsCfg := func(user string, node int) daemon.NATSConfig {
		l := r.Layout
		return daemon.NATSConfig{
			URL:          rotate(urls, node),
			NKeySeedFile: l.UserFile(user, natsconfig.UserSeedFile),
			InboxPrefix:  natsconfig.InboxPrefix(user),
			TLSCert:      l.UserFile(user, natsconfig.UserCertFile),
			TLSKey:       l.UserFile(user, natsconfig.UserKeyFile),
			TLSCA:        l.UserFile(user, natsconfig.UserCAFile),
		}
	}
	connect := func(user string, node int) (*nats.Conn, error) {
		cctx, cancel := context.WithTimeout(ctx, 30*time.Second)
		defer cancel()
		return daemon.Connect(cctx, natsCfg(user, node), user, quiet, nats.DontRandomize(),
			nats.ErrorHandler(func(_ *nats.Conn, _ *nats.Subscription, err error) {
				if err != nil && strings.Contains(strings.ToLower(err.Error()), "permissions violation") {
					dp.mu.Lock()
					dp.violations = append(dp.violations, user+": "+err.Error())
					dp.mu.Unlock()
				}
			}))
	}
	initNC, err := connect(natsconfig.Init, 0)
	if err != nil {
		return nil, err
	}
	initJS, err := jetstream.New(initNC)
	if err == nil {
		pctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
		err = natsconfig.Provision(pctx, initJS, d.Replicas)
		cancel()
	}
	initNC.Close()
	if err != nil {
		return nil, fmt.Errorf("provision R%d as %s: %w", d.Replicas, natsconfig.Init, err)
	}

	key, _ := seal.GenerateKey()
	ring, _ := seal.NewKeyring(key)
	svcs := services(ring, sim.Options{})
	sctx, cancel := context.WithCancel(ctx)
	ops := daemon.NewOpsHandler(prometheus.NewRegistry())
	var swg sync.WaitGroup
	stops = append(stops, func() { cancel(); swg.Wait() })
	for i, svc := range svcs {
		user := svc.Name() // each service's user has its name (natsconfig.Users)
		swg.Add(1)
		go func() {
			defer swg.Done()
			// The connection's goroutines carry the service's label, as
			// daemon.Run's own would (CPU by service).
			pprof.SetGoroutineLabels(pprof.WithLabels(sctx, pprof.Labels(daemon.ProfileLabel, user)))
			nc, err := connect(user, i%nodes)
			if err != nil {
				fmt.Fprintf(os.Stderr, "%s: %v\n", user, err)
				return
			}
			defer nc.Close()
			cfg := daemon.Config{Name: user, LogLevel: "error", SkipProvision: true, Replicas: d.Replicas}
			if err := daemon.Run(sctx, cfg, svc, daemon.WithConn(nc), daemon.WithoutHTTP(), daemon.WithOps(ops), daemon.WithLogger(quiet)); err != nil {
				fmt.Fprintf(os.Stderr, "%s: %v\n", user, err)
			}
		}()
	}
	if err := waitReady(ctx, time.Minute, len(svcs), func() *http.Response {
		rec := httptest.NewRecorder()
		ops.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/readyz", nil))
		return rec.Result()
	}); err != nil {
		return nil, err
	}
	nc, err := connect(natsconfig.Gateway, nodes-1)
	if err != nil {
		return nil, err
	}
	stops = append(stops, nc.Close)
	js, err := jetstream.New(nc)
	if err != nil {
		return nil, err
	}
	dp.fleetEnv = fleetEnv{nc: nc, js: js, counts: func(context.Context) (map[string]uint64, error) { return dp.streamMessages() }}
	return dp, nil
}

func (dp *deployment) Close() { dp.stop() }

// Violations are the permission violations the clients were told of so
// far: none, in a deployment whose permissions fit what capn does.
func (dp *deployment) Violations() []string {
	dp.mu.Lock()
	defer dp.mu.Unlock()
	return slices.Clone(dp.violations)
}

// streamMessages is the last sequence of every stream of the account,
// the highest any node has (a follower may trail its leader).
func (dp *deployment) streamMessages() (map[string]uint64, error) {
	out := map[string]uint64{}
	for i, s := range dp.servers {
		jsz, err := s.Jsz(&server.JSzOptions{Accounts: true, Streams: true})
		if err != nil {
			return nil, fmt.Errorf("node %d: %w", i+1, err)
		}
		for _, a := range jsz.AccountDetails {
			for _, st := range a.Streams {
				out[st.Name] = max(out[st.Name], st.State.LastSeq)
			}
		}
	}
	if len(out) == 0 {
		return nil, errors.New("no stream on any node")
	}
	return out, nil
}

// startNode starts a node from its rendered configuration file.
func startNode(conf string) (*server.Server, error) {
	opts, err := server.ProcessConfigFile(conf)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", conf, err)
	}
	opts.NoSigs = true
	s, err := server.NewServer(opts)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", conf, err)
	}
	go s.Start()
	if !s.ReadyForConnections(30 * time.Second) {
		s.Shutdown()
		return nil, fmt.Errorf("%s: node not ready for connections within 30s", opts.ServerName)
	}
	return s, nil
}

// waitMetaLeader waits until one node leads JetStream's meta group and
// every node is current with it.
func waitMetaLeader(ctx context.Context, servers []*server.Server, timeout time.Duration) error {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	err := poll(ctx, 50*time.Millisecond, func() (bool, error) {
		leader := false
		for _, s := range servers {
			if !s.JetStreamIsCurrent() {
				return false, nil
			}
			leader = leader || s.JetStreamIsLeader()
		}
		return leader, nil
	})
	if err != nil {
		return fmt.Errorf("no JetStream meta leader all %d nodes are current with: %w", len(servers), err)
	}
	return nil
}

// rotate is the comma-separated list urls starting at its i-th entry:
// a client given it connects there first, failing over to the rest.
func rotate(urls string, i int) string {
	list := strings.Split(urls, ",")
	i %= len(list)
	return strings.Join(append(list[i:], list[:i]...), ",")
}

// freeDeployPorts finds n distinct ports in [deployPortLow,
// deployPortHigh) that 127.0.0.1 can listen on now.
func freeDeployPorts(n int) ([]int, error) {
	seen := map[int]bool{}
	var out []int
	for tries := 0; len(out) < n; tries++ {
		if tries > 1000 {
			return nil, fmt.Errorf("no %d free ports in %d..%d on 127.0.0.1", n, deployPortLow, deployPortHigh)
		}
		p := deployPortLow + rand.IntN(deployPortHigh-deployPortLow)
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
	return out, nil
}
