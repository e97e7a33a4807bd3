package agent

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/user"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/capn-dev/capn/internal/atomicfile"
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
	// CommandsFile lists the commands of the data the agent does not run,
	// one a line: kubeadm's join (no kubeadm here), or the commands of
	// data it does not know the shape of (the script provider's).
	CommandsFile = "commands-not-run"
	// CommandsPlanFile holds the user's commands the agent runs (JSON:
	// pre and post, each with its name and timeout), written with the
	// files; CommandsStateFile records how far they ran, so a restarted
	// agent neither runs a finished stage again nor forgets a failure.
	CommandsPlanFile  = "bootstrap-commands.json"
	CommandsStateFile = "bootstrap-commands.state"
	// CommandsLog (under the data dir) gets every output line of the
	// commands.
	CommandsLog = "logs/bootstrap-commands.log"
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
// <dataDir>/rootfs with its mode and, as far as the agent may, its owner
// (p.Unowned lists those it could not give theirs), the commands to run
// and those not run, and, last, the checksum as applied. It never writes
// outside dataDir.
func Apply(dataDir string, p *Plan, checksum string) error {
	root := filepath.Join(dataDir, RootFS)
	p.Unowned = nil
	for _, f := range p.Files {
		dst, err := under(root, f.Path)
		if err != nil {
			return err
		}
		if err := writeFile(dst, f.Content, f.Mode); err != nil {
			return fmt.Errorf("write %s: %w", f.Path, err)
		}
		if f.Owner != "" {
			if err := chown(dst, f.Owner); err != nil {
				p.Unowned = append(p.Unowned, fmt.Sprintf("%s (owner %s): %v", f.Path, f.Owner, err))
			}
		}
	}
	state := filepath.Join(dataDir, StateDir)
	cmds := strings.Join(p.NotRun(), "\n")
	if cmds != "" {
		cmds += "\n"
	}
	if err := writeFile(filepath.Join(state, CommandsFile), []byte(cmds), 0o600); err != nil {
		return err
	}
	plan, err := json.MarshalIndent(commandPlan{Pre: p.Pre, Post: p.Post}, "", "  ")
	if err != nil {
		return err
	}
	if err := writeFile(filepath.Join(state, CommandsPlanFile), append(plan, '\n'), 0o600); err != nil {
		return err
	}
	// New data: its commands have not run.
	if err := os.Remove(filepath.Join(state, CommandsStateFile)); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return err
	}
	return writeFile(filepath.Join(state, AppliedFile), []byte(checksum+"\n"), 0o600)
}

// chown gives dst the owner "user[:group]" (names or numeric ids). Only
// root may give a file away: an agent that is not root stands for the
// machine's root itself (root's files stay the agent's), can set its own
// groups, and says so for the rest.
func chown(dst, owner string) error {
	name, group, _ := strings.Cut(owner, ":")
	uid, err := lookupID(name, func(n string) (string, error) {
		u, err := user.Lookup(n)
		if err != nil {
			return "", err
		}
		return u.Uid, nil
	})
	if err != nil {
		return err
	}
	gid := -1
	if group != "" {
		if gid, err = lookupID(group, func(n string) (string, error) {
			g, err := user.LookupGroup(n)
			if err != nil {
				return "", err
			}
			return g.Gid, nil
		}); err != nil {
			return err
		}
	}
	if os.Geteuid() != 0 {
		if uid == 0 {
			uid = -1 // the agent's user is the machine's root
		}
		if gid == 0 {
			gid = -1
		}
		if uid == -1 && gid == -1 {
			return nil
		}
	}
	if err := os.Lchown(dst, uid, gid); err != nil {
		if errors.Is(err, fs.ErrPermission) {
			return fmt.Errorf("not set: the agent runs as uid %d, and only root gives files away", os.Geteuid())
		}
		return err
	}
	return nil
}

// lookupID is a numeric id as is, or a name's id.
func lookupID(name string, lookup func(string) (string, error)) (int, error) {
	if n, err := strconv.Atoi(name); err == nil && n >= 0 {
		return n, nil
	}
	id, err := lookup(name)
	if err != nil {
		return 0, fmt.Errorf("not set: %w", err)
	}
	return strconv.Atoi(id)
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

// writeFile writes atomically with mode, creating the directory.
func writeFile(dst string, data []byte, mode fs.FileMode) error {
	return atomicfile.Write(dst, data, mode, 0o755)
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
