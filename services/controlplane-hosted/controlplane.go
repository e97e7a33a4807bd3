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
}

// member is one etcd member and the API server beside it.
type member struct {
	EtcdClient int    `json:"etcdClient"`
	EtcdPeer   int    `json:"etcdPeer"`
	APIServer  int    `json:"apiServer"`
	Version    string `json:"version"`
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
func (st *state) replicas() int32      { return int32(len(st.Members)) }
func (st *state) etcdURLs() string     { return strings.Join(st.etcdClientURLs(), ",") }
func (st *state) etcdClientURLs() []string {
	return mapMembers(st, func(m member) string { return url(m.EtcdClient) })
}
func mapMembers(st *state, f func(member) string) []string {
	out := make([]string, len(st.Members))
	for i, m := range st.Members {
		out[i] = f(m)
	}
	return out
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
	ready  []atomic.Bool
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
	var initial []string
	for j, o := range st.Members {
		initial = append(initial, etcdName(j)+"="+url(o.EtcdPeer))
	}
	return supervise.Process{Name: etcdName(i), Path: filepath.Join(bin, "etcd"), Env: l.env(), Args: []string{
		"--name=" + etcdName(i),
		"--listen-client-urls=" + url(m.EtcdClient),
		"--advertise-client-urls=" + url(m.EtcdClient),
		"--listen-peer-urls=" + url(m.EtcdPeer),
		"--initial-advertise-peer-urls=" + url(m.EtcdPeer),
		"--initial-cluster=" + strings.Join(initial, ","),
		"--initial-cluster-state=new",
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

func (c *controlPlane) apiserver(i int, bin string) supervise.Process {
	st, l := c.st, c.l
	f := l.pkiFile
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
		"--etcd-servers=" + st.etcdURLs(),
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
	c.ready = make([]atomic.Bool, len(st.Members))
	p, err := startProxy(st.endpointAddr(), c.backends)
	if err != nil {
		return fmt.Errorf("endpoint %s: %w", st.endpointAddr(), err)
	}
	c.proxy = p
	var procs []supervise.Process
	for i := range st.Members {
		procs = append(procs, c.etcd(i, c.bins[st.Version]))
	}
	for i, m := range st.Members {
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

// backends are the API servers, those that answered /readyz last first.
func (c *controlPlane) backends() []string {
	c.mu.Lock()
	defer c.mu.Unlock()
	var ready, rest []string
	for i := range c.st.Members {
		if c.ready[i].Load() {
			ready = append(ready, c.st.apiAddr(i))
		} else {
			rest = append(rest, c.st.apiAddr(i))
		}
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
	addrs := make([]string, len(c.st.Members))
	for i := range addrs {
		addrs[i] = c.st.apiAddr(i)
	}
	client := c.client
	c.mu.Unlock()
	n := 0
	for i, a := range addrs {
		ok := readyz(ctx, client, "https://"+a) == nil
		c.ready[i].Store(ok)
		if ok {
			n++
		}
	}
	return n
}

// readyCount is how many API servers answered /readyz last.
func (c *controlPlane) readyCount() int {
	n := 0
	for i := range c.ready {
		if c.ready[i].Load() {
			n++
		}
	}
	return n
}

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
		c.sup.Halt(apiName(i))
		c.ready[i].Store(false)
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
