package kubeadm

import (
	"fmt"
	"strings"

	"github.com/capn-dev/capn/services/bootstrapper/bootstrap"
	"github.com/capn-dev/capn/services/bootstrapper/bootstrap/cloudinit"
)

// Windows machines, as Cluster API's Windows flavours make them: the
// machine image (image-builder's) holds kubeadm.exe and kubelet.exe in
// C:\k and runs containerd; cloudbase-init reads the #cloud-config, writes
// the files and runs runcmd with cmd.exe, whose one line runs capn's
// PowerShell script.
const (
	// WindowsScript is capn's bootstrap script on a Windows machine.
	WindowsScript = bootstrap.WindowsCapnDir + `\bootstrap.ps1`
	// WindowsLog is where the script's transcript goes.
	WindowsLog = bootstrap.WindowsCapnDir + `\bootstrap.log`
	// WindowsCRISocket is containerd's named pipe.
	WindowsCRISocket = "npipe:////./pipe/containerd-containerd"
	// PowerShellHeader starts the script: cloudbase-init's mark of a
	// PowerShell user-data script (run by the 64-bit powershell.exe), so
	// the same script serves as user data on its own.
	PowerShellHeader = "#ps1_sysnative"
)

// windowsKubeletDefaults are the kubelet flags a Windows node needs (as
// sig-windows-tools' StartKubelet.ps1 and Cluster API's Windows
// templates set them): no QoS cgroups, no node allocatable enforcement,
// no resolv.conf, and a kubelet that keeps its CPU under load.
var windowsKubeletDefaults = map[string]string{
	"cgroups-per-qos":          "false",
	"enforce-node-allocatable": "",
	"resolv-conf":              "",
	"windows-priorityclass":    "ABOVE_NORMAL_PRIORITY_CLASS",
}

// windowsKubeletArgs are the kubeletExtraArgs a Windows pool may not set,
// with why.
var windowsKubeletArgs = func() map[string]string {
	m := map[string]string{}
	for k := range windowsKubeletDefaults {
		m[k] = "set by capn on windows machines"
	}
	for _, k := range []string{"cgroup-driver", "cgroup-root", "kubelet-cgroups", "runtime-cgroups", "system-cgroups",
		"kube-reserved-cgroup", "system-reserved-cgroup", "kernel-memcg-notification", "protect-kernel-defaults"} {
		m[k] = "a flag of the linux kubelet only; remove it from the windows pool (and from spec.bootstrap, which the pool inherits)"
	}
	return m
}()

// renderWindows renders a Windows worker: a #cloud-config for
// cloudbase-init with the user's files, the kubeadm join config and the
// PowerShell script in write_files, and one runcmd line that runs the
// script. The script runs the pre-commands, makes sure the kubelet
// service exists, joins with kubeadm, writes the sentinel, sets the
// kubelet to start with the machine and runs the post-commands; it stops
// at the first failure.
func renderWindows(in bootstrap.Input) (bootstrap.Output, error) {
	config, err := joinConfig(in)
	if err != nil {
		return bootstrap.Output{}, fmt.Errorf("kubeadm config: %w", err)
	}
	files := bootstrap.UserFiles(in.Spec)
	files = append(files,
		bootstrap.File{Path: bootstrap.WindowsKubeadmJoinConfig, Content: config},
		bootstrap.File{Path: WindowsScript, Content: []byte(windowsScript(in))},
	)
	runcmd := []any{"powershell.exe -NoLogo -NoProfile -NonInteractive -ExecutionPolicy Bypass -File " + WindowsScript}
	data, err := cloudinit.Marshal(cloudinit.Config{WriteFiles: cloudinit.Files(files), RunCmd: runcmd})
	if err != nil {
		return bootstrap.Output{}, err
	}
	return bootstrap.Output{Format: bootstrap.FormatCloudConfig, Data: data}, nil
}

// windowsKubeletFlags are the kubelet's flags on a Windows machine whose
// image has no kubelet service: kubeadm's files, the machine's name,
// containerd, Windows' defaults, the node labels and the user's flags.
func windowsKubeletFlags(in bootstrap.Input) []string {
	args := map[string]string{}
	for k, v := range windowsKubeletDefaults {
		args[k] = v
	}
	for k, v := range in.Spec.GetKubeletExtraArgs() {
		args[k] = v
	}
	if l := bootstrap.NodeLabelsArg(in.Labels); l != "" {
		args["node-labels"] = l
	}
	flags := []string{
		"--windows-service",
		`--cert-dir=C:\var\lib\kubelet\pki`,
		`--config=C:\var\lib\kubelet\config.yaml`,
		`--bootstrap-kubeconfig=C:\etc\kubernetes\bootstrap-kubelet.conf`,
		`--kubeconfig=C:\etc\kubernetes\kubelet.conf`,
		"--hostname-override=" + in.Machine,
		"--container-runtime-endpoint=" + WindowsCRISocket,
	}
	for _, k := range sortedKeys(args) {
		flags = append(flags, fmt.Sprintf("--%s=%s", k, args[k]))
	}
	return flags
}

// windowsScript is the PowerShell bootstrap script. Every value from the
// spec (commands, flags) enters it as a single-quoted literal, so nothing
// a user writes changes the script's structure; each command runs in a
// powershell.exe of its own (-EncodedCommand) under the timeout.
func windowsScript(in bootstrap.Input) string {
	timeout := bootstrap.TimeoutSeconds(bootstrap.CommandTimeout(in.Spec))
	var b strings.Builder
	b.WriteString(PowerShellHeader + "\n")
	b.WriteString(`# capn bootstrap (kubeadm provider, Windows): pre-commands, the kubelet
# service, kubeadm join, post-commands. It stops at the first failure.
$ErrorActionPreference = 'Stop'
Start-Transcript -Path ` + psQuote(WindowsLog) + ` -Append | Out-Null

function Invoke-CapnCommand {
    param([string]$Name, [string]$Command, [int]$TimeoutSeconds)
    Write-Output "capn: $Name"
    $encoded = [Convert]::ToBase64String([Text.Encoding]::Unicode.GetBytes($Command))
    $p = Start-Process -FilePath 'powershell.exe' -ArgumentList @('-NoLogo', '-NoProfile', '-NonInteractive', '-ExecutionPolicy', 'Bypass', '-EncodedCommand', $encoded) -NoNewWindow -PassThru
    $null = $p.Handle
    if (-not $p.WaitForExit($TimeoutSeconds * 1000)) {
        Stop-Process -Id $p.Id -Force
        throw "capn: $Name timed out after $TimeoutSeconds seconds"
    }
    if ($p.ExitCode -ne 0) {
        throw "capn: $Name exited with code $($p.ExitCode)"
    }
}

`)
	for i, c := range in.Spec.GetPreCommands() {
		fmt.Fprintf(&b, "Invoke-CapnCommand -Name %s -Command %s -TimeoutSeconds %d\n", psQuote(fmt.Sprintf("preCommands[%d]", i)), psQuote(c), timeout)
	}
	fmt.Fprintf(&b, "\n$kubeDir = %s\n", psQuote(bootstrap.WindowsKubeDir))
	b.WriteString(`$kubeadm = Join-Path $kubeDir 'kubeadm.exe'
if (-not (Test-Path $kubeadm)) {
    $kubeadm = 'kubeadm.exe'
}
if (-not (Get-Service -Name 'kubelet' -ErrorAction SilentlyContinue)) {
    $kubelet = Join-Path $kubeDir 'kubelet.exe'
    $flags = @(
`)
	flags := windowsKubeletFlags(in)
	for i, f := range flags {
		sep := ","
		if i == len(flags)-1 {
			sep = ""
		}
		fmt.Fprintf(&b, "        %s%s\n", psQuote(f), sep)
	}
	fmt.Fprintf(&b, `    )
    New-Item -ItemType Directory -Force -Path 'C:\var\lib\kubelet\pki', 'C:\etc\kubernetes' | Out-Null
    New-Service -Name 'kubelet' -DisplayName 'kubelet' -StartupType Manual -BinaryPathName ("$kubelet " + ($flags -join ' ')) | Out-Null
}
Write-Output 'capn: kubeadm join'
& $kubeadm join --config %s
if ($LASTEXITCODE -ne 0) {
    throw "capn: kubeadm join exited with code $LASTEXITCODE"
}
New-Item -ItemType Directory -Force -Path 'C:\run\cluster-api' | Out-Null
Set-Content -Path %s -Value 'success'
Set-Service -Name 'kubelet' -StartupType Automatic
`, psQuote(bootstrap.WindowsKubeadmJoinConfig), psQuote(bootstrap.WindowsSentinelFile))
	for i, c := range in.Spec.GetPostCommands() {
		fmt.Fprintf(&b, "Invoke-CapnCommand -Name %s -Command %s -TimeoutSeconds %d\n", psQuote(fmt.Sprintf("postCommands[%d]", i)), psQuote(c), timeout)
	}
	b.WriteString("Stop-Transcript | Out-Null\n")
	return b.String()
}

// psQuote is a PowerShell single-quoted literal: nothing inside is
// expanded; a quote is doubled. PowerShell also takes the typographic
// single quotes as quotes, so they are doubled too.
func psQuote(s string) string {
	r := strings.NewReplacer("'", "''", "\u2018", "\u2018\u2018", "\u2019", "\u2019\u2019", "\u201a", "\u201a\u201a", "\u201b", "\u201b\u201b")
	return "'" + r.Replace(s) + "'"
}
