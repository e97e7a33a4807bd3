package process

import (
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"syscall"
	"time"

	"github.com/capn-dev/capn/providers/process/rehome"
)

// identity is the head of a machine's capn-node argv, which the provider
// checks in /proc/<pid>/cmdline before it takes a pid for the machine's.
func (p *Provider) identity(rec *machineRecord) []string {
	dir := rec.NodeDir
	if dir == "" {
		dir = p.dirs.nodeDir(rec.Cluster, rec.Machine)
	}
	return []string{p.opts.NodeBinary, "agent", "--cluster=" + rec.Cluster, "--machine=" + rec.Machine,
		"--data-dir=" + dir}
}

// nodeArgs is the machine's whole capn-node command line; kubeDir is the
// directory of the Kubernetes binaries of its version (p.kubeDir), "" for
// none.
func (p *Provider) nodeArgs(rec *machineRecord, kubeDir string) []string {
	args := append(p.identity(rec),
		"--version="+rec.Version,
		"--bootstrap-checksum="+rec.Checksum,
		"--bootstrap-credential-file="+p.credentialPath(rec.Cluster, rec.Machine),
		"--nats-url="+p.opts.NodeNATSURL,
		"--heartbeat-every="+p.opts.HeartbeatEvery.String(),
	)
	if rec.CACertHash != "" {
		args = append(args, "--ca-cert-hash="+rec.CACertHash)
	}
	if p.opts.NodeNATSCreds != "" {
		args = append(args, "--nats-creds="+p.opts.NodeNATSCreds)
	}
	if p.opts.NodeNATSNKey != "" {
		args = append(args, "--nats-nkey="+p.opts.NodeNATSNKey)
	}
	for _, f := range []struct{ flag, v string }{
		{"nats-tls-ca", p.opts.NodeNATSTLSCA}, {"nats-tls-cert", p.opts.NodeNATSTLSCert},
		{"nats-tls-key", p.opts.NodeNATSTLSKey}, {"nats-inbox-prefix", p.opts.NodeNATSInboxPrefix},
	} {
		if f.v != "" {
			args = append(args, "--"+f.flag+"="+f.v)
		}
	}
	if rec.RealNode != 0 {
		// A real node: its agent runs the kubeadm data, and reaches
		// capn's NATS through the relay socket.
		return append(args, "--run-cloud-config=true", "--nats-socket="+p.RelaySocket())
	}
	if p.opts.HealthPort > 0 {
		args = append(args, "--health-addr="+net.JoinHostPort(rec.Address, strconv.Itoa(p.opts.HealthPort)))
	}
	// What the node needs to run Kubernetes: the binaries of its version,
	// the address its components bind, and the provider id its Node
	// carries. capn-node checks the binaries are its version again.
	if kubeDir != "" {
		args = append(args, "--kube-bin="+kubeDir, "--address="+rec.Address, "--provider-id="+rec.ProviderID)
		if rec.Capacity != "" {
			args = append(args, "--node-capacity="+rec.Capacity)
		}
	}
	return args
}

// running returns the machine's node process if it runs as this machine's.
func (p *Provider) running(rec *machineRecord) (procRef, bool) {
	ref, ok := readRef(p.pidPath(rec.Cluster, rec.Machine))
	if !ok || !alive(ref, p.identity(rec)) {
		return procRef{}, false
	}
	return ref, true
}

// startNode starts the machine's capn-node in a session of its own (so it
// outlives this provider and its terminal) with an empty environment (so
// it inherits none of the provider's credentials), output appended to
// node.log, and records its pid.
func (p *Provider) startNode(ctx context.Context, rec *machineRecord) error {
	dir := p.dirs.machine(rec.Cluster, rec.Machine)
	kubeDir, err := p.kubeDir(ctx, rec)
	if err != nil {
		return fmt.Errorf("start capn-node of %s/%s: %w", rec.Cluster, rec.Machine, err)
	}
	// Started here, a machine adopted from another state dir runs from
	// this one, connected where its command line says.
	if rec.NodeDir != "" {
		rec.NodeDir = ""
		if err := writeJSON(p.machineJSON(rec.Cluster, rec.Machine), rec); err != nil {
			return err
		}
	}
	if err := rehome.RemoveConnection(p.dirs.nodeDir(rec.Cluster, rec.Machine)); err != nil {
		return err
	}
	args := p.nodeArgs(rec, kubeDir)
	var env []string
	if rec.RealNode != 0 {
		// The node first (mounts, containerd, the kubelet unit); its
		// agent runs in its namespaces, with the stack on its PATH.
		n, err := p.startRealNode(rec)
		if err != nil {
			return err
		}
		args = append([]string{"nsenter"}, n.InNode(args[0], args[1:]...)...)
		env = []string{p.real.stack.Path()}
	}
	ref, exited, err := p.spawn(dir, filepath.Join(dir, nodeLogFile), args, env...)
	if err != nil {
		return fmt.Errorf("start capn-node of %s/%s: %w", rec.Cluster, rec.Machine, err)
	}
	if rec.RealNode != 0 {
		// nsenter execs the agent: wait until the pid is the machine's.
		if ok, _ := until(5*time.Second, 10*time.Millisecond, exited, func() bool { return alive(ref, p.identity(rec)) }); !ok {
			return fmt.Errorf("start capn-node of %s/%s in its node: not running as the machine's agent", rec.Cluster, rec.Machine)
		}
	}
	pidPath := p.pidPath(rec.Cluster, rec.Machine)
	if err := writeAtomic(pidPath, []byte(ref.String()+"\n")); err != nil {
		_ = terminate(ref, p.identity(rec), 0, exited)
		return err
	}
	p.watchChild(pidPath, ref, exited, rec.Cluster, rec.Machine)
	p.log.Info().Str("cluster", rec.Cluster).Str("machine", rec.Machine).Int("pid", ref.PID).Str("address", rec.Address).Msg("capn-node started")
	return nil
}

// spawn starts args in dir with output to logPath; exited is closed once
// the process is reaped.
func (p *Provider) spawn(dir, logPath string, args []string, env ...string) (procRef, chan struct{}, error) {
	if err := os.MkdirAll(dir, stateDirMode); err != nil {
		return procRef{}, nil, err
	}
	logf, err := os.OpenFile(logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		return procRef{}, nil, err
	}
	defer logf.Close()
	cmd := exec.Command(args[0], args[1:]...)
	cmd.Dir = dir
	cmd.Env = append([]string{}, env...)
	cmd.Stdout, cmd.Stderr = logf, logf
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	if err := cmd.Start(); err != nil {
		return procRef{}, nil, err
	}
	exited := make(chan struct{})
	go func() {
		_ = cmd.Wait()
		close(exited)
	}()
	// The start time is read from /proc; a process that died at once has
	// none, and is reported as not running. Start returns while the
	// kernel may still be setting up the new program, whose argv then
	// reads empty: wait until it shows, so the identity check holds.
	ref, err := refOf(cmd.Process.Pid)
	if err == nil {
		err = waitExecuted(ref, exited)
	}
	if err != nil {
		_ = cmd.Process.Kill()
		<-exited
		return procRef{}, nil, fmt.Errorf("%s did not start (%v); see %s", filepath.Base(args[0]), err, logPath)
	}
	return ref, exited, nil
}

// watchChild remembers a started process and, when it exits, asks the SDK
// to check its machine (a crash or kill -9 is drift).
func (p *Provider) watchChild(pidPath string, ref procRef, exited chan struct{}, cluster, machine string) {
	p.childMu.Lock()
	p.children[pidPath] = &child{ref: ref, exited: exited}
	p.childMu.Unlock()
	go func() {
		<-exited
		p.childMu.Lock()
		if c := p.children[pidPath]; c != nil && c.ref == ref {
			delete(p.children, pidPath)
		}
		p.childMu.Unlock()
		p.recheck(cluster, machine)
	}()
}

// exitedChan is the reaper channel of a process this provider started.
func (p *Provider) exitedChan(pidPath string, ref procRef) <-chan struct{} {
	p.childMu.Lock()
	defer p.childMu.Unlock()
	if c := p.children[pidPath]; c != nil && c.ref == ref {
		return c.exited
	}
	return nil
}

// stopNode ends the machine's node process, if any, and removes its pid
// file.
func (p *Provider) stopNode(rec *machineRecord) error {
	pidPath := p.pidPath(rec.Cluster, rec.Machine)
	if ref, ok := readRef(pidPath); ok {
		p.log.Info().Str("cluster", rec.Cluster).Str("machine", rec.Machine).Int("pid", ref.PID).Msg("stopping capn-node")
		if err := terminate(ref, p.identity(rec), p.opts.StopTimeout, p.exitedChan(pidPath, ref)); err != nil {
			return err
		}
	}
	if err := os.Remove(pidPath); err != nil && !os.IsNotExist(err) {
		return err
	}
	return nil
}

// recheck asks the SDK for a drift check of one machine, while Run runs.
func (p *Provider) recheck(cluster, machine string) {
	p.envMu.Lock()
	r := p.reporter
	p.envMu.Unlock()
	if r != nil {
		r.Recheck(cluster, machine)
	}
}

// touch records a start or stop as the machine's updated time.
func (p *Provider) touch(rec *machineRecord) error {
	t := p.now().UTC()
	if !t.After(rec.Changed) {
		t = rec.Changed.Add(time.Microsecond)
	}
	rec.Changed = t
	return writeJSON(p.machineJSON(rec.Cluster, rec.Machine), rec)
}
