package kubeadm_test

import (
	"encoding/base64"
	"slices"
	"strings"
	"testing"
	"time"

	"google.golang.org/protobuf/types/known/durationpb"

	capnv1 "github.com/capn-dev/capn/schemas/capn/v1alpha1"
	"github.com/capn-dev/capn/services/bootstrapper/bootstrap"
	"github.com/capn-dev/capn/services/bootstrapper/bootstrap/bootstraptest"
	"github.com/capn-dev/capn/services/bootstrapper/bootstrap/kubeadm"
	yaml "go.yaml.in/yaml/v2"
)

func TestConformance(t *testing.T) {
	full := bootstraptest.FullSpec("")
	full.IgnorePreflightErrors = []string{"ImagePull", "Port-10250"}
	ignition := bootstraptest.FullSpec("kubeadm")
	ignition.Format = "ignition"
	ignition.CommandTimeout = durationpb.New(90 * time.Second)
	win := bootstraptest.WindowsSpec("kubeadm")
	bootstraptest.Run(t, kubeadm.New(), bootstraptest.Features{
		Specs: map[string]*capnv1.BootstrapSpec{
			"empty":          {},
			"full":           full,
			"files only":     {Provider: "kubeadm", Files: full.Files},
			"commands only":  {PreCommands: full.PreCommands, PostCommands: full.PostCommands},
			"ignition":       ignition,
			"ignition empty": {Format: "ignition"},
		},
		Windows: map[string]*capnv1.BootstrapSpec{
			"empty":         {},
			"full":          win,
			"commands only": {PreCommands: win.PreCommands, PostCommands: win.PostCommands, CommandTimeout: durationpb.New(10 * time.Minute)},
		},
		Check: checkDocument,
	})
}

type cloudConfig struct {
	WriteFiles []struct {
		Path, Owner, Permissions, Encoding, Content string
	} `yaml:"write_files"`
	RunCmd []any `yaml:"runcmd"`
}

// runcmd reads cloud-config's runcmd back: a string as is, a list as the
// command and timeout of bootstrap.TimeoutArgv (any other list fails).
func runcmd(t *testing.T, entries []any) (cmds []string, timeouts []time.Duration) {
	t.Helper()
	for _, e := range entries {
		switch v := e.(type) {
		case string:
			cmds = append(cmds, v)
		case []any:
			words := make([]string, len(v))
			for i, w := range v {
				words[i] = w.(string)
			}
			c, d, ok := bootstrap.ParseTimeoutArgv(words)
			if !ok {
				t.Fatalf("runcmd entry %q is not a timeout command", words)
			}
			cmds, timeouts = append(cmds, c), append(timeouts, d)
		default:
			t.Fatalf("runcmd entry %#v", e)
		}
	}
	return cmds, timeouts
}

// checkDocument reads the rendered data back and checks what kubeadm will
// see, in each of the provider's renderings.
func checkDocument(t *testing.T, in bootstrap.Input, out bootstrap.Output) {
	switch {
	case in.OS == bootstrap.OSWindows:
		checkWindows(t, in, out)
		return
	case in.Spec.GetFormat() == "ignition":
		checkIgnition(t, in, out)
		return
	}
	var cc cloudConfig
	if err := yaml.Unmarshal(out.Data, &cc); err != nil {
		t.Fatal(err)
	}
	files := map[string][]byte{}
	var order []string
	for _, f := range cc.WriteFiles {
		if f.Encoding != "b64" {
			t.Errorf("%s: encoding %q, want b64", f.Path, f.Encoding)
		}
		b, err := base64.StdEncoding.DecodeString(f.Content)
		if err != nil {
			t.Fatalf("%s: %v", f.Path, err)
		}
		files[f.Path] = b
		order = append(order, f.Path)
		if strings.HasSuffix(f.Path, ".key") && f.Permissions != "0600" {
			t.Errorf("%s: permissions %s, want 0600", f.Path, f.Permissions)
		}
	}

	pkiFiles := []string{"ca.crt", "ca.key", "etcd/ca.crt", "etcd/ca.key", "front-proxy-ca.crt", "front-proxy-ca.key", "sa.pub", "sa.key"}
	for _, name := range pkiFiles {
		_, ok := files["/etc/kubernetes/pki/"+name]
		if want := in.Role == bootstrap.RoleControlPlane; ok != want {
			t.Errorf("/etc/kubernetes/pki/%s written: %v, want %v", name, ok, want)
		}
	}
	if in.Role == bootstrap.RoleControlPlane && string(files["/etc/kubernetes/pki/ca.key"]) != string(in.PKI.CAKey) {
		t.Error("ca.key content differs from the cluster CA key")
	}
	for _, f := range in.Spec.GetFiles() {
		if string(files[f.GetPath()]) != f.GetContent() {
			t.Errorf("user file %s: content did not round-trip", f.GetPath())
		}
	}

	configPath, command := bootstrap.KubeadmJoinConfig, "kubeadm join --config "+bootstrap.KubeadmJoinConfig
	if in.FirstControlPlane {
		configPath, command = bootstrap.KubeadmInitConfig, "kubeadm init --config "+bootstrap.KubeadmInitConfig
	}
	if order[len(order)-1] != configPath {
		t.Errorf("last file %s, want the kubeadm config %s", order[len(order)-1], configPath)
	}
	wantCmds := slices.Concat(in.Spec.GetPreCommands(),
		[]string{command + " && mkdir -p /run/cluster-api && echo success > /run/cluster-api/bootstrap-success.complete"},
		in.Spec.GetPostCommands())
	cmds, timeouts := runcmd(t, cc.RunCmd)
	if !slices.Equal(cmds, wantCmds) {
		t.Errorf("runcmd\n%q\nwant\n%q", cmds, wantCmds)
	}
	if len(timeouts) != len(wantCmds)-1 {
		t.Errorf("%d commands under a timeout, want every user command (%d)", len(timeouts), len(wantCmds)-1)
	}
	for _, d := range timeouts {
		if d != bootstrap.CommandTimeout(in.Spec) {
			t.Errorf("timeout %s, want %s", d, bootstrap.CommandTimeout(in.Spec))
		}
	}
	checkKubeadmConfig(t, in, files[configPath])
}

func checkKubeadmConfig(t *testing.T, in bootstrap.Input, data []byte) {
	docs := strings.Split(string(data), "\n---\n")
	byKind := map[string]map[string]any{}
	for _, d := range docs {
		var m map[string]any
		if err := yaml.Unmarshal([]byte(d), &m); err != nil {
			t.Fatal(err)
		}
		if m["apiVersion"] != "kubeadm.k8s.io/v1beta4" {
			t.Errorf("apiVersion %v", m["apiVersion"])
		}
		byKind[m["kind"].(string)] = m
	}
	get := func(m map[string]any, path ...string) any {
		var v any = m
		for _, p := range path {
			mm, ok := v.(map[any]any)
			if !ok {
				if mm2, ok := v.(map[string]any); ok {
					v = mm2[p]
					continue
				}
				return nil
			}
			v = mm[p]
		}
		return v
	}
	var nr map[string]any
	if in.FirstControlPlane {
		cc, ic := byKind["ClusterConfiguration"], byKind["InitConfiguration"]
		if cc == nil || ic == nil || len(byKind) != 2 {
			t.Fatalf("init config kinds %v", keys(byKind))
		}
		for field, want := range map[string]string{
			"kubernetesVersion": "v1.33.2", "controlPlaneEndpoint": "api.prod-1.example.com:6443",
			"clusterName": "prod-1", "encryptionAlgorithm": "ECDSA-P256", "certificatesDir": "/etc/kubernetes/pki",
		} {
			if got := cc[field]; got != want {
				t.Errorf("ClusterConfiguration.%s = %v, want %s", field, got, want)
			}
		}
		if get(cc, "networking", "podSubnet") != "10.244.0.0/16" || get(cc, "networking", "serviceSubnet") != "10.96.0.0/12" || get(cc, "networking", "dnsDomain") != "cluster.local" {
			t.Errorf("networking %v", cc["networking"])
		}
		bt := ic["bootstrapTokens"].([]any)[0]
		if get(map[string]any{"x": bt}, "x", "token") != bootstraptest.Token.Value() || get(map[string]any{"x": bt}, "x", "ttl") != "15m0s" {
			t.Errorf("bootstrapTokens %v", bt)
		}
		nr = toStringMap(ic["nodeRegistration"])
	} else {
		jc := byKind["JoinConfiguration"]
		if jc == nil || len(byKind) != 1 {
			t.Fatalf("join config kinds %v", keys(byKind))
		}
		if get(jc, "discovery", "bootstrapToken", "apiServerEndpoint") != "api.prod-1.example.com:6443" ||
			get(jc, "discovery", "bootstrapToken", "token") != bootstraptest.Token.Value() {
			t.Errorf("discovery %v", jc["discovery"])
		}
		if hashes := get(jc, "discovery", "bootstrapToken", "caCertHashes").([]any); len(hashes) != 1 || hashes[0] != in.CACertHash {
			t.Errorf("caCertHashes %v, want [%s]", hashes, in.CACertHash)
		}
		if _, ok := jc["controlPlane"]; ok != (in.Role == bootstrap.RoleControlPlane) {
			t.Errorf("controlPlane present %v for role %s", ok, in.Role)
		}
		nr = toStringMap(jc["nodeRegistration"])
	}
	if nr["name"] != in.Machine {
		t.Errorf("nodeRegistration.name %v, want %s", nr["name"], in.Machine)
	}
	var args []string
	for _, a := range nr["kubeletExtraArgs"].([]any) {
		m := toStringMap(a)
		args = append(args, m["name"].(string)+"="+m["value"].(string))
	}
	want := []string{"node-labels=example.com/team=a,node.kubernetes.io/pool=md-0,tier=web"}
	for k, v := range in.Spec.GetKubeletExtraArgs() {
		want = append(want, k+"="+v)
	}
	if in.OS == bootstrap.OSWindows {
		want = append(want, "cgroups-per-qos=false", "enforce-node-allocatable=", "resolv-conf=", "windows-priorityclass=ABOVE_NORMAL_PRIORITY_CLASS")
		if nr["criSocket"] != "npipe:////./pipe/containerd-containerd" {
			t.Errorf("criSocket %v, want containerd's named pipe", nr["criSocket"])
		}
	} else if _, ok := nr["criSocket"]; ok {
		t.Errorf("criSocket %v on a linux machine (kubeadm finds it)", nr["criSocket"])
	}
	slices.Sort(want)
	if !slices.Equal(args, want) {
		t.Errorf("kubeletExtraArgs %q, want %q (sorted by name)", args, want)
	}
	var ignored []string
	if l, ok := nr["ignorePreflightErrors"].([]any); ok {
		for _, n := range l {
			ignored = append(ignored, n.(string))
		}
	}
	if !slices.Equal(ignored, in.Spec.GetIgnorePreflightErrors()) {
		t.Errorf("ignorePreflightErrors %q, want the spec's %q", ignored, in.Spec.GetIgnorePreflightErrors())
	}
	taints := nr["taints"].([]any)
	if len(taints) != 2 || toStringMap(taints[0])["key"] != "dedicated" || toStringMap(taints[1])["effect"] != "NoExecute" {
		t.Errorf("taints %v", taints)
	}
}

func toStringMap(v any) map[string]any {
	out := map[string]any{}
	if m, ok := v.(map[any]any); ok {
		for k, v := range m {
			out[k.(string)] = v
		}
	}
	return out
}

func keys(m map[string]map[string]any) []string {
	var out []string
	for k := range m {
		out = append(out, k)
	}
	return out
}

func TestTaintsOmittedWhenNone(t *testing.T) {
	// No taints: kubeadm's default applies (control-plane taint on
	// control-plane nodes), so the field must be absent, not empty.
	in := bootstraptest.NewInput(t, bootstraptest.Init, &capnv1.BootstrapSpec{}, nil, nil)
	out, err := kubeadm.New().Render(in)
	if err != nil {
		t.Fatal(err)
	}
	var cc cloudConfig
	if err := yaml.Unmarshal(out.Data, &cc); err != nil {
		t.Fatal(err)
	}
	cfg, _ := base64.StdEncoding.DecodeString(cc.WriteFiles[len(cc.WriteFiles)-1].Content)
	if strings.Contains(string(cfg), "taints") || strings.Contains(string(cfg), "kubeletExtraArgs") {
		t.Fatalf("empty taints or args rendered:\n%s", cfg)
	}
	if !strings.Contains(string(cfg), "podSubnet: 10.244.0.0/16") {
		t.Fatalf("config:\n%s", cfg)
	}
}

func TestRenderRefuses(t *testing.T) {
	tests := []struct {
		name   string
		mutate func(*bootstrap.Input)
		want   string
	}{
		{"old version", func(in *bootstrap.Input) { in.KubernetesVersion = "v1.30.4" }, "needs Kubernetes v1.31 or newer"},
		{"bad version", func(in *bootstrap.Input) { in.KubernetesVersion = "1.31" }, `version: "1.31" is not a Kubernetes version`},
		{"user data", func(in *bootstrap.Input) { in.Spec = &capnv1.BootstrapSpec{UserData: "#!/bin/sh"} }, "bootstrap.userData: only the script provider"},
		{"no endpoint", func(in *bootstrap.Input) { in.Endpoint = bootstrap.Endpoint{} }, "endpoint.host: empty"},
		{"worker as first", func(in *bootstrap.Input) {
			in.Role = bootstrap.RoleWorker
			in.PKI = bootstrap.PKI{CACert: in.PKI.CACert}
		}, "firstControlPlane: only a control-plane machine"},
		{"bad label", func(in *bootstrap.Input) { in.Labels = map[string]string{"node-role.kubernetes.io/worker": ""} }, `labels["node-role.kubernetes.io/worker"]: a kubelet may not set`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			in := bootstraptest.NewInput(t, bootstraptest.Init, &capnv1.BootstrapSpec{}, nil, nil)
			tt.mutate(&in)
			_, err := kubeadm.New().Render(in)
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("Render error = %v, want containing %q", err, tt.want)
			}
		})
	}
}
