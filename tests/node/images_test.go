//go:build linux

package node

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/capn-dev/capn/providers/process/realnode"
)

// image is one archive of hack/nodeimages.sh.
type image struct{ ref, archive string }

// needImages reads the archives hack/nodeimages.sh built (CAPN_NODEIMAGES,
// its images.txt); it skips without them, or fails under
// CAPN_REQUIRE_NODESTACK=1.
func needImages(t *testing.T) []image {
	t.Helper()
	skip := t.Skipf
	if os.Getenv("CAPN_REQUIRE_NODESTACK") == "1" {
		skip = t.Fatalf
	}
	dir := os.Getenv("CAPN_NODEIMAGES")
	if _, err := os.Stat(filepath.Join(dir, "images.txt")); dir == "" || err != nil {
		skip("CAPN_NODEIMAGES %q has no images.txt (make nodeimages; CAPN_NODEIMAGES=$(hack/nodeimages.sh --print-path)): %v", dir, err)
	}
	list, err := realnode.ReadImages(dir)
	if err != nil {
		t.Fatal(err)
	}
	var images []image
	for _, im := range list {
		images = append(images, image{im.Ref, im.Archive})
	}
	return images
}

// TestRealNodeControlPlaneImages imports the images hack/nodeimages.sh
// built FROM scratch (the control plane's, kube-proxy's and CoreDNS's) into
// a real node's containerd — no registry, no pull — and runs each: the
// image is listed under the reference kubeadm asks for, and its binary runs
// in a container and reports the version its tag names. kube-proxy's
// iptables runs too: in a privileged container of its own network
// namespace it adds a rule of the kinds kube-proxy writes (comment,
// statistic, DNAT: extensions loaded with dlopen) to the nat table.
func TestRealNodeControlPlaneImages(t *testing.T) {
	s := needStack(t)
	images := needImages(t)
	start := time.Now()
	n := newNode(t)
	c := startContainerd(t, n, s, nil)
	for _, im := range images {
		c.ctr(t, "images", "import", "--snapshotter", "overlayfs", im.archive)
	}
	listed := c.ctr(t, "images", "ls", "-q")
	names := map[string]bool{}
	for _, im := range images {
		if !strings.Contains(listed, im.ref+"\n") {
			t.Fatalf("ctr images ls has no %s:\n%s", im.ref, listed)
		}
		names[im.ref[strings.LastIndex(im.ref, "/")+1:strings.LastIndex(im.ref, ":")]] = true
	}
	for _, want := range []string{"pause", "etcd", "kube-apiserver", "kube-controller-manager", "kube-scheduler", "kube-proxy", "coredns"} {
		if !names[want] {
			t.Errorf("no %s image among %v", want, images)
		}
	}
	for i, im := range images {
		name := im.ref[strings.LastIndex(im.ref, "/")+1 : strings.LastIndex(im.ref, ":")]
		tag := im.ref[strings.LastIndex(im.ref, ":")+1:]
		// The binary by name, found on the image's PATH, as kubeadm's
		// static pods name it; pause is its entrypoint.
		args, want := []string{name, "--version"}, tag
		switch name {
		case "pause":
			args, want = []string{"/pause", "-v"}, "pause.c v"+tag
		case "etcd":
			want = "etcd Version: " + strings.TrimSuffix(tag, "-0")
		case "coredns":
			args, want = []string{"/coredns", "-version"}, "CoreDNS-"+strings.TrimPrefix(tag, "v")
		}
		runIn := func(id string, privileged bool, args ...string) string {
			cgroup := "/" + n.ns + "/" + id
			t.Cleanup(func() { removeCgroup(t, cgroup) })
			flags := []string{"run", "--rm", "--snapshotter", "overlayfs",
				"--runc-binary", filepath.Join(s.bin, "runc"), "--runc-root", filepath.Join(n.dir, "runc"),
				"--fifo-dir", filepath.Join(n.dir, "fifo"), "--cgroup", cgroup}
			if privileged {
				flags = append(flags, "--privileged")
			}
			return c.ctr(t, append(append(flags, im.ref, id), args...)...)
		}
		id := "version-" + strings.ReplaceAll(name, "-", "")
		out := runIn(id, false, args...)
		if !strings.Contains(out, want) {
			t.Errorf("image %d %s: `%s` printed %q, want %q", i, im.ref, strings.Join(args, " "), out, want)
		}
		t.Logf("%s: %s", im.ref, strings.TrimSpace(out))
		if name == "kube-proxy" {
			out := runIn("iptables-version", false, "iptables", "--version")
			if !strings.Contains(out, "(nf_tables)") {
				t.Errorf("%s: iptables --version printed %q, want the nf_tables backend", im.ref, out)
			}
			// ctr run gives the container a network namespace of its own.
			rule := []string{"iptables", "-w", "-t", "nat", "-A", "OUTPUT", "-p", "tcp", "-d", "10.96.0.1", "--dport", "443",
				"-m", "comment", "--comment", "capn", "-m", "statistic", "--mode", "random", "--probability", "0.5",
				"-j", "DNAT", "--to-destination", "192.0.2.1:6443"}
			runIn("iptables-rule", true, rule...)
			t.Logf("%s: %s; added a nat rule: %s", im.ref, strings.TrimSpace(out), strings.Join(rule[1:], " "))
		}
	}
	t.Logf("%d images imported and run in %s", len(images), time.Since(start).Round(time.Millisecond))
}
