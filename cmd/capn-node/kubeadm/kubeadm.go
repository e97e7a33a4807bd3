// Package kubeadm is capn-node's part in a kubeadm control plane on a real
// node (the process provider's node mode: the agent ran the machine's
// kubeadm init or join, --run-cloud-config). kubeadm's stacked etcd member
// is kept in the cluster's membership by the loop kube-local's control
// planes run (kube.Membership), over kubeadm's own files:
//
//	/etc/kubernetes/manifests/etcd.yaml   the member: --name, its client and
//	                                      peer URLs (https://<node ip>:2379, :2380)
//	/etc/kubernetes/pki/etcd/ca.crt,      the etcd CA and the API server's
//	  apiserver-etcd-client.{crt,key}     etcd client certificate
//	/etc/kubernetes/admin.conf            the cluster's API server
//
//	every kube.SweepEvery ─► own Node deleted (seen before, now 404)?
//	    yes ─► leave etcd (quorum kept? leader? move leadership first) ─►
//	           move the control plane's static pod manifests out of
//	           /etc/kubernetes/manifests (the kubelet stops etcd, the API
//	           server, ...: kubeadm reset's cleanup) ─► EtcdMemberRemoved=True
//	    no  ─► sweep: remove the member of a control plane that vanished
//	           (no Node, does not answer), a learner stuck past its timeout
//	           ─► EtcdMembersHealthy
//
// The machine-manager of a deleting control-plane machine waits for
// EtcdMemberRemoved=True before it deletes the machine's infrastructure.
// A control plane with an external etcd (no etcd.yaml) has no member to
// remove: it says so (True) once its Node is deleted.
package kubeadm

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/rs/zerolog"
	"sigs.k8s.io/yaml"

	"github.com/capn-dev/capn/cmd/capn-node/kube"
	"github.com/capn-dev/capn/internal/atomicfile"
)

// kubeadm's paths on a control-plane node.
const (
	ManifestsDir = "/etc/kubernetes/manifests"
	EtcdManifest = "etcd.yaml"
	// APIServerManifest makes a node a control plane.
	APIServerManifest = "kube-apiserver.yaml"
	AdminConf         = "/etc/kubernetes/admin.conf"
	// LeftManifestsDir is where the static pod manifests of a control
	// plane that left go (kubeadm reset deletes them).
	LeftManifestsDir = "/etc/kubernetes/capn-left-manifests"
)

// Markers under Config.StateDir.
const (
	// RegisteredFile holds the Node's name once the agent saw it: a Node
	// not found later means deleted, never "not yet".
	RegisteredFile = "kubeadm-node-registered"
	// LeftFile holds what was done when this machine left etcd: a
	// restarted agent reports it again and does nothing more.
	LeftFile = "kubeadm-etcd-left"
)

// ControlPlaneManifests are kubeadm's static pods of a control plane.
var ControlPlaneManifests = []string{EtcdManifest, APIServerManifest, "kube-controller-manager.yaml", "kube-scheduler.yaml"}

// Config is one node's.
type Config struct {
	// Root is the node's root ("/" on a real node; a directory in tests).
	Root string
	// StateDir keeps the markers (the agent's state dir).
	StateDir string
	// NodeName is the node's Node (kubeadm's nodeRegistration.name).
	NodeName string
	// LearnerTimeout is kube.Membership's (0: kube.DefaultLearnerTimeout).
	LearnerTimeout time.Duration
	Log            zerolog.Logger
}

func (c Config) path(p string) string { return filepath.Join(c.Root, filepath.FromSlash(p)) }

// IsControlPlane reports whether kubeadm made this node a control plane
// (its API server's static pod), or it was one and left.
func IsControlPlane(c Config) bool {
	for _, p := range []string{c.path(ManifestsDir + "/" + APIServerManifest), filepath.Join(c.StateDir, LeftFile)} {
		if _, err := os.Stat(p); err == nil {
			return true
		}
	}
	return false
}

// EtcdMember is what kubeadm's etcd static pod says of this node's member.
type EtcdMember struct {
	Name                 string
	ClientURLs, PeerURLs []string
}

// ReadEtcdManifest reads the member's flags from kubeadm's etcd static
// pod manifest (fs.ErrNotExist: no stacked etcd here).
func ReadEtcdManifest(path string) (EtcdMember, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return EtcdMember{}, err
	}
	var pod struct {
		Spec struct {
			Containers []struct {
				Name    string   `json:"name"`
				Command []string `json:"command"`
			} `json:"containers"`
		} `json:"spec"`
	}
	if err := yaml.Unmarshal(b, &pod); err != nil {
		return EtcdMember{}, fmt.Errorf("%s: %w", path, err)
	}
	var m EtcdMember
	for _, c := range pod.Spec.Containers {
		if c.Name != "etcd" {
			continue
		}
		for _, arg := range c.Command {
			k, v, _ := strings.Cut(strings.TrimPrefix(arg, "--"), "=")
			switch k {
			case "name":
				m.Name = v
			case "advertise-client-urls":
				m.ClientURLs = strings.Split(v, ",")
			case "initial-advertise-peer-urls":
				m.PeerURLs = strings.Split(v, ",")
			}
		}
	}
	var errs []error
	if m.Name == "" {
		errs = append(errs, errors.New("no --name"))
	}
	if len(m.ClientURLs) == 0 {
		errs = append(errs, errors.New("no --advertise-client-urls"))
	}
	if len(m.PeerURLs) == 0 {
		errs = append(errs, errors.New("no --initial-advertise-peer-urls"))
	}
	if len(errs) > 0 {
		return m, fmt.Errorf("%s: the etcd container: %w", path, errors.Join(errs...))
	}
	return m, nil
}

// ControlPlane keeps a kubeadm control plane's etcd member. Build it with
// New, Run it once; EtcdConditions may be called at any time.
type ControlPlane struct {
	cfg   Config
	mu    sync.Mutex
	conds map[string]kube.Condition
	left  bool
}

// New returns the control plane of cfg.
func New(cfg Config) *ControlPlane {
	if cfg.LearnerTimeout <= 0 {
		cfg.LearnerTimeout = kube.DefaultLearnerTimeout
	}
	return &ControlPlane{cfg: cfg, conds: map[string]kube.Condition{}}
}

// EtcdConditions are the etcd membership's conditions, by type
// (EtcdMemberRemoved once the Node is deleted, EtcdMembersHealthy).
func (c *ControlPlane) EtcdConditions() []kube.NamedCondition {
	c.mu.Lock()
	defer c.mu.Unlock()
	var out []kube.NamedCondition
	for t, cond := range c.conds {
		out = append(out, kube.NamedCondition{Type: t, Condition: cond})
	}
	slices.SortFunc(out, func(a, b kube.NamedCondition) int { return strings.Compare(a.Type, b.Type) })
	return out
}

func (c *ControlPlane) set(t string, cond kube.Condition) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.conds[t] = cond
}

// Left reports whether this machine left etcd: its control plane no
// longer serves.
func (c *ControlPlane) Left() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.left
}

func (c *ControlPlane) removed(done string) {
	c.mu.Lock()
	c.left = true
	c.mu.Unlock()
	c.set(kube.CondEtcdMemberRemoved, kube.Condition{Status: "True", Reason: kube.ReasonMemberRemoved, Message: "kubeadm: " + done})
}

// Run keeps the member until ctx ends (see the package's drawing).
func (c *ControlPlane) Run(ctx context.Context) {
	log := c.cfg.Log
	left := filepath.Join(c.cfg.StateDir, LeftFile)
	if b, err := os.ReadFile(left); err == nil {
		log.Info().Msg("this machine left the cluster's etcd before: nothing to do")
		c.removed(strings.TrimSpace(string(b)))
		<-ctx.Done()
		return
	}
	var m *kube.Membership
	for {
		var err error
		m, err = c.membership()
		if err == nil {
			break
		}
		log.Warn().Err(err).Msg("cannot keep this control plane's etcd member yet")
		c.set(kube.CondEtcdMembersHealthy, kube.Condition{Status: "Unknown", Reason: kube.ReasonMemberUnhealthy, Message: "kubeadm: " + err.Error()})
		select {
		case <-ctx.Done():
			return
		case <-time.After(kube.SweepEvery):
		}
	}
	defer m.Client.Close()
	var done string
	if m.Etcd == nil {
		if !c.waitNodeDeleted(ctx, m) {
			return
		}
		done = "no etcd member on this machine (its etcd is external): nothing to remove"
	} else {
		defer m.Etcd.Close()
		var ok bool
		log.Info().Str("node", m.NodeName).Str("peer_url", m.PeerURL).Msg("keeping this control plane's etcd member (kubeadm)")
		if done, ok = m.Run(ctx); !ok {
			return
		}
		stopped, err := c.stopStaticPods()
		if err != nil {
			log.Warn().Err(err).Msg("cannot stop the control plane's static pods")
		}
		log.Info().Str("done", done).Strs("stopped", stopped).Msg("left the cluster's etcd; the control plane's static pods are stopped")
	}
	if err := atomicfile.Write(left, []byte(done+"\n"), 0o600, 0o700); err != nil {
		log.Warn().Err(err).Msg("cannot record that this machine left etcd")
	}
	c.removed(done)
	<-ctx.Done()
}

// waitNodeDeleted waits until this machine's Node is deleted (true) or ctx
// ends.
func (c *ControlPlane) waitNodeDeleted(ctx context.Context, m *kube.Membership) bool {
	t := time.NewTicker(kube.SweepEvery)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return false
		case <-t.C:
		}
		if m.OwnNodeDeleted(ctx) {
			return true
		}
	}
}

// membership is the loop over kubeadm's files; its Etcd is nil for a
// control plane without a stacked etcd member.
func (c *ControlPlane) membership() (*kube.Membership, error) {
	kc, err := kube.ReadKubeadmKubeconfig(c.cfg.path(AdminConf))
	if err != nil {
		return nil, fmt.Errorf("the API server's kubeconfig: %w", err)
	}
	client, err := kube.NewClient(kc)
	if err != nil {
		return nil, fmt.Errorf("the API server's client (%s): %w", AdminConf, err)
	}
	m := &kube.Membership{
		NodeName: c.cfg.NodeName, Client: client, Flavour: "kubeadm", LearnerTimeout: c.cfg.LearnerTimeout,
		JoinsBeforeNodeLabel: true, Log: c.cfg.Log, Registered: c.registered(client), SetCondition: c.set,
	}
	em, err := ReadEtcdManifest(c.cfg.path(ManifestsDir + "/" + EtcdManifest))
	if errors.Is(err, fs.ErrNotExist) {
		return m, nil
	}
	if err != nil {
		client.Close()
		return nil, err
	}
	if em.Name != c.cfg.NodeName {
		client.Close()
		return nil, fmt.Errorf("the etcd member is named %q, the Node %q: the member cannot be matched to its Node", em.Name, c.cfg.NodeName)
	}
	etcd, err := kube.NewEtcdFromPKI(kube.Layout{RootFS: c.cfg.Root}, em.ClientURLs)
	if err != nil {
		client.Close()
		return nil, fmt.Errorf("the etcd client (%s/etcd/ca.crt, apiserver-etcd-client.crt): %w", kube.Layout{RootFS: "/"}.PKIDir(), err)
	}
	m.Etcd, m.PeerURL = etcd, em.PeerURLs[0]
	return m, nil
}

// registered is Membership.Registered: the marker, or else the Node seen
// now (then the marker is written).
func (c *ControlPlane) registered(client *kube.Client) func(context.Context) bool {
	path := filepath.Join(c.cfg.StateDir, RegisteredFile)
	return func(ctx context.Context) bool {
		if b, err := os.ReadFile(path); err == nil && strings.TrimSpace(string(b)) == c.cfg.NodeName {
			return true
		}
		var n struct{}
		if err := client.Get(ctx, "/api/v1/nodes/"+c.cfg.NodeName, &n); err != nil {
			return false
		}
		if err := atomicfile.Write(path, []byte(c.cfg.NodeName+"\n"), 0o600, 0o700); err != nil {
			c.cfg.Log.Warn().Err(err).Msg("cannot record that this machine's Node is registered")
			return false
		}
		c.cfg.Log.Info().Str("node", c.cfg.NodeName).Msg("this control plane's Node is registered: its deletion will take its etcd member out")
		return true
	}
}

// stopStaticPods moves the control plane's static pod manifests out of
// the kubelet's manifests dir, as kubeadm reset removes them: the kubelet
// stops etcd (removed from the cluster, it would only fail) and the API
// server (whose etcd is gone), so the cluster's endpoint stops sending
// clients here. It returns the manifests moved.
func (c *ControlPlane) stopStaticPods() ([]string, error) {
	dst := c.cfg.path(LeftManifestsDir)
	if err := os.MkdirAll(dst, 0o700); err != nil {
		return nil, err
	}
	var moved []string
	var errs []error
	for _, f := range ControlPlaneManifests {
		err := os.Rename(c.cfg.path(ManifestsDir+"/"+f), filepath.Join(dst, f))
		switch {
		case err == nil:
			moved = append(moved, f)
		case !errors.Is(err, fs.ErrNotExist):
			errs = append(errs, err)
		}
	}
	return moved, errors.Join(errs...)
}
