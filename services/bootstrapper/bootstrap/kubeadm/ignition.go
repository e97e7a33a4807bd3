package kubeadm

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"strconv"
	"strings"

	"github.com/capn-dev/capn/services/bootstrapper/bootstrap"
)

// IgnitionVersion is the Ignition config spec rendered: 3.4.0, read by
// Ignition v2.15 and newer (Flatcar, Fedora CoreOS).
const IgnitionVersion = "3.4.0"

// Paths of the Ignition rendering. Ignition writes files from the
// initramfs, before /run is mounted, so capn's own files live under
// /etc/capn instead of /run (Cluster API's Flatcar flavour keeps them in
// /etc as well).
const (
	IgnitionInitConfig = bootstrap.CapnEtcDir + "/kubeadm/kubeadm.yaml"
	IgnitionJoinConfig = bootstrap.CapnEtcDir + "/kubeadm/kubeadm-join-config.yaml"
	// IgnitionScript runs the pre-commands, kubeadm and the
	// post-commands; IgnitionUnit runs it once.
	IgnitionScript = bootstrap.CapnEtcDir + "/bootstrap.sh"
	IgnitionUnit   = "capn-bootstrap.service"
	// IgnitionDone is written when the script has run to its end: the
	// unit does not run again after a reboot.
	IgnitionDone = bootstrap.CapnEtcDir + "/bootstrap.done"
)

// The subset of the Ignition v3 config written here.
type ignitionConfig struct {
	Ignition ignitionMeta    `json:"ignition"`
	Storage  ignitionStorage `json:"storage"`
	Systemd  ignitionSystemd `json:"systemd"`
}

type ignitionMeta struct {
	Version string `json:"version"`
}

type ignitionStorage struct {
	Files []ignitionFile `json:"files"`
}

type ignitionFile struct {
	Path      string           `json:"path"`
	Overwrite bool             `json:"overwrite"`
	Mode      int              `json:"mode"`
	User      *ignitionOwner   `json:"user,omitempty"`
	Group     *ignitionOwner   `json:"group,omitempty"`
	Contents  ignitionContents `json:"contents"`
}

type ignitionOwner struct {
	Name string `json:"name"`
}

type ignitionContents struct {
	Source string `json:"source"`
}

type ignitionSystemd struct {
	Units []ignitionUnit `json:"units"`
}

type ignitionUnit struct {
	Name     string `json:"name"`
	Enabled  bool   `json:"enabled"`
	Contents string `json:"contents"`
}

// renderIgnition renders a linux machine as an Ignition v3 config: the
// files (PKI, the user's, the kubeadm config, the bootstrap script) in
// storage.files, and a oneshot unit that runs the script once the network
// is up. The script stops at the first command that fails or outlives the
// timeout (set -e), so kubeadm never runs after a failed pre-command.
func renderIgnition(in bootstrap.Input) (bootstrap.Output, error) {
	config, verb, err := kubeadmConfig(in)
	if err != nil {
		return bootstrap.Output{}, err
	}
	configPath := IgnitionJoinConfig
	if in.FirstControlPlane {
		configPath = IgnitionInitConfig
	}
	files := linuxFiles(in)
	files = append(files,
		bootstrap.File{Path: configPath, Content: config, Owner: "root:root", Permissions: "0600"},
		bootstrap.File{Path: IgnitionScript, Content: ignitionScript(in, "kubeadm "+verb+" --config "+configPath), Owner: "root:root", Permissions: "0700"},
	)
	ic := ignitionConfig{
		Ignition: ignitionMeta{Version: IgnitionVersion},
		Storage:  ignitionStorage{Files: make([]ignitionFile, 0, len(files))},
		Systemd:  ignitionSystemd{Units: []ignitionUnit{{Name: IgnitionUnit, Enabled: true, Contents: ignitionUnitContents}}},
	}
	for _, f := range files {
		mode, err := fileMode(f.Permissions)
		if err != nil {
			return bootstrap.Output{}, fmt.Errorf("%s: %w", f.Path, err)
		}
		igf := ignitionFile{Path: f.Path, Overwrite: true, Mode: mode,
			Contents: ignitionContents{Source: "data:;base64," + base64.StdEncoding.EncodeToString(f.Content)}}
		if f.Owner != "" {
			user, group, _ := strings.Cut(f.Owner, ":")
			igf.User = &ignitionOwner{Name: user}
			if group != "" {
				igf.Group = &ignitionOwner{Name: group}
			}
		}
		ic.Storage.Files = append(ic.Storage.Files, igf)
	}
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	enc.SetIndent("", "  ")
	if err := enc.Encode(ic); err != nil {
		return bootstrap.Output{}, fmt.Errorf("marshal ignition: %w", err)
	}
	return bootstrap.Output{Format: bootstrap.FormatIgnition, Data: buf.Bytes()}, nil
}

// fileMode reads octal permissions as Ignition's decimal mode (0644 when
// none are given, Ignition's default).
func fileMode(perm string) (int, error) {
	if perm == "" {
		return 0o644, nil
	}
	n, err := strconv.ParseUint(perm, 8, 32)
	if err != nil || n > 0o7777 {
		return 0, fmt.Errorf("permissions %q: want an octal mode", perm)
	}
	return int(n), nil
}

// ignitionUnitContents runs the bootstrap script once, after the network
// is up (kubeadm reaches the API server).
const ignitionUnitContents = `[Unit]
Description=capn bootstrap: pre-commands, kubeadm, post-commands
Wants=network-online.target
After=network-online.target
ConditionPathExists=!` + IgnitionDone + `

[Service]
Type=oneshot
RemainAfterExit=yes
ExecStart=` + IgnitionScript + `

[Install]
WantedBy=multi-user.target
`

// ignitionScript is the bootstrap script of an Ignition machine: each
// user command in a shell of its own under the timeout (the words of
// bootstrap.TimeoutArgv, quoted), kubeadm and the sentinel, then the
// done marker.
func ignitionScript(in bootstrap.Input, command string) []byte {
	timeout := bootstrap.CommandTimeout(in.Spec)
	var b strings.Builder
	b.WriteString("#!/bin/sh\n# capn bootstrap (kubeadm provider, Ignition): stops at the first command that fails.\nset -eu\n")
	step := func(list string, i int, c string) {
		fmt.Fprintf(&b, "echo %s\n", shellQuote(fmt.Sprintf("capn: %s[%d]", list, i)))
		words := bootstrap.TimeoutArgv(c, timeout)
		for j, w := range words {
			if j > 0 {
				b.WriteByte(' ')
			}
			b.WriteString(shellQuote(w))
		}
		b.WriteByte('\n')
	}
	for i, c := range in.Spec.GetPreCommands() {
		step("preCommands", i, c)
	}
	fmt.Fprintf(&b, "%s\nmkdir -p /run/cluster-api\necho success > %s\n", command, bootstrap.SentinelFile)
	for i, c := range in.Spec.GetPostCommands() {
		step("postCommands", i, c)
	}
	fmt.Fprintf(&b, "touch %s\n", IgnitionDone)
	return []byte(b.String())
}

// shellQuote quotes s for a POSIX shell: in single quotes, a quote inside
// written as quote, backslash, quote, quote.
func shellQuote(s string) string {
	return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
}
