//go:build linux

// Package node is issue 26's first step: one real node on this host, made of
// the stack hack/nodestack.sh builds — a network namespace with a veth to a
// host bridge the test creates and its own address (no default route), its
// own containerd (root, state and socket under t.TempDir(), runc as the
// runtime, the overlayfs snapshotter), and a real container from an image
// the test builds FROM scratch (a static Go HTTP server, imported with
// `ctr images import` from an OCI tarball the test writes), given its
// address by the bridge CNI plugin; the test fetches from it over HTTP from
// the host, through both bridges.
//
// It needs root and CAPN_NODESTACK_BIN ("<containerd/runc/CNI bin>" or
// "<that>:<kubelet bin>", as `make -s nodestack-bin` prints); it skips
// without them, and fails instead under CAPN_REQUIRE_NODESTACK=1.
package node

import (
	"archive/tar"
	"bufio"
	"bytes"
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/capn-dev/capn/internal/testkit"
	"github.com/capn-dev/capn/providers/process/realnode"
)

// stack is where the node binaries are.
type stack struct {
	bin     string // containerd, ctr, containerd-shim-runc-v2, runc, CNI plugins
	kubeBin string // kubelet, kubeadm, kube-proxy ("" when not given)
}

// stackBinaries are what a node needs in the stack's first directory.
var stackBinaries = realnode.StackBinaries

// rn is the stack as package realnode takes it.
func (s stack) rn() realnode.Stack { return realnode.Stack{Bin: s.bin, KubeBin: s.kubeBin} }

func needStack(t *testing.T) stack {
	t.Helper()
	skip := t.Skipf
	if os.Getenv("CAPN_REQUIRE_NODESTACK") == "1" {
		skip = t.Fatalf
	}
	if os.Geteuid() != 0 {
		skip("a real node needs root (network namespaces, mounts, cgroups)")
	}
	dirs := filepath.SplitList(os.Getenv("CAPN_NODESTACK_BIN"))
	if len(dirs) == 0 || dirs[0] == "" {
		skip("CAPN_NODESTACK_BIN is not set (make nodestack; CAPN_NODESTACK_BIN=$(make -s nodestack-bin))")
	}
	s := stack{bin: dirs[0]}
	if len(dirs) > 1 {
		s.kubeBin = dirs[1]
	}
	for _, b := range stackBinaries {
		if _, err := os.Stat(filepath.Join(s.bin, b)); err != nil {
			skip("CAPN_NODESTACK_BIN %q has no %s (make nodestack): %v", s.bin, b, err)
		}
	}
	for _, b := range []string{"ip", "nsenter"} {
		if _, err := exec.LookPath(b); err != nil {
			skip("%s is not installed: %v", b, err)
		}
	}
	holdHost(t)
	return s
}

// holdHost takes the host's real-nodes lock until t ends: other
// packages' tests (providers/process) make real nodes too, and go test
// runs packages at once.
func holdHost(t *testing.T) {
	t.Helper()
	release, err := realnode.LockHost("realnodes", t.Logf)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(release)
}

// run runs a command and returns its standard output; it fails the test
// with everything the command printed when it fails.
func run(t *testing.T, stdin []byte, env []string, name string, args ...string) string {
	t.Helper()
	out, err := try(stdin, env, name, args...)
	if err != nil {
		t.Fatalf("%s %s: %v", name, strings.Join(args, " "), err)
	}
	return out
}

// try is run that returns the error (with the command's stderr) instead.
func try(stdin []byte, env []string, name string, args ...string) (string, error) {
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
		return stdout.String(), fmt.Errorf("%w\nstdout: %s\nstderr: %s", err, stdout.String(), stderr.String())
	}
	return stdout.String(), nil
}

// cleanup runs a cleanup command and logs (does not fail on) its error:
// cleanups run on failure too, when a step may not have happened.
func cleanup(t *testing.T, name string, args ...string) {
	t.Helper()
	if out, err := try(nil, nil, name, args...); err != nil {
		t.Logf("cleanup %s %s: %v %s", name, strings.Join(args, " "), err, out)
	}
}

// node is one real node's network: its namespace, the host bridge it hangs
// off, and the addresses.
type node struct {
	id      string // short random hex, in every name
	ns      string // the node's network namespace (ip netns name)
	bridge  string // the host bridge the test created
	hostIP  string // the host's address on the bridge
	nodeIP  string // the node's address (its eth0)
	podCIDR string // the node's pod network (bridge CNI, host-local)
	dir     string
	// mnt is the node's mount namespace (/proc/<pid>/ns/mnt of the
	// process that holds it), "" when the node shares the host's
	// (isolateMounts).
	mnt string
	// root is the node's file system seen from the host
	// (/proc/<pid>/root), when it has its own mounts.
	root string
	// rn is the node as package realnode has it (nodes of a LAN).
	rn *realnode.Node
}

// real is the node as package realnode has it: its own on a LAN, else
// one with its namespace and address.
func (n *node) real() *realnode.Node {
	if n.rn != nil {
		return n.rn
	}
	return &realnode.Node{NS: n.ns, HostIP: n.hostIP, NodeIP: n.nodeIP, Dir: n.dir, Mnt: n.mnt, Root: n.root}
}

// newNode makes the host bridge, the node's namespace and the veth between
// them; everything is removed when the test ends, whatever happened.
func newNode(t *testing.T) *node {
	t.Helper()
	var r [2]byte
	if _, err := rand.Read(r[:]); err != nil {
		t.Fatal(err)
	}
	id := hex.EncodeToString(r[:])
	// A private /24 for the node link and one for its pods, that no address
	// or route of this host is in already.
	routes := run(t, nil, nil, "ip", "-4", "route", "show", "table", "all")
	octet := -1
	for i := 0; i < 250; i++ {
		o := (int(r[0])+i)%250 + 1
		if !strings.Contains(routes, fmt.Sprintf("10.253.%d.", o)) && !strings.Contains(routes, fmt.Sprintf("10.254.%d.", o)) {
			octet = o
			break
		}
	}
	if octet < 0 {
		t.Fatal("no free 10.253.x.0/24 and 10.254.x.0/24 on this host")
	}
	n := &node{
		id:      id,
		ns:      "capn-node-" + id,
		bridge:  "capnbr" + id,
		hostIP:  fmt.Sprintf("10.253.%d.1", octet),
		nodeIP:  fmt.Sprintf("10.253.%d.2", octet),
		podCIDR: fmt.Sprintf("10.254.%d.0/24", octet),
		dir:     t.TempDir(),
	}
	hostVeth, nodeVeth := "capnh"+id, "capnn"+id

	run(t, nil, nil, "ip", "link", "add", n.bridge, "type", "bridge")
	t.Cleanup(func() { cleanup(t, "ip", "link", "del", n.bridge) })
	run(t, nil, nil, "ip", "addr", "add", n.hostIP+"/24", "dev", n.bridge)
	run(t, nil, nil, "ip", "link", "set", n.bridge, "up")

	run(t, nil, nil, "ip", "netns", "add", n.ns)
	t.Cleanup(func() { cleanup(t, "ip", "netns", "del", n.ns) })
	run(t, nil, nil, "ip", "link", "add", hostVeth, "type", "veth", "peer", "name", nodeVeth)
	t.Cleanup(func() {
		// Gone with the namespace when that went first; otherwise remove it.
		if _, err := net.InterfaceByName(hostVeth); err == nil {
			cleanup(t, "ip", "link", "del", hostVeth)
		}
	})
	run(t, nil, nil, "ip", "link", "set", hostVeth, "master", n.bridge, "up")
	run(t, nil, nil, "ip", "link", "set", nodeVeth, "netns", n.ns)
	run(t, nil, nil, "ip", "-n", n.ns, "link", "set", nodeVeth, "name", "eth0")
	run(t, nil, nil, "ip", "-n", n.ns, "addr", "add", n.nodeIP+"/24", "dev", "eth0")
	run(t, nil, nil, "ip", "-n", n.ns, "link", "set", "eth0", "up")
	run(t, nil, nil, "ip", "-n", n.ns, "link", "set", "lo", "up")
	// The node routes for its pods; the host reaches them through the node.
	run(t, nil, nil, "ip", "netns", "exec", n.ns, "sysctl", "-qw", "net.ipv4.ip_forward=1")
	run(t, nil, nil, "ip", "route", "add", n.podCIDR, "via", n.nodeIP, "dev", n.bridge)
	return n
}

// inNode runs a command in the node's network namespace, and only its
// network namespace: `ip netns exec` would also give it a mount namespace
// with a fresh /sys, without the cgroup file systems runc needs.
// With its own mount namespace (isolateMounts), it enters that too.
func (n *node) inNode(name string, args ...string) []string {
	ns := []string{"--net=/run/netns/" + n.ns}
	if n.mnt != "" {
		ns = append(ns, "--mount="+n.mnt)
	}
	return append(append(ns, "--", name), args...)
}

// containerd is one node's containerd.
type containerd struct {
	sock  string
	dir   string
	cmd   *exec.Cmd
	log   *testkit.Buffer
	ns    string // containerd namespace the test's objects are in
	stack stack
}

// startContainerd starts a containerd of the node's own (own root, state,
// socket), in the node's network namespace, with runc from the stack.
// With cri (kubelet's step), containerd's CRI is on: pods get their
// network from the bridge CNI config in cniConfDir, and sandboxes run
// pauseImage (imported, never pulled).
func startContainerd(t *testing.T, n *node, s stack, cri *criConfig) *containerd {
	t.Helper()
	dir := filepath.Join(n.dir, "containerd")
	for _, d := range []string{"root", "state", "opt"} {
		if err := os.MkdirAll(filepath.Join(dir, d), 0o700); err != nil {
			t.Fatal(err)
		}
	}
	c := &containerd{sock: filepath.Join(dir, "containerd.sock"), dir: dir, log: &testkit.Buffer{}, ns: "capn-test", stack: s}
	// The node's own containerd, as the process provider's real nodes
	// run it (package realnode).
	var rcri *realnode.CRI
	if cri != nil {
		rcri = &realnode.CRI{PauseImage: cri.pauseImage, CNIConfDir: cri.cniConfDir, CNIConfTemplate: cri.cniConfTemplate}
	}
	config := realnode.ContainerdConfig(dir, c.sock, s.rn(), rcri)
	cfg := filepath.Join(dir, "config.toml")
	if err := os.WriteFile(cfg, []byte(config), 0o600); err != nil {
		t.Fatal(err)
	}
	c.cmd = exec.Command("nsenter", n.inNode(filepath.Join(s.bin, "containerd"), "--config", cfg, "--log-level", "info")...)
	// The shim and runc come from the stack, found on PATH.
	c.cmd.Env = append(os.Environ(), "PATH="+s.bin+string(os.PathListSeparator)+os.Getenv("PATH"))
	c.cmd.Stdout, c.cmd.Stderr = c.log, c.log
	c.cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := c.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan error, 1)
	go func() { exited <- c.cmd.Wait() }()
	// The shim keeps its socket in /run/containerd/s, whatever the
	// configuration says; when the test made that directory, it removes it
	// (only if empty: os.Remove).
	var made []string
	for _, d := range []string{"/run/containerd", "/run/containerd/s"} {
		if _, err := os.Stat(d); os.IsNotExist(err) {
			made = append(made, d)
		}
	}
	t.Cleanup(func() {
		defer func() {
			for i := len(made) - 1; i >= 0; i-- {
				if err := os.Remove(made[i]); err != nil && !os.IsNotExist(err) {
					t.Logf("cleanup: %v", err)
				}
			}
		}()
		_ = c.cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-exited:
		case <-time.After(30 * time.Second):
			_ = c.cmd.Process.Kill()
			<-exited
		}
		c.killShims(t)
		unmountUnder(t, n.dir)
		if t.Failed() {
			t.Logf("containerd log:\n%s", tail(c.log.String(), 60))
		}
	})
	testkit.WaitFor(t, 90*time.Second, "containerd answers on "+c.sock, func() bool {
		select {
		case err := <-exited:
			t.Fatalf("containerd exited: %v\n%s", err, tail(c.log.String(), 40))
		default:
		}
		_, err := c.try(nil, "version")
		return err == nil
	})
	return c
}

func (c *containerd) ctr(t *testing.T, args ...string) string {
	t.Helper()
	out, err := c.try(nil, args...)
	if err != nil {
		t.Fatalf("ctr %s: %v", strings.Join(args, " "), err)
	}
	return out
}

func (c *containerd) try(stdin []byte, args ...string) (string, error) {
	return try(stdin, nil, filepath.Join(c.stack.bin, "ctr"), append([]string{"--address", c.sock, "--namespace", c.ns}, args...)...)
}

// killShims kills the shims this containerd started (they outlive it by
// design) and nothing else: a shim's command line names its containerd's
// socket.
func (c *containerd) killShims(t *testing.T) {
	procs, _ := filepath.Glob("/proc/[0-9]*/cmdline")
	for _, p := range procs {
		b, err := os.ReadFile(p)
		if err != nil || !bytes.Contains(b, []byte("containerd-shim")) || !bytes.Contains(b, []byte("\x00"+c.sock+"\x00")) && !bytes.HasSuffix(b, []byte("\x00"+c.sock)) {
			continue
		}
		var pid int
		if _, err := fmt.Sscanf(filepath.Base(filepath.Dir(p)), "%d", &pid); err == nil {
			t.Logf("killing leftover shim %d", pid)
			_ = syscall.Kill(pid, syscall.SIGKILL)
		}
	}
}

// removeCgroup removes a cgroup v1 directory and its parent, in every
// hierarchy, once the container in it is gone (rmdir of an empty cgroup).
func removeCgroup(t *testing.T, cgroup string) {
	hier, _ := filepath.Glob("/sys/fs/cgroup/*")
	for _, h := range hier {
		for _, d := range []string{cgroup, filepath.Dir(cgroup)} {
			if err := os.Remove(filepath.Join(h, d)); err != nil && !os.IsNotExist(err) {
				t.Logf("cgroup %s: %v", filepath.Join(h, d), err)
			}
		}
	}
}

// unmountUnder unmounts whatever is still mounted under dir (the rootfs of
// a container whose task was not deleted), deepest first.
func unmountUnder(t *testing.T, dir string) {
	f, err := os.Open("/proc/self/mountinfo")
	if err != nil {
		return
	}
	defer f.Close()
	var mounts []string
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		fields := strings.Fields(sc.Text())
		if len(fields) > 4 && strings.HasPrefix(fields[4], dir+"/") {
			mounts = append(mounts, fields[4])
		}
	}
	for i := len(mounts) - 1; i >= 0; i-- {
		t.Logf("unmounting leftover %s", mounts[i])
		if err := syscall.Unmount(mounts[i], syscall.MNT_DETACH); err != nil {
			t.Logf("unmount %s: %v", mounts[i], err)
		}
	}
}

func tail(s string, lines int) string {
	l := strings.Split(strings.TrimRight(s, "\n"), "\n")
	if len(l) > lines {
		l = l[len(l)-lines:]
	}
	return strings.Join(l, "\n")
}

// pod is a container network namespace wired by the CNI plugins.
type pod struct {
	ns   string
	path string
	ip   string
}

// criConfig turns containerd's CRI on (startContainerd).
type criConfig struct {
	pauseImage string
	cniConfDir string
	// cniConfTemplate, when set, is a text/template of the CNI config
	// that containerd renders into cniConfDir with the pod CIDR the
	// kubelet hands it ({{.PodCIDR}}), as a kubenet-style node does.
	cniConfTemplate string
}

// addPod makes a network namespace for a container and runs the loopback
// and bridge CNI plugins on it from the node's namespace (the bridge, cni0,
// is the node's); CNI DEL and the namespace's removal are cleanups.
func (n *node) addPod(t *testing.T, s stack, name string) *pod {
	t.Helper()
	p := &pod{ns: "capn-pod-" + n.id + "-" + name}
	p.path = "/run/netns/" + p.ns
	run(t, nil, nil, "ip", "netns", "add", p.ns)
	t.Cleanup(func() { cleanup(t, "ip", "netns", "del", p.ns) })
	bridgeConf := fmt.Sprintf(`{"cniVersion":"1.0.0","name":"capn-pods","type":"bridge","bridge":"cni0","isGateway":true,"ipMasq":false,"hairpinMode":true,
"ipam":{"type":"host-local","ranges":[[{"subnet":%q}]],"routes":[{"dst":"0.0.0.0/0"}],"dataDir":%q}}`,
		n.podCIDR, filepath.Join(n.dir, "cni-ipam"))
	loConf := `{"cniVersion":"1.0.0","name":"capn-lo","type":"loopback"}`
	cni := func(command, plugin, conf string) (string, error) {
		return try([]byte(conf), []string{
			"CNI_COMMAND=" + command, "CNI_CONTAINERID=" + p.ns, "CNI_NETNS=" + p.path,
			"CNI_IFNAME=" + map[string]string{"bridge": "eth0", "loopback": "lo"}[plugin], "CNI_PATH=" + s.bin,
		}, "nsenter", n.inNode(filepath.Join(s.bin, plugin))...)
	}
	for _, pl := range []struct{ plugin, conf string }{{"loopback", loConf}, {"bridge", bridgeConf}} {
		out, err := cni("ADD", pl.plugin, pl.conf)
		if err != nil {
			t.Fatalf("CNI ADD %s: %v", pl.plugin, err)
		}
		t.Cleanup(func() {
			if _, err := cni("DEL", pl.plugin, pl.conf); err != nil {
				t.Logf("CNI DEL %s: %v", pl.plugin, err)
			}
		})
		if pl.plugin != "bridge" {
			continue
		}
		var res struct {
			IPs []struct {
				Address string `json:"address"`
			} `json:"ips"`
		}
		if err := json.Unmarshal([]byte(out), &res); err != nil || len(res.IPs) == 0 {
			t.Fatalf("bridge CNI result %q: no address (%v)", out, err)
		}
		ip, _, err := net.ParseCIDR(res.IPs[0].Address)
		if err != nil {
			t.Fatalf("bridge CNI address %q: %v", res.IPs[0].Address, err)
		}
		p.ip = ip.String()
	}
	return p
}

// buildWeb builds the web server statically as dir/web.
func buildWeb(t *testing.T, dir string) string {
	t.Helper()
	bin := filepath.Join(dir, "web")
	// go test puts its own go first on PATH.
	run(t, nil, []string{"CGO_ENABLED=0", "GOOS=linux", "GOARCH=" + runtime.GOARCH, "GOFLAGS=-mod=readonly"},
		"go", "build", "-trimpath", "-ldflags=-s -w", "-o", bin, "./testdata/web")
	return bin
}

// buildImage builds the web server statically and writes an OCI image
// layout tarball of an image FROM scratch holding it as /web; it returns
// the tarball's path. entrypoint is the image's (["/web"] or ["/web",
// "pause"]).
func buildImage(t *testing.T, dir, ref string, entrypoint ...string) string {
	t.Helper()
	web, err := os.ReadFile(buildWeb(t, dir))
	if err != nil {
		t.Fatal(err)
	}

	// The one layer: /web, uncompressed (its digest is its diff ID).
	var layer bytes.Buffer
	tw := tar.NewWriter(&layer)
	epoch := time.Unix(0, 0)
	if err := tw.WriteHeader(&tar.Header{Name: "web", Mode: 0o755, Size: int64(len(web)), ModTime: epoch, Typeflag: tar.TypeReg}); err != nil {
		t.Fatal(err)
	}
	if _, err := tw.Write(web); err != nil {
		t.Fatal(err)
	}
	if err := tw.Close(); err != nil {
		t.Fatal(err)
	}
	type desc struct {
		MediaType   string            `json:"mediaType"`
		Digest      string            `json:"digest"`
		Size        int               `json:"size"`
		Platform    map[string]string `json:"platform,omitempty"`
		Annotations map[string]string `json:"annotations,omitempty"`
	}
	blobs := map[string][]byte{}
	add := func(mediaType string, b []byte) desc {
		sum := sha256.Sum256(b)
		d := "sha256:" + hex.EncodeToString(sum[:])
		blobs[d] = b
		return desc{MediaType: mediaType, Digest: d, Size: len(b)}
	}
	mustJSON := func(v any) []byte {
		b, err := json.Marshal(v)
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	layerDesc := add("application/vnd.oci.image.layer.v1.tar", layer.Bytes())
	configDesc := add("application/vnd.oci.image.config.v1+json", mustJSON(map[string]any{
		"architecture": runtime.GOARCH,
		"os":           "linux",
		"config":       map[string]any{"Entrypoint": entrypoint, "ExposedPorts": map[string]any{"8080/tcp": map[string]any{}}},
		"rootfs":       map[string]any{"type": "layers", "diff_ids": []string{layerDesc.Digest}},
	}))
	manifestDesc := add("application/vnd.oci.image.manifest.v1+json", mustJSON(map[string]any{
		"schemaVersion": 2,
		"mediaType":     "application/vnd.oci.image.manifest.v1+json",
		"config":        configDesc,
		"layers":        []desc{layerDesc},
	}))
	manifestDesc.Platform = map[string]string{"architecture": runtime.GOARCH, "os": "linux"}
	manifestDesc.Annotations = map[string]string{
		"io.containerd.image.name":          ref,
		"org.opencontainers.image.ref.name": ref[strings.LastIndex(ref, ":")+1:],
	}
	index := mustJSON(map[string]any{
		"schemaVersion": 2,
		"mediaType":     "application/vnd.oci.image.index.v1+json",
		"manifests":     []desc{manifestDesc},
	})

	path := filepath.Join(dir, strings.NewReplacer("/", "_", ":", "_").Replace(ref)+".tar")
	f, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	out := tar.NewWriter(f)
	file := func(name string, b []byte) {
		if err := out.WriteHeader(&tar.Header{Name: name, Mode: 0o644, Size: int64(len(b)), ModTime: epoch, Typeflag: tar.TypeReg}); err != nil {
			t.Fatal(err)
		}
		if _, err := out.Write(b); err != nil {
			t.Fatal(err)
		}
	}
	file("oci-layout", []byte(`{"imageLayoutVersion":"1.0.0"}`))
	file("index.json", index)
	for d, b := range blobs {
		file("blobs/sha256/"+strings.TrimPrefix(d, "sha256:"), b)
	}
	if err := out.Close(); err != nil {
		t.Fatal(err)
	}
	return path
}

// TestRealNodeContainer makes one real node and runs one real container on
// it, reached over HTTP from the host through the node's bridges.
func TestRealNodeContainer(t *testing.T) {
	s := needStack(t)
	start := time.Now()
	n := newNode(t)

	// Nothing leaves the host from the node: it has no default route, and
	// an address outside its own networks is unreachable from it.
	if out := run(t, nil, nil, "ip", "-n", n.ns, "route", "show", "default"); strings.TrimSpace(out) != "" {
		t.Fatalf("node namespace has a default route: %q", out)
	}
	if out, err := try(nil, nil, "ip", "-n", n.ns, "route", "get", "192.0.2.200"); err == nil {
		t.Fatalf("node namespace routes to an outside address: %q", out)
	}
	// The node is on the host bridge.
	if out := run(t, nil, nil, "ip", "netns", "exec", n.ns, "ip", "-4", "-o", "addr", "show", "eth0"); !strings.Contains(out, n.nodeIP+"/24") {
		t.Fatalf("node eth0 has no %s: %q", n.nodeIP, out)
	}

	p := n.addPod(t, s, "web")
	c := startContainerd(t, n, s, nil)
	t.Logf("node %s up, containerd answering after %s", n.ns, time.Since(start).Round(time.Millisecond))

	const ref = "capn.local/test/web:v1"
	tarball := buildImage(t, n.dir, ref, "/web")
	c.ctr(t, "images", "import", "--snapshotter", "overlayfs", tarball)
	if out := c.ctr(t, "images", "ls", "-q"); !strings.Contains(out, ref) {
		t.Fatalf("ctr images ls has no %s: %q", ref, out)
	}

	token := "capn-" + n.id
	// runc's state, the I/O fifos and the cgroup are the node's own too
	// (ctr's defaults are /run/containerd/runc, /run/containerd/fifo and
	// /<namespace>/<id>).
	cgroup := "/" + n.ns + "/web"
	t.Cleanup(func() { removeCgroup(t, cgroup) })
	c.ctr(t, "run", "-d", "--snapshotter", "overlayfs",
		"--runc-binary", filepath.Join(s.bin, "runc"), "--runc-root", filepath.Join(n.dir, "runc"),
		"--fifo-dir", filepath.Join(n.dir, "fifo"), "--cgroup", cgroup,
		"--with-ns", "network:"+p.path,
		"--env", "CAPN_WEB_TOKEN="+token,
		ref, "web")
	t.Cleanup(func() {
		if _, err := c.try(nil, "tasks", "kill", "-s", "SIGKILL", "web"); err != nil {
			t.Logf("ctr tasks kill: %v", err)
		}
		testkit.WaitFor(t, 60*time.Second, "the web task stops and is deleted", func() bool {
			_, err := c.try(nil, "tasks", "delete", "web")
			return err == nil || strings.Contains(err.Error(), "not found")
		})
		if _, err := c.try(nil, "containers", "delete", "web"); err != nil {
			t.Logf("ctr containers delete: %v", err)
		}
	})
	if out := c.ctr(t, "tasks", "ls"); !strings.Contains(out, "RUNNING") {
		t.Fatalf("web task is not running: %q", out)
	}
	// cgroup v1: the container's memory cgroup holds its process.
	if b, err := os.ReadFile(filepath.Join("/sys/fs/cgroup/memory", cgroup, "cgroup.procs")); err != nil || strings.TrimSpace(string(b)) == "" {
		t.Fatalf("the container's memory cgroup %s has no process: %q %v", cgroup, b, err)
	}

	// From the host (this test process, in the host's namespace): host
	// bridge → node eth0 → node's cni0 → the container's eth0.
	url := "http://" + net.JoinHostPort(p.ip, "8080") + "/"
	var body string
	client := &http.Client{Timeout: 2 * time.Second}
	testkit.WaitFor(t, 60*time.Second, "GET "+url+" answers from the container", func() bool {
		resp, err := client.Get(url)
		if err != nil {
			return false
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		body = string(b)
		return resp.StatusCode == http.StatusOK
	})
	if !strings.Contains(body, "token="+token+"\n") {
		t.Fatalf("answer is not from the container (no token %s):\n%s", token, body)
	}
	if !strings.Contains(body, "addr="+p.ip+"/24\n") {
		t.Fatalf("the container does not hold its CNI address %s:\n%s", p.ip, body)
	}
	t.Logf("node %s (%s), pod %s: container answered after %s:\n%s", n.ns, n.nodeIP, p.ip, time.Since(start).Round(time.Millisecond), body)
}
