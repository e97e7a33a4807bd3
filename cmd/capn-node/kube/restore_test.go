package kube_test

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/capn-dev/capn/cmd/capn-node/kube"
	capnv1 "github.com/capn-dev/capn/schemas/capn/v1alpha1"
	"github.com/capn-dev/capn/secrets/pki"
	"github.com/capn-dev/capn/services/bootstrapper/bootstrap"
)

// TestEtcdSnapshotAndRestoreOnThreeMembers is issue 22's etcd proof on the
// node side, with real binaries: three kube-local control planes (the
// first initialises, two join), a ConfigMap written, a snapshot taken
// through the etcd gateway of one member, the ConfigMap deleted, then the
// restore every member runs as the backup service drives it (stage the
// file, prepare: stop and etcdutl restore with a new cluster token, start
// on the restored data). The ConfigMap is back, the three members are
// voting and healthy, and every API server is ready with its Node.
func TestEtcdSnapshotAndRestoreOnThreeMembers(t *testing.T) {
	requireLinux(t)
	if testing.Short() {
		t.Skip("runs three real control planes")
	}
	bin := kubeBin(t)
	for _, b := range []string{"etcdctl", "etcdutl"} {
		if _, err := os.Stat(filepath.Join(bin, b)); err != nil {
			if os.Getenv("CAPN_REQUIRE_KUBE") == "1" {
				t.Fatalf("no %s in %s, and CAPN_REQUIRE_KUBE=1: make kube builds it", b, bin)
			}
			t.Skipf("no %s in %s: make kube builds it (an older cache lacks etcdutl: run make kube again)", b, bin)
		}
	}
	version, err := kube.BinaryVersion(t.Context(), filepath.Join(bin, "kube-apiserver"))
	if err != nil {
		t.Fatal(err)
	}
	set, _, err := pki.Ensure(pki.Set{}, pki.Options{Now: time.Now()})
	if err != nil {
		t.Fatal(err)
	}
	ports := freePorts(t, 5)
	p := kube.Ports{EtcdClient: ports[0], EtcdPeer: ports[1], APIServer: ports[2], ControllerManager: ports[3], Scheduler: ports[4]}
	network := &capnv1.NetworkSpec{PodCidrs: []string{"10.244.0.0/16"}, ServiceCidrs: []string{"10.96.0.0/12"}, ServiceDomain: "cluster.local"}

	var rts []*kube.Runtime
	var k kubectl
	for i, addr := range []string{"127.0.0.1", "127.0.0.3", "127.0.0.4"} {
		name := fmt.Sprintf("kr-cp-%d", i)
		cfg, dir := machine{Name: name, Role: bootstrap.RoleControlPlane, First: i == 0, Version: version,
			Host: "127.0.0.1", Port: p.APIServer, Network: network}.render(t, set)
		rt, _ := runMachine(t, cfg, kube.Options{BinDir: bin, DataDir: dir, Address: addr, ProviderID: "process://kr/" + name, Ports: p})
		rts = append(rts, rt)
		if i == 0 {
			k = kubectl{t: t, bin: bin, admin: rt.Layout().AdminKubeconfig(), home: t.TempDir()}
		}
		within(t, 4*time.Minute, "Node "+name+" Ready", func() (bool, string) { return nodeReady(k, name) })
	}
	etcd0 := fmt.Sprintf("https://127.0.0.1:%d", p.EtcdClient)
	if got := describeMembers(etcdctlMembers(t, bin, etcd0, rts[0].Layout())); got != "kr-cp-0,kr-cp-1,kr-cp-2" {
		t.Fatalf("members %s before the snapshot", got)
	}

	if _, err := k.run("", "create", "configmap", "keep-me", "--from-literal=answer=42"); err != nil {
		t.Fatal(err)
	}
	var snap bytes.Buffer
	began := time.Now()
	info, err := rts[1].EtcdSnapshot(t.Context(), &snap)
	if err != nil {
		t.Fatal(err)
	}
	if info.Size != int64(snap.Len()) || info.Revision <= 0 || len(info.Members) != 3 || len(info.SHA256) != 64 {
		t.Fatalf("snapshot info %+v for %d bytes", info, snap.Len())
	}
	t.Logf("snapshot: %d bytes at revision %d in %s", info.Size, info.Revision, time.Since(began).Round(time.Millisecond))
	if _, err := k.run("", "delete", "configmap", "keep-me"); err != nil {
		t.Fatal(err)
	}
	if _, err := k.run("", "get", "configmap", "keep-me"); err == nil || !strings.Contains(err.Error(), "NotFound") {
		t.Fatalf("the ConfigMap is still there after its delete: %v", err)
	}

	// The restore, as the backup service drives it.
	began = time.Now()
	id := "rtest1"
	var parts []string
	for _, rt := range rts {
		self := rt.EtcdSelf()
		parts = append(parts, self.Name+"="+self.PeerURLs[0])
	}
	initial := strings.Join(parts, ",")
	for _, rt := range rts {
		data := snap.Bytes()
		for off := 0; off < len(data); off += 512 << 10 {
			if _, err := rt.StageRestore(id, int64(off), data[off:min(off+512<<10, len(data))]); err != nil {
				t.Fatal(err)
			}
		}
	}
	// A file that does not match is refused before anything stops.
	if err := rts[0].PrepareRestore(t.Context(), id, info.Size, strings.Repeat("0", 64), initial, "tok"); err == nil || !rts[0].Ready() {
		t.Fatalf("prepare with a wrong sha256: %v (ready %t)", err, rts[0].Ready())
	}
	for _, rt := range rts {
		if err := rt.PrepareRestore(t.Context(), id, info.Size, info.SHA256, initial, "kr-"+id); err != nil {
			t.Fatal(err)
		}
	}
	for _, rt := range rts {
		if err := rt.StartRestored(t.Context(), id); err != nil {
			t.Fatal(err)
		}
	}
	for i, rt := range rts {
		name := fmt.Sprintf("kr-cp-%d", i)
		within(t, 4*time.Minute, name+" ready on the restored etcd", func() (bool, string) {
			if err := rt.EtcdHealth(t.Context()); err != nil {
				return false, "etcd: " + err.Error()
			}
			c, _ := rt.Condition()
			if !rt.Ready() || rt.Restoring() {
				return false, fmt.Sprintf("ready %t restoring %t: %s", rt.Ready(), rt.Restoring(), c.Message)
			}
			return nodeReady(k, name)
		})
	}
	t.Logf("restored on three members: every member healthy, API server ready and Node Ready %s after the prepare began", time.Since(began).Round(time.Millisecond))
	if s, err := k.run("", "get", "configmap", "keep-me", "-o", "jsonpath={.data.answer}"); err != nil || s != "42" {
		t.Fatalf("the ConfigMap after the restore: %q %v", s, err)
	}
	if got := describeMembers(etcdctlMembers(t, bin, etcd0, rts[0].Layout())); got != "kr-cp-0,kr-cp-1,kr-cp-2" {
		t.Errorf("members %s after the restore, want three voting", got)
	}
	for _, rt := range rts {
		if _, err := os.Stat(rt.Layout().EtcdDataDir() + ".pre-restore-" + id); err != nil {
			t.Errorf("the old etcd data was not kept aside: %v", err)
		}
	}
}
