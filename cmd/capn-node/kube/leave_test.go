package kube_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/capn-dev/capn/cmd/capn-node/kube"
	capnv1 "github.com/capn-dev/capn/schemas/capn/v1alpha1"
	"github.com/capn-dev/capn/secrets/pki"
	"github.com/capn-dev/capn/services/bootstrapper/bootstrap"
	"github.com/capn-dev/capn/services/bootstrapper/bootstrap/kubelocal"
)

// etcdctl runs the real etcdctl against endpoints with the API server's
// etcd client certificate of l.
func etcdctl(t *testing.T, bin string, l kube.Layout, endpoints []string, args ...string) (string, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	pkiFile := func(name string) string { return filepath.Join(l.PKIDir(), filepath.FromSlash(name)) }
	cmd := exec.CommandContext(ctx, filepath.Join(bin, "etcdctl"), append([]string{"--endpoints=" + strings.Join(endpoints, ","),
		"--cacert=" + pkiFile("etcd/ca.crt"), "--cert=" + pkiFile("apiserver-etcd-client.crt"), "--key=" + pkiFile("apiserver-etcd-client.key")}, args...)...)
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	if err := cmd.Run(); err != nil {
		return out.String(), fmt.Errorf("etcdctl %s: %w: %s", strings.Join(args, " "), err, errb.String())
	}
	return out.String(), nil
}

// TestControlPlaneLeavesEtcd runs kube-local control planes with real etcd
// and checks how members leave:
//
//	(a) kl-cp-2, made etcd's leader, has its Node deleted (what the
//	    health-watcher does when capn deletes its machine): it hands
//	    leadership to another member, removes its own member, stops its
//	    etcd and API server and reports EtcdMemberRemoved=True;
//	(c) a learner that never starts (added with etcdctl, as a machine that
//	    died right after its member add) blocks every join, since etcd
//	    allows one learner at a time: the others remove it after the
//	    learner timeout, and a new machine kl-cp-3 then joins;
//	(b) with kl-cp-3 stopped (dead, its Node still there), kl-cp-1's Node
//	    is deleted: removing kl-cp-1 would leave one healthy member of two,
//	    so it refuses (EtcdMemberRemoved=False QuorumAtRisk naming kl-cp-3
//	    unhealthy) and stays a member; once kl-cp-3's Node is deleted too,
//	    kl-cp-0 removes the dead kl-cp-3 (quorum kept) and kl-cp-1 then
//	    leaves: one member, etcd healthy.
func TestControlPlaneLeavesEtcd(t *testing.T) {
	requireLinux(t)
	if testing.Short() {
		t.Skip("runs four real control planes")
	}
	bin := kubeBin(t)
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
	oldSweep := kube.SweepEvery
	kube.SweepEvery = time.Second
	t.Cleanup(func() { kube.SweepEvery = oldSweep })
	const learnerTimeout = 20 * time.Second

	type running struct {
		name string
		rt   *kube.Runtime
		stop func()
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
		rt, stop := runMachine(t, m.cfg, kube.Options{BinDir: bin, DataDir: m.dir, Address: address, ProviderID: "process://kl/" + name,
			Ports: p, LearnerTimeout: learnerTimeout})
		return running{name: name, rt: rt, stop: stop}
	}
	etcdURL := func(addr string) string { return fmt.Sprintf("https://%s:%d", addr, p.EtcdClient) }

	cp0 := start("kl-cp-0", "127.0.0.1", true)
	k := kubectl{t: t, bin: bin, admin: cp0.rt.Layout().AdminKubeconfig(), home: t.TempDir()}
	within(t, 4*time.Minute, "Node kl-cp-0 Ready", func() (bool, string) { return nodeReady(k, "kl-cp-0") })
	members := func() []kube.Member { return etcdctlMembers(t, bin, etcdURL("127.0.0.1"), cp0.rt.Layout()) }
	wantMembers := func(what, want string) {
		t.Helper()
		within(t, 2*time.Minute, what, func() (bool, string) {
			got := describeMembers(members())
			return got == want, "members " + got
		})
	}
	etcdCond := func(r running, typ string) (kube.Condition, string) {
		c, ok := r.rt.EtcdCondition(typ)
		if !ok {
			return c, typ + " not set"
		}
		return c, fmt.Sprintf("%s=%s %s: %s", typ, c.Status, c.Reason, c.Message)
	}
	cp1 := start("kl-cp-1", "127.0.0.3", false)
	within(t, 4*time.Minute, "Node kl-cp-1 Ready", func() (bool, string) { return nodeReady(k, "kl-cp-1") })
	cp2 := start("kl-cp-2", "127.0.0.4", false)
	within(t, 4*time.Minute, "Node kl-cp-2 Ready", func() (bool, string) { return nodeReady(k, "kl-cp-2") })
	wantMembers("three voting members", "kl-cp-0,kl-cp-1,kl-cp-2")
	within(t, time.Minute, "kl-cp-0 sees three healthy members", func() (bool, string) {
		c, s := etcdCond(cp0, kube.CondEtcdMembersHealthy)
		return c.Status == "True" && strings.Contains(c.Message, "3 voting etcd members"), s
	})

	// (a) kl-cp-2 leads, then leaves.
	var id2 kube.EtcdID
	for _, m := range members() {
		if m.Name == "kl-cp-2" {
			id2 = m.ID
		}
	}
	all := []string{etcdURL("127.0.0.1"), etcdURL("127.0.0.3"), etcdURL("127.0.0.4")}
	if out, err := etcdctl(t, bin, cp0.rt.Layout(), all, "move-leader", id2.String()); err != nil {
		t.Fatalf("%v: %s", err, out)
	}
	leader := func(endpoint string) kube.EtcdID {
		out, err := etcdctl(t, bin, cp0.rt.Layout(), []string{endpoint}, "endpoint", "status", "-w", "json")
		if err != nil {
			t.Logf("%v", err)
			return 0
		}
		var st []struct {
			Status struct {
				Leader uint64 `json:"leader"`
			} `json:"Status"`
		}
		if err := json.Unmarshal([]byte(out), &st); err != nil || len(st) != 1 {
			t.Fatalf("endpoint status %q: %v", out, err)
		}
		return kube.EtcdID(st[0].Status.Leader)
	}
	if l := leader(etcdURL("127.0.0.1")); l != id2 {
		t.Fatalf("leader %s after move-leader, want kl-cp-2 (%s)", l, id2)
	}
	began := time.Now()
	if _, err := k.run("", "delete", "node", "kl-cp-2"); err != nil {
		t.Fatal(err)
	}
	within(t, 2*time.Minute, "kl-cp-2 reports EtcdMemberRemoved=True", func() (bool, string) {
		c, s := etcdCond(cp2, kube.CondEtcdMemberRemoved)
		return c.Status == "True", s
	})
	c, s := etcdCond(cp2, kube.CondEtcdMemberRemoved)
	t.Logf("(a) kl-cp-2 left %s after its Node was deleted: %s", time.Since(began).Round(time.Millisecond), s)
	if c.Reason != kube.ReasonMemberRemoved || !strings.Contains(c.Message, "after moving leadership to kl-cp-") || !strings.Contains(c.Message, "2 voting members left") {
		t.Errorf("kl-cp-2's EtcdMemberRemoved: %s; want the member removed after moving leadership", s)
	}
	wantMembers("kl-cp-2's member removed", "kl-cp-0,kl-cp-1")
	if l := leader(etcdURL("127.0.0.1")); l == id2 || l == 0 {
		t.Errorf("leader %s after kl-cp-2 left", l)
	}
	for _, st := range cp2.rt.Supervisor().Status() {
		if st.PID != 0 {
			t.Errorf("kl-cp-2's %s still runs (pid %d) after it left", st.Name, st.PID)
		}
	}
	if cp2.rt.Ready() {
		t.Error("kl-cp-2 still ready after it left")
	}
	if s, err := k.run("", "get", "--raw", "/readyz/etcd"); err != nil || s != "ok" {
		t.Errorf("after kl-cp-2 left: /readyz/etcd %q %v", s, err)
	}
	cp2.stop()

	// (c) a learner that never starts blocks joins until it is removed.
	if out, err := etcdctl(t, bin, cp0.rt.Layout(), all[:2], "member", "add", "kl-ghost", "--learner",
		fmt.Sprintf("--peer-urls=https://127.0.0.9:%d", p.EtcdPeer)); err != nil {
		t.Fatalf("%v: %s", err, out)
	}
	wantMembers("the ghost learner added", "(unstarted)[learner],kl-cp-0,kl-cp-1")
	began = time.Now()
	cp3 := start("kl-cp-3", "127.0.0.5", false)
	within(t, 4*time.Minute, "Node kl-cp-3 Ready", func() (bool, string) { return nodeReady(k, "kl-cp-3") })
	wantMembers("kl-cp-3 a voting member, the ghost gone", "kl-cp-0,kl-cp-1,kl-cp-3")
	joined := time.Since(began)
	t.Logf("(c) the unstarted learner was removed and kl-cp-3 joined %s after its start (learner timeout %s)", joined.Round(time.Millisecond), learnerTimeout)

	// (b) with kl-cp-3 dead, kl-cp-1 may not leave.
	cp3.stop()
	began = time.Now()
	if _, err := k.run("", "delete", "node", "kl-cp-1"); err != nil {
		t.Fatal(err)
	}
	within(t, 2*time.Minute, "kl-cp-1 refuses to leave: quorum at risk", func() (bool, string) {
		c, s := etcdCond(cp1, kube.CondEtcdMemberRemoved)
		return c.Status == "False" && c.Reason == kube.ReasonQuorumAtRisk, s
	})
	c, s = etcdCond(cp1, kube.CondEtcdMemberRemoved)
	t.Logf("(b) %s after kl-cp-1's Node was deleted: %s", time.Since(began).Round(time.Millisecond), s)
	for _, want := range []string{"kl-cp-1", "kl-cp-0 healthy", "kl-cp-3 unhealthy", "1 healthy of 2 voting members"} {
		if !strings.Contains(c.Message, want) {
			t.Errorf("the refusal %q does not say %q", c.Message, want)
		}
	}
	within(t, time.Minute, "kl-cp-0 reports kl-cp-3 unhealthy", func() (bool, string) {
		c, s := etcdCond(cp0, kube.CondEtcdMembersHealthy)
		return c.Status == "False" && strings.Contains(c.Message, "kl-cp-3 unhealthy"), s
	})
	if got := describeMembers(members()); got != "kl-cp-0,kl-cp-1,kl-cp-3" {
		t.Fatalf("members %s while removal is refused", got)
	}
	if !cp1.rt.Ready() {
		t.Error("kl-cp-1 stopped its API server although it did not leave")
	}

	// The dead member goes (its Node deleted), then kl-cp-1 may leave.
	began = time.Now()
	if _, err := k.run("", "delete", "node", "kl-cp-3"); err != nil {
		t.Fatal(err)
	}
	within(t, 2*time.Minute, "kl-cp-1 reports EtcdMemberRemoved=True", func() (bool, string) {
		c, s := etcdCond(cp1, kube.CondEtcdMemberRemoved)
		return c.Status == "True", s
	})
	wantMembers("kl-cp-0 alone", "kl-cp-0")
	_, s = etcdCond(cp1, kube.CondEtcdMemberRemoved)
	t.Logf("(b) the dead kl-cp-3 removed and kl-cp-1 left %s after kl-cp-3's Node was deleted: %s", time.Since(began).Round(time.Millisecond), s)
	if s, err := k.run("", "get", "--raw", "/readyz/etcd"); err != nil || s != "ok" {
		t.Errorf("with one member: /readyz/etcd %q %v", s, err)
	}

	// A restarted agent of a machine that left starts nothing again and
	// still says its member is removed.
	cp1.stop()
	cp1 = start("kl-cp-1", "127.0.0.3", false)
	within(t, 30*time.Second, "kl-cp-1 restarted: EtcdMemberRemoved=True", func() (bool, string) {
		c, s := etcdCond(cp1, kube.CondEtcdMemberRemoved)
		return c.Status == "True", s
	})
	if st := cp1.rt.Supervisor().Status(); len(st) != 0 {
		t.Errorf("kl-cp-1 restarted after it left and started %+v", st)
	}
	wantMembers("still kl-cp-0 alone", "kl-cp-0")
}
