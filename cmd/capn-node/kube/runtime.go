package kube

import (
	"context"
	_ "embed"
	"errors"
	"fmt"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/capn-dev/capn/events"
	"github.com/capn-dev/capn/kubeapi"
	"github.com/capn-dev/capn/services/bootstrapper/bootstrap/kubelocal"
)

// KwokStages is kwok's configuration: its default node and pod stages.
//
//go:embed kwok-stages.yaml
var KwokStages []byte

// Binaries the control plane needs in the bin dir.
var Binaries = []string{"etcd", "kube-apiserver", "kube-controller-manager", "kube-scheduler", "kwok"}

// Condition is the runtime's state as a node condition.
type Condition struct {
	// Status is True (running and the API server ready), False or Unknown
	// (starting).
	Status, Reason, Message string
}

// Runtime runs one machine's part of the cluster. Build it with New; Run
// it once.
type Runtime struct {
	cfg    *kubelocal.NodeConfig
	opts   Options
	layout Layout
	sup    *Supervisor
	// ReadyEvery is how often /readyz is asked once up (default 2s).
	ReadyEvery time.Duration
	// Now is the clock for certificates and the token's expiry.
	Now func() time.Time

	ready atomic.Bool
	// leaving is set once the machine leaves etcd: the probe no longer
	// reports the API server's state.
	leaving   atomic.Bool
	mu        sync.Mutex
	cond      Condition
	etcdConds map[string]Condition
	condSeq   int
	milestone map[string]time.Duration
	started   time.Time
	// restoring is set from an etcd restore's prepare until the Node is
	// registered again (restore.go); halted are the children a restore
	// stopped; client is the API server's (once connected).
	restoring atomic.Bool
	halted    []Process
	client    *Client
	// rotating serialises CA rotation phases and leaf renewals
	// (rotate.go).
	rotating sync.Mutex
}

// New checks the config and the options and returns the machine's
// runtime: a control-plane machine (the first, or one joining) or a
// worker.
func New(cfg *kubelocal.NodeConfig, o Options) (*Runtime, error) {
	if o.Ports == (Ports{}) {
		o.Ports = DefaultPorts
	}
	if err := o.Validate(); err != nil {
		return nil, err
	}
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	r := &Runtime{
		cfg: cfg, opts: o, layout: Layout{RootFS: filepath.Join(o.DataDir, "rootfs")},
		ReadyEvery: 2 * time.Second, Now: time.Now, milestone: map[string]time.Duration{},
		cond: Condition{Status: "Unknown", Reason: "Starting", Message: "kube-local: starting the control plane"},
	}
	r.sup = &Supervisor{LogDir: filepath.Join(o.DataDir, "logs"), Log: o.Log}
	return r, nil
}

// Layout is where the runtime's files are.
func (r *Runtime) Layout() Layout { return r.layout }

// Supervisor runs the children (for status and tests).
func (r *Runtime) Supervisor() *Supervisor { return r.sup }

// Ready is true while the API server answers /readyz.
func (r *Runtime) Ready() bool { return r.ready.Load() }

// Condition is the current state and a sequence number that grows with
// every change.
func (r *Runtime) Condition() (Condition, int) {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.cond, r.condSeq
}

// Milestones are how long after Run began the API server first answered
// /readyz ("apiserver-ready"), the join material and Node were registered
// ("registered") and kwok was started ("kwok-started").
func (r *Runtime) Milestones() map[string]time.Duration {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := make(map[string]time.Duration, len(r.milestone))
	for k, v := range r.milestone {
		out[k] = v
	}
	return out
}

func (r *Runtime) mark(name string) time.Duration {
	r.mu.Lock()
	defer r.mu.Unlock()
	d := time.Since(r.started)
	if _, ok := r.milestone[name]; !ok {
		r.milestone[name] = d
	}
	return d
}

func (r *Runtime) setCondition(c Condition) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if c != r.cond {
		r.cond = c
		r.condSeq++
	}
}

// Run runs the machine's part of the cluster until ctx ends; then it
// stops every child and returns nil. It returns an error when it cannot
// start at all (binaries missing or of another version, a broken CA); the
// children are stopped then too.
func (r *Runtime) Run(ctx context.Context) (err error) {
	r.started = time.Now()
	defer func() {
		if err != nil {
			r.ready.Store(false)
			r.setCondition(Condition{Status: "False", Reason: "Failed", Message: err.Error()})
		}
	}()
	if !r.cfg.IsControlPlane() {
		return r.runWorker(ctx)
	}
	return r.runControlPlane(ctx)
}

// runControlPlane runs a control-plane machine. The first starts a new
// etcd cluster and registers the join material; another joins the
// cluster's etcd as a learner (see joinEtcd), waits until it is promoted,
// and only then starts its API server. Every one keeps the etcd
// membership in line with the control-plane Nodes, and leaves etcd once
// its own Node is deleted (manageMembers, membership.go).
func (r *Runtime) runControlPlane(ctx context.Context) error {
	log := r.opts.Log
	if r.hasLeft() {
		b, _ := os.ReadFile(r.leftMarker())
		log.Info().Msg("this machine left the cluster's etcd before: nothing runs here")
		r.leaving.Store(true)
		r.left(strings.TrimSpace(string(b)))
		<-ctx.Done()
		return nil
	}
	if err := CheckBinaries(ctx, r.opts.BinDir, r.cfg.KubernetesVersion); err != nil {
		return err
	}
	addr := netip.MustParseAddr(r.opts.Address)
	leaves, err := Leaves(r.cfg, addr)
	if err != nil {
		return err
	}
	local := serverURL(r.opts.Address, r.opts.Ports.APIServer)
	res, err := IssueAll(r.layout, r.cfg.Cluster, local, leaves, r.Now())
	if err != nil {
		return fmt.Errorf("kube-local certificates: %w", err)
	}
	log.Info().Strs("issued", res.Issued).Strs("kept", res.Kept).Msg("control-plane certificates ready")
	if err := writeFile(r.layout.KwokConfig(), KwokStages, 0o644); err != nil {
		return err
	}
	for _, d := range []string{r.layout.EtcdDataDir(), r.layout.CertDir(), filepath.Join(r.opts.DataDir, "home")} {
		if err := os.MkdirAll(d, 0o700); err != nil {
			return err
		}
	}
	plan, err := Commands(r.cfg, r.opts, r.layout)
	if err != nil {
		return err
	}
	defer r.sup.Stop()
	defer r.ready.Store(false)
	localEtcd := url("https", addr, r.opts.Ports.EtcdClient)
	etcdURLs := []string{localEtcd}
	// With a member in its data dir (a restart, a wake from hibernation)
	// etcd starts on its data at once: asking through the endpoint first
	// would wait for an API server that cannot serve until enough members
	// are back.
	restart := hasEtcdData(r.layout.EtcdDataDir())
	if !r.cfg.FirstControlPlane && !restart {
		r.setCondition(Condition{Status: "Unknown", Reason: "JoiningEtcd", Message: "kube-local: joining the cluster's etcd through " + r.cfg.Endpoint.String()})
		var j etcdJoin
		if !r.retry(ctx, "join the cluster's etcd", func() (err error) { j, err = r.joinEtcd(ctx); return err }) {
			return nil
		}
		plan.Etcd = joining(plan.Etcd, j.InitialCluster)
		etcdURLs = append(j.Peers, localEtcd)
		log.Info().Dur("after", r.mark("etcd-member-added")).Str("initial_cluster", j.InitialCluster).Strs("peers", j.Peers).Msg("etcd member added (learner)")
	}
	etcd, err := NewEtcdFromPKI(r.layout, etcdURLs)
	if err != nil {
		return err
	}
	defer etcd.Close()
	if err := r.sup.Start(plan.Etcd); err != nil {
		return err
	}
	if !r.cfg.FirstControlPlane {
		peer := url("https", addr, r.opts.Ports.EtcdPeer)
		var removed error
		if !r.retry(ctx, "promote this etcd learner to a voting member", func() error {
			err := r.promote(ctx, etcd, peer, restart)
			if errors.Is(err, errLearnerRemoved) && !restart {
				removed, err = err, nil // no use retrying: fail the machine
			}
			return err
		}) {
			return nil
		}
		if removed != nil {
			return fmt.Errorf("kube-local: %w: the other control planes remove a learner that does not start or catch up within their learner timeout; this machine must be replaced", removed)
		}
		log.Info().Dur("after", r.mark("etcd-member-promoted")).Msg("etcd member is a voting member")
	}
	for _, p := range []Process{plan.APIServer, plan.ControllerManager, plan.Scheduler} {
		if err := r.sup.Start(p); err != nil {
			return err
		}
	}
	client, stop, err := r.connect(ctx, r.layout.AdminKubeconfig())
	if err != nil {
		return err
	}
	defer stop()
	r.mu.Lock()
	r.client = client
	r.mu.Unlock()
	if !r.waitReady(ctx) {
		return nil
	}
	log.Info().Dur("after", r.mark("apiserver-ready")).Str("server", local).Msg("kube-apiserver ready")
	if r.ownNodeDeleted(ctx, client) {
		// Deleted while this agent was down: registering again would
		// bring back a Node capn removed.
		r.leave(ctx, client, etcd)
		return nil
	}
	register := func() error { return RegisterNode(ctx, client, r.node()) }
	if r.cfg.FirstControlPlane {
		register = func() error { return r.register(ctx, client) }
	}
	if !r.retry(ctx, "register the Node", register) {
		return nil
	}
	log.Info().Dur("after", r.mark("registered")).Str("node", r.cfg.NodeName).Msg("Node registered")
	if err := writeFile(r.registeredMarker(), []byte(r.cfg.NodeName+"\n"), 0o600); err != nil {
		return err
	}
	if err := r.sup.Start(plan.Kwok); err != nil {
		return err
	}
	log.Info().Dur("after", r.mark("kwok-started")).Msg("kwok started in place of the kubelet")
	r.manageMembers(ctx, client, etcd)
	return nil
}

// node is this machine's Node; a control plane's carries its etcd client
// URL, for machines joining later.
func (r *Runtime) node() NodeSpec {
	n := NodeFor(r.cfg, r.opts.Address, r.opts.ProviderID)
	n.Capacity = r.opts.Capacity
	if r.cfg.IsControlPlane() {
		n.Annotations = map[string]string{EtcdClientURLsAnnotation: url("https", netip.MustParseAddr(r.opts.Address), r.opts.Ports.EtcdClient)}
	}
	return n
}

// etcdJoin is what joinEtcd found: the --initial-cluster to start with
// and the client URLs of the other members.
type etcdJoin struct {
	InitialCluster string
	Peers          []string
}

// joinEtcd makes this machine a member of the cluster's etcd, through the
// control-plane endpoint with the admin credentials it issued itself:
//
//  1. it registers its Node first (with its etcd client URL), so that no
//     other control plane takes the member it is about to add for the
//     member of a machine that is gone (see sweepMembers);
//  2. it finds the members' client URLs on the other control-plane Nodes;
//  3. a member with its peer URL that never started is its own earlier
//     attempt and is kept; one that ran is a machine of the past at this
//     address and is removed; otherwise it adds itself as a learner.
func (r *Runtime) joinEtcd(ctx context.Context) (etcdJoin, error) {
	viaEndpoint, err := r.endpointClient()
	if err != nil {
		return etcdJoin{}, err
	}
	defer viaEndpoint.Close()
	if err := RegisterNode(ctx, viaEndpoint, r.node()); err != nil {
		return etcdJoin{}, fmt.Errorf("register the Node before joining etcd: %w", err)
	}
	peers, err := r.peerEtcdURLs(ctx, viaEndpoint)
	if err != nil {
		return etcdJoin{}, err
	}
	j := etcdJoin{Peers: peers}
	etcd, err := NewEtcdFromPKI(r.layout, peers)
	if err != nil {
		return etcdJoin{}, err
	}
	defer etcd.Close()
	members, err := etcd.Members(ctx)
	if err != nil {
		return etcdJoin{}, err
	}
	peer := url("https", netip.MustParseAddr(r.opts.Address), r.opts.Ports.EtcdPeer)
	if m, ok := ByPeerURL(members, peer); ok {
		if !m.Started() {
			j.InitialCluster = InitialCluster(members, m.ID, r.cfg.NodeName)
			return j, nil
		}
		r.opts.Log.Warn().Str("member", m.ID.String()).Str("name", m.Name).Str("peer_url", peer).
			Msg("an etcd member that ran before has this machine's peer URL and this machine has no etcd data: removing it to join anew")
		if err := etcd.Remove(ctx, m.ID); err != nil {
			return etcdJoin{}, fmt.Errorf("remove the earlier member %s (%s) at %s: %w", m.ID, m.Name, peer, err)
		}
	}
	m, members, err := etcd.AddLearner(ctx, peer)
	if err != nil {
		return etcdJoin{}, fmt.Errorf("add this machine (%s) as an etcd learner: %w", peer, err)
	}
	j.InitialCluster = InitialCluster(members, m.ID, r.cfg.NodeName)
	return j, nil
}

// endpointClient talks to the control-plane endpoint with the admin
// certificate this machine issued itself (its admin kubeconfig points at
// its own API server, which is not up while it joins).
func (r *Runtime) endpointClient() (*Client, error) {
	kc, err := ReadKubeconfig(r.layout.AdminKubeconfig())
	if err != nil {
		return nil, err
	}
	pair := kc.Client()
	return kubeapi.NewClient("https://"+r.cfg.Endpoint.String(), kc.CA(), pair.CertPEM, pair.KeyPEM)
}

// peerEtcdURLs are the etcd client URLs the other control-plane Nodes
// carry.
func (r *Runtime) peerEtcdURLs(ctx context.Context, c *Client) ([]string, error) {
	nodes, err := controlPlaneNodes(ctx, c)
	if err != nil {
		return nil, err
	}
	var peers []string
	for _, n := range nodes {
		if u := n.Metadata.Annotations[EtcdClientURLsAnnotation]; u != "" && n.Metadata.Name != r.cfg.NodeName {
			peers = append(peers, strings.Split(u, ",")...)
		}
	}
	if len(peers) == 0 {
		return nil, fmt.Errorf("no other control-plane Node carries %s yet", EtcdClientURLsAnnotation)
	}
	return peers, nil
}

// hasEtcdData is true when etcd's data dir holds a member (it then
// ignores --initial-cluster).
func hasEtcdData(dir string) bool {
	_, err := os.Stat(filepath.Join(dir, "member", "snap", "db"))
	return err == nil
}

// promote makes the member with peerURL a voting member; done when it is
// one already. After a restart etcd is asked through this machine's own
// member first; a member restarted before it was promoted is a learner,
// which serves no linearizable read, so then the others are asked, found
// through the endpoint.
func (r *Runtime) promote(ctx context.Context, etcd *Etcd, peerURL string, restart bool) error {
	err := promote(ctx, etcd, peerURL)
	if err == nil || !restart {
		return err
	}
	c, cerr := r.endpointClient()
	if cerr != nil {
		return errors.Join(err, cerr)
	}
	defer c.Close()
	peers, perr := r.peerEtcdURLs(ctx, c)
	if perr != nil {
		return errors.Join(err, perr)
	}
	others, oerr := NewEtcdFromPKI(r.layout, peers)
	if oerr != nil {
		return errors.Join(err, oerr)
	}
	defer others.Close()
	return promote(ctx, others, peerURL)
}

// errLearnerRemoved: this machine's member is not in the list (removed).
var errLearnerRemoved = errors.New("this machine's etcd learner was removed before it was promoted")

func promote(ctx context.Context, etcd *Etcd, peerURL string) error {
	members, err := etcd.Members(ctx)
	if err != nil {
		return err
	}
	m, ok := ByPeerURL(members, peerURL)
	switch {
	case !ok:
		return fmt.Errorf("%w: no etcd member has peer URL %s", errLearnerRemoved, peerURL)
	case !m.IsLearner:
		return nil
	}
	return etcd.Promote(ctx, m.ID)
}

// listedNode is the part of a listed Node the runtime reads.
type listedNode struct {
	Metadata struct {
		Name        string            `json:"name"`
		Annotations map[string]string `json:"annotations"`
	} `json:"metadata"`
}

// allNodes lists every Node.
func allNodes(ctx context.Context, c *Client) ([]listedNode, error) {
	var l struct {
		Items []listedNode `json:"items"`
	}
	if err := c.Get(ctx, "/api/v1/nodes", &l); err != nil {
		return nil, fmt.Errorf("list the Nodes: %w", err)
	}
	return l.Items, nil
}

// controlPlaneNodes lists the Nodes with the control-plane role label.
func controlPlaneNodes(ctx context.Context, c *Client) ([]listedNode, error) {
	var l struct {
		Items []listedNode `json:"items"`
	}
	if err := c.Get(ctx, "/api/v1/nodes?labelSelector="+ControlPlaneRoleLabel, &l); err != nil {
		return nil, fmt.Errorf("list the control-plane Nodes: %w", err)
	}
	return l.Items, nil
}

// SweepEvery is how often a control plane checks its own Node and
// compares the etcd members with the control-plane Nodes.
var SweepEvery = 5 * time.Second

// probe asks /readyz every ReadyEvery and keeps Ready and the condition
// up to date until ctx ends.
func (r *Runtime) probe(ctx context.Context, c *Client) {
	t := time.NewTicker(r.ReadyEvery)
	defer t.Stop()
	for {
		err := c.Ready(ctx)
		if ctx.Err() != nil || r.leaving.Load() {
			return
		}
		r.ready.Store(err == nil)
		r.mu.Lock()
		_, wasReady := r.milestone["apiserver-ready"]
		r.mu.Unlock()
		switch {
		case err == nil:
			r.setCondition(Condition{Status: "True", Reason: "APIServerReady", Message: "kube-local: kube-apiserver answers /readyz at " + c.Server})
		case wasReady:
			r.setCondition(Condition{Status: "False", Reason: "APIServerNotReady", Message: "kube-local: kube-apiserver at " + c.Server + ": " + err.Error()})
		default:
			r.setCondition(Condition{Status: "Unknown", Reason: "Starting", Message: "kube-local: starting the control plane; kube-apiserver at " + c.Server + " not ready yet"})
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// waitReady waits until the probe saw /readyz answer (false: ctx ended).
func (r *Runtime) waitReady(ctx context.Context) bool {
	t := time.NewTicker(200 * time.Millisecond)
	defer t.Stop()
	for !r.ready.Load() {
		select {
		case <-ctx.Done():
			return false
		case <-t.C:
		}
	}
	return true
}

// connect opens a client with the kubeconfig at path and probes the API
// server in the background (the heartbeat's ready flag, see probe) until
// ctx ends; stop waits for the probe and closes the client.
func (r *Runtime) connect(ctx context.Context, path string) (c *Client, stop func(), err error) {
	kc, err := ReadKubeconfig(path)
	if err != nil {
		return nil, nil, err
	}
	if c, err = NewClient(kc); err != nil {
		return nil, nil, err
	}
	probeDone := make(chan struct{})
	go func() {
		defer close(probeDone)
		r.probe(ctx, c)
	}()
	return c, func() { <-probeDone; c.Close() }, nil
}

// retry runs f until it succeeds (true) or ctx ends (false), with capped
// backoff, logging each failure.
func (r *Runtime) retry(ctx context.Context, what string, f func() error) bool {
	return events.Retry(ctx, r.opts.Log, what, 500*time.Millisecond, 15*time.Second,
		func(context.Context) error { return f() }) == nil
}

// tokenMarker records that the token Secret was created once, so a
// restarted agent never brings back a token that expired or was deleted.
func (r *Runtime) tokenMarker() string {
	return filepath.Join(r.opts.DataDir, "capn-node", "kube-token-registered")
}

// register applies kubeadm's join RBAC and cluster-info, the bootstrap
// token Secret (once) and the machine's Node.
func (r *Runtime) register(ctx context.Context, c *Client) error {
	for _, o := range JoinRBAC() {
		if err := c.Apply(ctx, o); err != nil {
			return err
		}
	}
	ca, err := os.ReadFile(filepath.Join(r.layout.PKIDir(), "ca.crt"))
	if err != nil {
		return err
	}
	ci, err := ClusterInfo("https://"+r.cfg.Endpoint.String(), ca)
	if err != nil {
		return err
	}
	if err := c.Apply(ctx, ci); err != nil {
		return err
	}
	tok, err := r.cfg.Token()
	if err != nil {
		return err
	}
	if b, _ := os.ReadFile(r.tokenMarker()); strings.TrimSpace(string(b)) != tok.ID {
		ttl, err := r.cfg.TTL()
		if err != nil {
			return err
		}
		created, err := c.Create(ctx, TokenSecret(tok, ttl, r.Now(), r.cfg.Cluster))
		if err != nil {
			return err
		}
		r.opts.Log.Info().Str("token_id", tok.ID).Bool("created", created).Dur("ttl", ttl).Msg("bootstrap token registered")
		if err := writeFile(r.tokenMarker(), []byte(tok.ID+"\n"), 0o600); err != nil {
			return err
		}
	}
	return RegisterNode(ctx, c, r.node())
}

// RegisterNode creates the Node, or brings an existing one to n (merge
// patch: a PUT could not keep the podCIDR the controller-manager set),
// then sets its status (version, addresses).
func RegisterNode(ctx context.Context, c *Client, n NodeSpec) error {
	o := n.Object()
	created, err := c.Create(ctx, o)
	if err != nil {
		return err
	}
	if !created {
		var cur struct {
			Spec struct {
				ProviderID string            `json:"providerID"`
				Taints     []kubelocal.Taint `json:"taints"`
			} `json:"spec"`
		}
		if err := c.Get(ctx, o.Path(), &cur); err != nil {
			return err
		}
		if cur.Spec.ProviderID != "" && n.ProviderID != "" && cur.Spec.ProviderID != n.ProviderID {
			return fmt.Errorf("%s has providerID %s, this machine is %s: a Node's providerID cannot change", n, cur.Spec.ProviderID, n.ProviderID)
		}
		if err := c.MergePatch(ctx, o.Path(), n.Patch(cur.Spec.Taints)); err != nil {
			return fmt.Errorf("update %s: %w", n, err)
		}
	}
	if err := c.MergePatch(ctx, o.Path()+"/status", n.Status()); err != nil {
		return fmt.Errorf("status of %s: %w", n, err)
	}
	return nil
}

var versionRe = regexp.MustCompile(`Kubernetes (v[0-9]+\.[0-9]+\.[0-9]+\S*)`)

// CheckBinaries makes sure every binary is in dir and that the
// Kubernetes ones are version want: a machine that says v1.33.2 must not
// run v1.37.2. The process provider hands each machine the directory of
// its version; this is the node's own check of what it runs.
func CheckBinaries(ctx context.Context, dir, want string) error {
	if err := checkPresent(dir, Binaries); err != nil {
		return err
	}
	for _, b := range []string{"kube-apiserver", "kube-controller-manager", "kube-scheduler"} {
		got, err := BinaryVersion(ctx, filepath.Join(dir, b))
		if err != nil {
			return err
		}
		if got != want {
			return fmt.Errorf("kube-local: %s is Kubernetes %s, but the machine's kubernetesVersion is %s: give --kube-bin the directory of %s's binaries (make kube KUBE_VERSIONS=\"… %s\" builds them)", filepath.Join(dir, b), got, want, want, want)
		}
	}
	return nil
}

// checkPresent is nil when every binary of names is an executable in dir.
func checkPresent(dir string, names []string) error {
	var missing []string
	for _, b := range names {
		if fi, err := os.Stat(filepath.Join(dir, b)); err != nil || fi.IsDir() || fi.Mode()&0o111 == 0 {
			missing = append(missing, b)
		}
	}
	if len(missing) > 0 {
		return fmt.Errorf("kube-local: kube-bin %s has no %s (build them with make kube)", dir, strings.Join(missing, ", "))
	}
	return nil
}

// BinaryVersion runs `<path> --version` and reads "Kubernetes vX.Y.Z".
func BinaryVersion(ctx context.Context, path string) (string, error) {
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	out, err := exec.CommandContext(ctx, path, "--version").CombinedOutput()
	if err != nil {
		return "", fmt.Errorf("%s --version: %w: %s", path, err, strings.TrimSpace(string(out)))
	}
	m := versionRe.FindSubmatch(out)
	if m == nil {
		return "", fmt.Errorf("%s --version printed %q, not Kubernetes vX.Y.Z", path, strings.TrimSpace(string(out)))
	}
	return string(m[1]), nil
}
