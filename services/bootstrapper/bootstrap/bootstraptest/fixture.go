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
	// OS is the machine's operating system ("": linux).
	OS bootstrap.OS
}

// The three machines every provider renders for, and the Windows worker
// a provider that renders Windows machines renders for too.
var (
	Init          = Machine{Role: bootstrap.RoleControlPlane, FirstControlPlane: true}
	JoinControl   = Machine{Role: bootstrap.RoleControlPlane}
	JoinWorker    = Machine{Role: bootstrap.RoleWorker}
	WindowsWorker = Machine{Role: bootstrap.RoleWorker, OS: bootstrap.OSWindows}
)

// Name of a machine kind, for subtest names.
func (m Machine) Name() string {
	switch {
	case m.OS == bootstrap.OSWindows:
		return "windows-worker-join"
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
	switch {
	case m.Role == bootstrap.RoleControlPlane:
		name = "prod-1-cp-abcde"
	case m.OS == bootstrap.OSWindows:
		name = "prod-1-win-abcde"
	}
	in, err := bootstrap.NewInput(&capnv1.GenerateBootstrap{
		Cluster:           "prod-1",
		Machine:           name,
		Role:              string(m.Role),
		FirstControlPlane: m.FirstControlPlane,
		Os:                string(m.OS),
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

// WindowsSpec fills every common field for a Windows pool: files under
// C:\ (one with content that needs quoting; no owner or permissions, which
// Windows files do not take), PowerShell pre and post
// commands (with quotes and braces of their own), kubelet extra args.
func WindowsSpec(provider string) *capnv1.BootstrapSpec {
	return &capnv1.BootstrapSpec{
		Provider: provider,
		Files: []*capnv1.File{
			{Path: `C:\k\containerd-config.toml`, Content: "version = 2\n[plugins]\n"},
			{Path: "C:/k/tricky.ps1", Content: "Write-Output 'it''s \"quoted\"' # { not closed\n"},
		},
		PreCommands:      []string{"Set-Content -Path C:\\k\\pre.txt -Value 'pre: done'", "if ($true) { Write-Output \"brace { in a string\" }"},
		PostCommands:     []string{"Write-Output 'post'", "New-Item -ItemType File -Force -Path C:\\k\\post.txt"},
		KubeletExtraArgs: map[string]string{"max-pods": "64", "v": "2"},
	}
}

// Labels and Taints used by the suite.
var (
	Labels = map[string]string{"node.kubernetes.io/pool": "md-0", "tier": "web", "example.com/team": "a"}
	Taints = []*capnv1.Taint{{Key: "dedicated", Value: "web", Effect: "NoSchedule"}, {Key: "example.com/gpu", Effect: "NoExecute"}}
)
