package kubeadm_test

import (
	"encoding/base64"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"

	capnv1 "github.com/capn-dev/capn/schemas/capn/v1alpha1"
	"github.com/capn-dev/capn/services/bootstrapper/bootstrap"
	"github.com/capn-dev/capn/services/bootstrapper/bootstrap/bootstraptest"
	"github.com/capn-dev/capn/services/bootstrapper/bootstrap/kubeadm"
	yaml "go.yaml.in/yaml/v2"
)

// psLiteral matches a PowerShell single-quoted literal.
var psLiteral = `'((?:[^']|'')*)'`

// checkWindows reads a Windows rendering back: the cloud-config parses as
// YAML (and cloud-init's schema took it in the suite), its one runcmd
// line runs capn's script, the script is well-formed PowerShell
// (bootstraptest.CheckPowerShell) and holds every command as a literal in
// order around the kubelet service and kubeadm join.
func checkWindows(t *testing.T, in bootstrap.Input, out bootstrap.Output) {
	if out.Format != bootstrap.FormatCloudConfig {
		t.Fatalf("format %s, want cloud-config (cloudbase-init)", out.Format)
	}
	var cc cloudConfig
	if err := yaml.Unmarshal(out.Data, &cc); err != nil {
		t.Fatal(err)
	}
	files := map[string][]byte{}
	for _, f := range cc.WriteFiles {
		b, err := base64.StdEncoding.DecodeString(f.Content)
		if err != nil {
			t.Fatalf("%s: %v", f.Path, err)
		}
		files[f.Path] = b
		if !bootstrap.IsWindowsPath(f.Path) {
			t.Errorf("%s: not a windows path", f.Path)
		}
		if f.Owner != "" || f.Permissions != "" {
			t.Errorf("%s: owner %q permissions %q on windows", f.Path, f.Owner, f.Permissions)
		}
	}
	for p := range files {
		if strings.Contains(strings.ToLower(p), "pki") {
			t.Errorf("%s written to a windows worker (kubeadm join writes the CA from discovery)", p)
		}
	}
	for _, f := range in.Spec.GetFiles() {
		if string(files[f.GetPath()]) != f.GetContent() {
			t.Errorf("user file %s: content did not round-trip", f.GetPath())
		}
	}
	checkKubeadmConfig(t, in, files[bootstrap.WindowsKubeadmJoinConfig])
	cmds, _ := runcmd(t, cc.RunCmd)
	if want := []string{`powershell.exe -NoLogo -NoProfile -NonInteractive -ExecutionPolicy Bypass -File C:\capn\bootstrap.ps1`}; !slices.Equal(cmds, want) {
		t.Fatalf("runcmd %q, want %q", cmds, want)
	}
	script := string(files[kubeadm.WindowsScript])
	if err := bootstraptest.CheckPowerShell(script, kubeadm.PowerShellHeader); err != nil {
		t.Fatalf("the script is not well-formed PowerShell: %v\n%s", err, script)
	}
	// The commands, in order, each a literal that reads back as written.
	re := regexp.MustCompile(`(?m)^Invoke-CapnCommand -Name ` + psLiteral + ` -Command ` + psLiteral + ` -TimeoutSeconds (\d+)$`)
	var names, got []string
	for _, m := range re.FindAllStringSubmatch(script, -1) {
		names = append(names, m[1])
		got = append(got, strings.ReplaceAll(m[2], "''", "'"))
		if want := strconv.FormatInt(bootstrap.TimeoutSeconds(bootstrap.CommandTimeout(in.Spec)), 10); m[3] != want {
			t.Errorf("%s: timeout %s seconds, want %s", m[1], m[3], want)
		}
	}
	if want := slices.Concat(in.Spec.GetPreCommands(), in.Spec.GetPostCommands()); !slices.Equal(got, want) {
		t.Errorf("commands\n%q\nwant\n%q", got, want)
	}
	for i := range names {
		want := "preCommands[" + strconv.Itoa(i) + "]"
		if i >= len(in.Spec.GetPreCommands()) {
			want = "postCommands[" + strconv.Itoa(i-len(in.Spec.GetPreCommands())) + "]"
		}
		if names[i] != want {
			t.Errorf("command %d named %q, want %q", i, names[i], want)
		}
	}
	join := strings.Index(script, "& $kubeadm join --config 'C:\\run\\kubeadm\\kubeadm-join-config.yaml'")
	service := strings.Index(script, "New-Service -Name 'kubelet'")
	auto := strings.Index(script, "Set-Service -Name 'kubelet' -StartupType Automatic")
	sentinel := strings.Index(script, `Set-Content -Path 'C:\run\cluster-api\bootstrap-success.complete'`)
	if service < 0 || join < service || sentinel < join || auto < sentinel {
		t.Fatalf("kubelet service (%d), kubeadm join (%d), sentinel (%d), automatic start (%d) not in that order:\n%s", service, join, sentinel, auto, script)
	}
	if n := len(in.Spec.GetPreCommands()); n > 0 && strings.Index(script, "-Name 'preCommands["+strconv.Itoa(n-1)+"]'") > service {
		t.Error("a pre-command runs after the kubelet service is made")
	}
	if n := len(in.Spec.GetPostCommands()); n > 0 && strings.Index(script, "-Name 'postCommands[0]'") < auto {
		t.Error("a post-command runs before the join is done")
	}
	for _, flag := range []string{"'--windows-service',", "'--hostname-override=" + in.Machine + "',", "'--container-runtime-endpoint=npipe:////./pipe/containerd-containerd',",
		"'--cgroups-per-qos=false',", "'--enforce-node-allocatable=',", "'--node-labels=example.com/team=a,node.kubernetes.io/pool=md-0,tier=web'"} {
		if !strings.Contains(script, flag) {
			t.Errorf("kubelet service flags lack %s", flag)
		}
	}
	for k, v := range in.Spec.GetKubeletExtraArgs() {
		if !strings.Contains(script, "'--"+k+"="+v+"'") {
			t.Errorf("kubelet service flags lack --%s=%s", k, v)
		}
	}
}

func TestWindowsRefusals(t *testing.T) {
	tests := []struct {
		name string
		spec *capnv1.BootstrapSpec
		want []string
	}{
		{"linux flags", &capnv1.BootstrapSpec{KubeletExtraArgs: map[string]string{"cgroup-driver": "systemd", "resolv-conf": "/etc/r", "max-pods": "10"}}, []string{
			`spec.workerPools[0].bootstrap.kubeletExtraArgs["cgroup-driver"]: a flag of the linux kubelet only`,
			`spec.workerPools[0].bootstrap.kubeletExtraArgs["resolv-conf"]: set by capn on windows machines`,
		}},
		{"user data", &capnv1.BootstrapSpec{UserData: "#ps1_sysnative\n"}, []string{"spec.workerPools[0].bootstrap.userData: only the script provider reads userData"}},
		{"script format", &capnv1.BootstrapSpec{Format: "script"}, []string{`spec.workerPools[0].bootstrap.format: "script": windows machines take cloud-config`}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := kubeadm.New().ValidateOS("spec.workerPools[0].bootstrap", bootstrap.OSWindows, tt.spec)
			if err == nil {
				t.Fatal("accepted")
			}
			if n := strings.Count(err.Error(), "\n") + 1; n != len(tt.want) {
				t.Errorf("%d errors, want %d: %v", n, len(tt.want), err)
			}
			for _, w := range tt.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q lacks %q", err, w)
				}
			}
		})
	}
	// A Windows control plane never renders: Input.Validate refuses it.
	in := bootstraptest.NewInput(t, bootstraptest.JoinControl, &capnv1.BootstrapSpec{}, nil, nil)
	in.OS = bootstrap.OSWindows
	if _, err := kubeadm.New().Render(in); err == nil || !strings.Contains(err.Error(), "os: a windows machine cannot be control-plane") {
		t.Fatalf("Render of a windows control plane: %v", err)
	}
}
