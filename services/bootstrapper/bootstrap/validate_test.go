package bootstrap_test

import (
	"errors"
	"strings"
	"testing"
	"time"

	capnv1 "github.com/capn-dev/capn/schemas/capn/v1alpha1"
	"github.com/capn-dev/capn/services/bootstrapper/bootstrap"
	"github.com/capn-dev/capn/services/bootstrapper/bootstrap/bootstraptest"
	"github.com/capn-dev/capn/services/bootstrapper/bootstrap/builtin"
	"google.golang.org/protobuf/types/known/durationpb"
)

func TestLookup(t *testing.T) {
	r := builtin.Registry()
	for name, want := range map[string]string{"": "kubeadm", "kubeadm": "kubeadm", "script": "script"} {
		p, err := r.Lookup(name)
		if err != nil || p.Name() != want {
			t.Fatalf("Lookup(%q) = %v, %v; want %s", name, p, err, want)
		}
	}
	_, err := builtin.Lookup("foo")
	if !errors.Is(err, bootstrap.ErrUnknownProvider) || err.Error() != `unknown bootstrap provider "foo" (available: kube-local, kubeadm, script)` {
		t.Fatalf("Lookup(foo) error = %v", err)
	}
}

func TestNewRegistryRejects(t *testing.T) {
	k, _ := builtin.Lookup("kubeadm")
	if _, err := bootstrap.NewRegistry("kubeadm", k, k); err == nil {
		t.Error("duplicate provider accepted")
	}
	if _, err := bootstrap.NewRegistry("nope", k); err == nil || !strings.Contains(err.Error(), `default bootstrap provider "nope" is not registered (registered: kubeadm)`) {
		t.Errorf("unknown default: %v", err)
	}
}

func TestValidate(t *testing.T) {
	now := time.Now()
	set := bootstraptest.PKI(t)
	tests := []struct {
		name string
		spec *capnv1.BootstrapSpec
		want []string
	}{
		{"nil", nil, nil},
		{"full", bootstraptest.FullSpec("kubeadm"), nil},
		{"user CA", &capnv1.BootstrapSpec{Ca: &capnv1.CertificateAuthority{CertificatePem: string(set.CA.CertPEM), PrivateKeyPem: string(set.CA.KeyPEM)}}, nil},
		{"unknown provider", &capnv1.BootstrapSpec{Provider: "foo"},
			[]string{`spec.bootstrap.provider: unknown bootstrap provider "foo" (available: kube-local, kubeadm, script)`}},
		{"files", &capnv1.BootstrapSpec{Files: []*capnv1.File{
			{Path: ""}, {Path: "etc/x"}, {Path: "/a/../b"}, {Path: "/etc/kubernetes/pki/ca.key"}, {Path: "/run/capn/x"},
			{Path: "/etc/x", Permissions: "rw-r--r--", Owner: "root root"}, {Path: "/etc/x"}, nil,
		}}, []string{
			"spec.bootstrap.files[0].path: empty",
			`spec.bootstrap.files[1].path: "etc/x": want a clean absolute path`,
			`spec.bootstrap.files[2].path: "/a/../b": want a clean absolute path`,
			`spec.bootstrap.files[3].path: "/etc/kubernetes/pki/ca.key" is written by capn itself`,
			`spec.bootstrap.files[4].path: "/run/capn/x" is written by capn itself`,
			`spec.bootstrap.files[5].permissions: "rw-r--r--": want three or four octal digits like 0644`,
			`spec.bootstrap.files[5].owner: "root root": want user or user:group`,
			`spec.bootstrap.files[6].path: "/etc/x" already written by files[5]`,
			"spec.bootstrap.files[7]: null",
		}},
		{"file secret refs", &capnv1.BootstrapSpec{Files: []*capnv1.File{
			{Path: "/etc/a", SecretRef: &capnv1.FileSecretRef{Name: "tls", Key: "tls.key"}},
			{Path: "/etc/b", Content: "x", SecretRef: &capnv1.FileSecretRef{Name: "tls", Key: "ca"}},
			{Path: "/etc/c", SecretRef: &capnv1.FileSecretRef{Name: "", Key: "a b"}},
			{Path: "/etc/d", SecretRef: &capnv1.FileSecretRef{Name: "Bad_Name", Key: "k"}},
		}}, []string{
			"spec.bootstrap.files[1]: set one of content and secretRef, not both",
			`spec.bootstrap.files[2].secretRef.name: "": want a bootstrap secret's name`,
			`spec.bootstrap.files[2].secretRef.key: "a b": want the secret's key`,
			`spec.bootstrap.files[3].secretRef.name: "Bad_Name": want a bootstrap secret's name`,
		}},
		{"commands", &capnv1.BootstrapSpec{PreCommands: []string{"ok", " "}, PostCommands: []string{"a\x00b"}}, []string{
			"spec.bootstrap.preCommands[1]: empty command", "spec.bootstrap.postCommands[0]: contains a NUL byte",
		}},
		{"kubelet args", &capnv1.BootstrapSpec{KubeletExtraArgs: map[string]string{
			"--max-pods": "1", "Bad_Flag": "x", "node-labels": "a=b", "v": "2\n",
		}}, []string{
			`spec.bootstrap.kubeletExtraArgs["--max-pods"]: write the flag name without leading dashes`,
			`spec.bootstrap.kubeletExtraArgs["Bad_Flag"]: want a kubelet flag name`,
			`spec.bootstrap.kubeletExtraArgs["node-labels"]: set by capn; set node labels with the pool's labels`,
			`spec.bootstrap.kubeletExtraArgs["v"]: value contains a line break`,
		}},
		{"ignore preflight errors", &capnv1.BootstrapSpec{IgnorePreflightErrors: []string{"ImagePull", "imagepull", "--all", "all"}}, []string{
			`spec.bootstrap.ignorePreflightErrors[1]: "imagepull": given already as spec.bootstrap.ignorePreflightErrors[0]`,
			`spec.bootstrap.ignorePreflightErrors[2]: "--all": want a kubeadm preflight check's name`,
			`spec.bootstrap.ignorePreflightErrors: "all" ignores every check; give it alone`,
		}},
		{"format and command timeout", &capnv1.BootstrapSpec{Format: "yaml", CommandTimeout: durationpb.New(0)}, []string{
			`spec.bootstrap.format: "yaml": want cloud-config, script or ignition`,
			"spec.bootstrap.commandTimeout: 0s: want between 1s and 24h0m0s (unset: 5m0s)",
		}},
		{"capn's /etc/capn", &capnv1.BootstrapSpec{Files: []*capnv1.File{{Path: "/etc/capn/bootstrap.sh"}}}, []string{
			`spec.bootstrap.files[0].path: "/etc/capn/bootstrap.sh" is written by capn itself`,
		}},
		{"token ttl", &capnv1.BootstrapSpec{TokenTtl: durationpb.New(time.Second)}, []string{
			"spec.bootstrap.tokenTtl: token TTL 1s: want between 1m0s and 168h0m0s",
		}},
		{"CA: key for another cert", &capnv1.BootstrapSpec{Ca: &capnv1.CertificateAuthority{CertificatePem: string(set.CA.CertPEM), PrivateKeyPem: string(set.EtcdCA.KeyPEM)}}, []string{
			`spec.bootstrap.ca: private key does not match the public key of certificate "CN=kubernetes"`,
		}},
		{"CA: garbage", &capnv1.BootstrapSpec{Ca: &capnv1.CertificateAuthority{CertificatePem: "x", PrivateKeyPem: string(set.CA.CertPEM)}}, []string{
			"spec.bootstrap.ca.certificatePem: certificate: no PEM block found",
			`spec.bootstrap.ca.privateKeyPem: private key: PEM block is "CERTIFICATE"`,
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := builtin.Registry().Validate("spec.bootstrap", tt.spec, now)
			checkErrors(t, err, tt.want)
		})
	}
}

// checkErrors wants exactly the listed messages (as prefixes of lines).
func checkErrors(t *testing.T, err error, want []string) {
	t.Helper()
	if len(want) == 0 {
		if err != nil {
			t.Fatalf("unexpected error: %v", err)
		}
		return
	}
	if err == nil {
		t.Fatal("no error")
	}
	lines := strings.Split(err.Error(), "\n")
	if len(lines) != len(want) {
		t.Errorf("%d errors, want %d:\n%v", len(lines), len(want), err)
	}
	for _, w := range want {
		found := false
		for _, l := range lines {
			found = found || strings.HasPrefix(l, w)
		}
		if !found {
			t.Errorf("no error starting %q in:\n%v", w, err)
		}
	}
	for _, l := range lines {
		if strings.Contains(l, "PRIVATE KEY-----") || strings.Contains(l, "MHcCAQEE") {
			t.Fatalf("error leaks key material: %s", l)
		}
	}
}

func TestValidateCluster(t *testing.T) {
	now := time.Now()
	set := bootstraptest.PKI(t)
	tests := []struct {
		name string
		spec *capnv1.ClusterSpec
		want []string
	}{
		{"empty", &capnv1.ClusterSpec{}, nil},
		{"script pool inherits files", &capnv1.ClusterSpec{
			Bootstrap:   &capnv1.BootstrapSpec{Files: bootstraptest.FullSpec("").Files},
			WorkerPools: []*capnv1.WorkerPool{{Name: "a", Bootstrap: &capnv1.BootstrapSpec{Provider: "script", UserData: "#!/bin/sh\n"}}},
		}, nil},
		{"script pool inherits commands", &capnv1.ClusterSpec{
			Bootstrap:   &capnv1.BootstrapSpec{PreCommands: []string{"x"}},
			WorkerPools: []*capnv1.WorkerPool{{Name: "a"}, {Name: "b", Bootstrap: &capnv1.BootstrapSpec{Provider: "script", UserData: "#!/bin/sh\n"}}},
		}, []string{"spec.workerPools[1].bootstrap.preCommands: the script provider runs userData as is"}},
		{"script cluster, kubeadm control plane", &capnv1.ClusterSpec{
			Bootstrap:    &capnv1.BootstrapSpec{Provider: "script", UserData: "#cloud-config\n"},
			ControlPlane: &capnv1.ControlPlaneSpec{Bootstrap: &capnv1.BootstrapSpec{Provider: "kubeadm"}},
			WorkerPools:  []*capnv1.WorkerPool{{Name: "a"}},
		}, nil},
		{"kubeadm pool with user data", &capnv1.ClusterSpec{
			WorkerPools: []*capnv1.WorkerPool{{Name: "a", Bootstrap: &capnv1.BootstrapSpec{UserData: "#!/bin/sh\n"}}},
		}, []string{"spec.workerPools[0].bootstrap.userData: only the script provider reads userData"}},
		{"windows pool", &capnv1.ClusterSpec{
			WorkerPools: []*capnv1.WorkerPool{{Name: "win", Os: "windows", Bootstrap: bootstraptest.WindowsSpec("kubeadm")}},
		}, nil},
		{"windows pool, linux paths and modes", &capnv1.ClusterSpec{
			WorkerPools: []*capnv1.WorkerPool{{Name: "win", Os: "windows", Bootstrap: &capnv1.BootstrapSpec{Files: []*capnv1.File{
				{Path: "/etc/x"}, {Path: `C:\k\a`, Permissions: "0600", Owner: "root"}, {Path: `c:/K/A`}, {Path: `C:\capn\bootstrap.ps1`}, {Path: `C:\k\..\x`},
			}}}},
		}, []string{
			`spec.workerPools[0].bootstrap.files[0].path: "/etc/x": a windows machine needs a drive path such as C:\k\config.yaml`,
			`spec.workerPools[0].bootstrap.files[1].permissions: "0600": windows files have ACLs, not modes`,
			`spec.workerPools[0].bootstrap.files[1].owner: "root": cloudbase-init writes windows files as its own user`,
			`spec.workerPools[0].bootstrap.files[2].path: "c:/K/A" already written by files[1]`,
			`spec.workerPools[0].bootstrap.files[3].path: "C:\\capn\\bootstrap.ps1" is written by capn itself`,
			`spec.workerPools[0].bootstrap.files[4].path: "C:\\k\\..\\x": a windows machine needs a drive path`,
		}},
		{"windows pool inherits linux commands", &capnv1.ClusterSpec{
			Bootstrap:   &capnv1.BootstrapSpec{PreCommands: []string{"sysctl --system"}},
			WorkerPools: []*capnv1.WorkerPool{{Name: "lin"}, {Name: "win", Os: "windows"}},
		}, []string{"spec.workerPools[1].os: windows: the pool would inherit the files, preCommands and postCommands of spec.bootstrap"}},
		{"windows pool on a linux-only provider", &capnv1.ClusterSpec{
			WorkerPools: []*capnv1.WorkerPool{{Name: "win", Os: "windows", Bootstrap: &capnv1.BootstrapSpec{Provider: "kube-local"}}},
		}, []string{"spec.workerPools[0].os: windows machines are not rendered by the kube-local bootstrap provider (it renders linux only); use the kubeadm provider"}},
		{"windows control plane, bad os", &capnv1.ClusterSpec{
			ControlPlane: &capnv1.ControlPlaneSpec{Os: "windows"},
			WorkerPools:  []*capnv1.WorkerPool{{Name: "mac", Os: "darwin"}},
		}, []string{
			`spec.controlPlane.os: "windows": the control plane runs on linux only (as in Cluster API); put windows nodes in a worker pool`,
			`spec.workerPools[0].os: "darwin": want linux or windows`,
		}},
		{"ignition pool, script format for kubeadm", &capnv1.ClusterSpec{
			Bootstrap:   &capnv1.BootstrapSpec{Format: "ignition"},
			WorkerPools: []*capnv1.WorkerPool{{Name: "a", Bootstrap: &capnv1.BootstrapSpec{Format: "script"}}},
		}, []string{`spec.workerPools[0].bootstrap.format: "script": the kubeadm provider renders cloud-config or ignition`}},
		{"every level checked", &capnv1.ClusterSpec{
			Bootstrap:    &capnv1.BootstrapSpec{Provider: "foo"},
			ControlPlane: &capnv1.ControlPlaneSpec{Bootstrap: &capnv1.BootstrapSpec{Ca: &capnv1.CertificateAuthority{CertificatePem: string(set.CA.CertPEM), PrivateKeyPem: string(set.CA.KeyPEM)}}},
			WorkerPools: []*capnv1.WorkerPool{{
				Name: "a", Labels: map[string]string{"node-role.kubernetes.io/worker": ""},
				Taints:    []*capnv1.Taint{{Key: "k", Effect: "Sometimes"}},
				Bootstrap: &capnv1.BootstrapSpec{Provider: "bar"},
			}},
		}, []string{
			`spec.bootstrap.provider: unknown bootstrap provider "foo"`,
			`spec.workerPools[0].labels["node-role.kubernetes.io/worker"]: a kubelet may not set labels`,
			`spec.workerPools[0].taints[0].effect "Sometimes": want one of NoSchedule, PreferNoSchedule, NoExecute`,
			"spec.controlPlane.bootstrap.ca: the CA is cluster-wide; set it at spec.bootstrap.ca",
			`spec.workerPools[0].bootstrap.provider: unknown bootstrap provider "bar"`,
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			checkErrors(t, builtin.Registry().ValidateCluster(tt.spec, now), tt.want)
		})
	}
}

func TestValidateLabelsAndTaints(t *testing.T) {
	labels := map[string]string{
		"tier": "web", "example.com/team": "a", "node.kubernetes.io/pool": "x", "kubernetes.io/arch": "amd64",
		"sub.kubelet.kubernetes.io/x": "", "node-role.kubernetes.io/worker": "", "k8s.io/x": "",
		"Bad_Prefix.com/x": "", "v": "bad value", "": "",
	}
	errs := bootstrap.ValidateLabels("labels", labels)
	checkErrors(t, errors.Join(errs...), []string{
		`labels["node-role.kubernetes.io/worker"]: a kubelet may not set`,
		`labels["k8s.io/x"]: a kubelet may not set`,
		`labels["Bad_Prefix.com/x"]: key "Bad_Prefix.com/x": the prefix must be a lowercase DNS subdomain`,
		`labels["v"]: value "bad value": want at most 63 characters`,
		`labels[""]: key "": the name must be 1-63 characters`,
	})
	taints := []*capnv1.Taint{
		{Key: "a", Effect: "NoSchedule"}, {Key: "a", Effect: "NoSchedule"}, {Key: "a", Value: "x y", Effect: "NoExecute"},
	}
	checkErrors(t, errors.Join(bootstrap.ValidateTaints("taints", taints)...), []string{
		"taints[1]: taint a:NoSchedule given twice",
		`taints[2].value: value "x y"`,
	})
	if got := bootstrap.NodeLabelsArg(map[string]string{"b": "2", "a": "1"}); got != "a=1,b=2" {
		t.Fatalf("NodeLabelsArg = %q", got)
	}
}
