package agent

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
)

// Layout of a machine's data dir.
const (
	// RootFS is where the bootstrap data's absolute paths are written:
	// /etc/kubernetes/pki/ca.crt becomes <data-dir>/rootfs/etc/kubernetes/pki/ca.crt.
	RootFS = "rootfs"
	// StateDir holds the agent's own records.
	StateDir = "capn-node"
	// AppliedFile holds the checksum of the bootstrap data applied last:
	// a restarted agent (a rebooted machine) does not fetch again, as
	// cloud-init runs once per instance.
	AppliedFile = "applied"
	// CommandsFile lists the commands the data asks for, one a line. The
	// agent does not run them (no kubeadm, no kubelet).
	CommandsFile = "commands-not-run"
	// IdentityFile holds <cluster>/<machine>: a data dir belongs to one machine.
	IdentityFile = "identity"
	// BootsFile counts the agent's starts on this data dir.
	BootsFile = "boots"
	// MachineSecretFile holds the machine's NATS login after its join
	// (0600), from the sealed fetch reply; the bootstrap credential opens
	// nothing once the machine has joined. capn-npd-bridge on the same
	// machine logs in with it too (--nats-password-file).
	MachineSecretFile = "machine-secret"
)

// Apply writes a verified plan into dataDir: every file under
// <dataDir>/rootfs with its mode, the commands (not run) and, last, the
// checksum as applied. It never writes outside dataDir.
func Apply(dataDir string, p *Plan, checksum string) error {
	root := filepath.Join(dataDir, RootFS)
	for _, f := range p.Files {
		dst, err := under(root, f.Path)
		if err != nil {
			return err
		}
		if err := writeFile(dst, f.Content, f.Mode); err != nil {
			return fmt.Errorf("write %s: %w", f.Path, err)
		}
	}
	state := filepath.Join(dataDir, StateDir)
	cmds := strings.Join(p.Commands, "\n")
	if cmds != "" {
		cmds += "\n"
	}
	if err := writeFile(filepath.Join(state, CommandsFile), []byte(cmds), 0o600); err != nil {
		return err
	}
	return writeFile(filepath.Join(state, AppliedFile), []byte(checksum+"\n"), 0o600)
}

// Applied is the checksum of the data applied last in dataDir ("" if none).
func Applied(dataDir string) string {
	b, err := os.ReadFile(filepath.Join(dataDir, StateDir, AppliedFile))
	if err != nil {
		return ""
	}
	return strings.TrimSpace(string(b))
}

// under maps an absolute machine path into root, refusing any escape.
func under(root, p string) (string, error) {
	if err := checkPath(p); err != nil {
		return "", err
	}
	dst := filepath.Join(root, filepath.FromSlash(p))
	if rel, err := filepath.Rel(root, dst); err != nil || rel == "." || strings.HasPrefix(rel, "..") {
		return "", fmt.Errorf("path %q leaves the machine's root", p)
	}
	return dst, nil
}

// writeFile writes atomically (temporary file, then rename) with mode.
func writeFile(dst string, data []byte, mode fs.FileMode) error {
	if err := os.MkdirAll(filepath.Dir(dst), 0o755); err != nil {
		return err
	}
	tmp, err := os.CreateTemp(filepath.Dir(dst), ".tmp-"+filepath.Base(dst))
	if err != nil {
		return err
	}
	defer os.Remove(tmp.Name())
	if _, err := tmp.Write(data); err != nil {
		tmp.Close()
		return err
	}
	if err := tmp.Chmod(mode); err != nil {
		tmp.Close()
		return err
	}
	if err := tmp.Close(); err != nil {
		return err
	}
	return os.Rename(tmp.Name(), dst)
}

// claim records the machine's identity in dataDir on first start, refuses
// a data dir of another machine, and counts the start.
func claim(dataDir, identity string) (boots int, err error) {
	state := filepath.Join(dataDir, StateDir)
	if err := os.MkdirAll(state, 0o700); err != nil {
		return 0, err
	}
	idFile := filepath.Join(state, IdentityFile)
	switch b, err := os.ReadFile(idFile); {
	case errors.Is(err, fs.ErrNotExist):
		if err := writeFile(idFile, []byte(identity+"\n"), 0o600); err != nil {
			return 0, err
		}
	case err != nil:
		return 0, err
	case strings.TrimSpace(string(b)) != identity:
		return 0, fmt.Errorf("data dir %s belongs to machine %s, not %s", dataDir, strings.TrimSpace(string(b)), identity)
	}
	b, _ := os.ReadFile(filepath.Join(state, BootsFile))
	fmt.Sscan(string(b), &boots)
	boots++
	return boots, writeFile(filepath.Join(state, BootsFile), []byte(fmt.Sprintln(boots)), 0o600)
}
