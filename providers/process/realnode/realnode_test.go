//go:build linux

package realnode

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestReadImages(t *testing.T) {
	dir := t.TempDir()
	if _, err := ReadImages(dir); err == nil {
		t.Fatal("a directory without images.txt read")
	}
	list := "registry.k8s.io/pause:3.10.2 pause.tar\ncapn.local/test/web:v1 /abs/web.tar\n"
	if err := os.WriteFile(filepath.Join(dir, "images.txt"), []byte(list), 0o600); err != nil {
		t.Fatal(err)
	}
	im, err := ReadImages(dir)
	if err != nil {
		t.Fatal(err)
	}
	if len(im) != 2 || im[0].Archive != filepath.Join(dir, "pause.tar") || im[1].Archive != "/abs/web.tar" {
		t.Fatalf("images %v", im)
	}
	if p := PauseImage(im); p != "registry.k8s.io/pause:3.10.2" {
		t.Errorf("pause image %q", p)
	}
	if err := os.WriteFile(filepath.Join(dir, "images.txt"), []byte("no-archive\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := ReadImages(dir); err == nil || !strings.Contains(err.Error(), `line "no-archive"`) {
		t.Fatalf("a bad line: %v", err)
	}
}

func TestCheckNamesWhatIsMissing(t *testing.T) {
	dir := t.TempDir()
	err := Stack{Bin: filepath.Join(dir, "bin"), KubeBin: filepath.Join(dir, "kube")}.Check(true, filepath.Join(dir, "images"))
	if err == nil {
		t.Fatal("an empty stack passed")
	}
	for _, want := range []string{"containerd in the node stack", "runc", "kubelet", "kubeadm", "make nodestack", "make nodeimages"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("%q not in %v", want, err)
		}
	}
	if err := (Stack{}).Check(false, ""); err == nil || !strings.Contains(err.Error(), "CAPN_NODESTACK_BIN is not set") {
		t.Errorf("no stack: %v", err)
	}
}

func TestPodCIDROf(t *testing.T) {
	dir := t.TempDir()
	if c := PodCIDROf(dir); c != "" {
		t.Fatalf("no config: %q", c)
	}
	conf := strings.ReplaceAll(CNITemplate, "{{.PodCIDR}}", "10.252.4.0/24")
	if err := os.WriteFile(filepath.Join(dir, "10-containerd-net.conflist"), []byte(conf), 0o600); err != nil {
		t.Fatal(err)
	}
	if c := PodCIDROf(dir); c != "10.252.4.0/24" {
		t.Fatalf("pod CIDR %q", c)
	}
	bad := strings.ReplaceAll(CNITemplate, "{{.PodCIDR}}", "not-a-cidr")
	if err := os.WriteFile(filepath.Join(dir, "10-containerd-net.conflist"), []byte(bad), 0o600); err != nil {
		t.Fatal(err)
	}
	if c := PodCIDROf(dir); c != "" {
		t.Fatalf("a bad subnet read as %q", c)
	}
}

func TestContainerdConfig(t *testing.T) {
	s := Stack{Bin: "/stack/bin"}
	plain := ContainerdConfig("/n/containerd", "/n/containerd/containerd.sock", s, nil)
	if !strings.Contains(plain, `"io.containerd.grpc.v1.cri",`) || strings.Contains(plain, "pinned_images") {
		t.Errorf("without CRI, the CRI plugins are not off:\n%s", plain)
	}
	cri := ContainerdConfig("/n/containerd", "/n/containerd/containerd.sock", s, &CRI{PauseImage: "registry.k8s.io/pause:3.10.2", CNIConfDir: "/n/cni-conf", CNIConfTemplate: "/n/t"})
	for _, want := range []string{`sandbox = "registry.k8s.io/pause:3.10.2"`, `BinaryName = "/stack/bin/runc"`, `conf_dir = "/n/cni-conf"`, `conf_template = "/n/t"`, `address = "/n/containerd/containerd.sock"`, `root = "/n/containerd/root"`} {
		if !strings.Contains(cri, want) {
			t.Errorf("%s not in:\n%s", want, cri)
		}
	}
	if strings.Contains(cri, `"io.containerd.grpc.v1.cri",`) {
		t.Errorf("with CRI, the CRI is still off")
	}
}

func TestNames(t *testing.T) {
	l := LANFor("5ca65c", 93)
	n := l.NodeFor(12, "/d")
	if l.NS != "capn-lan-5ca65c" || l.HostIP != "10.253.93.1" || n.NS != "capn-node-5ca65c-12" || n.NodeIP != "10.253.93.13" {
		t.Fatalf("lan %+v node %+v", l, n)
	}
	// Interface names fit IFNAMSIZ (15): capnv<id><index> for index 250.
	sw, eth := l.NodeFor(250, "/d").veths()
	if len(sw) > 15 || len(eth) > 15 || len(l.HostDev) > 15 {
		t.Errorf("interface names too long: %s %s %s", sw, eth, l.HostDev)
	}
}

// TestKubeletDefaults: the provider id reaches the node's
// /etc/default/kubelet as KUBELET_EXTRA_ARGS (what capn-node kubelet
// reads), written once, and an id the unit would split is refused, the
// file untouched.
func TestKubeletDefaults(t *testing.T) {
	root := t.TempDir()
	n := &Node{Root: root}
	path := filepath.Join(root, "etc", "default", "kubelet")
	if err := n.writeKubeletDefaults("process://c1/m1"); err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(path)
	if err != nil || !strings.Contains(string(b), "\nKUBELET_EXTRA_ARGS='--provider-id=process://c1/m1'\n") {
		t.Fatalf("/etc/default/kubelet = %q, %v", b, err)
	}
	fi, _ := os.Stat(path)
	if err := n.writeKubeletDefaults("process://c1/m1"); err != nil {
		t.Fatal(err)
	}
	if fi2, _ := os.Stat(path); !os.SameFile(fi, fi2) {
		t.Error("the same provider id wrote the file again")
	}
	for _, bad := range []string{"process://c1/m 1", "process://c1/m'1"} {
		err := n.writeKubeletDefaults(bad)
		if err == nil || !strings.Contains(err.Error(), "provider id") {
			t.Errorf("%q: %v", bad, err)
		}
	}
	if b2, _ := os.ReadFile(path); string(b2) != string(b) {
		t.Errorf("a refused id changed the file: %q", b2)
	}
	if err := (&Node{}).writeKubeletDefaults("process://c1/m1"); err == nil {
		t.Error("a node without its own mounts wrote /etc/default/kubelet")
	}
}

// TestContainerIDs: the containers whose cgroups Remove removes are those
// containerd listed and those runc has state of, each once — a node
// killed out of band has no containerd to list them.
func TestContainerIDs(t *testing.T) {
	tests := []struct {
		name   string
		listed string   // containerIDFile, "" for none
		runc   []string // directories under containerd/runc/k8s.io
		want   []string
	}{
		{"nothing", "", nil, nil},
		{"listed by containerd", "a\nb\n", nil, []string{"a", "b"}},
		{"runc state only (containerd killed)", "", []string{"c", "d"}, []string{"c", "d"}},
		{"both, once each", "a\nc\n", []string{"c", "d"}, []string{"a", "c", "d"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			n := &Node{Dir: t.TempDir()}
			if tt.listed != "" {
				if err := os.WriteFile(filepath.Join(n.Dir, containerIDFile), []byte(tt.listed), 0o600); err != nil {
					t.Fatal(err)
				}
			}
			for _, id := range tt.runc {
				if err := os.MkdirAll(filepath.Join(n.Dir, ContainerdDir, "runc", "k8s.io", id), 0o700); err != nil {
					t.Fatal(err)
				}
			}
			if got := n.containerIDs(); strings.Join(got, ",") != strings.Join(tt.want, ",") {
				t.Errorf("containerIDs() = %v, want %v", got, tt.want)
			}
		})
	}
}
