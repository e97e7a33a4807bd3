package kube_test

import (
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"github.com/capn-dev/capn/cmd/capn-node/kube"
	capnv1 "github.com/capn-dev/capn/schemas/capn/v1alpha1"
	"github.com/capn-dev/capn/services/bootstrapper/bootstrap"
	"github.com/capn-dev/capn/services/bootstrapper/bootstrap/bootstraptest"
)

func TestParsePorts(t *testing.T) {
	p, err := kube.ParsePorts("")
	if err != nil || p != kube.DefaultPorts {
		t.Fatalf("empty: %+v %v", p, err)
	}
	if p.String() != "etcd-client=2379,etcd-peer=2380,apiserver=6443,controller-manager=10257,scheduler=10259" {
		t.Errorf("String %s", p)
	}
	p, err = kube.ParsePorts("apiserver=7443, scheduler=7459")
	if err != nil || p.APIServer != 7443 || p.Scheduler != 7459 || p.EtcdClient != 2379 {
		t.Fatalf("partial: %+v %v", p, err)
	}
	if again, err := kube.ParsePorts(p.String()); err != nil || again != p {
		t.Errorf("round trip: %+v %v", again, err)
	}
	_, err = kube.ParsePorts("apiserver=0,etcd=1,kubelet,scheduler=2379")
	for _, want := range []string{"apiserver=0: want a port 1-65535", `"etcd=1": want name=port`, `"kubelet": want name=port`, "etcd-client and scheduler are both 2379"} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("error %v, want %q", err, want)
		}
	}
}

func flagValue(args []string, name string) (string, bool) {
	for _, a := range args {
		if v, ok := strings.CutPrefix(a, "--"+name+"="); ok {
			return v, true
		}
	}
	return "", false
}

func TestCommands(t *testing.T) {
	set := bootstraptest.PKI(t)
	cfg, dir := machine{Network: &capnv1.NetworkSpec{PodCidrs: []string{"10.32.0.0/16"}, ServiceCidrs: []string{"10.112.0.0/16"}}}.render(t, set)
	ports := kube.Ports{EtcdClient: 3379, EtcdPeer: 3380, APIServer: 7443, ControllerManager: 11257, Scheduler: 11259}
	o := kube.Options{BinDir: "/opt/kube/bin", DataDir: dir, Address: "127.0.0.5", Ports: ports}
	l := kube.Layout{RootFS: filepath.Join(dir, "rootfs")}
	plan, err := kube.Commands(cfg, o, l)
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]map[string]string{
		"etcd": {
			"name": "kl-cp-0", "listen-client-urls": "https://127.0.0.5:3379", "advertise-client-urls": "https://127.0.0.5:3379",
			"listen-peer-urls": "https://127.0.0.5:3380", "initial-advertise-peer-urls": "https://127.0.0.5:3380",
			"initial-cluster": "kl-cp-0=https://127.0.0.5:3380", "initial-cluster-state": "new",
			"client-cert-auth": "true", "peer-client-cert-auth": "true",
		},
		"kube-apiserver": {
			"advertise-address": "127.0.0.5", "bind-address": "127.0.0.5", "secure-port": "7443",
			"endpoint-reconciler-type": "none", "etcd-servers": "https://127.0.0.5:3379",
			"authorization-mode": "Node,RBAC", "enable-admission-plugins": "NodeRestriction", "enable-bootstrap-token-auth": "true",
			"service-cluster-ip-range": "10.112.0.0/16", "service-account-issuer": "https://kubernetes.default.svc.cluster.local",
			"requestheader-allowed-names": "front-proxy-client",
		},
		"kube-controller-manager": {
			"bind-address": "127.0.0.5", "secure-port": "11257", "leader-elect": "true",
			"controllers": "*,bootstrapsigner,tokencleaner", "use-service-account-credentials": "true",
			"allocate-node-cidrs": "true", "cluster-cidr": "10.32.0.0/16", "service-cluster-ip-range": "10.112.0.0/16", "cluster-name": "kl",
			"cluster-signing-cert-file": l.PKIDir() + "/ca.crt", "cluster-signing-key-file": l.PKIDir() + "/ca.key",
			"root-ca-file": l.PKIDir() + "/ca-bundle.crt", "service-account-private-key-file": l.PKIDir() + "/sa.key",
			"kubeconfig": l.KubeconfigPath("controller-manager"),
		},
		"kube-scheduler": {"bind-address": "127.0.0.5", "secure-port": "11259", "kubeconfig": l.KubeconfigPath("scheduler"), "leader-elect": "true"},
		"kwok": {
			"kubeconfig": l.AdminKubeconfig(), "config": l.KwokConfig(), "manage-single-node": "kl-cp-0", "node-ip": "127.0.0.5",
		},
	}
	all := append(plan.ControlPlane(), plan.Kwok)
	if len(all) != 5 {
		t.Fatalf("%d processes", len(all))
	}
	for _, p := range all {
		if p.Path != "/opt/kube/bin/"+p.Name {
			t.Errorf("%s: path %s", p.Name, p.Path)
		}
		for name, v := range want[p.Name] {
			if got, ok := flagValue(p.Args, name); !ok || got != v {
				t.Errorf("%s --%s = %q (set %v), want %q", p.Name, name, got, ok, v)
			}
		}
		for _, a := range p.Args {
			if strings.Contains(a, "0.0.0.0") || strings.Contains(a, "://127.0.0.1") {
				t.Errorf("%s: %s binds or points outside the machine's address", p.Name, a)
			}
			// Every file a flag names is inside the machine's data dir.
			if _, v, ok := strings.Cut(a, "="); ok && strings.HasPrefix(v, "/") && !strings.HasPrefix(v, dir) && !strings.HasPrefix(a, "--service-account-issuer") {
				t.Errorf("%s: %s is outside the data dir %s", p.Name, a, dir)
			}
		}
		if !slices.ContainsFunc(p.Env, func(e string) bool { return strings.HasPrefix(e, "HOME="+dir) }) {
			t.Errorf("%s: env %v has no HOME in the data dir", p.Name, p.Env)
		}
	}
	// The node CIDR mask fits the pod CIDR (/16 keeps the default /24).
	if _, ok := flagValue(plan.ControllerManager.Args, "node-cidr-mask-size"); ok {
		t.Error("node-cidr-mask-size set for a /16")
	}
	small, _ := machine{Network: &capnv1.NetworkSpec{PodCidrs: []string{"10.244.0.0/24"}}}.render(t, set)
	p2, _ := kube.Commands(small, o, l)
	if v, _ := flagValue(p2.ControllerManager.Args, "node-cidr-mask-size"); v != "26" {
		t.Errorf("node-cidr-mask-size for a /24 = %q, want 26", v)
	}

	// Every certificate, key and kubeconfig the flags name exists once
	// the leaves are issued.
	leaves, _ := kube.Leaves(cfg, netip.MustParseAddr("127.0.0.5"))
	if _, err := kube.IssueAll(l, "kl", "https://127.0.0.5:7443", leaves, time.Now()); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(l.KwokConfig(), kube.KwokStages, 0o644); err != nil {
		t.Fatal(err)
	}
	for _, p := range all {
		for _, a := range p.Args {
			_, v, _ := strings.Cut(a, "=")
			if strings.HasSuffix(v, ".crt") || strings.HasSuffix(v, ".key") || strings.HasSuffix(v, ".pub") || strings.HasSuffix(v, ".conf") || strings.HasSuffix(v, ".yaml") {
				if _, err := os.Stat(v); err != nil {
					t.Errorf("%s %s: %v", p.Name, a, err)
				}
			}
		}
	}
}

func TestKwokStages(t *testing.T) {
	s := string(kube.KwokStages)
	for _, name := range []string{"node-initialize", "node-heartbeat-with-lease", "pod-ready", "pod-complete", "pod-delete"} {
		if !strings.Contains(s, "  name: "+name+"\n") {
			t.Errorf("kwok config lacks stage %s", name)
		}
	}
	if n := strings.Count(s, "\nkind: Stage\n"); n != 5 {
		t.Errorf("%d stages", n)
	}
	// The node-initialize stage must keep the version the node side
	// registered.
	if !strings.Contains(s, "kubeletVersion: {{ or $nodeInfo.kubeletVersion $kwokVersion }}") {
		t.Error("node-initialize does not keep nodeInfo.kubeletVersion")
	}
}

func TestNewChecksOptions(t *testing.T) {
	set := bootstraptest.PKI(t)
	o := func(dir string) kube.Options {
		return kube.Options{BinDir: "/opt/kube/bin", DataDir: dir, Address: "127.0.0.1", Log: zerolog.Nop()}
	}
	cfg, dir := machine{Name: "kl-cp-1", Role: bootstrap.RoleControlPlane, First: false}.render(t, set)
	if _, err := kube.New(cfg, o(dir)); err != nil {
		t.Errorf("control plane joining: %v", err)
	}
	cfg, dir = machine{Name: "kl-md-0", Role: bootstrap.RoleWorker}.render(t, set)
	if _, err := kube.New(cfg, o(dir)); err != nil {
		t.Errorf("worker: %v", err)
	}
	cfg, dir = machine{}.render(t, set)
	if _, err := kube.New(cfg, o(dir)); err != nil {
		t.Errorf("first control plane: %v", err)
	}
	bad := o(dir)
	bad.Address, bad.BinDir = "localhost", "bin"
	_, err := kube.New(cfg, bad)
	for _, want := range []string{`address "localhost": want the machine's IP address`, `kube-bin "bin": want an absolute directory`} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("bad options: %v, want %q", err, want)
		}
	}
}

// fakeBin writes shell scripts standing in for the binaries; the
// Kubernetes ones print version.
func fakeBin(t *testing.T, version string, skip ...string) string {
	t.Helper()
	dir := t.TempDir()
	for _, b := range kube.Binaries {
		if slices.Contains(skip, b) {
			continue
		}
		script := "#!/bin/sh\necho 'Kubernetes " + version + "'\n"
		if err := os.WriteFile(filepath.Join(dir, b), []byte(script), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}

func TestCheckBinaries(t *testing.T) {
	ctx := t.Context()
	if err := kube.CheckBinaries(ctx, fakeBin(t, "v1.37.2"), "v1.37.2"); err != nil {
		t.Fatal(err)
	}
	dir := fakeBin(t, "v1.37.2")
	err := kube.CheckBinaries(ctx, dir, "v1.33.2")
	if err == nil || !strings.Contains(err.Error(), "kube-apiserver is Kubernetes v1.37.2, but the machine's kubernetesVersion is v1.33.2") {
		t.Fatalf("version mismatch: %v", err)
	}
	err = kube.CheckBinaries(ctx, fakeBin(t, "v1.37.2", "etcd", "kwok"), "v1.37.2")
	if err == nil || !strings.Contains(err.Error(), "has no etcd, kwok (build them with make kube)") {
		t.Fatalf("missing: %v", err)
	}
	if err := os.WriteFile(filepath.Join(dir, "kube-scheduler"), []byte("#!/bin/sh\necho hello\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	err = kube.CheckBinaries(ctx, dir, "v1.37.2")
	if err == nil || !strings.Contains(err.Error(), `kube-scheduler --version printed "hello", not Kubernetes vX.Y.Z`) {
		t.Fatalf("no version: %v", err)
	}
}
