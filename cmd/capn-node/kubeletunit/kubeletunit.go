// Package kubeletunit runs a kubelet the way kubeadm's systemd unit does
// (kubelet.service with its 10-kubeadm.conf drop-in), for machines with no
// systemd — a real node of this host, whose init is capn-node:
//
//	ExecStart=kubelet $KUBELET_KUBECONFIG_ARGS $KUBELET_CONFIG_ARGS $KUBELET_KUBEADM_ARGS $KUBELET_EXTRA_ARGS
//	  KUBELET_KUBECONFIG_ARGS=--bootstrap-kubeconfig=/etc/kubernetes/bootstrap-kubelet.conf --kubeconfig=/etc/kubernetes/kubelet.conf
//	  KUBELET_CONFIG_ARGS=--config=/var/lib/kubelet/config.yaml
//	  EnvironmentFile=-/var/lib/kubelet/kubeadm-flags.env   (KUBELET_KUBEADM_ARGS, written by kubeadm)
//	  EnvironmentFile=-/etc/default/kubelet                 (KUBELET_EXTRA_ARGS, the machine's own)
//	Restart=always, RestartSec=10
//
// One difference: systemd starts the kubelet at boot and lets it fail
// until kubeadm has written /var/lib/kubelet/config.yaml; Run waits for
// that file instead (kubeadm init and join wait for the kubelet's health
// only after writing it).
package kubeletunit

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"time"
)

// The files the unit reads (kubeadm's paths).
const (
	BootstrapKubeconfig = "/etc/kubernetes/bootstrap-kubelet.conf"
	Kubeconfig          = "/etc/kubernetes/kubelet.conf"
	ConfigFile          = "/var/lib/kubelet/config.yaml"
	FlagsEnv            = "/var/lib/kubelet/kubeadm-flags.env"
	DefaultsEnv         = "/etc/default/kubelet"
	// RestartDelay is the unit's RestartSec.
	RestartDelay = 10 * time.Second
)

// Args is the kubelet's command line after the binary, as the unit
// expands it now: the fixed arguments, then KUBELET_KUBEADM_ARGS and
// KUBELET_EXTRA_ARGS from their environment files under root (a missing
// file is empty, as the unit's "-" prefix says).
func Args(root string) ([]string, error) {
	args := []string{"--bootstrap-kubeconfig=" + BootstrapKubeconfig, "--kubeconfig=" + Kubeconfig, "--config=" + ConfigFile}
	for _, f := range []struct{ file, name string }{{FlagsEnv, "KUBELET_KUBEADM_ARGS"}, {DefaultsEnv, "KUBELET_EXTRA_ARGS"}} {
		env, err := ReadEnvFile(filepath.Join(root, f.file))
		if errors.Is(err, os.ErrNotExist) {
			continue
		}
		if err != nil {
			return nil, err
		}
		// An unbraced $VAR in ExecStart is split at whitespace.
		args = append(args, strings.Fields(env[f.name])...)
	}
	return args, nil
}

// ReadEnvFile reads a systemd EnvironmentFile: NAME=value lines, the value
// optionally in double or single quotes; blank lines and lines starting
// with # or ; are skipped. A line without '=' is an error naming it.
func ReadEnvFile(path string) (map[string]string, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	env := map[string]string{}
	sc := bufio.NewScanner(f)
	for n := 1; sc.Scan(); n++ {
		line := strings.TrimSpace(sc.Text())
		if line == "" || line[0] == '#' || line[0] == ';' {
			continue
		}
		name, value, ok := strings.Cut(line, "=")
		if !ok || strings.TrimSpace(name) == "" {
			return nil, fmt.Errorf("%s:%d: %q is not NAME=value", path, n, line)
		}
		value = strings.TrimSpace(value)
		if len(value) >= 2 && (value[0] == '"' && value[len(value)-1] == '"' || value[0] == '\'' && value[len(value)-1] == '\'') {
			value = value[1 : len(value)-1]
		}
		env[strings.TrimSpace(name)] = value
	}
	return env, sc.Err()
}

// Unit runs the kubelet.
type Unit struct {
	// Kubelet is the binary.
	Kubelet string
	// Root is where the unit's files are read ("/" on a machine).
	Root string
	// RestartDelay between an exit and the next start (default RestartDelay, the unit's RestartSec).
	RestartDelay time.Duration
	// Output gets the kubelet's output and one line per start and exit.
	Output io.Writer
	// Env is added to the kubelet's environment.
	Env []string
}

// Run waits for the kubelet's config, then keeps the kubelet running,
// restarting it RestartDelay after it exits, until ctx ends; then it stops
// the kubelet (SIGTERM, SIGKILL after 30 s) and returns nil.
func (u *Unit) Run(ctx context.Context) error {
	root, restart := u.Root, u.RestartDelay
	if root == "" {
		root = "/"
	}
	if restart <= 0 {
		restart = RestartDelay
	}
	out := u.Output
	if out == nil {
		out = io.Discard
	}
	wait := func(d time.Duration) bool {
		t := time.NewTimer(d)
		defer t.Stop()
		select {
		case <-ctx.Done():
			return false
		case <-t.C:
			return true
		}
	}
	for {
		if _, err := os.Stat(filepath.Join(root, ConfigFile)); err != nil {
			if !wait(200 * time.Millisecond) {
				return nil
			}
			continue
		}
		args, err := Args(root)
		if err != nil {
			fmt.Fprintf(out, "kubelet unit: %v; retrying in %s\n", err, restart)
			if !wait(restart) {
				return nil
			}
			continue
		}
		cmd := exec.Command(u.Kubelet, args...)
		cmd.Stdout, cmd.Stderr = out, out
		cmd.Env = append(os.Environ(), u.Env...)
		cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
		fmt.Fprintf(out, "kubelet unit: starting %s %s\n", u.Kubelet, strings.Join(args, " "))
		if err := cmd.Start(); err != nil {
			return fmt.Errorf("start kubelet: %w", err)
		}
		exited := make(chan error, 1)
		go func() { exited <- cmd.Wait() }()
		select {
		case err := <-exited:
			fmt.Fprintf(out, "kubelet unit: kubelet exited (%v); restarting in %s\n", err, restart)
			if !wait(restart) {
				return nil
			}
		case <-ctx.Done():
			_ = cmd.Process.Signal(syscall.SIGTERM)
			t := time.NewTimer(30 * time.Second)
			select {
			case <-exited:
			case <-t.C:
				_ = cmd.Process.Kill()
				<-exited
			}
			t.Stop()
			fmt.Fprintf(out, "kubelet unit: stopped\n")
			return nil
		}
	}
}
