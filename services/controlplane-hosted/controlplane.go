package controlplanehosted

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/rs/zerolog"

	"github.com/capn-dev/capn/internal/supervise"
	"github.com/capn-dev/capn/schemas/manifest"
	"github.com/capn-dev/capn/secrets/pki"
)

// loopback is where every hosted process listens and the endpoint is:
// reachable from the management host (workers of process machines share
// its loopback network).
const loopback = "127.0.0.1"

// state is a hosted control plane's <data-dir>/<cluster>/state.json: what
// a restart of the service needs to start it again as it was (the same
// ports, so the same endpoint; the same etcd members on their data).
type state struct {
	Cluster string `json:"cluster"`
	// UID is the desired cluster's metadata.uid: a cluster of the same
	// name created after an Orphan delete is another one.
	UID string `json:"uid,omitempty"`
	// Generation is the desired cluster revision the control plane
	// answers.
	Generation int64 `json:"generation"`
	// Version is the Kubernetes version wanted; each member's Version is
	// the one its API server runs (they differ during an upgrade).
	Version     string   `json:"version"`
	Members     []member `json:"members"`
	Endpoint    int      `json:"endpoint"`
	KCM         int      `json:"controllerManager"`
	Scheduler   int      `json:"scheduler"`
	ServiceCIDR string   `json:"serviceCIDR"`
	PodCIDR     string   `json:"podCIDR"`
	DNSDomain   string   `json:"dnsDomain"`
	// Replicas is the count of etcd members and API servers wanted (1 or
	// 3); Members differ from it while a scale is under way (scale.go).
	// 0 (a state.json written before scaling existed) is len(Members).
	Replicas int `json:"replicas,omitempty"`
	// Progress is the last step of the scale under way (the record's
	// Scaling condition), kept so that a restart says where it resumes.
	Progress string `json:"progress,omitempty"`
}

// Etcd phases of a member during a scale ("" is a voting member).
const (
	// etcdAdding: the member is being added (member add as a learner,
	// started with initial-cluster-state=existing, promoted, healthy).
	etcdAdding = "adding"
	// etcdRemoving: the member is being removed (leadership moved away,
	// member remove, process halted, data dir deleted).
	etcdRemoving = "removing"
)

// member is one etcd member and the API server beside it. Members are
// etcd-0 … etcd-<n-1>: a scale adds at the end and removes from the end,
// so etcd-0 stays.
type member struct {
	EtcdClient int    `json:"etcdClient"`
	EtcdPeer   int    `json:"etcdPeer"`
	APIServer  int    `json:"apiServer"`
	Version    string `json:"version"`
	// Etcd is "" (a voting member), etcdAdding or etcdRemoving.
	Etcd string `json:"etcd,omitempty"`
	// Joined: the member joined a running cluster (member add), so it
	// starts with initial-cluster-state=existing.
	Joined bool `json:"joined,omitempty"`
	// NoAPIServer: no API server runs beside this member (a scale starts
	// them after the etcd members and stops them before).
	NoAPIServer bool `json:"noAPIServer,omitempty"`
	// EtcdServers is the --etcd-servers its API server was started with.
	EtcdServers string `json:"etcdServers,omitempty"`
}

// lowestVersion is the version of the oldest API server (the record's
// version: the workers' ceiling).
func (st *state) lowestVersion() string {
	low := st.Version
	for _, m := range st.Members {
		if m.Version != "" && manifest.CompareVersions(m.Version, low) < 0 {
			low = m.Version
		}
	}
	return low
}

// layout of a hosted control plane's data dir.
type layout struct{ dir string }

func (l layout) pki() string                { return filepath.Join(l.dir, "pki") }
func (l layout) pkiFile(name string) string { return filepath.Join(l.pki(), filepath.FromSlash(name)) }
func (l layout) kubeconfig(name string) string {
	return filepath.Join(l.dir, "kubeconfig", name+".conf")
}
func (l layout) etcdData(i int) string { return filepath.Join(l.dir, "etcd-"+strconv.Itoa(i)) }
func (l layout) stateFile() string     { return filepath.Join(l.dir, "state.json") }
func (l layout) logs() string          { return filepath.Join(l.dir, "logs") }
func (l layout) certDir() string       { return filepath.Join(l.dir, "run") }
func (l layout) home() string          { return filepath.Join(l.dir, "home") }
func (l layout) env() []string {
	return []string{"HOME=" + l.home(), "PATH=/usr/local/bin:/usr/bin:/bin"}
}
func url(port int) string              { return "https://" + net.JoinHostPort(loopback, strconv.Itoa(port)) }
func etcdName(i int) string            { return "etcd-" + strconv.Itoa(i) }
func apiName(i int) string             { return "kube-apiserver-" + strconv.Itoa(i) }
func (l layout) exists() bool          { _, err := os.Stat(l.stateFile()); return err == nil }
func (l layout) clean() error          { return os.RemoveAll(l.dir) }
func (st *state) endpointAddr() string { return net.JoinHostPort(loopback, strconv.Itoa(st.Endpoint)) }
func (st *state) apiAddr(i int) string {
	return net.JoinHostPort(loopback, strconv.Itoa(st.Members[i].APIServer))
}
func (l layout) save(st *state) error {
	b, _ := json.MarshalIndent(st, "", "  ")
	return writeFile(l.stateFile(), b, 0o600)
}
func (l layout) load() (*state, error) { return loadState(l.stateFile()) }

// replicas is the count wanted (state.Replicas, else len(Members)).
func (st *state) replicas() int32 {
	if st.Replicas > 0 {
		return int32(st.Replicas)
	}
	return int32(len(st.Members))
}

// apiEtcdServers are the etcd members the API servers use: the voting
// members among the first Replicas (those a scale keeps), comma-separated.
func (st *state) apiEtcdServers() string {
	var out []string
	for i, m := range st.Members {
		if i < int(st.replicas()) && m.Etcd == "" {
			out = append(out, url(m.EtcdClient))
		}
	}
	if len(out) == 0 {
		out = append(out, url(st.Members[0].EtcdClient))
	}
	return strings.Join(out, ",")
}

func loadState(path string) (*state, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	var st state
	if err := json.Unmarshal(b, &st); err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	if len(st.Members) == 0 || st.Endpoint == 0 {
		return nil, fmt.Errorf("%s: no members or no endpoint", path)
	}
	return &st, nil
}

// freePorts are n loopback ports free now (the kernel's choice; kept in
// state.json from then on).
func freePorts(n int) ([]int, error) {
	var lns []net.Listener
	defer func() {
		for _, ln := range lns {
			ln.Close()
		}
	}()
	out := make([]int, n)
	for i := range out {
		ln, err := net.Listen("tcp", net.JoinHostPort(loopback, "0"))
		if err != nil {
			return nil, err
		}
		lns = append(lns, ln)
		out[i] = ln.Addr().(*net.TCPAddr).Port
	}
	return out, nil
}

// controlPlane is one hosted control plane while the service runs it.
type controlPlane struct {
	l   layout
	log zerolog.Logger
	sup *supervise.Supervisor

	mu     sync.Mutex
	st     *state
	bins   map[string]string // version → bin dir
	client *http.Client
	// ready: the API servers (by port) that answered /readyz last.
	ready  map[int]bool
	next   atomic.Uint32 // the proxy's round robin
	now    func() time.Time
	proxy  *proxy
	cancel context.CancelFunc
	done   chan struct{}
	// changed wakes the record writer.
	changed chan struct{}
}

// processes are the control plane's children for bin (the directory of
// its version): every etcd member, every API server, the
// controller-manager and the scheduler, with kubeadm's static-pod flags
// (as cmd/capn-node/kube runs them on a machine) bound to the loopback
// address.
func (c *controlPlane) etcd(i int, bin string) supervise.Process {
	st, l := c.st, c.l
	m := st.Members[i]
	// A member of the first start lists every first member; one a scale
	// added lists the members there when it joined (itself the last), as
	// member add prints them. Both are ignored once its data dir exists.
	var initial []string
	for j, o := range st.Members {
		if m.Joined && j > i {
			break
		}
		initial = append(initial, etcdName(j)+"="+url(o.EtcdPeer))
	}
	clusterState := "new"
	if m.Joined {
		clusterState = "existing"
	}
	return supervise.Process{Name: etcdName(i), Path: filepath.Join(bin, "etcd"), Env: l.env(), Args: []string{
		"--name=" + etcdName(i),
		"--listen-client-urls=" + url(m.EtcdClient),
		"--advertise-client-urls=" + url(m.EtcdClient),
		"--listen-peer-urls=" + url(m.EtcdPeer),
		"--initial-advertise-peer-urls=" + url(m.EtcdPeer),
		"--initial-cluster=" + strings.Join(initial, ","),
		"--initial-cluster-state=" + clusterState,
		"--initial-cluster-token=" + st.Cluster,
		"--data-dir=" + l.etcdData(i),
		"--cert-file=" + l.pkiFile("etcd/server-"+strconv.Itoa(i)+".crt"),
		"--key-file=" + l.pkiFile("etcd/server-"+strconv.Itoa(i)+".key"),
		"--trusted-ca-file=" + l.pkiFile("etcd/ca.crt"),
		"--client-cert-auth=true",
		"--peer-cert-file=" + l.pkiFile("etcd/peer-"+strconv.Itoa(i)+".crt"),
		"--peer-key-file=" + l.pkiFile("etcd/peer-"+strconv.Itoa(i)+".key"),
		"--peer-trusted-ca-file=" + l.pkiFile("etcd/ca.crt"),
		"--peer-client-cert-auth=true",
		"--snapshot-count=10000",
	}}
}

// apiserver is API server i's process on bin; its --etcd-servers are the
// etcd members it should use now (state.apiEtcdServers), remembered in the
// member so that a scale knows whom to restart. c.mu is held.
func (c *controlPlane) apiserver(i int, bin string) supervise.Process {
	st, l := c.st, c.l
	f := l.pkiFile
	etcdServers := st.apiEtcdServers()
	st.Members[i].EtcdServers = etcdServers
	return supervise.Process{Name: apiName(i), Path: filepath.Join(bin, "kube-apiserver"), Env: l.env(), Args: []string{
		"--advertise-address=" + loopback,
		"--bind-address=" + loopback,
		"--secure-port=" + strconv.Itoa(st.Members[i].APIServer),
		"--endpoint-reconciler-type=none",
		"--allow-privileged=true",
		"--authorization-mode=Node,RBAC",
		"--enable-admission-plugins=NodeRestriction",
		"--enable-bootstrap-token-auth=true",
		"--client-ca-file=" + f("ca.crt"),
		"--tls-cert-file=" + f("apiserver.crt"),
		"--tls-private-key-file=" + f("apiserver.key"),
		"--cert-dir=" + l.certDir(),
		"--etcd-servers=" + etcdServers,
		"--etcd-cafile=" + f("etcd/ca.crt"),
		"--etcd-certfile=" + f("apiserver-etcd-client.crt"),
		"--etcd-keyfile=" + f("apiserver-etcd-client.key"),
		"--kubelet-client-certificate=" + f("apiserver-kubelet-client.crt"),
		"--kubelet-client-key=" + f("apiserver-kubelet-client.key"),
		"--kubelet-preferred-address-types=InternalIP,ExternalIP,Hostname",
		"--proxy-client-cert-file=" + f("front-proxy-client.crt"),
		"--proxy-client-key-file=" + f("front-proxy-client.key"),
		"--requestheader-allowed-names=front-proxy-client",
		"--requestheader-client-ca-file=" + f("front-proxy-ca.crt"),
		"--requestheader-extra-headers-prefix=X-Remote-Extra-",
		"--requestheader-group-headers=X-Remote-Group",
		"--requestheader-username-headers=X-Remote-User",
		"--service-account-issuer=https://kubernetes.default.svc." + st.DNSDomain,
		"--service-account-key-file=" + f("sa.pub"),
		"--service-account-signing-key-file=" + f("sa.key"),
		"--service-cluster-ip-range=" + st.ServiceCIDR,
	}}
}

func (c *controlPlane) controllerManager(bin string) supervise.Process {
	st, l := c.st, c.l
	f, conf := l.pkiFile, l.kubeconfig("controller-manager")
	return supervise.Process{Name: "kube-controller-manager", Path: filepath.Join(bin, "kube-controller-manager"), Env: l.env(), Args: []string{
		"--bind-address=" + loopback,
		"--secure-port=" + strconv.Itoa(st.KCM),
		"--cert-dir=" + l.certDir(),
		"--leader-elect=true",
		"--kubeconfig=" + conf,
		"--authentication-kubeconfig=" + conf,
		"--authorization-kubeconfig=" + conf,
		"--client-ca-file=" + f("ca.crt"),
		"--requestheader-client-ca-file=" + f("front-proxy-ca.crt"),
		"--root-ca-file=" + f("ca.crt"),
		"--service-account-private-key-file=" + f("sa.key"),
		"--cluster-signing-cert-file=" + f("ca.crt"),
		"--cluster-signing-key-file=" + f("ca.key"),
		"--use-service-account-credentials=true",
		"--controllers=*,bootstrapsigner,tokencleaner",
		"--allocate-node-cidrs=true",
		"--cluster-cidr=" + st.PodCIDR,
		"--service-cluster-ip-range=" + st.ServiceCIDR,
		"--cluster-name=" + st.Cluster,
	}}
}

func (c *controlPlane) scheduler(bin string) supervise.Process {
	st, l := c.st, c.l
	conf := l.kubeconfig("scheduler")
	return supervise.Process{Name: "kube-scheduler", Path: filepath.Join(bin, "kube-scheduler"), Env: l.env(), Args: []string{
		"--bind-address=" + loopback,
		"--secure-port=" + strconv.Itoa(st.Scheduler),
		"--cert-dir=" + l.certDir(),
		"--leader-elect=true",
		"--kubeconfig=" + conf,
		"--authentication-kubeconfig=" + conf,
		"--authorization-kubeconfig=" + conf,
	}}
}

// start writes the certificates and starts every process and the
// endpoint; the monitor probes the API servers from then on.
func (c *controlPlane) start(set pki.Set, now time.Time, write func(*controlPlane)) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	st := c.st
	for _, d := range []string{c.l.certDir(), c.l.home(), c.l.logs()} {
		if err := os.MkdirAll(d, 0o700); err != nil {
			return err
		}
	}
	if err := writePKI(c.l, st, set, now); err != nil {
		return err
	}
	client, err := adminClient(set, now)
	if err != nil {
		return err
	}
	c.client = client
	c.ready = map[int]bool{}
	p, err := startProxy(st.endpointAddr(), c.backends)
	if err != nil {
		return fmt.Errorf("endpoint %s: %w", st.endpointAddr(), err)
	}
	c.proxy = p
	var procs []supervise.Process
	for i, m := range st.Members {
		// A member a scale was adding or removing runs if its data dir
		// is there (it ran: it is a member, or was until the removal,
		// which goes on); the scale starts or drops it otherwise.
		if _, err := os.Stat(c.l.etcdData(i)); m.Etcd == "" || err == nil {
			procs = append(procs, c.etcd(i, c.bins[st.Version]))
		}
	}
	for i, m := range st.Members {
		if m.NoAPIServer {
			continue
		}
		v := m.Version
		if v == "" || c.bins[v] == "" {
			v = st.Version
			c.st.Members[i].Version = v
		}
		procs = append(procs, c.apiserver(i, c.bins[v]))
	}
	procs = append(procs, c.controllerManager(c.bins[st.Version]), c.scheduler(c.bins[st.Version]))
	for _, pr := range procs {
		if err := c.sup.Start(pr); err != nil {
			return err
		}
	}
	if err := c.l.save(st); err != nil {
		return err
	}
	ctx, cancel := context.WithCancel(context.Background())
	c.cancel, c.done = cancel, make(chan struct{})
	go c.monitor(ctx, write)
	return nil
}

// backends are the API servers that run: those that answered /readyz
// last first, taken in turn (each connection starts at the next one, so
// connections spread over every ready API server), then the others.
func (c *controlPlane) backends() []string {
	c.mu.Lock()
	defer c.mu.Unlock()
	var ready, rest []string
	for i, m := range c.st.Members {
		switch {
		case m.NoAPIServer:
		case c.ready[m.APIServer]:
			ready = append(ready, c.st.apiAddr(i))
		default:
			rest = append(rest, c.st.apiAddr(i))
		}
	}
	if n := len(ready); n > 1 {
		k := int(c.next.Add(1) % uint32(n))
		ready = append(ready[k:], ready[:k]...)
	}
	return append(ready, rest...)
}

// ProbeEvery is how often the API servers are asked /readyz.
var ProbeEvery = time.Second

// monitor asks every API server /readyz with capn's admin credentials and
// has the record written when the count of ready ones changes.
func (c *controlPlane) monitor(ctx context.Context, write func(*controlPlane)) {
	defer close(c.done)
	t := time.NewTicker(ProbeEvery)
	defer t.Stop()
	last := -1
	joined := false
	for {
		n := c.probe(ctx)
		if n > 0 && !joined {
			// Workers join with a bootstrap token: the RBAC and
			// cluster-info they need (join.go), once per start.
			if err := c.prepareJoin(ctx); err != nil {
				c.log.Warn().Err(err).Msg("cannot apply the join RBAC and cluster-info yet; the next probe tries again")
			} else {
				joined = true
				c.log.Info().Msg("join RBAC and cluster-info applied: workers can join with a bootstrap token")
			}
		}
		if n != last {
			last = n
			write(c)
		}
		select {
		case <-ctx.Done():
			return
		case <-c.changed:
			write(c)
		case <-t.C:
		}
	}
}

// probe asks every API server once and returns how many are ready.
func (c *controlPlane) probe(ctx context.Context) int {
	c.mu.Lock()
	var ports []int
	for _, m := range c.st.Members {
		if !m.NoAPIServer {
			ports = append(ports, m.APIServer)
		}
	}
	client := c.client
	c.mu.Unlock()
	ok := make([]bool, len(ports))
	for i, port := range ports {
		ok[i] = readyz(ctx, client, "https://"+net.JoinHostPort(loopback, strconv.Itoa(port))) == nil
	}
	c.mu.Lock()
	for i, port := range ports {
		c.ready[port] = ok[i]
	}
	c.mu.Unlock()
	return c.readyCount()
}

// readyCount is how many of the API servers that run answered /readyz
// last.
func (c *controlPlane) readyCount() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	n := 0
	for _, m := range c.st.Members {
		if !m.NoAPIServer && c.ready[m.APIServer] {
			n++
		}
	}
	return n
}

// setReady records API server i's readiness (c.mu is held).
func (c *controlPlane) setReady(i int, ok bool) { c.ready[c.st.Members[i].APIServer] = ok }

func readyz(ctx context.Context, client *http.Client, base string) error {
	ctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, base+"/readyz", nil)
	if err != nil {
		return err
	}
	resp, err := client.Do(req)
	if err != nil {
		return err
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("/readyz: %s", resp.Status)
	}
	return nil
}

// adminClient talks to the API servers as capn's admin (CN
// kubernetes-admin, O system:masters), trusting the cluster CA only.
func adminClient(set pki.Set, now time.Time) (*http.Client, error) {
	ca, err := pki.ParseCA(set.CA, now)
	if err != nil {
		return nil, err
	}
	kp, err := pki.IssueAdmin(ca, now)
	if err != nil {
		return nil, err
	}
	cert, err := tls.X509KeyPair(kp.CertPEM, kp.KeyPEM)
	if err != nil {
		return nil, err
	}
	roots := x509.NewCertPool()
	roots.AddCert(ca.Cert)
	return &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{
		RootCAs: roots, Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS12,
	}, DisableKeepAlives: true}, Timeout: 5 * time.Second}, nil
}

// upgrade moves the API servers to version one at a time (each back on
// /readyz before the next), then the controller-manager and the
// scheduler; etcd keeps running.
func (c *controlPlane) upgrade(ctx context.Context, version string, wait time.Duration) error {
	c.mu.Lock()
	bin := c.bins[version]
	n := len(c.st.Members)
	c.st.Version = version
	err := c.l.save(c.st)
	c.mu.Unlock()
	if err != nil {
		return err
	}
	for i := range n {
		c.mu.Lock()
		cur := c.st.Members[i].Version
		c.mu.Unlock()
		if cur == version {
			continue
		}
		c.mu.Lock()
		off := c.st.Members[i].NoAPIServer
		if !off {
			c.setReady(i, false)
		}
		c.mu.Unlock()
		if off {
			// No API server here (a scale stopped it or starts it).
			continue
		}
		c.sup.Halt(apiName(i))
		c.mu.Lock()
		p := c.apiserver(i, bin)
		c.mu.Unlock()
		if err := c.sup.Start(p); err != nil {
			return err
		}
		c.log.Info().Int("replica", i).Str("version", version).Msg("kube-apiserver restarted on the new version")
		deadline := time.Now().Add(wait)
		for readyz(ctx, c.client, "https://"+c.st.apiAddr(i)) != nil {
			if time.Now().After(deadline) {
				return fmt.Errorf("%s did not answer /readyz within %s on %s", apiName(i), wait, version)
			}
			select {
			case <-ctx.Done():
				return ctx.Err()
			case <-time.After(200 * time.Millisecond):
			}
		}
		c.mu.Lock()
		c.st.Members[i].Version = version
		err := c.l.save(c.st)
		c.mu.Unlock()
		if err != nil {
			return err
		}
		c.wake()
	}
	c.sup.Halt("kube-controller-manager", "kube-scheduler")
	c.mu.Lock()
	kcm, sched := c.controllerManager(bin), c.scheduler(bin)
	c.mu.Unlock()
	return errors.Join(c.sup.Start(kcm), c.sup.Start(sched))
}

func (c *controlPlane) wake() {
	select {
	case c.changed <- struct{}{}:
	default:
	}
}

// stop stops the monitor, the endpoint and every process.
func (c *controlPlane) stop() {
	if c.cancel != nil {
		c.cancel()
		<-c.done
	}
	if c.proxy != nil {
		c.proxy.Close()
	}
	c.sup.Stop()
}
