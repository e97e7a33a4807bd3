//go:build linux

package node

import (
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/capn-dev/capn/internal/testkit"
	"github.com/capn-dev/capn/providers/process/realnode"
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
	rn      *realnode.LAN
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
	octet, err := realnode.FreeOctet(int(r[0]))
	if err != nil {
		t.Fatal(err)
	}
	routes := run(t, nil, nil, "ip", "-4", "route", "show", "table", "all")
	free := func(prefix string) bool { return !strings.Contains(routes, prefix) }
	block := -1
	for i := 0; i < 64 && block < 0; i++ {
		b := ((int(r[1]) + i) % 64) * 4
		if free(fmt.Sprintf("10.252.%d.", b)) && free(fmt.Sprintf("10.252.%d.", b+1)) && free(fmt.Sprintf("10.252.%d.", b+2)) && free(fmt.Sprintf("10.252.%d.", b+3)) {
			block = b
		}
	}
	if block < 0 {
		t.Fatal("no free 10.252.x.0/22 on this host")
	}
	// The switch as the process provider's real nodes have it.
	rl := realnode.LANFor(id, octet)
	l := &lan{
		id:      id,
		ns:      rl.NS,
		hostDev: rl.HostDev,
		hostIP:  rl.HostIP,
		prefix:  rl.Prefix,
		podCIDR: fmt.Sprintf("10.252.%d.0/22", block),
		rn:      rl,
	}
	t.Cleanup(func() {
		if err := rl.Remove(); err != nil {
			t.Logf("cleanup: %v", err)
		}
	})
	if err := rl.Create(); err != nil {
		t.Fatal(err)
	}
	return l
}

// addNode makes the next node on the LAN: its own network namespace, a
// veth to the switch as its eth0, the LAN's next address, forwarding on
// (it routes for its pods), and no route beyond the LAN.
func (l *lan) addNode(t *testing.T) *node {
	t.Helper()
	l.nodes++
	rn := l.rn.NodeFor(l.nodes, t.TempDir())
	n := &node{
		id:     l.id + strconv.Itoa(l.nodes),
		ns:     rn.NS,
		hostIP: rn.HostIP,
		nodeIP: rn.NodeIP,
		dir:    rn.Dir,
		rn:     rn,
	}
	t.Cleanup(func() { cleanup(t, "ip", "netns", "del", n.ns) })
	if err := rn.Create(); err != nil {
		t.Fatal(err)
	}
	return n
}

// routePods routes each node's pod CIDR to it, from every other node and
// from the host: one host, one LAN, so no overlay — a route per node.
func (l *lan) routePods(t *testing.T, nodes []*node) {
	t.Helper()
	for _, to := range nodes {
		var from []string
		for _, n := range nodes {
			if n != to {
				from = append(from, n.ns)
			}
		}
		if err := l.rn.RoutePod(to.podCIDR, to.nodeIP, from); err != nil {
			t.Fatal(err)
		}
		l.routes = append(l.routes, to.podCIDR+" via "+to.nodeIP)
	}
}

// checkNoDefault fails the test unless the node has no default route at
// all and an outside address is unreachable from it.
func (n *node) checkNoDefault(t *testing.T) {
	t.Helper()
	if err := n.real().CheckNoDefault(); err != nil {
		t.Fatal(err)
	}
}

// rss is the resident memory of everything that runs in the node: the
// processes in its network namespace (containerd, the shims, the kubelet
// and its unit, host-network static pods) and all their descendants (the
// containers of pods with a network namespace of their own).
func (n *node) rss(t *testing.T) (kib int64, procs int) {
	t.Helper()
	if _, err := os.Stat("/run/netns/" + n.ns); err != nil {
		t.Fatalf("node %s: %v", n.ns, err)
	}
	kib, procs = realnode.RSS(n.ns)
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
	holdHost(t)
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
