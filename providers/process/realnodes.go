package process

import (
	"encoding/hex"
	"errors"
	"fmt"
	"hash/fnv"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"

	"github.com/capn-dev/capn/providers/process/realnode"
)

// Node mode (Options.RealNodes): every machine is a real Linux node on
// this host (package realnode) — a network namespace on the provider's
// switch with an address of the switch's /24 and no route out, a mount
// namespace of its own, its own containerd, the kubelet unit
// (capn-node kubelet), and its capn-node agent in those namespaces, which
// fetches the machine's bootstrap data as every capn machine does and runs
// it (--run-cloud-config: kubeadm init or join). The agent reaches capn's
// NATS through the provider's relay socket in the state dir, as docker
// machines do. The provider keeps a route to each node's pod CIDR (read
// from the CNI config its containerd rendered) on the host and on every
// other node.
//
//	<state>/realnodes/lan.json    the switch: its id and /24
//	<state>/realnodes/relay/nats.sock
//	<state>/realnodes/<index>/    a node's directory (short: unix socket paths)
const (
	realNodesDir   = "realnodes"
	lanFile        = "lan.json"
	relayDirName   = "relay"
	relaySocket    = "nats.sock"
	maxSocketPath  = 100 // sun_path is 108 bytes; containerd adds ".ttrpc"
	defaultInotify = 1024
)

// lanRecord is lan.json.
type lanRecord struct {
	ID    string `json:"id"`
	Octet int    `json:"octet"`
}

// realNodes is the provider's node-mode state.
type realNodes struct {
	stack  realnode.Stack
	images []realnode.Image
	lanMu  sync.Mutex
	lan    *realnode.LAN
	// routed is what routes were set last: node index → "<cidr> via
	// <ip> from <peers>", so each change is applied once.
	routeMu sync.Mutex
	routed  map[int]string
}

// realNodesOn reports whether the provider runs real nodes.
func (p *Provider) realNodesOn() bool { return p.opts.RealNodes }

func (p *Provider) realDir() string { return filepath.Join(p.opts.StateDir, realNodesDir) }

// RelaySocket is the unix socket real nodes reach capn's NATS through.
func (p *Provider) RelaySocket() string {
	return filepath.Join(p.realDir(), relayDirName, relaySocket)
}

// checkRealNodes says what node mode lacks on this host, naming the make
// commands that build it.
func checkRealNodes(o Options) error {
	if err := realnode.ParseStack(o.NodeStack).Check(true, o.NodeImages); err != nil {
		return err
	}
	if o.StateDir != "" {
		// A node's mounts cover these with overlays: its containerd's
		// root (overlayfs snapshots) may not be in one.
		for _, d := range []string{"/etc", "/var/lib", "/var/log", "/usr/libexec", "/run"} {
			if abs, err := filepath.Abs(o.StateDir); err == nil && (abs == d || strings.HasPrefix(abs, d+"/")) {
				return fmt.Errorf("the state dir %q is under %s, which each real node overlays: use another", o.StateDir, d)
			}
		}
		sock := filepath.Join(o.StateDir, realNodesDir, "250", "containerd", "containerd.sock.ttrpc")
		if len(sock) > maxSocketPath {
			return fmt.Errorf("the state dir %q is too long for a node's containerd socket (%d bytes > %d): use a shorter path", o.StateDir, len(sock), maxSocketPath)
		}
	}
	return nil
}

// initRealNodes reads the stack and images and raises the host's inotify
// instance limit (the nodes' containerd, kubelet and API server each take
// several).
func (p *Provider) initRealNodes() error {
	images, err := realnode.ReadImages(p.opts.NodeImages)
	if err != nil {
		return err
	}
	p.real = &realNodes{stack: realnode.ParseStack(p.opts.NodeStack), images: images, routed: map[int]string{}}
	if old, raised, err := realnode.RaiseInotifyInstances(defaultInotify); err != nil {
		return err
	} else if raised {
		p.log.Info().Str("was", strings.TrimSpace(string(old))).Int("now", defaultInotify).Msg("raised fs.inotify.max_user_instances for real nodes")
	}
	return nil
}

// ensureLAN makes the provider's switch, once: its id and /24 are kept in
// lan.json, so a restarted provider finds it again.
func (p *Provider) ensureLAN() (*realnode.LAN, error) {
	p.real.lanMu.Lock()
	defer p.real.lanMu.Unlock()
	path := filepath.Join(p.realDir(), lanFile)
	rec := new(lanRecord)
	err := readJSON(path, rec)
	if errors.Is(err, fs.ErrNotExist) {
		h := fnv.New32a()
		_, _ = h.Write([]byte(p.opts.StateDir))
		sum := h.Sum(nil)
		octet, err := realnode.FreeOctet(int(sum[0]))
		if err != nil {
			return nil, err
		}
		rec = &lanRecord{ID: hex.EncodeToString(sum[:3]), Octet: octet}
		if err := os.MkdirAll(p.realDir(), stateDirMode); err != nil {
			return nil, err
		}
		if err := writeJSON(path, rec); err != nil {
			return nil, err
		}
	} else if err != nil {
		return nil, err
	}
	l := realnode.LANFor(rec.ID, rec.Octet)
	if !l.Exists() {
		if err := l.Create(); err != nil {
			return nil, fmt.Errorf("real nodes' switch: %w", err)
		}
		p.log.Info().Str("switch", l.NS).Str("host", l.HostIP).Msg("real nodes' switch made")
	}
	p.real.lan = l
	return l, nil
}

// lanIfMade is the switch if lan.json names one, without making it.
func (p *Provider) lanIfMade() *realnode.LAN {
	rec := new(lanRecord)
	if readJSON(filepath.Join(p.realDir(), lanFile), rec) != nil {
		return nil
	}
	return realnode.LANFor(rec.ID, rec.Octet)
}

// allocateNode is the lowest node index no machine holds, and its address.
// p.mu must be held.
func (p *Provider) allocateNode(l *realnode.LAN) (int, string, error) {
	recs, err := p.records()
	if err != nil {
		return 0, "", err
	}
	used := map[int]bool{}
	for _, r := range recs {
		used[r.RealNode] = true
	}
	for i := 1; i <= 250; i++ {
		if !used[i] && !exists(filepath.Join(p.realDir(), strconv.Itoa(i))) {
			return i, l.NodeFor(i, "").NodeIP, nil
		}
	}
	return 0, "", errors.New("process: all 250 real nodes of the switch are taken")
}

// nodeOf is the machine's real node.
func (p *Provider) nodeOf(l *realnode.LAN, rec *machineRecord) *realnode.Node {
	return l.NodeFor(rec.RealNode, filepath.Join(p.realDir(), strconv.Itoa(rec.RealNode)))
}

// startRealNode makes the machine's node and starts what runs on it
// before its agent: mounts, containerd with the images, the kubelet unit.
// Each step already done is kept.
func (p *Provider) startRealNode(rec *machineRecord) (*realnode.Node, error) {
	l, err := p.ensureLAN()
	if err != nil {
		return nil, err
	}
	n := p.nodeOf(l, rec)
	if !n.Exists() {
		if err := n.Create(); err != nil {
			return nil, err
		}
		// kubeadm init reads the default route's address: a control
		// plane gets the discard route (no route out all the same).
		if rec.Role == RoleControlPlane {
			if err := n.DiscardRoute(); err != nil {
				_ = n.Remove(p.real.stack)
				return nil, err
			}
		}
	}
	if err := n.StartServices(realnode.Boot{
		Stack: p.real.stack, Images: p.real.images, CapnNode: p.opts.NodeBinary, Hostname: rec.Machine,
		Env: []string{p.real.stack.Path()}, ProviderID: rec.ProviderID,
	}); err != nil {
		return nil, fmt.Errorf("real node %s of %s/%s: %w", n.NS, rec.Cluster, rec.Machine, err)
	}
	return n, nil
}

// removeRealNode removes everything of the machine's node from the host,
// and the other nodes' routes to its pods.
func (p *Provider) removeRealNode(rec *machineRecord) error {
	l := p.lanIfMade()
	if l == nil || rec.RealNode == 0 {
		return nil
	}
	n := p.nodeOf(l, rec)
	errs := []error{n.Remove(p.real.stack), l.UnroutePods(n.NodeIP, p.peerNamespaces(l, rec.RealNode))}
	p.real.routeMu.Lock()
	delete(p.real.routed, rec.RealNode)
	p.real.routeMu.Unlock()
	return errors.Join(errs...)
}

// tidyLAN removes the switch once no machine is left.
func (p *Provider) tidyLAN() error {
	recs, err := p.records()
	if err != nil || len(recs) > 0 {
		return err
	}
	l := p.lanIfMade()
	if l == nil {
		return nil
	}
	return l.Remove()
}

// peerNamespaces are the network namespaces of the nodes other than index.
func (p *Provider) peerNamespaces(l *realnode.LAN, index int) []string {
	recs, _ := p.records()
	var out []string
	for _, r := range recs {
		if r.RealNode != 0 && r.RealNode != index {
			if n := p.nodeOf(l, r); n.Exists() {
				out = append(out, n.NS)
			}
		}
	}
	return out
}

// routePods keeps a route to each node's pod CIDR (the subnet of the CNI
// config its containerd rendered once its kubelet got the Node's
// spec.podCIDR) on the host and on every other node; level-driven, and
// applied again only when a CIDR or the set of nodes changes.
func (p *Provider) routePods() {
	l := p.lanIfMade()
	if l == nil {
		return
	}
	recs, err := p.records()
	if err != nil {
		return
	}
	for _, r := range recs {
		if r.RealNode == 0 {
			continue
		}
		n := p.nodeOf(l, r)
		cidr := realnode.PodCIDROf(n.CNIConf())
		if cidr == "" || !n.Exists() {
			continue
		}
		peers := p.peerNamespaces(l, r.RealNode)
		want := cidr + " via " + n.NodeIP + " from " + strings.Join(peers, ",")
		p.real.routeMu.Lock()
		done := p.real.routed[r.RealNode] == want
		p.real.routeMu.Unlock()
		if done {
			continue
		}
		if err := l.RoutePod(cidr, n.NodeIP, peers); err != nil {
			p.log.Warn().Err(err).Str("machine", r.Machine).Str("pod_cidr", cidr).Msg("cannot route a node's pods")
			continue
		}
		p.real.routeMu.Lock()
		p.real.routed[r.RealNode] = want
		p.real.routeMu.Unlock()
		p.log.Info().Str("cluster", r.Cluster).Str("machine", r.Machine).Str("pod_cidr", cidr).Str("via", n.NodeIP).Strs("peers", peers).Msg("routed a node's pods")
	}
}

// kubeletVersion is "vX.Y.Z" of the stack's kubelet.
func kubeletVersion(s realnode.Stack) (string, error) {
	out, err := exec.Command(filepath.Join(s.KubeBin, "kubelet"), "--version").Output()
	if err != nil {
		return "", err
	}
	f := strings.Fields(string(out))
	if len(f) < 2 {
		return "", fmt.Errorf("kubelet --version printed %q", out)
	}
	return f[len(f)-1], nil
}

// RealNodeLeftovers lists what of the provider's real nodes is still on
// the host: the switch, node namespaces, node directories, processes
// started from them, mounts under them, and host routes through a node.
func (p *Provider) RealNodeLeftovers() []string {
	l := p.lanIfMade()
	if l == nil {
		return nil
	}
	var out []string
	if l.Exists() {
		out = append(out, "switch "+l.NS)
	}
	if ns, err := realnode.Run(nil, nil, "ip", "netns", "list"); err == nil {
		for _, line := range strings.Split(ns, "\n") {
			if f := strings.Fields(line); len(f) > 0 && strings.HasPrefix(f[0], "capn-node-"+l.ID+"-") {
				out = append(out, "network namespace "+f[0])
			}
		}
	}
	if entries, err := os.ReadDir(p.realDir()); err == nil {
		for _, e := range entries {
			if _, err := strconv.Atoi(e.Name()); err == nil && e.IsDir() {
				out = append(out, "node directory "+filepath.Join(p.realDir(), e.Name()))
			}
		}
	}
	// Processes started from a node's directory (containerd, the shims,
	// the kubelet unit, the agents), even outside any namespace left.
	if procs, err := filepath.Glob("/proc/[0-9]*/cmdline"); err == nil {
		for _, f := range procs {
			if b, err := os.ReadFile(f); err == nil && strings.Contains(string(b), p.realDir()+"/") {
				out = append(out, "process "+filepath.Base(filepath.Dir(f))+": "+strings.ReplaceAll(strings.TrimRight(string(b), "\x00"), "\x00", " "))
			}
		}
	}
	if b, err := os.ReadFile("/proc/self/mountinfo"); err == nil {
		for _, line := range strings.Split(string(b), "\n") {
			if f := strings.Fields(line); len(f) > 4 && strings.HasPrefix(f[4], p.realDir()+"/") {
				out = append(out, "mount "+f[4])
			}
		}
	}
	if r, err := realnode.Run(nil, nil, "ip", "-4", "route", "show"); err == nil {
		for _, line := range strings.Split(r, "\n") {
			if strings.Contains(line, " via "+l.Prefix) {
				out = append(out, "host route "+strings.TrimSpace(line))
			}
		}
	}
	return out
}

// RealNodeNamespaces are the network namespaces of the real nodes of the
// provider with stateDir, by machine ("<cluster>/<machine>").
func RealNodeNamespaces(stateDir string) (map[string]string, error) {
	p := &Provider{opts: Options{StateDir: stateDir}, dirs: layout{stateDir}}
	l := p.lanIfMade()
	if l == nil {
		return nil, nil
	}
	recs, err := p.records()
	if err != nil {
		return nil, err
	}
	out := map[string]string{}
	for _, r := range recs {
		if r.RealNode != 0 {
			out[r.Cluster+"/"+r.Machine] = p.nodeOf(l, r).NS
		}
	}
	return out, nil
}

// RealNodeLeftovers lists what of the real nodes of the provider with
// opts's state dir is still on the host (Provider.RealNodeLeftovers).
func RealNodeLeftovers(opts Options) []string {
	p := &Provider{opts: opts, dirs: layout{opts.StateDir}}
	return p.RealNodeLeftovers()
}

// purgeRealNodes removes every real node of the state dir and the switch.
func purgeRealNodes(opts Options) error {
	stack := opts.NodeStack
	if stack == "" {
		stack = os.Getenv("CAPN_NODESTACK_BIN")
	}
	p := &Provider{opts: opts, dirs: layout{opts.StateDir}, real: &realNodes{stack: realnode.ParseStack(stack), routed: map[int]string{}}}
	l := p.lanIfMade()
	if l == nil {
		return nil
	}
	var errs []error
	entries, _ := os.ReadDir(p.realDir())
	for _, e := range entries {
		if i, err := strconv.Atoi(e.Name()); err == nil {
			errs = append(errs, l.NodeFor(i, filepath.Join(p.realDir(), e.Name())).Remove(p.real.stack))
		}
	}
	// A node whose directory went first: its namespace by name.
	if ns, err := realnode.Run(nil, nil, "ip", "netns", "list"); err == nil {
		for _, line := range strings.Split(ns, "\n") {
			f := strings.Fields(line)
			if len(f) == 0 {
				continue
			}
			if i, err := strconv.Atoi(strings.TrimPrefix(f[0], "capn-node-"+l.ID+"-")); err == nil && strings.HasPrefix(f[0], "capn-node-"+l.ID+"-") {
				errs = append(errs, l.NodeFor(i, filepath.Join(p.realDir(), strconv.Itoa(i))).Remove(p.real.stack))
			}
		}
	}
	errs = append(errs, l.Remove())
	return errors.Join(errs...)
}
