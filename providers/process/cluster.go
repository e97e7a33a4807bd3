package process

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"time"

	capnv1 "github.com/capn-dev/capn/schemas/capn/v1alpha1"
)

// EndpointMessage says what listens on a process cluster's control-plane
// endpoint.
const EndpointMessage = "load balancer (capn-node endpoint) to the control-plane machines' API servers on :6443; placeholder answers while none is up"

// EnsureCluster gives the cluster a directory and a control-plane endpoint
// on 127.0.0.1:<port> (the port chosen once and kept), and keeps its
// endpoint process running there: a TCP load balancer to the cluster's
// control-plane machines' API servers (<address>:6443), which answers as a
// placeholder while none is up. It is idempotent. params are ignored.
func (p *Provider) EnsureCluster(ctx context.Context, cluster string, _ map[string]string) (*capnv1.InfraCluster, error) {
	if p.realNodesOn() {
		// The nodes reach the endpoint on the host's address on their
		// switch.
		if _, err := p.ensureLAN(); err != nil {
			return nil, err
		}
	}
	p.mu.Lock()
	rec, err := p.ensureClusterRecord(cluster)
	if err == nil {
		err = p.ensureEndpoint(rec)
	}
	p.mu.Unlock()
	if err != nil {
		return nil, err
	}
	addr := net.JoinHostPort(p.endpointHost(), strconv.Itoa(rec.Port))
	if err := waitListening(ctx, addr, 5*time.Second); err != nil {
		return nil, fmt.Errorf("endpoint of %s: %w", cluster, err)
	}
	return &capnv1.InfraCluster{
		Provider: Name, Cluster: cluster, Ready: true, Message: EndpointMessage,
		ControlPlaneEndpoint: &capnv1.Endpoint{Host: p.endpointHost(), Port: int32(rec.Port)},
		Location:             p.dirs.cluster(cluster),
	}, nil
}

// ensureClusterRecord reads or writes cluster.json. p.mu must be held.
func (p *Provider) ensureClusterRecord(cluster string) (*clusterRecord, error) {
	path := filepath.Join(p.dirs.cluster(cluster), clusterFile)
	rec := new(clusterRecord)
	err := readJSON(path, rec)
	if err == nil {
		return rec, nil
	}
	if !errors.Is(err, fs.ErrNotExist) {
		return nil, err
	}
	port, err := freePort()
	if err != nil {
		return nil, err
	}
	rec = &clusterRecord{Cluster: cluster, Port: port, Created: p.now().UTC()}
	return rec, writeJSON(path, rec)
}

// endpointArgs is the head of the endpoint process's command line, which
// says that a pid is this cluster's endpoint (checked in /proc).
func (p *Provider) endpointArgs(rec *clusterRecord) []string {
	return []string{p.opts.NodeBinary, "endpoint", "--cluster=" + rec.Cluster,
		"--listen=" + net.JoinHostPort(p.endpointHost(), strconv.Itoa(rec.Port))}
}

// endpointHost is where cluster endpoints listen: 127.0.0.1, or in node
// mode the host's address on the real nodes' switch (their kubeadm and
// kubelets reach the API servers through it; so does this host).
func (p *Provider) endpointHost() string {
	if p.opts.RealNodes {
		if l := p.lanIfMade(); l != nil {
			return l.HostIP
		}
	}
	return "127.0.0.1"
}

// endpointCommand is the endpoint process's whole command line: its
// backends are the cluster's control-plane machines in the state dir.
func (p *Provider) endpointCommand(rec *clusterRecord) []string {
	state := p.opts.StateDir
	if rec.EndpointStateDir != "" {
		state = rec.EndpointStateDir
	}
	return append(p.endpointArgs(rec), "--process-state-dir="+state,
		"--backend-port="+strconv.Itoa(p.opts.apiServerPort))
}

// ensureEndpoint starts the cluster's endpoint process unless it runs; one
// that runs with another command line (started by an older provider as a
// placeholder only, or with other options) is replaced. p.mu must be
// held, so that two callers never start two.
func (p *Provider) ensureEndpoint(rec *clusterRecord) error {
	dir := p.dirs.cluster(rec.Cluster)
	pidPath := filepath.Join(dir, endpointPID)
	if ref, ok := readRef(pidPath); ok && alive(ref, p.endpointArgs(rec)) {
		if alive(ref, p.endpointCommand(rec)) {
			return nil
		}
		p.log.Info().Str("cluster", rec.Cluster).Int("pid", ref.PID).Msg("replacing the cluster endpoint started with another command line")
		if err := terminate(ref, p.endpointArgs(rec), p.opts.StopTimeout, p.exitedChan(pidPath, ref)); err != nil {
			return fmt.Errorf("stop the old endpoint of %s: %w", rec.Cluster, err)
		}
	}
	if rec.EndpointStateDir != "" {
		// Started here, an adopted cluster's endpoint reads this state dir.
		rec.EndpointStateDir = ""
		if err := writeJSON(filepath.Join(dir, clusterFile), rec); err != nil {
			return err
		}
	}
	ref, exited, err := p.spawn(dir, filepath.Join(dir, endpointLog), p.endpointCommand(rec))
	if err != nil {
		return fmt.Errorf("start the endpoint of %s: %w", rec.Cluster, err)
	}
	if err := writeAtomic(pidPath, []byte(ref.String()+"\n")); err != nil {
		_ = terminate(ref, p.endpointArgs(rec), 0, exited)
		return err
	}
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
	}()
	p.log.Info().Str("cluster", rec.Cluster).Int("port", rec.Port).Int("pid", ref.PID).Msg("cluster endpoint started")
	return nil
}

// DeleteCluster stops the cluster's endpoint process and forgets its
// record; the cluster's directory goes once no machine of it is left. A
// missing cluster is fine.
func (p *Provider) DeleteCluster(_ context.Context, cluster string) error {
	dir := p.dirs.cluster(cluster)
	// The record goes first, under p.mu, so that the watcher does not
	// bring the endpoint back while it is being stopped.
	p.mu.Lock()
	rec := new(clusterRecord)
	err := readJSON(filepath.Join(dir, clusterFile), rec)
	if err == nil {
		err = os.Remove(filepath.Join(dir, clusterFile))
	}
	p.mu.Unlock()
	switch {
	case errors.Is(err, fs.ErrNotExist):
	case err != nil:
		return err
	default:
		pidPath := filepath.Join(dir, endpointPID)
		if ref, ok := readRef(pidPath); ok {
			if err := terminate(ref, p.endpointArgs(rec), p.opts.StopTimeout, p.exitedChan(pidPath, ref)); err != nil {
				return err
			}
		}
	}
	for _, f := range []string{endpointPID, endpointLog} {
		if err := os.Remove(filepath.Join(dir, f)); err != nil && !errors.Is(err, fs.ErrNotExist) {
			return err
		}
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	p.tidyCluster(cluster)
	return nil
}

// tidyCluster removes the cluster's directory when it holds no machine and
// no cluster record (a pool's cluster whose infrastructure another
// provider holds has no record here). p.mu must be held.
func (p *Provider) tidyCluster(cluster string) {
	dir := p.dirs.cluster(cluster)
	if exists(filepath.Join(dir, clusterFile)) {
		return
	}
	if names, err := p.dirs.machineNames(cluster); err != nil || len(names) > 0 {
		return
	}
	_ = os.Remove(p.dirs.machines(cluster))
	removeIfEmpty(dir, filepath.Join(p.opts.StateDir, clustersDir))
}

// reviveEndpoints restarts the endpoint of every cluster that has a record
// and whose endpoint process is gone.
func (p *Provider) reviveEndpoints() {
	clusters, err := p.dirs.clusterNames()
	if err != nil {
		return
	}
	for _, c := range clusters {
		p.mu.Lock()
		rec := new(clusterRecord)
		if readJSON(filepath.Join(p.dirs.cluster(c), clusterFile), rec) == nil {
			if err := p.ensureEndpoint(rec); err != nil {
				p.log.Warn().Err(err).Str("cluster", c).Msg("cannot restart the cluster endpoint")
			}
		}
		p.mu.Unlock()
	}
}

// waitListening waits until addr accepts TCP connections.
func waitListening(ctx context.Context, addr string, d time.Duration) error {
	ctx, cancel := context.WithTimeout(ctx, d)
	defer cancel()
	var dialer net.Dialer
	for {
		c, err := dialer.DialContext(ctx, "tcp", addr)
		if err == nil {
			c.Close()
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("%s does not accept connections: %w", addr, err)
		case <-time.After(20 * time.Millisecond):
		}
	}
}
