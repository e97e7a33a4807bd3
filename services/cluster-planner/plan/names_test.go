package plan

import (
	"strings"
	"testing"

	"google.golang.org/protobuf/types/known/durationpb"

	capnv1 "github.com/capn-dev/capn/schemas/capn/v1alpha1"
	"github.com/capn-dev/capn/schemas/manifest"
)

func TestTemplateHash(t *testing.T) {
	tmpl := func(params map[string]string, fd string) *capnv1.MachineTemplate {
		return &capnv1.MachineTemplate{Parameters: params, FailureDomain: fd}
	}
	boot := &capnv1.BootstrapSpec{Provider: "kubeadm"}
	base := TemplateHash(RoleWorker, "sim", "v1.34.0", "linux", tmpl(map[string]string{"a": "1", "b": "2"}, "z1"), boot)

	// Pinned: a change of this value rolls every machine of every cluster
	// on upgrade. Change the encoding only with a migration plan.
	if base != "ee60ab996b" {
		t.Errorf("TemplateHash changed: %s", base)
	}
	if len(base) != 10 {
		t.Errorf("hash %q is not 10 characters", base)
	}

	same := []struct {
		name string
		hash string
	}{
		{"map order", TemplateHash(RoleWorker, "sim", "v1.34.0", "linux", tmpl(map[string]string{"b": "2", "a": "1"}, "z1"), boot)},
		{"token TTL", TemplateHash(RoleWorker, "sim", "v1.34.0", "linux", tmpl(map[string]string{"a": "1", "b": "2"}, "z1"),
			&capnv1.BootstrapSpec{Provider: "kubeadm", TokenTtl: durationpb.New(3600e9)})},
		// Like the token TTL, ignored preflight checks matter only while a
		// machine joins: changing them rolls no machine.
		{"ignored preflight checks", TemplateHash(RoleWorker, "sim", "v1.34.0", "linux", tmpl(map[string]string{"a": "1", "b": "2"}, "z1"),
			&capnv1.BootstrapSpec{Provider: "kubeadm", IgnorePreflightErrors: []string{"ImagePull"}})},
		// An os written as empty is linux: machines made before the field
		// keep their hash.
		{"empty os", TemplateHash(RoleWorker, "sim", "v1.34.0", "", tmpl(map[string]string{"a": "1", "b": "2"}, "z1"), boot)},
	}
	for _, tt := range same {
		if tt.hash != base {
			t.Errorf("%s changed the hash", tt.name)
		}
	}
	differ := []struct {
		name string
		hash string
	}{
		{"version", TemplateHash(RoleWorker, "sim", "v1.34.1", "linux", tmpl(map[string]string{"a": "1", "b": "2"}, "z1"), boot)},
		{"parameter", TemplateHash(RoleWorker, "sim", "v1.34.0", "linux", tmpl(map[string]string{"a": "1", "b": "3"}, "z1"), boot)},
		{"parameter split", TemplateHash(RoleWorker, "sim", "v1.34.0", "linux", tmpl(map[string]string{"a": "1b", "": "2"}, "z1"), boot)},
		{"failure domain", TemplateHash(RoleWorker, "sim", "v1.34.0", "linux", tmpl(map[string]string{"a": "1", "b": "2"}, "z2"), boot)},
		{"role", TemplateHash(RoleControlPlane, "sim", "v1.34.0", "linux", tmpl(map[string]string{"a": "1", "b": "2"}, "z1"), boot)},
		{"bootstrap provider", TemplateHash(RoleWorker, "sim", "v1.34.0", "linux", tmpl(map[string]string{"a": "1", "b": "2"}, "z1"), &capnv1.BootstrapSpec{Provider: "script"})},
		{"bootstrap command", TemplateHash(RoleWorker, "sim", "v1.34.0", "linux", tmpl(map[string]string{"a": "1", "b": "2"}, "z1"),
			&capnv1.BootstrapSpec{Provider: "kubeadm", PreCommands: []string{"echo hi"}})},
		{"os", TemplateHash(RoleWorker, "sim", "v1.34.0", "windows", tmpl(map[string]string{"a": "1", "b": "2"}, "z1"), boot)},
		{"bootstrap format", TemplateHash(RoleWorker, "sim", "v1.34.0", "linux", tmpl(map[string]string{"a": "1", "b": "2"}, "z1"),
			&capnv1.BootstrapSpec{Provider: "kubeadm", Format: "ignition"})},
		{"command timeout", TemplateHash(RoleWorker, "sim", "v1.34.0", "linux", tmpl(map[string]string{"a": "1", "b": "2"}, "z1"),
			&capnv1.BootstrapSpec{Provider: "kubeadm", CommandTimeout: durationpb.New(60e9)})},
	}
	for _, tt := range differ {
		if tt.hash == base {
			t.Errorf("%s did not change the hash", tt.name)
		}
	}
	if TemplateHash(RoleWorker, "sim", "v1.34.0", "", nil, nil) != TemplateHash(RoleWorker, "sim", "v1.34.0", "linux", &capnv1.MachineTemplate{}, &capnv1.BootstrapSpec{}) {
		t.Error("nil and empty template/bootstrap hash differently")
	}
}

func TestMachineName(t *testing.T) {
	if got := MachineName("demo", "md-0", "3f9a1c0d2e", 2); got != "demo-md-0-3f9a1-2" {
		t.Errorf("got %q", got)
	}
	long := strings.Repeat("c", 60)
	a := MachineName(long, "pool-a", "3f9a1c0d2e", 12)
	b := MachineName(long, "pool-b", "3f9a1c0d2e", 12)
	for _, n := range []string{a, b} {
		if len(n) > 63 || !manifest.IsDNSLabel(n) {
			t.Errorf("%q (%d characters) is not a DNS label", n, len(n))
		}
		if !strings.HasSuffix(n, "-3f9a1-12") {
			t.Errorf("%q lost its slot suffix", n)
		}
	}
	if a == b {
		t.Errorf("two pools share the name %q", a)
	}
	// A cluster name ending where the cut falls must not leave "--".
	if n := MachineName(strings.Repeat("a", 43)+"-b", "x", "3f9a1", 0); strings.Contains(n, "--") || !manifest.IsDNSLabel(n) {
		t.Errorf("bad cut: %q", n)
	}
}

func TestLowestFreeOrdinal(t *testing.T) {
	p := &planner{name: "demo", taken: map[string]bool{}}
	pl := &pool{name: "md-0", hash: "abcde12345"}
	for _, i := range []int{0, 1, 3} {
		p.taken[MachineName("demo", "md-0", pl.hash, i)] = true
	}
	// A record of another template with a colliding short hash is skipped too.
	if got := p.freeName(pl); got != "demo-md-0-abcde-2" {
		t.Errorf("got %s, want ordinal 2", got)
	}
	p.taken["demo-md-0-abcde-2"] = true
	if got := p.freeName(pl); got != "demo-md-0-abcde-4" {
		t.Errorf("got %s, want ordinal 4", got)
	}
}
