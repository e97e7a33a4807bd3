package agent

import (
	"context"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"sync"

	"github.com/capn-dev/capn/cmd/capn-node/kube"
	"github.com/capn-dev/capn/cmd/capn-node/kubeadm"
	"github.com/capn-dev/capn/schemas/keys"
	"github.com/capn-dev/capn/schemas/nodecapacity"
	"github.com/capn-dev/capn/services/bootstrapper/bootstrap/kubelocal"
)

// The node condition the agent reports about its control plane.
const (
	ConditionKubeControlPlane = "KubeControlPlane"
	// ConditionsKind is the last token of the conditions subject.
	ConditionsKind = keys.HealthConditions
)

// KubeRuntime is what the agent needs of a control-plane runtime
// (kube.Runtime).
type KubeRuntime interface {
	Run(ctx context.Context) error
	Ready() bool
	Condition() (kube.Condition, int)
	// EtcdConditions are the etcd membership's conditions
	// (EtcdMemberRemoved while the machine leaves, EtcdMembersHealthy),
	// sent beside KubeControlPlane.
	EtcdConditions() []kube.NamedCondition
}

// kubeState is the machine's control plane as the agent sees it: the
// runtime, or why there is none.
type kubeState struct {
	rt   KubeRuntime
	mu   sync.Mutex
	fail *kube.Condition
}

func (k *kubeState) failed(reason string, err error) {
	k.mu.Lock()
	defer k.mu.Unlock()
	k.fail = &kube.Condition{Status: "False", Reason: reason, Message: err.Error()}
}

func (k *kubeState) ready() bool {
	k.mu.Lock()
	failed := k.fail != nil
	k.mu.Unlock()
	return !failed && k.rt != nil && k.rt.Ready()
}

// conditions are KubeControlPlane first, then the etcd ones.
func (k *kubeState) conditions() []kube.NamedCondition {
	k.mu.Lock()
	defer k.mu.Unlock()
	if k.fail != nil {
		return []kube.NamedCondition{{Type: ConditionKubeControlPlane, Condition: *k.fail}}
	}
	c, _ := k.rt.Condition()
	return append([]kube.NamedCondition{{Type: ConditionKubeControlPlane, Condition: c}}, k.rt.EtcdConditions()...)
}

// startKube runs the control plane when the applied data is kube-local's
// and the agent has --kube-bin (on a real node: startKubeadm). The channel is closed once every child is
// stopped (at once when nothing runs).
func (a *Agent) startKube(ctx context.Context) <-chan struct{} {
	if a.cfg.RunCloudConfig {
		return a.startKubeadm(ctx)
	}
	done := make(chan struct{})
	path := filepath.Join(a.cfg.DataDir, RootFS, kubelocal.ConfigPath)
	raw, err := os.ReadFile(path)
	if errors.Is(err, fs.ErrNotExist) {
		close(done)
		return done
	}
	if a.cfg.KubeBin == "" {
		a.log.Warn().Str("config", kubelocal.ConfigPath).
			Msg("the bootstrap data is the kube-local provider's, but this agent has no --kube-bin: no Kubernetes runs here (heartbeats say ready once bootstrapped)")
		close(done)
		return done
	}
	ks := &kubeState{}
	fail := func(reason string, err error) <-chan struct{} {
		a.log.Error().Err(err).Str("reason", reason).Msg("the control plane does not run")
		ks.failed(reason, err)
		a.kube.Store(ks)
		close(done)
		return done
	}
	if err != nil {
		return fail("InvalidConfig", err)
	}
	cfg, err := kubelocal.Parse(raw)
	if err != nil {
		return fail("InvalidConfig", err)
	}
	ports, err := kube.ParsePorts(a.cfg.KubePorts)
	if err != nil {
		return fail("InvalidConfig", err)
	}
	var capacity map[string]string
	if a.cfg.NodeCapacity != "" {
		capacity, _ = nodecapacity.Parse(a.cfg.NodeCapacity) // Validate refused a bad one
	}
	rt, err := a.newKube(cfg, kube.Options{
		BinDir: a.cfg.KubeBin, DataDir: a.cfg.DataDir, Address: a.cfg.Address, ProviderID: a.cfg.ProviderID, Capacity: capacity,
		Ports: ports, LearnerTimeout: a.cfg.EtcdLearnerTimeout, Log: a.log.With().Str("component", "kube").Logger(),
	})
	if err != nil {
		return fail("Failed", err)
	}
	ks.rt = rt
	a.kube.Store(ks)
	a.log.Info().Str("kube_bin", a.cfg.KubeBin).Str("address", a.cfg.Address).Str("node", cfg.NodeName).
		Str("version", cfg.KubernetesVersion).Msg("running the control plane (kube-local)")
	go func() {
		defer close(done)
		if err := rt.Run(ctx); err != nil {
			a.log.Error().Err(err).Msg("the control plane stopped")
			ks.failed("Failed", err)
		}
	}()
	return done
}

// startKubeadm keeps the etcd member of a real node that kubeadm made a
// control plane (package kubeadm): it leaves etcd once its Node is
// deleted, and sweeps the members of control planes that vanished. The
// channel is closed once it stops (at once on a worker).
func (a *Agent) startKubeadm(ctx context.Context) <-chan struct{} {
	done := make(chan struct{})
	root := a.cloudConfigRoot
	if root == "" {
		root = "/"
	}
	cfg := kubeadm.Config{Root: root, StateDir: filepath.Join(a.cfg.DataDir, StateDir), NodeName: a.cfg.NodeName,
		LearnerTimeout: a.cfg.EtcdLearnerTimeout, Log: a.log.With().Str("component", "kubeadm").Logger()}
	if !kubeadm.IsControlPlane(cfg) {
		close(done)
		return done
	}
	cp := kubeadm.New(cfg)
	a.kubeadm.Store(cp)
	go func() {
		defer close(done)
		cp.Run(ctx)
	}()
	return done
}
