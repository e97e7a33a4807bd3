package kube_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/capn-dev/capn/cmd/capn-node/kube"
	capnv1 "github.com/capn-dev/capn/schemas/capn/v1alpha1"
	"github.com/capn-dev/capn/secrets/pki"
	"github.com/capn-dev/capn/services/bootstrapper/bootstrap"
	"github.com/capn-dev/capn/services/bootstrapper/bootstrap/kubelocal"
)

func TestEtcdIDJSON(t *testing.T) {
	var m kube.Member
	if err := json.Unmarshal([]byte(`{"ID":"12345678901234567890","name":"a","peerURLs":["https://127.0.0.1:2380"],"isLearner":true}`), &m); err != nil {
		t.Fatal(err)
	}
	if m.ID != 12345678901234567890 || !m.IsLearner || !m.Started() {
		t.Errorf("%+v", m)
	}
	if err := json.Unmarshal([]byte(`{"ID":42}`), &m); err != nil || m.ID != 42 {
		t.Errorf("bare number: %v %v", m.ID, err)
	}
	b, _ := json.Marshal(map[string]any{"ID": kube.EtcdID(12345678901234567890)})
	if string(b) != `{"ID":"12345678901234567890"}` {
		t.Errorf("marshal %s", b)
	}
	if err := json.Unmarshal([]byte(`{"ID":"x"}`), &m); err == nil {
		t.Error("ID x accepted")
	}
}

func TestInitialCluster(t *testing.T) {
	members := []kube.Member{
		{ID: 1, Name: "cp-0", PeerURLs: []string{"https://127.0.0.1:2380"}},
		{ID: 2, Name: "cp-1", PeerURLs: []string{"https://127.0.0.3:2380"}},
		{ID: 3, PeerURLs: []string{"https://127.0.0.4:2380"}, IsLearner: true},
	}
	if got, want := kube.InitialCluster(members, 3, "cp-2"), "cp-0=https://127.0.0.1:2380,cp-1=https://127.0.0.3:2380,cp-2=https://127.0.0.4:2380"; got != want {
		t.Errorf("initial cluster %s, want %s", got, want)
	}
	if m, ok := kube.ByPeerURL(members, "https://127.0.0.4:2380"); !ok || m.ID != 3 || m.Started() {
		t.Errorf("by peer URL: %+v %v", m, ok)
	}
	if _, ok := kube.ByPeerURL(members, "https://127.0.0.9:2380"); ok {
		t.Error("found a member that is not there")
	}
}

// etcdctl lists the members with the real etcdctl, as an operator would.
func etcdctlMembers(t *testing.T, bin, endpoint string, l kube.Layout) []kube.Member {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	pkiFile := func(name string) string { return filepath.Join(l.PKIDir(), filepath.FromSlash(name)) }
	cmd := exec.CommandContext(ctx, filepath.Join(bin, "etcdctl"), "--endpoints="+endpoint,
		"--cacert="+pkiFile("etcd/ca.crt"), "--cert="+pkiFile("apiserver-etcd-client.crt"), "--key="+pkiFile("apiserver-etcd-client.key"),
		"member", "list", "-w", "json")
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	if err := cmd.Run(); err != nil {
		t.Logf("etcdctl member list: %v: %s", err, errb.String())
		return nil
	}
	var resp struct {
		Members []struct {
			ID        uint64   `json:"ID"`
			Name      string   `json:"name"`
			PeerURLs  []string `json:"peerURLs"`
			IsLearner bool     `json:"isLearner"`
		} `json:"members"`
	}
	if err := json.Unmarshal(out.Bytes(), &resp); err != nil {
		t.Fatalf("etcdctl member list: %v: %s", err, out.String())
	}
	var ms []kube.Member
	for _, m := range resp.Members {
		ms = append(ms, kube.Member{ID: kube.EtcdID(m.ID), Name: m.Name, PeerURLs: m.PeerURLs, IsLearner: m.IsLearner})
	}
	return ms
}

func describeMembers(ms []kube.Member) string {
	var parts []string
	for _, m := range ms {
		s := m.Name
		if s == "" {
			s = "(unstarted)"
		}
		if m.IsLearner {
			s += "[learner]"
		}
		parts = append(parts, s)
	}
	slices.Sort(parts)
	return strings.Join(parts, ",")
}

// TestControlPlaneJoins runs three kube-local control-plane machines
// (127.0.0.1 initialises; 127.0.0.3 and .4 join through the endpoint, the
// first machine's API server) and checks with etcdctl and kubectl: three
// voting etcd members named after the machines, three Ready control-plane
// Nodes. Then the third machine's Node is deleted (what the health-watcher
// does when capn deletes the machine) and the machine stopped: the others
// remove its member, and etcd stays healthy with two. A fourth machine then
// joins at the third's address with no data (a machine re-created there),
// and the cluster is back at three.
func TestControlPlaneJoins(t *testing.T) {
	requireLinux(t)
	if testing.Short() {
		t.Skip("runs three real control planes")
	}
	bin := kubeBin(t)
	if _, err := os.Stat(filepath.Join(bin, "etcdctl")); err != nil {
		t.Fatalf("no etcdctl in %s (make kube builds it)", bin)
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
	old := kube.SweepEvery
	kube.SweepEvery = time.Second
	t.Cleanup(func() { kube.SweepEvery = old })

	type running struct {
		name, address string
		rt            *kube.Runtime
		stop          func()
	}
	type rendered struct {
		cfg *kubelocal.NodeConfig
		dir string
	}
	machines := map[string]rendered{}
	start := func(name, address string, first bool) running {
		m, ok := machines[name]
		if !ok { // a restart keeps the machine's config and data dir
			m.cfg, m.dir = machine{Name: name, Role: bootstrap.RoleControlPlane, First: first, Version: version,
				Host: "127.0.0.1", Port: p.APIServer, Network: network}.render(t, set)
			machines[name] = m
		}
		rt, stop := runMachine(t, m.cfg, kube.Options{BinDir: bin, DataDir: m.dir, Address: address, ProviderID: "process://kl/" + name, Ports: p})
		return running{name: name, address: address, rt: rt, stop: stop}
	}

	cp0 := start("kl-cp-0", "127.0.0.1", true)
	k := kubectl{t: t, bin: bin, admin: cp0.rt.Layout().AdminKubeconfig(), home: t.TempDir()}
	within(t, 4*time.Minute, "Node kl-cp-0 Ready", func() (bool, string) { return nodeReady(k, "kl-cp-0") })
	etcd0 := fmt.Sprintf("https://127.0.0.1:%d", p.EtcdClient)
	members := func() []kube.Member { return etcdctlMembers(t, bin, etcd0, cp0.rt.Layout()) }
	wantMembers := func(what, want string) {
		t.Helper()
		within(t, 2*time.Minute, what, func() (bool, string) {
			got := describeMembers(members())
			return got == want, "members " + got
		})
	}

	cps := []running{cp0}
	for i, addr := range []string{"127.0.0.3", "127.0.0.4"} {
		name := fmt.Sprintf("kl-cp-%d", i+1)
		began := time.Now()
		cp := start(name, addr, false)
		cps = append(cps, cp)
		within(t, 4*time.Minute, "Node "+name+" Ready", func() (bool, string) { return nodeReady(k, name) })
		ms := cp.rt.Milestones()
		t.Logf("%s joined: member added %s, promoted %s, API server ready %s, Node Ready %s after start",
			name, ms["etcd-member-added"].Round(time.Millisecond), ms["etcd-member-promoted"].Round(time.Millisecond),
			ms["apiserver-ready"].Round(time.Millisecond), time.Since(began).Round(time.Millisecond))
	}
	wantMembers("three voting members", "kl-cp-0,kl-cp-1,kl-cp-2")
	// Every machine's API server serves the cluster: ask the joined ones.
	for _, cp := range cps[1:] {
		kc := kubectl{t: t, bin: bin, admin: cp.rt.Layout().AdminKubeconfig(), home: t.TempDir()}
		var nodes nodeList
		kc.json(&nodes, "get", "nodes", "-l", "node-role.kubernetes.io/control-plane")
		if len(nodes.Items) != 3 {
			t.Errorf("%s's API server lists %d control-plane Nodes, want 3", cp.name, len(nodes.Items))
		}
		if s, err := kc.run("", "get", "--raw", "/readyz/etcd"); err != nil || s != "ok" {
			t.Errorf("%s: /readyz/etcd %q %v", cp.name, s, err)
		}
	}

	// capn deletes kl-cp-2: the health-watcher deletes its Node, the
	// provider stops it. The others take its member out.
	began := time.Now()
	if _, err := k.run("", "delete", "node", "kl-cp-2"); err != nil {
		t.Fatal(err)
	}
	cps[2].stop()
	wantMembers("kl-cp-2's member removed", "kl-cp-0,kl-cp-1")
	t.Logf("kl-cp-2's member removed %s after its Node was deleted", time.Since(began).Round(time.Millisecond))
	if s, err := k.run("", "get", "--raw", "/readyz/etcd"); err != nil || s != "ok" {
		t.Errorf("with two members: /readyz/etcd %q %v", s, err)
	}

	// A new machine at the same address, without data, joins.
	cp3 := start("kl-cp-3", "127.0.0.4", false)
	within(t, 4*time.Minute, "Node kl-cp-3 Ready", func() (bool, string) { return nodeReady(k, "kl-cp-3") })
	wantMembers("kl-cp-3 a voting member", "kl-cp-0,kl-cp-1,kl-cp-3")

	// Hibernation: every control plane stops, then all start again on
	// their data (etcd needs two of three back before any API server
	// serves, so none may wait for the endpoint first).
	cp0.stop()
	cps[1].stop()
	cp3.stop()
	began = time.Now()
	cp0 = start("kl-cp-0", "127.0.0.1", true)
	cp1 := start("kl-cp-1", "127.0.0.3", false)
	cp3 = start("kl-cp-3", "127.0.0.4", false)
	for _, cp := range []running{cp0, cp1, cp3} {
		within(t, 4*time.Minute, "Node "+cp.name+" Ready after the restart", func() (bool, string) {
			c, _ := cp.rt.Condition()
			if !cp.rt.Ready() {
				return false, c.Reason + ": " + c.Message
			}
			return nodeReady(k, cp.name)
		})
	}
	wantMembers("the same three members after the restart", "kl-cp-0,kl-cp-1,kl-cp-3")
	t.Logf("all three control planes stopped and started again: every API server ready and Node Ready %s after the start", time.Since(began).Round(time.Millisecond))
}
