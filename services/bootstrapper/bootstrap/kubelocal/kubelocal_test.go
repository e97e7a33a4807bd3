package kubelocal_test

import (
	"bytes"
	"encoding/base64"
	"maps"
	"slices"
	"strings"
	"testing"
	"time"

	"google.golang.org/protobuf/types/known/durationpb"

	capnv1 "github.com/capn-dev/capn/schemas/capn/v1alpha1"
	"github.com/capn-dev/capn/services/bootstrapper/bootstrap"
	"github.com/capn-dev/capn/services/bootstrapper/bootstrap/bootstraptest"
	"github.com/capn-dev/capn/services/bootstrapper/bootstrap/builtin"
	"github.com/capn-dev/capn/services/bootstrapper/bootstrap/kubelocal"
	yaml "go.yaml.in/yaml/v2"
)

var filesOnly = &capnv1.BootstrapSpec{Provider: kubelocal.Name, Files: bootstraptest.FullSpec("").Files}

func TestConformance(t *testing.T) {
	bootstraptest.Run(t, kubelocal.New(), bootstraptest.Features{
		Specs: map[string]*capnv1.BootstrapSpec{
			"minimal":  {Provider: kubelocal.Name},
			"files":    filesOnly,
			"commands": {Provider: kubelocal.Name, PreCommands: []string{"echo 'pre'"}, PostCommands: []string{"touch /tmp/post"}, CommandTimeout: durationpb.New(42 * time.Second)},
		},
		Check: checkDocument,
	})
}

func TestSelectedByName(t *testing.T) {
	p, err := builtin.Lookup("kube-local")
	if err != nil || p.Name() != kubelocal.Name {
		t.Fatalf("builtin.Lookup(kube-local) = %v, %v", p, err)
	}
	in := bootstraptest.NewInput(t, bootstraptest.Init, &capnv1.BootstrapSpec{Provider: "kube-local"}, nil, nil)
	out, err := builtin.Registry().Render(in)
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := decode(t, out)[kubelocal.ConfigPath]; !ok {
		t.Fatal("the registry did not render with kube-local")
	}
}

// decode reads write_files back: path -> content, checking the encoding
// and that keys are root-only.
func decode(t *testing.T, out bootstrap.Output) map[string][]byte {
	t.Helper()
	var cc struct {
		WriteFiles []struct {
			Path, Owner, Permissions, Encoding, Content string
		} `yaml:"write_files"`
		RunCmd []string `yaml:"runcmd"`
	}
	if err := yaml.Unmarshal(out.Data, &cc); err != nil {
		t.Fatal(err)
	}
	if len(cc.RunCmd) != 0 {
		t.Errorf("runcmd %q: kube-local runs no commands", cc.RunCmd)
	}
	files := map[string][]byte{}
	for _, f := range cc.WriteFiles {
		if f.Encoding != "b64" {
			t.Errorf("%s: encoding %q", f.Path, f.Encoding)
		}
		b, err := base64.StdEncoding.DecodeString(f.Content)
		if err != nil {
			t.Fatalf("%s: %v", f.Path, err)
		}
		if _, dup := files[f.Path]; dup {
			t.Errorf("%s written twice", f.Path)
		}
		files[f.Path] = b
		if (strings.HasSuffix(f.Path, ".key") || f.Path == kubelocal.ConfigPath) && f.Permissions != "0600" {
			t.Errorf("%s: permissions %s, want 0600", f.Path, f.Permissions)
		}
	}
	return files
}

func checkDocument(t *testing.T, in bootstrap.Input, out bootstrap.Output) {
	files := decode(t, out)
	var want []string
	if in.Role == bootstrap.RoleControlPlane {
		want = []string{"ca.crt", "ca.key", "etcd/ca.crt", "etcd/ca.key", "front-proxy-ca.crt", "front-proxy-ca.key", "sa.pub", "sa.key"}
	} else {
		want = []string{"ca.crt"}
	}
	var got []string
	for p := range files {
		if name, ok := strings.CutPrefix(p, "/etc/kubernetes/pki/"); ok {
			got = append(got, name)
		}
	}
	slices.Sort(got)
	slices.Sort(want)
	if !slices.Equal(got, want) {
		t.Errorf("PKI files %v, want %v", got, want)
	}
	if !bytes.Equal(files["/etc/kubernetes/pki/ca.crt"], in.PKI.CACert) {
		t.Error("ca.crt is not the cluster CA certificate")
	}
	for _, f := range in.Spec.GetFiles() {
		if string(files[f.GetPath()]) != f.GetContent() {
			t.Errorf("user file %s did not round-trip", f.GetPath())
		}
	}
	cfg, err := kubelocal.Parse(files[kubelocal.ConfigPath])
	if err != nil {
		t.Fatalf("the rendered node config does not parse: %v", err)
	}
	if cfg.NodeName != in.Machine || cfg.Role != string(in.Role) || cfg.FirstControlPlane != in.FirstControlPlane ||
		cfg.Cluster != in.Cluster || cfg.CACertHash != in.CACertHash || cfg.BootstrapToken != in.Token.Value() {
		t.Errorf("identity or join material differs from the input: %+v", cfg)
	}
	// The node side runs the commands itself: they travel in the config.
	if !slices.Equal(cfg.PreCommands, in.Spec.GetPreCommands()) || !slices.Equal(cfg.PostCommands, in.Spec.GetPostCommands()) ||
		cfg.Timeout() != bootstrap.CommandTimeout(in.Spec) {
		t.Errorf("commands %q %q timeout %s, want %q %q %s", cfg.PreCommands, cfg.PostCommands, cfg.Timeout(),
			in.Spec.GetPreCommands(), in.Spec.GetPostCommands(), bootstrap.CommandTimeout(in.Spec))
	}
}

func renderConfig(t *testing.T, in bootstrap.Input) (*kubelocal.NodeConfig, []byte) {
	t.Helper()
	out, err := kubelocal.New().Render(in)
	if err != nil {
		t.Fatal(err)
	}
	raw := decode(t, out)[kubelocal.ConfigPath]
	cfg, err := kubelocal.Parse(raw)
	if err != nil {
		t.Fatal(err)
	}
	return cfg, raw
}

func TestControlPlaneAndWorkerMaterial(t *testing.T) {
	set := bootstraptest.PKI(t)
	keys := [][]byte{set.CA.KeyPEM, set.EtcdCA.KeyPEM, set.FrontProxyCA.KeyPEM, set.ServiceAccount.PrivatePEM}
	for _, m := range []bootstraptest.Machine{bootstraptest.Init, bootstraptest.JoinControl, bootstraptest.JoinWorker} {
		t.Run(m.Name(), func(t *testing.T) {
			in := bootstraptest.NewInput(t, m, &capnv1.BootstrapSpec{}, nil, nil)
			out, err := kubelocal.New().Render(in)
			if err != nil {
				t.Fatal(err)
			}
			files := decode(t, out)
			hasKeys := false
			for p, content := range files {
				if strings.Contains(string(content), "PRIVATE KEY") {
					hasKeys = true
					if m.Role == bootstrap.RoleWorker {
						t.Errorf("worker gets a private key at %s", p)
					}
				}
			}
			for _, k := range keys {
				if bytes.Contains(out.Data, []byte(base64.StdEncoding.EncodeToString(k))) != (m.Role == bootstrap.RoleControlPlane) {
					t.Errorf("role %s: a cluster key present = %v", m.Role, !(m.Role == bootstrap.RoleControlPlane))
				}
			}
			if hasKeys != (m.Role == bootstrap.RoleControlPlane) {
				t.Errorf("role %s: private keys present = %v", m.Role, hasKeys)
			}
			if string(files["/etc/kubernetes/pki/sa.key"]) != string(in.PKI.ServiceAccountKey) {
				t.Error("sa.key is not the input's service-account key")
			}
			cfg, _ := renderConfig(t, in)
			if cfg.Role != string(m.Role) || cfg.FirstControlPlane != m.FirstControlPlane {
				t.Errorf("role %s first %v", cfg.Role, cfg.FirstControlPlane)
			}
		})
	}
}

func TestDeterministic(t *testing.T) {
	labels := map[string]string{"a": "1", "b": "2", "c": "3", "d": "4", "e": "5", "tier": "web"}
	first, err := kubelocal.New().Render(bootstraptest.NewInput(t, bootstraptest.Init, filesOnly, labels, bootstraptest.Taints))
	if err != nil {
		t.Fatal(err)
	}
	for range 20 {
		again, err := kubelocal.New().Render(bootstraptest.NewInput(t, bootstraptest.Init, filesOnly, maps.Clone(labels), bootstraptest.Taints))
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(first.Data, again.Data) {
			t.Fatalf("two renders of one input differ:\n%s\n---\n%s", first.Data, again.Data)
		}
	}
}

func TestCarriesVersionNetworkLabelsTaints(t *testing.T) {
	in := bootstraptest.NewInput(t, bootstraptest.JoinWorker, &capnv1.BootstrapSpec{}, bootstraptest.Labels, bootstraptest.Taints)
	in.Network = &capnv1.NetworkSpec{PodCidrs: []string{"192.168.0.0/16"}, ServiceCidrs: []string{"10.128.0.0/16"}, ServiceDomain: "corp.internal"}
	cfg, raw := renderConfig(t, in)
	want := kubelocal.NodeConfig{
		APIVersion: "capn.dev/kube-local/v1alpha1", Kind: "NodeConfig",
		Cluster: "prod-1", NodeName: "prod-1-md-0-abcde", Role: "worker",
		KubernetesVersion: "v1.33.2",
		Endpoint:          kubelocal.Endpoint{Host: "api.prod-1.example.com", Port: 6443},
		ServiceCIDR:       "10.128.0.0/16", PodCIDR: "192.168.0.0/16", DNSDomain: "corp.internal",
		BootstrapToken: bootstraptest.Token.Value(), TokenTTL: "15m0s", CACertHash: in.CACertHash,
		Labels: bootstraptest.Labels,
		Taints: []kubelocal.Taint{{Key: "dedicated", Value: "web", Effect: "NoSchedule"}, {Key: "example.com/gpu", Effect: "NoExecute"}},
	}
	if cfg.APIVersion != want.APIVersion || cfg.Kind != want.Kind || cfg.Cluster != want.Cluster || cfg.NodeName != want.NodeName ||
		cfg.Role != want.Role || cfg.FirstControlPlane || cfg.KubernetesVersion != want.KubernetesVersion || cfg.Endpoint != want.Endpoint ||
		cfg.ServiceCIDR != want.ServiceCIDR || cfg.PodCIDR != want.PodCIDR || cfg.DNSDomain != want.DNSDomain ||
		cfg.BootstrapToken != want.BootstrapToken || cfg.TokenTTL != want.TokenTTL || cfg.CACertHash != want.CACertHash ||
		!maps.Equal(cfg.Labels, want.Labels) || !slices.Equal(cfg.Taints, want.Taints) {
		t.Errorf("node config\n%s\nwant\n%+v", raw, want)
	}
	// The JSON is for people too: the labels appear sorted.
	if i, j := bytes.Index(raw, []byte(`"example.com/team"`)), bytes.Index(raw, []byte(`"tier"`)); i < 0 || j < i {
		t.Errorf("labels not sorted:\n%s", raw)
	}
}

func TestDefaults(t *testing.T) {
	in := bootstraptest.NewInput(t, bootstraptest.Init, &capnv1.BootstrapSpec{}, nil, nil)
	in.Network = nil
	cfg, _ := renderConfig(t, in)
	if cfg.ServiceCIDR != "10.96.0.0/12" || cfg.PodCIDR != "10.244.0.0/16" || cfg.DNSDomain != "cluster.local" {
		t.Errorf("network defaults %s %s %s", cfg.ServiceCIDR, cfg.PodCIDR, cfg.DNSDomain)
	}
	// A control plane without taints gets kubeadm's control-plane taint; a
	// worker without taints gets none.
	if !slices.Equal(cfg.Taints, []kubelocal.Taint{{Key: "node-role.kubernetes.io/control-plane", Effect: "NoSchedule"}}) {
		t.Errorf("control-plane taints %+v", cfg.Taints)
	}
	w, _ := renderConfig(t, bootstraptest.NewInput(t, bootstraptest.JoinWorker, &capnv1.BootstrapSpec{}, nil, nil))
	if len(w.Taints) != 0 || w.Labels != nil {
		t.Errorf("worker taints %+v labels %v", w.Taints, w.Labels)
	}
}

func TestValidateSpecRefuses(t *testing.T) {
	spec := &capnv1.BootstrapSpec{
		Provider:              kubelocal.Name,
		UserData:              "#!/bin/sh\n",
		PreCommands:           []string{"echo pre"},
		PostCommands:          []string{"echo post"},
		Format:                "ignition",
		KubeletExtraArgs:      map[string]string{"max-pods": "10"},
		IgnorePreflightErrors: []string{"ImagePull"},
		Files: []*capnv1.File{
			{Path: "/etc/ok.conf", Content: "x"},
			{Path: "/etc/capn/kube-local.json", Content: "{}"},
			{Path: "/etc/kubernetes/pki/apiserver.key", Content: "x"},
		},
	}
	err := kubelocal.New().ValidateSpec("spec.workerPools[1].bootstrap", spec)
	for _, want := range []string{
		"spec.workerPools[1].bootstrap.userData: only the script provider reads userData",
		`spec.workerPools[1].bootstrap.format: "ignition": the kube-local provider renders cloud-config only`,
		"spec.workerPools[1].bootstrap.kubeletExtraArgs: no kubelet runs",
		"spec.workerPools[1].bootstrap.ignorePreflightErrors: no kubeadm runs under the kube-local provider",
		`spec.workerPools[1].bootstrap.files[1].path: "/etc/capn/kube-local.json" is under /etc/capn/`,
		`spec.workerPools[1].bootstrap.files[2].path: "/etc/kubernetes/pki/apiserver.key" is under /etc/kubernetes/pki/`,
	} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("ValidateSpec error\n%v\nwant containing %q", err, want)
		}
	}
	if err != nil && (strings.Contains(err.Error(), "files[0]") || strings.Contains(err.Error(), "Commands")) {
		t.Errorf("a legal file or command was refused: %v", err)
	}
	// The gateway's path goes through the registry with the same messages.
	err = builtin.Registry().ValidateEffective("spec.bootstrap", &capnv1.BootstrapSpec{Provider: "kube-local", Format: "script"})
	if err == nil || !strings.Contains(err.Error(), `spec.bootstrap.format: "script": the kube-local provider renders cloud-config only`) {
		t.Errorf("registry: %v", err)
	}
	err = builtin.Registry().ValidateFor("spec.workerPools[0].bootstrap", "spec.workerPools[0].os", bootstrap.OSWindows, &capnv1.BootstrapSpec{Provider: "kube-local"})
	if err == nil || !strings.Contains(err.Error(), "spec.workerPools[0].os: windows machines are not rendered by the kube-local bootstrap provider") {
		t.Errorf("registry, windows: %v", err)
	}
}

func TestRenderRefuses(t *testing.T) {
	tests := []struct {
		name   string
		mutate func(*bootstrap.Input)
		want   string
	}{
		{"old version", func(in *bootstrap.Input) { in.KubernetesVersion = "v1.30.4" }, "version v1.30.4: the kube-local provider needs Kubernetes v1.31 or newer"},
		{"dual stack", func(in *bootstrap.Input) {
			in.Network = &capnv1.NetworkSpec{PodCidrs: []string{"10.244.0.0/16", "fd00::/56"}}
		}, "network.podCidrs: 2 CIDRs; the kube-local provider runs a single-stack control plane"},
		{"bad service CIDR", func(in *bootstrap.Input) {
			in.Network = &capnv1.NetworkSpec{ServiceCidrs: []string{"10.96.0.1/12"}}
		}, `network.serviceCidrs[0]: "10.96.0.1/12": host bits set; want 10.96.0.0/12`},
		{"garbage CIDR", func(in *bootstrap.Input) {
			in.Network = &capnv1.NetworkSpec{PodCidrs: []string{"ten"}}
		}, `network.podCidrs[0]: "ten": want one CIDR`},
		{"overlap", func(in *bootstrap.Input) {
			in.Network = &capnv1.NetworkSpec{PodCidrs: []string{"10.96.0.0/16"}}
		}, "network: service CIDR 10.96.0.0/12 and pod CIDR 10.96.0.0/16 overlap"},
		{"bad domain", func(in *bootstrap.Input) {
			in.Network = &capnv1.NetworkSpec{ServiceDomain: "Cluster_Local"}
		}, `network.serviceDomain "Cluster_Local"`},
		{"windows", func(in *bootstrap.Input) {
			in.OS = bootstrap.OSWindows
			in.Role = bootstrap.RoleWorker
			in.FirstControlPlane = false
			in.PKI = bootstrap.PKI{CACert: in.PKI.CACert}
		},
			"os windows: the kube-local bootstrap provider renders linux machines only"},
		{"no endpoint", func(in *bootstrap.Input) { in.Endpoint = bootstrap.Endpoint{} }, "endpoint.host: empty"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			in := bootstraptest.NewInput(t, bootstraptest.Init, &capnv1.BootstrapSpec{}, nil, nil)
			tt.mutate(&in)
			_, err := kubelocal.New().Render(in)
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("Render error = %v, want containing %q", err, tt.want)
			}
			if strings.Contains(err.Error(), bootstraptest.Token.Secret) {
				t.Fatal("error leaks the token secret")
			}
		})
	}
}

func TestParseRefuses(t *testing.T) {
	_, good := renderConfig(t, bootstraptest.NewInput(t, bootstraptest.Init, &capnv1.BootstrapSpec{}, nil, nil))
	tests := []struct {
		name, from, to, want string
	}{
		{"unknown field", `"cluster"`, `"clusterz": "x", "cluster"`, `unknown field "clusterz"`},
		{"api version", `"capn.dev/kube-local/v1alpha1"`, `"capn.dev/kube-local/v9"`, `apiVersion: "capn.dev/kube-local/v9": want capn.dev/kube-local/v1alpha1`},
		{"role", `"role": "control-plane"`, `"role": "master"`, `role: "master": want control-plane or worker`},
		{"first worker", `"role": "control-plane"`, `"role": "worker"`, "firstControlPlane: only a control-plane machine"},
		{"pod cidr", `"podCIDR": "10.244.0.0/16"`, `"podCIDR": "10.244.0.0"`, `podCIDR: "10.244.0.0": want one CIDR`},
		{"token", `"bootstrapToken": "abcdef.0123456789abcdef"`, `"bootstrapToken": "abcdef.SECRETSECRETSECRE"`, "bootstrapToken: bootstrap token: want"},
		{"ttl", `"tokenTTL": "15m0s"`, `"tokenTTL": "-1m"`, `tokenTTL: "-1m": want a positive Go duration`},
		{"port", `"port": 6443`, `"port": 70000`, "endpoint.port: 70000: want 1-65535"},
		{"node name", `"nodeName": "prod-1-cp-abcde"`, `"nodeName": "Prod_1"`, `nodeName: "Prod_1": want a lowercase DNS subdomain`},
		{"taint effect", `"effect": "NoSchedule"`, `"effect": "Sometimes"`, `taints[0].effect "Sometimes": want one of`},
		{"trailing value", "", "{}", "more than one JSON value"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			bad := append(slices.Clone(good), tt.to...) // from "": append
			if tt.from != "" {
				if !bytes.Contains(good, []byte(tt.from)) {
					t.Fatalf("fixture lacks %s:\n%s", tt.from, good)
				}
				bad = bytes.Replace(good, []byte(tt.from), []byte(tt.to), 1)
			}
			_, err := kubelocal.Parse(bad)
			if err == nil || !strings.Contains(err.Error(), tt.want) || !strings.Contains(err.Error(), kubelocal.ConfigPath) {
				t.Fatalf("Parse error = %v, want one naming %s and containing %q", err, kubelocal.ConfigPath, tt.want)
			}
			if strings.Contains(err.Error(), "SECRETSECRET") || strings.Contains(err.Error(), bootstraptest.Token.Secret) {
				t.Fatal("error leaks the token")
			}
		})
	}
}
