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
	"github.com/capn-dev/capn/services/bootstrapper/bootstrap/kubelocal"
)

// KwokStages is kwok's configuration: its default node and pod stages.
//
//go:embed kwok-stages.yaml
var KwokStages []byte

// ErrNotBuilt marks a machine kind the node side cannot run yet.
var ErrNotBuilt = errors.New("not built yet")

type notBuilt string

func (e notBuilt) Error() string        { return string(e) }
func (e notBuilt) Is(target error) bool { return target == ErrNotBuilt }

// ErrControlPlaneJoin is a control-plane machine other than the first:
// joining etcd and the control plane is not built yet.
var ErrControlPlaneJoin error = notBuilt("kube-local: joining a control plane (etcd member add) is not built yet")

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

	ready     atomic.Bool
	mu        sync.Mutex
	cond      Condition
	condSeq   int
	milestone map[string]time.Duration
	started   time.Time
}

// New checks that this machine is one the node side can run and returns
// its runtime: the first control-plane machine or a worker. A control
// plane that would join another one gets ErrControlPlaneJoin (it wraps
// ErrNotBuilt).
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
	if cfg.IsControlPlane() && !cfg.FirstControlPlane {
		return nil, ErrControlPlaneJoin
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

// runControlPlane runs the first control-plane machine.
func (r *Runtime) runControlPlane(ctx context.Context) error {
	log := r.opts.Log
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
	for _, p := range plan.ControlPlane() {
		if err := r.sup.Start(p); err != nil {
			return err
		}
	}
	client, stop, err := r.connect(ctx, r.layout.AdminKubeconfig())
	if err != nil {
		return err
	}
	defer stop()
	if !r.waitReady(ctx) {
		return nil
	}
	log.Info().Dur("after", r.mark("apiserver-ready")).Str("server", local).Msg("kube-apiserver ready")
	if !r.retry(ctx, "register the join material and the Node", func() error { return r.register(ctx, client) }) {
		return nil
	}
	log.Info().Dur("after", r.mark("registered")).Str("node", r.cfg.NodeName).Msg("join material and Node registered")
	if err := r.sup.Start(plan.Kwok); err != nil {
		return err
	}
	log.Info().Dur("after", r.mark("kwok-started")).Msg("kwok started in place of the kubelet")
	<-ctx.Done()
	return nil
}

// probe asks /readyz every ReadyEvery and keeps Ready and the condition
// up to date until ctx ends.
func (r *Runtime) probe(ctx context.Context, c *Client) {
	t := time.NewTicker(r.ReadyEvery)
	defer t.Stop()
	for {
		err := c.Ready(ctx)
		if ctx.Err() != nil {
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
	return RegisterNode(ctx, c, NodeFor(r.cfg, r.opts.Address, r.opts.ProviderID))
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
// run v1.37.2.
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
			return fmt.Errorf("kube-local: %s is Kubernetes %s, but the machine's kubernetesVersion is %s", filepath.Join(dir, b), got, want)
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
