// Package realnode makes real Linux nodes on one host (issue 26): a switch
// (a bridge in a network namespace of its own, with a veth from the host),
// and per node a network namespace on it with its own address and no route
// out, a mount namespace of its own (overlays on /etc, /var/lib, /var/log,
// /usr/libexec; a fresh /run), its own containerd (CRI on, the bridge CNI
// config rendered from the pod CIDR its kubelet hands it), and routes
// between the nodes' pod networks. Its only dependencies are the standard
// library and the host's ip, nsenter, unshare and mount: the process
// provider's node mode (providers may not import internal/) and tests/node
// both use it. Everything it makes it can remove again, and Leftovers says
// what of a node is still on the host.
//
// It needs root.
package realnode

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// StackBinaries are the binaries a node needs in the stack's first
// directory (hack/nodestack.sh).
var StackBinaries = []string{"containerd", "containerd-shim-runc-v2", "ctr", "runc", "bridge", "host-local", "loopback", "portmap"}

// KubeBinaries are the binaries a node needs in the stack's second
// directory.
var KubeBinaries = []string{"kubelet", "kubeadm"}

// HostTools are the host's commands the package runs.
var HostTools = []string{"ip", "nsenter", "unshare", "mount"}

// Stack is where a node's binaries and images are.
type Stack struct {
	Bin     string // containerd, ctr, containerd-shim-runc-v2, runc, CNI plugins
	KubeBin string // kubelet, kubeadm, kube-proxy ("" when not given)
}

// ParseStack reads CAPN_NODESTACK_BIN's form, "<stack bin>[:<kube bin>]".
func ParseStack(s string) Stack {
	dirs := filepath.SplitList(s)
	var st Stack
	if len(dirs) > 0 {
		st.Bin = dirs[0]
	}
	if len(dirs) > 1 {
		st.KubeBin = dirs[1]
	}
	return st
}

// MissingError says what a real node lacks on this host, and how to get it.
type MissingError struct{ What []string }

func (e *MissingError) Error() string {
	return "real nodes need " + strings.Join(e.What, "; ")
}

// Check says what of the stack, the images and the host is missing for a
// node that runs kubeadm (kube: the kubelet and kubeadm too; images: the
// directory hack/nodeimages.sh wrote), all of it in one *MissingError, or
// nil.
func (s Stack) Check(kube bool, images string) error {
	var miss []string
	if os.Geteuid() != 0 {
		miss = append(miss, "root (network namespaces, mounts, cgroups)")
	}
	if s.Bin == "" {
		miss = append(miss, "the node stack: CAPN_NODESTACK_BIN is not set (make nodestack; CAPN_NODESTACK_BIN=$(make -s nodestack-bin))")
	} else {
		for _, b := range StackBinaries {
			if _, err := os.Stat(filepath.Join(s.Bin, b)); err != nil {
				miss = append(miss, fmt.Sprintf("%s in the node stack %q (make nodestack): %v", b, s.Bin, err))
			}
		}
	}
	if kube {
		for _, b := range KubeBinaries {
			if _, err := os.Stat(filepath.Join(s.KubeBin, b)); s.KubeBin == "" || err != nil {
				miss = append(miss, fmt.Sprintf("%s in the node stack's second directory %q (make nodestack; CAPN_NODESTACK_BIN=$(make -s nodestack-bin))", b, s.KubeBin))
			}
		}
	}
	if kube || images != "" {
		if _, err := ReadImages(images); err != nil {
			miss = append(miss, fmt.Sprintf("the node images: %v (make nodeimages; CAPN_NODEIMAGES=$(hack/nodeimages.sh --print-path))", err))
		}
	}
	for _, b := range HostTools {
		if _, err := exec.LookPath(b); err != nil {
			miss = append(miss, fmt.Sprintf("%s on this host: %v", b, err))
		}
	}
	if len(miss) > 0 {
		return &MissingError{What: miss}
	}
	return nil
}

// Image is one archive of hack/nodeimages.sh.
type Image struct{ Ref, Archive string }

// ReadImages reads dir/images.txt ("<ref> <archive>" a line; an archive
// path relative to dir, or absolute).
func ReadImages(dir string) ([]Image, error) {
	if dir == "" {
		return nil, errors.New("CAPN_NODEIMAGES is not set")
	}
	list, err := os.ReadFile(filepath.Join(dir, "images.txt"))
	if err != nil {
		return nil, err
	}
	var images []Image
	for _, l := range strings.Split(strings.TrimSpace(string(list)), "\n") {
		ref, archive, ok := strings.Cut(l, " ")
		if !ok {
			return nil, fmt.Errorf("%s/images.txt: line %q is not \"<ref> <archive>\"", dir, l)
		}
		if !filepath.IsAbs(archive) {
			archive = filepath.Join(dir, archive)
		}
		images = append(images, Image{ref, archive})
	}
	if len(images) == 0 {
		return nil, fmt.Errorf("%s/images.txt lists no image", dir)
	}
	return images, nil
}

// PauseImage is the first image whose name is pause, or "".
func PauseImage(images []Image) string {
	for _, im := range images {
		if strings.Contains(im.Ref, "/pause:") {
			return im.Ref
		}
	}
	return ""
}

// Run runs a command (bounded by 2 minutes) and returns its standard
// output; its error carries everything the command printed.
func Run(stdin []byte, env []string, name string, args ...string) (string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, name, args...)
	if stdin != nil {
		cmd.Stdin = bytes.NewReader(stdin)
	}
	if env != nil {
		cmd.Env = append(os.Environ(), env...)
	}
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		return stdout.String(), fmt.Errorf("%s %s: %w\nstdout: %s\nstderr: %s", name, strings.Join(args, " "), err, stdout.String(), stderr.String())
	}
	return stdout.String(), nil
}

// runAll runs each command in order and stops at the first error.
func runAll(cmds ...[]string) error {
	for _, c := range cmds {
		if _, err := Run(nil, nil, c[0], c[1:]...); err != nil {
			return err
		}
	}
	return nil
}

// LAN is a switch several nodes hang off: a bridge in a network namespace
// of its own, with a veth from the host to it. Not a bridge in the host's
// namespace: a host that loads br_netfilter with
// net.bridge.bridge-nf-call-iptables=1 and a FORWARD policy of DROP
// (Docker's) would drop frames bridged between two nodes. In the switch's
// own namespace that chain is empty, and the switch turns the call off.
type LAN struct {
	ID      string // in every name: at most 6 characters
	NS      string // the switch's network namespace
	HostDev string // the host's end of its veth to the switch
	HostIP  string // the host's address on the LAN
	Prefix  string // "10.253.<o>.": the LAN is <Prefix>0/24
}

// LANFor is the LAN of id on 10.253.<octet>.0/24, not made yet.
func LANFor(id string, octet int) *LAN {
	l := &LAN{ID: id, NS: "capn-lan-" + id, HostDev: "capnh" + id, Prefix: fmt.Sprintf("10.253.%d.", octet)}
	l.HostIP = l.Prefix + "1"
	return l
}

// FreeOctet is the first o from seed on (mod 250, plus 1) such that no
// address or route of this host is in 10.253.<o>.0/24.
func FreeOctet(seed int) (int, error) {
	routes, err := Run(nil, nil, "ip", "-4", "route", "show", "table", "all")
	if err != nil {
		return 0, err
	}
	addrs, err := Run(nil, nil, "ip", "-4", "-o", "addr", "show")
	if err != nil {
		return 0, err
	}
	for i := 0; i < 250; i++ {
		o := (seed+i)%250 + 1
		p := fmt.Sprintf("10.253.%d.", o)
		if !strings.Contains(routes, p) && !strings.Contains(addrs, p) {
			return o, nil
		}
	}
	return 0, errors.New("no free 10.253.x.0/24 on this host")
}

// Exists reports whether the LAN's namespace and host veth are there.
func (l *LAN) Exists() bool {
	_, err := net.InterfaceByName(l.HostDev)
	return err == nil && exists("/run/netns/"+l.NS)
}

// Create makes the switch and the host's veth to it; what it made is
// removed again when a step fails.
func (l *LAN) Create() (err error) {
	defer func() {
		if err != nil {
			_ = l.Remove()
		}
	}()
	peer := "capns" + l.ID
	if err := runAll(
		[]string{"ip", "netns", "add", l.NS},
		[]string{"ip", "-n", l.NS, "link", "add", "br0", "type", "bridge"},
		[]string{"ip", "-n", l.NS, "link", "set", "br0", "up"},
	); err != nil {
		return err
	}
	// Per network namespace since Linux 5.3; its FORWARD chain is empty
	// anyway.
	if exists("/proc/sys/net/bridge/bridge-nf-call-iptables") {
		if _, err := Run(nil, nil, "ip", "netns", "exec", l.NS, "sysctl", "-qw", "net.bridge.bridge-nf-call-iptables=0"); err != nil {
			return err
		}
	}
	return runAll(
		[]string{"ip", "link", "add", l.HostDev, "type", "veth", "peer", "name", peer},
		[]string{"ip", "link", "set", peer, "netns", l.NS},
		[]string{"ip", "-n", l.NS, "link", "set", peer, "master", "br0", "up"},
		[]string{"ip", "addr", "add", l.HostIP + "/24", "dev", l.HostDev},
		[]string{"ip", "link", "set", l.HostDev, "up"},
	)
}

// Remove deletes the switch's namespace (its veths go with it) and the
// host's veth; what is already gone is fine.
func (l *LAN) Remove() error {
	var errs []error
	if exists("/run/netns/" + l.NS) {
		if _, err := Run(nil, nil, "ip", "netns", "del", l.NS); err != nil {
			errs = append(errs, err)
		}
	}
	if _, err := net.InterfaceByName(l.HostDev); err == nil {
		if _, err := Run(nil, nil, "ip", "link", "del", l.HostDev); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// Node is one real node's network, directory and mounts.
type Node struct {
	Index  int    // its place on the LAN: address <Prefix><1+Index>
	NS     string // the node's network namespace (ip netns name)
	HostIP string // the host's address on the LAN
	NodeIP string // the node's address (its eth0)
	Dir    string // the node's own directory on the host
	// Mnt is the node's mount namespace (/proc/<pid>/ns/mnt of the
	// process that holds it), "" while the node shares the host's.
	Mnt string
	// Root is the node's file system seen from the host
	// (/proc/<pid>/root), when it has its own mounts.
	Root string
	lan  *LAN
}

// NodeFor is node index of l, with its directory dir, not made yet.
func (l *LAN) NodeFor(index int, dir string) *Node {
	i := strconv.Itoa(index)
	return &Node{
		Index: index, NS: "capn-node-" + l.ID + "-" + i, HostIP: l.HostIP,
		NodeIP: l.Prefix + strconv.Itoa(1+index), Dir: dir, lan: l,
	}
}

func (n *Node) veths() (sw, eth string) {
	i := strconv.Itoa(n.Index)
	return "capnv" + n.lan.ID + i, "capnn" + n.lan.ID + i
}

// Create makes the node's network namespace, a veth to the switch as its
// eth0 with the node's address, forwarding on (it routes for its pods),
// and no route beyond the LAN; what it made is removed when a step fails.
func (n *Node) Create() (err error) {
	defer func() {
		if err != nil {
			_ = n.removeNetwork()
		}
	}()
	sw, eth := n.veths()
	return runAll(
		[]string{"ip", "netns", "add", n.NS},
		[]string{"ip", "-n", n.lan.NS, "link", "add", sw, "type", "veth", "peer", "name", eth},
		[]string{"ip", "-n", n.lan.NS, "link", "set", eth, "netns", n.NS},
		[]string{"ip", "-n", n.lan.NS, "link", "set", sw, "master", "br0", "up"},
		[]string{"ip", "-n", n.NS, "link", "set", eth, "name", "eth0"},
		[]string{"ip", "-n", n.NS, "addr", "add", n.NodeIP + "/24", "dev", "eth0"},
		[]string{"ip", "-n", n.NS, "link", "set", "eth0", "up"},
		[]string{"ip", "-n", n.NS, "link", "set", "lo", "up"},
		[]string{"ip", "netns", "exec", n.NS, "sysctl", "-qw", "net.ipv4.ip_forward=1"},
	)
}

// Exists reports whether the node's network namespace is there.
func (n *Node) Exists() bool { return exists("/run/netns/" + n.NS) }

// removeNetwork deletes the node's namespace and its switch port.
func (n *Node) removeNetwork() error {
	var errs []error
	if n.Exists() {
		if _, err := Run(nil, nil, "ip", "netns", "del", n.NS); err != nil {
			errs = append(errs, err)
		}
	}
	sw, _ := n.veths()
	if exists("/run/netns/" + n.lan.NS) {
		if out, _ := Run(nil, nil, "ip", "-n", n.lan.NS, "-o", "link", "show", sw); out != "" {
			if _, err := Run(nil, nil, "ip", "-n", n.lan.NS, "link", "del", sw); err != nil {
				errs = append(errs, err)
			}
		}
	}
	return errors.Join(errs...)
}

// InNode is the nsenter arguments that run a command in the node's network
// namespace, and its mount namespace when it has one: `ip netns exec`
// would also give it a fresh /sys, without the cgroup file systems runc
// needs.
func (n *Node) InNode(name string, args ...string) []string {
	ns := []string{"--net=/run/netns/" + n.NS}
	if n.Mnt != "" {
		ns = append(ns, "--mount="+n.Mnt)
	}
	return append(append(ns, "--", name), args...)
}

// DiscardDev is the node's discard device (DiscardRoute), and DiscardPeer
// its veth peer, which stays down.
const (
	DiscardDev  = "capn0"
	DiscardPeer = "capn0-void"
)

// DiscardRoute gives the node a default route that is never used: kubeadm
// init needs one to read. With no localAPIEndpoint.advertiseAddress in its
// config (capn cannot render one: a machine's address is not known when
// its data is rendered) kubeadm takes the address of the default route's
// interface, and without any default route it falls back to 0.0.0.0, with
// which kube-apiserver exits ("Unable to find suitable network address
// ... no default routes found"). So the main table gets "default dev
// capn0", capn0 holding the node's address, while two policy rules keep
// every packet off it: the main table is looked up with its default route
// suppressed (suppress_prefixlength 0), and whatever that leaves is
// unreachable — an outside address fails at once (ENETUNREACH). capn0 is
// one end of a veth pair whose other end stays down (a veth drops what it
// sends while its peer is down; some kernels have no dummy driver), so the
// route leads nowhere even without the rules.
func (n *Node) DiscardRoute() error {
	if err := runAll(
		[]string{"ip", "-n", n.NS, "link", "add", DiscardDev, "type", "veth", "peer", "name", DiscardPeer},
		[]string{"ip", "-n", n.NS, "addr", "add", n.NodeIP + "/32", "dev", DiscardDev},
		[]string{"ip", "-n", n.NS, "link", "set", DiscardDev, "up"},
		[]string{"ip", "-n", n.NS, "route", "add", "default", "dev", DiscardDev},
		[]string{"ip", "-n", n.NS, "rule", "add", "priority", "32000", "lookup", "main", "suppress_prefixlength", "0"},
		[]string{"ip", "-n", n.NS, "rule", "add", "priority", "32001", "unreachable"},
	); err != nil {
		return err
	}
	return n.CheckDiscard()
}

// CheckDiscard is an error unless the node's default route is the discard
// device's, its peer is down, and an outside address is unreachable.
func (n *Node) CheckDiscard() error {
	out, err := Run(nil, nil, "ip", "-n", n.NS, "route", "show", "default")
	if err != nil {
		return err
	}
	if !strings.HasPrefix(out, "default dev "+DiscardDev+" ") {
		return fmt.Errorf("the node's default route is not the discard device's: %q", out)
	}
	if out, _ := Run(nil, nil, "ip", "-n", n.NS, "-o", "link", "show", DiscardPeer); !strings.Contains(out, "state DOWN") || strings.Contains(out, ",UP") {
		return fmt.Errorf("%s, the discard device's peer, is not down: %s", DiscardPeer, out)
	}
	if out, err := Run(nil, nil, "ip", "-n", n.NS, "route", "get", "192.0.2.200"); err == nil || !strings.Contains(err.Error(), "Network is unreachable") {
		return fmt.Errorf("the node routes an outside address: %q %v", out, err)
	}
	return nil
}

// CheckNoDefault is an error unless the node has no default route at all
// and an outside address is unreachable from it.
func (n *Node) CheckNoDefault() error {
	out, err := Run(nil, nil, "ip", "-n", n.NS, "route", "show", "default")
	if err != nil {
		return err
	}
	if strings.TrimSpace(out) != "" {
		return fmt.Errorf("node %s has a default route: %q", n.NS, out)
	}
	if out, err := Run(nil, nil, "ip", "-n", n.NS, "route", "get", "192.0.2.200"); err == nil {
		return fmt.Errorf("node %s routes an outside address: %q", n.NS, out)
	}
	return nil
}

// RoutePod routes cidr to the node at via: from the host (through the
// LAN's host veth) and from each namespace in from (the other nodes).
// "ip route replace": the same again changes nothing.
func (l *LAN) RoutePod(cidr, via string, from []string) error {
	for _, ns := range from {
		if _, err := Run(nil, nil, "ip", "-n", ns, "route", "replace", cidr, "via", via, "dev", "eth0"); err != nil {
			return err
		}
	}
	_, err := Run(nil, nil, "ip", "route", "replace", cidr, "via", via, "dev", l.HostDev)
	return err
}

// UnroutePods removes the host's routes via the address via (a node that
// goes); the other nodes' routes to it go with their own checks
// (RoutePod replaces them, a deleted node's namespace takes its own).
func (l *LAN) UnroutePods(via string, from []string) error {
	var errs []error
	del := func(ns []string) {
		args := append(append([]string{}, ns...), "-4", "route", "show", "via", via)
		out, _ := Run(nil, nil, "ip", args...)
		for _, line := range strings.Split(strings.TrimSpace(out), "\n") {
			if f := strings.Fields(line); len(f) > 0 {
				if _, err := Run(nil, nil, "ip", append(append([]string{}, ns...), "route", "del", f[0], "via", via)...); err != nil {
					errs = append(errs, err)
				}
			}
		}
	}
	del(nil)
	for _, ns := range from {
		if exists("/run/netns/" + ns) {
			del([]string{"-n", ns})
		}
	}
	return errors.Join(errs...)
}

// MountScript gives a process (started with `unshare --mount --propagation
// private` in the node's network namespace) the node's own mounts, and
// then prints "ready" and runs what follows it ("$@"). What kubeadm and the
// kubelet write to /etc, /var/lib, /var/log, /usr/libexec and /run stays
// the node's: each of the first four is an overlay on the host's
// directory whose upper layer is in $CAPN_OVL, /run a fresh tmpfs (as at
// boot). A host with no /lib/modules gets an empty one in an overlay on
// the directory /lib is: kube-proxy's DaemonSet mounts the host's
// /lib/modules (a hostPath of no type), and containerd's CRI makes a
// missing bind-mount source itself — without the overlay, on the host.
// /run/containerd/containerd.sock (where kubeadm looks for containerd) is
// a link to $CAPN_SOCK, and /etc/hosts names the node ($CAPN_HOSTNAME at
// $CAPN_NODE_IP: the kubelet resolves its node name with it).
const MountScript = `set -eu
mount -t tmpfs -o mode=0755 capn-run /run
for d in etc var/lib var/log usr/libexec; do
  o="$CAPN_OVL/$(echo "$d" | tr / -)"
  mkdir -p "$o/upper" "$o/work"
  mount -t overlay capn-node -o "lowerdir=/$d,upperdir=$o/upper,workdir=$o/work" "/$d"
done
if [ ! -d /lib/modules ]; then
  l=$(readlink -f /lib)
  o="$CAPN_OVL/lib-modules"
  mkdir -p "$o/upper" "$o/work"
  mount -t overlay capn-node -o "lowerdir=$l,upperdir=$o/upper,workdir=$o/work" "$l"
  mkdir /lib/modules
fi
mkdir -p /run/containerd
ln -s "$CAPN_SOCK" /run/containerd/containerd.sock
printf '127.0.0.1 localhost\n%s %s\n' "$CAPN_NODE_IP" "$CAPN_HOSTNAME" > /etc/hosts
echo ready
exec "$@"
`

// MountCommand is the command line of the process that holds the node's
// mount namespace, then runs holder (e.g. cat, or sleep infinity), and its
// environment (to append to the caller's).
func (n *Node) MountCommand(sock, hostname string, holder ...string) (args, env []string) {
	args = append([]string{"--net=/run/netns/" + n.NS, "--", "unshare", "--mount", "--propagation", "private", "--", "/bin/sh", "-c", MountScript, "capn-node-mounts"}, holder...)
	env = []string{"CAPN_OVL=" + filepath.Join(n.Dir, "overlay"), "CAPN_SOCK=" + sock, "CAPN_NODE_IP=" + n.NodeIP, "CAPN_HOSTNAME=" + hostname}
	return args, env
}

// SetHolder records pid as the process that holds the node's mounts.
func (n *Node) SetHolder(pid int) {
	n.Mnt = fmt.Sprintf("/proc/%d/ns/mnt", pid)
	n.Root = fmt.Sprintf("/proc/%d/root", pid)
}

// CRI turns containerd's CRI on (ContainerdConfig).
type CRI struct {
	PauseImage string
	CNIConfDir string
	// CNIConfTemplate, when set, is a text/template file of the CNI
	// config that containerd renders into CNIConfDir with the pod CIDR the
	// kubelet hands it ({{.PodCIDR}}), as a kubenet-style node does.
	CNIConfTemplate string
}

// CNITemplate is the bridge CNI config every node's containerd renders
// once its kubelet hands it the Node's pod CIDR: cni0 is the pods' gateway
// on the node, addresses from host-local (state in the %q directory); no
// masquerade (the other nodes and the host route to each node's pods).
const CNITemplate = `{"cniVersion":"1.0.0","name":"capn-pods","plugins":[
{"type":"bridge","bridge":"cni0","isGateway":true,"ipMasq":false,"hairpinMode":true,
 "ipam":{"type":"host-local","ranges":[[{"subnet":"{{.PodCIDR}}"}]],"routes":[{"dst":"0.0.0.0/0"}],"dataDir":%q}}]}
`

// ContainerdConfig is the config.toml of a node's own containerd: root,
// state and opt under dir, its socket sock, runc from the stack, and with
// cri its CRI (else the CRI plugins off).
func ContainerdConfig(dir, sock string, s Stack, cri *CRI) string {
	disabledCRI := `
  "io.containerd.grpc.v1.cri",
  "io.containerd.cri.v1.runtime",
  "io.containerd.cri.v1.images",
  "io.containerd.podsandbox.controller.v1.podsandbox",
  "io.containerd.sandbox.controller.v1.shim",`
	criTOML := ""
	if cri != nil {
		disabledCRI = ""
		template := ""
		if cri.CNIConfTemplate != "" {
			// The kubelet hands the CRI its Node's spec.podCIDR
			// (UpdateRuntimeConfig); containerd then writes
			// 10-containerd-net.conflist from this template.
			template = fmt.Sprintf("\n    conf_template = %q", cri.CNIConfTemplate)
		}
		criTOML = fmt.Sprintf(`
[plugins."io.containerd.cri.v1.images"]
  snapshotter = "overlayfs"
  [plugins."io.containerd.cri.v1.images".pinned_images]
    sandbox = %q

[plugins."io.containerd.cri.v1.runtime"]
  # A host that drops CAP_SYS_RESOURCE: runc may not lower a sandbox's
  # oom_score_adj to -998 (runc init: "failed to update
  # /proc/self/oom_score_adj: Permission denied"), so keep it at
  # containerd's own.
  restrict_oom_score_adj = true
  [plugins."io.containerd.cri.v1.runtime".containerd]
    default_runtime_name = "runc"
    [plugins."io.containerd.cri.v1.runtime".containerd.runtimes.runc]
      runtime_type = "io.containerd.runc.v2"
      [plugins."io.containerd.cri.v1.runtime".containerd.runtimes.runc.options]
        BinaryName = %q
        Root = %q
        SystemdCgroup = false
  [plugins."io.containerd.cri.v1.runtime".cni]
    bin_dirs = [%q]
    conf_dir = %q%s

[plugins."io.containerd.grpc.v1.cri"]
  stream_server_address = "127.0.0.1"
`, cri.PauseImage, filepath.Join(s.Bin, "runc"), filepath.Join(dir, "runc"), s.Bin, cri.CNIConfDir, template)
	}
	return fmt.Sprintf(`version = 3
root = %q
state = %q
# Only what the node needs: CRI only for kubelet, no NRI, and nothing that
# writes outside this node's directories.
disabled_plugins = [%s
  "io.containerd.nri.v1.nri",
  "io.containerd.tracing.processor.v1.otlp",
  "io.containerd.internal.v1.tracing",
  "io.containerd.snapshotter.v1.zfs",
  "io.containerd.snapshotter.v1.devmapper",
  "io.containerd.snapshotter.v1.erofs",
  "io.containerd.differ.v1.erofs",
]

[grpc]
  address = %q

[ttrpc]
  address = %q

[plugins."io.containerd.internal.v1.opt"]
  path = %q
%s`, filepath.Join(dir, "root"), filepath.Join(dir, "state"), disabledCRI, sock, sock+".ttrpc", filepath.Join(dir, "opt"), criTOML)
}

// Ctr runs the stack's ctr against the containerd at sock, in namespace ns.
func (s Stack) Ctr(sock, ns string, stdin []byte, args ...string) (string, error) {
	return Run(stdin, nil, filepath.Join(s.Bin, "ctr"), append([]string{"--address", sock, "--namespace", ns}, args...)...)
}

// PodCIDROf reads the subnet of the CNI config containerd rendered in
// confDir from the pod CIDR its kubelet handed it ("" while there is none).
func PodCIDROf(confDir string) string {
	b, err := os.ReadFile(filepath.Join(confDir, "10-containerd-net.conflist"))
	if err != nil {
		return ""
	}
	_, rest, ok := bytes.Cut(b, []byte(`"subnet":"`))
	if !ok {
		return ""
	}
	cidr, _, _ := bytes.Cut(rest, []byte(`"`))
	if _, _, err := net.ParseCIDR(string(cidr)); err != nil {
		return ""
	}
	return string(cidr)
}

// Processes are the processes that run in the node: those in its network
// namespace (containerd, the shims, the kubelet, host-network static
// pods, the agent) and all their descendants (the containers of pods with
// a network namespace of their own). Empty when the namespace is gone.
func Processes(netns string) []int {
	var st syscall.Stat_t
	if err := syscall.Stat("/run/netns/"+netns, &st); err != nil {
		return nil
	}
	parent := map[int]int{}
	in := map[int]bool{}
	dirs, _ := filepath.Glob("/proc/[0-9]*")
	for _, d := range dirs {
		pid, err := strconv.Atoi(filepath.Base(d))
		if err != nil {
			continue
		}
		var ns syscall.Stat_t
		if syscall.Stat(d+"/ns/net", &ns) == nil && ns.Ino == st.Ino && ns.Dev == st.Dev {
			in[pid] = true
		}
		if b, err := os.ReadFile(d + "/stat"); err == nil {
			// pid (comm) state ppid ...: comm may hold spaces; cut at
			// the last ')'.
			s := string(b)
			if j := strings.LastIndexByte(s, ')'); j > 0 {
				if f := strings.Fields(s[j+1:]); len(f) > 1 {
					if pp, err := strconv.Atoi(f[1]); err == nil {
						parent[pid] = pp
					}
				}
			}
		}
	}
	for pid := range parent {
		for p, hops := pid, 0; p > 1 && hops < 64; p, hops = parent[p], hops+1 {
			if in[p] {
				in[pid] = true
				break
			}
		}
	}
	out := make([]int, 0, len(in))
	for pid := range in {
		out = append(out, pid)
	}
	return out
}

// RSS is the resident memory of Processes(netns), and how many there are.
func RSS(netns string) (kib int64, procs int) {
	for _, pid := range Processes(netns) {
		f, err := os.Open(fmt.Sprintf("/proc/%d/status", pid))
		if err != nil {
			continue
		}
		sc := bufio.NewScanner(f)
		for sc.Scan() {
			if v, ok := strings.CutPrefix(sc.Text(), "VmRSS:"); ok {
				k, _ := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 10, 64)
				kib += k
				procs++
			}
		}
		f.Close()
	}
	return kib, procs
}

// RaiseInotifyInstances raises fs.inotify.max_user_instances to at least
// min, and returns the value it had and whether it changed it. A node's
// containerd (its CNI config watcher), kubelet and API server each take
// several inotify instances, all counted against root's one limit (128 by
// default): containerd's CRI then fails to load ("failed to create
// fsnotify watcher: couldn't initialize inotify: too many open files").
func RaiseInotifyInstances(min int) (old []byte, raised bool, err error) {
	const path = "/proc/sys/fs/inotify/max_user_instances"
	old, err = os.ReadFile(path)
	if err != nil {
		return nil, false, fmt.Errorf("inotify: %w", err)
	}
	cur, err := strconv.Atoi(strings.TrimSpace(string(old)))
	if err != nil {
		return nil, false, fmt.Errorf("%s: %q: %w", path, old, err)
	}
	if cur >= min {
		return old, false, nil
	}
	if err := os.WriteFile(path, []byte(strconv.Itoa(min)), 0o644); err != nil {
		return nil, false, fmt.Errorf("raising %s from %d to %d: %w", path, cur, min, err)
	}
	return old, true, nil
}

func exists(p string) bool {
	_, err := os.Stat(p)
	return err == nil
}
