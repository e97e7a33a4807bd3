//go:build linux

package node

import (
	"bufio"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/capn-dev/capn/internal/testkit"
)

// lan is a switch several nodes hang off: a bridge in a network namespace
// of its own, with a veth from the host to it. Not a bridge in the host's
// namespace: this host loads br_netfilter with
// net.bridge.bridge-nf-call-iptables=1 and its FORWARD policy is DROP
// (Docker's), so frames bridged between two nodes on a host bridge would
// go through the host's FORWARD chain and be dropped. In the switch's own
// namespace that chain is empty, and the switch turns the call off.
type lan struct {
	id      string
	ns      string // the switch's network namespace
	hostDev string // the host's end of its veth to the switch
	hostIP  string // the host's address on the LAN
	prefix  string // "10.253.<o>.": the LAN is <prefix>0/24
	// podCIDR is a cluster's pod network, free on this host, wide enough
	// for a /24 per node (kube-controller-manager's --allocate-node-cidrs
	// with its default --node-cidr-mask-size 24).
	podCIDR string
	nodes   int
	routes  []string // "<cidr> via <ip>" the host got, for logs
}

// newLAN makes the switch and the host's veth to it; everything is removed
// when the test ends, whatever happened.
func newLAN(t *testing.T) *lan {
	t.Helper()
	var r [2]byte
	if _, err := rand.Read(r[:]); err != nil {
		t.Fatal(err)
	}
	id := hex.EncodeToString(r[:])
	// A private /24 for the LAN and a /22 for the pods that no address or
	// route of this host is in already.
	routes := run(t, nil, nil, "ip", "-4", "route", "show", "table", "all")
	free := func(prefix string) bool { return !strings.Contains(routes, prefix) }
	octet, block := -1, -1
	for i := 0; i < 250 && octet < 0; i++ {
		if o := (int(r[0])+i)%250 + 1; free(fmt.Sprintf("10.253.%d.", o)) {
			octet = o
		}
	}
	for i := 0; i < 64 && block < 0; i++ {
		b := ((int(r[1]) + i) % 64) * 4
		if free(fmt.Sprintf("10.252.%d.", b)) && free(fmt.Sprintf("10.252.%d.", b+1)) && free(fmt.Sprintf("10.252.%d.", b+2)) && free(fmt.Sprintf("10.252.%d.", b+3)) {
			block = b
		}
	}
	if octet < 0 || block < 0 {
		t.Fatal("no free 10.253.x.0/24 or 10.252.x.0/22 on this host")
	}
	l := &lan{
		id:      id,
		ns:      "capn-lan-" + id,
		hostDev: "capnh" + id,
		prefix:  fmt.Sprintf("10.253.%d.", octet),
		podCIDR: fmt.Sprintf("10.252.%d.0/22", block),
	}
	l.hostIP = l.prefix + "1"
	run(t, nil, nil, "ip", "netns", "add", l.ns)
	t.Cleanup(func() { cleanup(t, "ip", "netns", "del", l.ns) })
	run(t, nil, nil, "ip", "-n", l.ns, "link", "add", "br0", "type", "bridge")
	run(t, nil, nil, "ip", "-n", l.ns, "link", "set", "br0", "up")
	// Per network namespace since Linux 5.3; its FORWARD chain is empty
	// anyway.
	if _, err := os.Stat("/proc/sys/net/bridge/bridge-nf-call-iptables"); err == nil {
		run(t, nil, nil, "ip", "netns", "exec", l.ns, "sysctl", "-qw", "net.bridge.bridge-nf-call-iptables=0")
	}
	peer := "capns" + id
	run(t, nil, nil, "ip", "link", "add", l.hostDev, "type", "veth", "peer", "name", peer)
	t.Cleanup(func() {
		// Gone with the switch when that went first; otherwise remove it.
		if _, err := net.InterfaceByName(l.hostDev); err == nil {
			cleanup(t, "ip", "link", "del", l.hostDev)
		}
	})
	run(t, nil, nil, "ip", "link", "set", peer, "netns", l.ns)
	run(t, nil, nil, "ip", "-n", l.ns, "link", "set", peer, "master", "br0", "up")
	run(t, nil, nil, "ip", "addr", "add", l.hostIP+"/24", "dev", l.hostDev)
	run(t, nil, nil, "ip", "link", "set", l.hostDev, "up")
	return l
}

// addNode makes the next node on the LAN: its own network namespace, a
// veth to the switch as its eth0, the LAN's next address, forwarding on
// (it routes for its pods), and no route beyond the LAN.
func (l *lan) addNode(t *testing.T) *node {
	t.Helper()
	l.nodes++
	i := strconv.Itoa(l.nodes)
	n := &node{
		id:     l.id + i,
		ns:     "capn-node-" + l.id + "-" + i,
		hostIP: l.hostIP,
		nodeIP: l.prefix + strconv.Itoa(1+l.nodes),
		dir:    t.TempDir(),
	}
	sw, eth := "capnv"+l.id+i, "capnn"+l.id+i
	run(t, nil, nil, "ip", "netns", "add", n.ns)
	t.Cleanup(func() { cleanup(t, "ip", "netns", "del", n.ns) })
	run(t, nil, nil, "ip", "-n", l.ns, "link", "add", sw, "type", "veth", "peer", "name", eth)
	run(t, nil, nil, "ip", "-n", l.ns, "link", "set", eth, "netns", n.ns)
	run(t, nil, nil, "ip", "-n", l.ns, "link", "set", sw, "master", "br0", "up")
	run(t, nil, nil, "ip", "-n", n.ns, "link", "set", eth, "name", "eth0")
	run(t, nil, nil, "ip", "-n", n.ns, "addr", "add", n.nodeIP+"/24", "dev", "eth0")
	run(t, nil, nil, "ip", "-n", n.ns, "link", "set", "eth0", "up")
	run(t, nil, nil, "ip", "-n", n.ns, "link", "set", "lo", "up")
	run(t, nil, nil, "ip", "netns", "exec", n.ns, "sysctl", "-qw", "net.ipv4.ip_forward=1")
	return n
}

// routePods routes each node's pod CIDR to it, from every other node and
// from the host: one host, one LAN, so no overlay — a route per node.
func (l *lan) routePods(t *testing.T, nodes []*node) {
	t.Helper()
	for _, to := range nodes {
		for _, from := range nodes {
			if from != to {
				run(t, nil, nil, "ip", "-n", from.ns, "route", "replace", to.podCIDR, "via", to.nodeIP, "dev", "eth0")
			}
		}
		run(t, nil, nil, "ip", "route", "replace", to.podCIDR, "via", to.nodeIP, "dev", l.hostDev)
		l.routes = append(l.routes, to.podCIDR+" via "+to.nodeIP)
	}
}

// checkNoDefault fails the test unless the node has no default route at
// all and an outside address is unreachable from it.
func (n *node) checkNoDefault(t *testing.T) {
	t.Helper()
	if out := run(t, nil, nil, "ip", "-n", n.ns, "route", "show", "default"); strings.TrimSpace(out) != "" {
		t.Fatalf("node %s has a default route: %q", n.ns, out)
	}
	if out, err := try(nil, nil, "ip", "-n", n.ns, "route", "get", "192.0.2.200"); err == nil {
		t.Fatalf("node %s routes an outside address: %q", n.ns, out)
	}
}

// rss is the resident memory of everything that runs in the node: the
// processes in its network namespace (containerd, the shims, the kubelet
// and its unit, host-network static pods) and all their descendants (the
// containers of pods with a network namespace of their own).
func (n *node) rss(t *testing.T) (kib int64, procs int) {
	t.Helper()
	var st syscall.Stat_t
	if err := syscall.Stat("/run/netns/"+n.ns, &st); err != nil {
		t.Fatalf("node %s: %v", n.ns, err)
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
				f := strings.Fields(s[j+1:])
				if len(f) > 1 {
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
	for pid := range in {
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

// TestRealNodeLAN checks the LAN the kubeadm test's nodes share, with no
// node stack: two node namespaces on the switch, no default route in
// either; a "pod" address on the second node (on its lo, in the first /24
// of the LAN's pod CIDR) routed by routePods; the web server run in each
// node's namespace. The host asks the first node's server, which fetches
// from the second node's pod address: host → node, and node → node's
// pods through the switch.
func TestRealNodeLAN(t *testing.T) {
	skip := t.Skipf
	if os.Getenv("CAPN_REQUIRE_NODESTACK") == "1" {
		skip = t.Fatalf
	}
	if os.Geteuid() != 0 {
		skip("the LAN needs root (network namespaces)")
	}
	for _, b := range []string{"ip", "nsenter"} {
		if _, err := exec.LookPath(b); err != nil {
			skip("%s is not installed: %v", b, err)
		}
	}
	l := newLAN(t)
	n1, n2 := l.addNode(t), l.addNode(t)
	_, pods, err := net.ParseCIDR(l.podCIDR)
	if err != nil {
		t.Fatal(err)
	}
	n1.podCIDR = fmt.Sprintf("%s/24", pods.IP.To4())
	base := pods.IP.To4()
	n2.podCIDR = fmt.Sprintf("%d.%d.%d.0/24", base[0], base[1], base[2]+1)
	podIP := fmt.Sprintf("%d.%d.%d.7", base[0], base[1], base[2]+1)
	run(t, nil, nil, "ip", "-n", n2.ns, "addr", "add", podIP+"/32", "dev", "lo")
	l.routePods(t, []*node{n1, n2})
	for _, n := range []*node{n1, n2} {
		n.checkNoDefault(t)
	}

	web := buildWeb(t, t.TempDir())
	serve := func(n *node, token, fetch string) {
		cmd := exec.Command("nsenter", n.inNode(web)...)
		cmd.Env = append(os.Environ(), "CAPN_WEB_TOKEN="+token, "CAPN_WEB_FETCH="+fetch)
		log := &testkit.Buffer{}
		cmd.Stdout, cmd.Stderr = log, log
		cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() {
			_ = cmd.Process.Kill()
			_ = cmd.Wait()
			if t.Failed() {
				t.Logf("web in %s:\n%s", n.ns, log.String())
			}
		})
	}
	serve(n2, "n2-"+l.id, "")
	serve(n1, "n1-"+l.id, "http://"+net.JoinHostPort(podIP, "8080")+"/")
	url := "http://" + net.JoinHostPort(n1.nodeIP, "8080") + "/"
	var body string
	client := &http.Client{Timeout: 5 * time.Second}
	testkit.WaitFor(t, 30*time.Second, "GET "+url+" answers with what it fetched from "+podIP, func() bool {
		resp, err := client.Get(url)
		if err != nil {
			return false
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		body = string(b)
		return resp.StatusCode == http.StatusOK && strings.Contains(body, "fetched-status=200\n")
	})
	if !strings.Contains(body, "token=n1-"+l.id+"\n") || !strings.Contains(body, "fetched token=n2-"+l.id+"\n") || !strings.Contains(body, "fetched addr="+podIP+"/32\n") {
		t.Fatalf("node 1 did not relay node 2's pod address:\n%s", body)
	}
	t.Logf("host → %s → %s (%s's pods, via %v):\n%s", n1.nodeIP, podIP, n2.ns, l.routes, body)
}
