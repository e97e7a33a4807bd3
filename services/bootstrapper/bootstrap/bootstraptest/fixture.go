// Package bootstraptest is the conformance suite every bootstrap provider
// must pass, and the fixtures to test one with.
package bootstraptest

import (
	"sync"
	"testing"
	"time"

	capnv1 "github.com/capn-dev/capn/schemas/capn/v1alpha1"
	"github.com/capn-dev/capn/secrets/pki"
	"github.com/capn-dev/capn/secrets/token"
	"github.com/capn-dev/capn/services/bootstrapper/bootstrap"
)

var (
	setOnce sync.Once
	set     pki.Set
	setErr  error
)

// PKI is a cluster PKI made once per test binary.
func PKI(t testing.TB) pki.Set {
	t.Helper()
	setOnce.Do(func() { set, _, setErr = pki.Ensure(pki.Set{}, pki.Options{Now: time.Now()}) })
	if setErr != nil {
		t.Fatal(setErr)
	}
	return set
}

// Token is a fixed, valid bootstrap token.
var Token = token.Token{ID: "abcdef", Secret: "0123456789abcdef"}

// Machine describes the machine an Input is for.
type Machine struct {
	Role              bootstrap.Role
	FirstControlPlane bool
}

// The three machines every provider renders for.
var (
	Init        = Machine{bootstrap.RoleControlPlane, true}
	JoinControl = Machine{bootstrap.RoleControlPlane, false}
	JoinWorker  = Machine{bootstrap.RoleWorker, false}
)

// Name of a machine kind, for subtest names.
func (m Machine) Name() string {
	switch {
	case m.FirstControlPlane:
		return "init"
	case m.Role == bootstrap.RoleControlPlane:
		return "control-plane-join"
	default:
		return "worker-join"
	}
}

// NewInput builds a valid Input through bootstrap.NewInput (so the PKI is
// cut to the role as in the service) for spec, with labels and taints.
func NewInput(t testing.TB, m Machine, spec *capnv1.BootstrapSpec, labels map[string]string, taints []*capnv1.Taint) bootstrap.Input {
	t.Helper()
	name := "prod-1-md-0-abcde"
	if m.Role == bootstrap.RoleControlPlane {
		name = "prod-1-cp-abcde"
	}
	in, err := bootstrap.NewInput(&capnv1.GenerateBootstrap{
		Cluster:           "prod-1",
		Machine:           name,
		Role:              string(m.Role),
		FirstControlPlane: m.FirstControlPlane,
		Version:           "v1.33.2",
		Bootstrap:         spec,
		Labels:            labels,
		Taints:            taints,
	}, bootstrap.Cluster{
		Endpoint: bootstrap.Endpoint{Host: "api.prod-1.example.com", Port: 6443},
		Network: &capnv1.NetworkSpec{
			PodCidrs:      []string{"10.244.0.0/16"},
			ServiceCidrs:  []string{"10.96.0.0/12"},
			ServiceDomain: "cluster.local",
		},
		PKI: PKI(t),
	}, Token)
	if err != nil {
		t.Fatal(err)
	}
	return in
}

// FullSpec fills every common field: files (one with content that needs
// quoting), pre and post commands, kubelet extra args.
func FullSpec(provider string) *capnv1.BootstrapSpec {
	return &capnv1.BootstrapSpec{
		Provider: provider,
		Files: []*capnv1.File{
			{Path: "/etc/sysctl.d/99-k8s.conf", Content: "net.ipv4.ip_forward = 1\n", Owner: "root:root", Permissions: "0644"},
			{Path: "/opt/tricky.yaml", Content: "key: 'value' # \"quoted\"\n---\n- a: |\n  b\n\ttab \x01 ünïcode\n", Permissions: "600"},
		},
		PreCommands:      []string{"sysctl --system", "echo 'pre: done' > /tmp/pre"},
		PostCommands:     []string{"echo \"post\" # comment", "touch /tmp/post"},
		KubeletExtraArgs: map[string]string{"max-pods": "110", "cgroup-driver": "systemd", "eviction-hard": "memory.available<100Mi"},
	}
}

// Labels and Taints used by the suite.
var (
	Labels = map[string]string{"node.kubernetes.io/pool": "md-0", "tier": "web", "example.com/team": "a"}
	Taints = []*capnv1.Taint{{Key: "dedicated", Value: "web", Effect: "NoSchedule"}, {Key: "example.com/gpu", Effect: "NoExecute"}}
)
