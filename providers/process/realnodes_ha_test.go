//go:build linux

package process_test

import (
	"context"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/capn-dev/capn/events"
	"github.com/capn-dev/capn/events/store"
	"github.com/capn-dev/capn/providers/conformance"
	"github.com/capn-dev/capn/providers/process"
	"github.com/capn-dev/capn/providers/process/realnode"
	"github.com/capn-dev/capn/schemas/annotations"
	capnv1 "github.com/capn-dev/capn/schemas/capn/v1alpha1"
)

// TestRealNodesHAControlPlane is issue 26's control-plane joins: `capn
// apply` of a kubeadm cluster of 3 control planes and 1 worker on the
// process provider in node mode. The first control-plane machine runs
// kubeadm init, the other two `kubeadm join` with controlPlane (capn's
// shared CA, etcd CA, front-proxy CA and service-account key in their
// data), one at a time (capn's planner makes the next only once every
// control-plane machine is available), all through the cluster's endpoint
// (the provider's load balancer on the host's address on the nodes'
// switch). Proved: 4 Nodes Ready, 3 of them control planes; etcd has 3
// started voting members, one per control plane, each healthy; each
// control plane's own API server answers /readyz/etcd. Then `capn scale
// --pool control-plane --replicas 1` (scaleControlPlaneDown): each deleted
// control plane's agent takes its etcd member out once its Node is
// deleted, and one control plane is left with etcd of one member.
func TestRealNodesHAControlPlane(t *testing.T) {
	haManifest := strings.Replace(strings.Replace(realManifest, "    replicas: 1\n", "    replicas: 3\n", 1), "    replicas: 2\n", "    replicas: 1\n", 1)
	if haManifest == realManifest {
		t.Fatal("realManifest's replicas changed: 3 control planes and 1 worker are not made")
	}
	r := newRealWorld(t, nil, haManifest, 4)
	applied := r.applied

	cps := r.controlPlanes(3)
	for _, cp := range cps {
		t.Logf("control plane %s at %s: Node created %s, Ready %s after capn apply; %s", cp.name, cp.ip,
			cp.created.Sub(applied).Round(time.Second), cp.ready.Sub(applied).Round(time.Second), r.bootstrapTook(cp.name))
	}
	r.checkEtcd(cps)
	nss, err := process.RealNodeNamespaces(r.opts.StateDir)
	if err != nil || len(nss) != 4 {
		t.Fatalf("real node namespaces %v, %v", nss, err)
	}
	for _, m := range slices.Sorted(maps.Keys(nss)) {
		kib, procs := realnode.RSS(nss[m])
		t.Logf("%s (%s): RSS %.0f MiB in %d processes", m, nss[m], float64(kib)/1024, procs)
	}

	r.scaleControlPlaneDown(cps)
	r.deleteAndCheck()
}

// cpRemoval is what was seen of a control plane's removal, as durations
// after the scale (0: not yet).
type cpRemoval struct {
	node, member, machine time.Duration
}

// watchEtcdRemoved records, by machine, the first EtcdMemberRemoved=True
// that capn's NodeHealth of a machine of cluster got (the agent's report
// through the health-watcher, which the machine-manager waits for), until
// the test ends. It returns a reader of what was recorded.
func (r *realWorld) watchEtcdRemoved() func() map[string]*capnv1.NodeCondition {
	t := r.t
	ctx, cancel := context.WithCancel(context.Background())
	observed, err := r.env.JS.KeyValue(ctx, events.BucketObserved)
	if err != nil {
		t.Fatal(err)
	}
	w, err := observed.Watch(ctx, "node."+r.name+".*", jetstream.UpdatesOnly())
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	seen := map[string]*capnv1.NodeCondition{}
	done := make(chan struct{})
	go func() {
		defer close(done)
		for e := range w.Updates() {
			if e == nil || e.Operation() != jetstream.KeyValuePut {
				continue
			}
			h, err := store.Decode(e.Value(), func() *capnv1.NodeHealth { return new(capnv1.NodeHealth) })
			if err != nil {
				continue
			}
			machine := strings.TrimPrefix(e.Key(), "node."+r.name+".")
			for _, c := range h.GetConditions() {
				mu.Lock()
				if c.GetType() == annotations.CondEtcdMemberRemoved && c.GetStatus() == "True" && seen[machine] == nil {
					seen[machine] = c
				}
				mu.Unlock()
			}
		}
	}()
	t.Cleanup(func() { _ = w.Stop(); cancel(); <-done })
	return func() map[string]*capnv1.NodeCondition {
		mu.Lock()
		defer mu.Unlock()
		return maps.Clone(seen)
	}
}

// scaleControlPlaneDown is `capn scale --pool control-plane --replicas 1`
// on the 3 control planes cps: capn deletes two control-plane machines;
// each one's Node is drained and deleted, its agent then takes its etcd
// member out (moving leadership first if it leads; package kubeadm of
// capn-node) and stops its control plane's static pods, and the
// machine-manager deletes the machine's infrastructure only once the
// agent reports EtcdMemberRemoved=True. Proved: for each removed machine,
// its Node deleted, then its member, then the machine; capn's NodeHealth
// of it got EtcdMemberRemoved=True from its own agent ("kubeadm: etcd
// member <it> (…) removed…"), the kept one's never; etcd, asked at the
// remaining control plane, has that one voting member,
// healthy; its API server answers /readyz/etcd; kubectl reads and writes
// through the cluster's endpoint; capn's cluster Ready; nothing of the
// two nodes left on the host. The time of each removal's steps is
// logged.
func (r *realWorld) scaleControlPlaneDown(cps []realCP) {
	t := r.t
	nss, err := process.RealNodeNamespaces(r.opts.StateDir)
	if err != nil {
		t.Fatal(err)
	}
	before := map[string]string{}
	for _, cp := range cps {
		before[cp.name] = nss[r.name+"/"+cp.name]
	}
	removals := map[string]*cpRemoval{}
	for _, cp := range cps {
		removals[cp.name] = &cpRemoval{}
	}
	// etcdctl as each control plane's API server talks to etcd, its
	// certificates read now: a removed node's files go with it.
	ctls := map[string]*conformance.Etcdctl{}
	for _, cp := range cps {
		ctls[cp.name] = r.k.Etcdctl(func(path string) ([]byte, bool) { return readNodeFile(r.opts.StateDir, r.name, cp.name, path) })
	}
	reported := r.watchEtcdRemoved()
	began := time.Now()
	r.c.CLI("scale", r.name, "--pool", "control-plane", "--replicas", "1")
	var kept realCP
	conformance.Poll(t, "two of the three control planes removed: Nodes, etcd members, machines", 15*time.Minute, func() error {
		since := time.Since(began)
		nl, err := r.nodes()
		if err != nil {
			return err
		}
		nodes := map[string]bool{}
		for _, n := range nl.Items {
			nodes[n.Metadata.Name] = true
		}
		now, err := process.RealNodeNamespaces(r.opts.StateDir)
		if err != nil {
			return err
		}
		var members []conformance.EtcdMember
		var asked []string
		for _, cp := range cps {
			if _, ok := now[r.name+"/"+cp.name]; !ok || !nodes[cp.name] {
				continue
			}
			list, err := ctls[cp.name].Members([]string{"https://" + cp.ip + ":2379"})
			if err != nil {
				asked = append(asked, err.Error())
				continue
			}
			members = list
			break
		}
		if members == nil {
			return fmt.Errorf("no control plane's etcd lists the members: %v", asked)
		}
		machines := r.k.Clusters.Machines(r.name)
		var left []string
		for _, cp := range cps {
			rm := removals[cp.name]
			if !nodes[cp.name] && rm.node == 0 {
				rm.node = since
			}
			if !slices.ContainsFunc(members, func(m conformance.EtcdMember) bool { return m.Name == cp.name }) && rm.member == 0 {
				rm.member = since
			}
			if st, ok := machines[cp.name]; (!ok || st.GetPhaseValue() == capnv1.MachineDeleted) && rm.machine == 0 {
				rm.machine = since
			}
			if rm.node == 0 || rm.member == 0 || rm.machine == 0 {
				left = append(left, cp.name)
			}
		}
		if len(left) != 1 {
			var state []string
			for _, cp := range cps {
				rm := removals[cp.name]
				state = append(state, fmt.Sprintf("%s: Node gone %v, member gone %v, machine gone %v", cp.name, rm.node > 0, rm.member > 0, rm.machine > 0))
			}
			return fmt.Errorf("%d control planes not removed (want 1): %s", len(left), strings.Join(state, "; "))
		}
		for _, cp := range cps {
			if cp.name == left[0] {
				kept = cp
			}
		}
		if rm := removals[kept.name]; rm.node > 0 || rm.member > 0 || rm.machine > 0 {
			return fmt.Errorf("the control plane kept, %s, lost part of it: %+v", kept.name, *rm)
		}
		return nil
	})
	said := reported()
	for _, cp := range cps {
		c := said[cp.name]
		if cp.name == kept.name {
			if c != nil {
				t.Errorf("the control plane kept, %s, reported EtcdMemberRemoved=True: %s", cp.name, c.GetMessage())
			}
			continue
		}
		rm := removals[cp.name]
		t.Logf("control plane %s removed: its Node deleted %s after capn scale, its etcd member removed %s, its machine deleted %s; its NodeHealth got EtcdMemberRemoved=True %s: %s",
			cp.name, rm.node.Round(time.Second), rm.member.Round(time.Second), rm.machine.Round(time.Second), c.GetReason(), c.GetMessage())
		if rm.member < rm.node || rm.machine < rm.member {
			t.Errorf("control plane %s: removed out of order (Node, etcd member, machine): %+v", cp.name, *rm)
		}
		// Its own agent removed its member (not another's sweep) and said
		// so through capn.
		if c.GetReason() != "MemberRemoved" || !strings.HasPrefix(c.GetMessage(), "kubeadm: etcd member "+cp.name+" (") || !strings.Contains(c.GetMessage(), ") removed") {
			t.Errorf("control plane %s: EtcdMemberRemoved %v, want True MemberRemoved from its agent: \"kubeadm: etcd member %s (…) removed…\"", cp.name, c, cp.name)
		}
	}
	t.Logf("the control plane down from 3 to 1 machines in %s; %s is kept", time.Since(began).Round(time.Second), kept.name)

	r.k.Clusters.WaitReady(r.name, 5*time.Minute)
	if ms := r.k.Running(); len(ms) != 2 || len(r.k.ControlPlane(ms)) != 1 || r.k.ControlPlane(ms)[0] != kept.name {
		t.Errorf("capn's cluster is Ready with Running machines %v, want %s and a worker", slices.Sorted(maps.Keys(ms)), kept.name)
	}
	conformance.Poll(t, "2 Nodes, both Ready", time.Minute, func() error {
		ready, total, err := r.readyNodes()
		if err != nil {
			return err
		}
		if total != 2 || ready != 2 {
			return fmt.Errorf("%d Nodes, %d Ready", total, ready)
		}
		return nil
	})
	r.checkEtcd([]realCP{kept})
	cm := "capn-ha-" + strings.TrimPrefix(kept.name, r.name+"-")
	for _, args := range [][]string{
		{"create", "configmap", cm, "--from-literal=kept=" + kept.name},
		{"get", "configmap", cm, "-o", "jsonpath={.data.kept}"},
		{"delete", "configmap", cm},
	} {
		out, err := r.k.Kubectl(args...)
		if err != nil {
			t.Errorf("kubectl %s through the endpoint with one control plane: %v: %s", strings.Join(args, " "), err, out)
		} else if args[0] == "get" && out != kept.name {
			t.Errorf("kubectl %s: %q, want %q", strings.Join(args, " "), out, kept.name)
		}
	}
	conformance.Poll(t, "nothing of the removed control planes' nodes left on the host", time.Minute, func() error {
		var left []string
		for _, item := range process.RealNodeLeftovers(r.opts) {
			for _, cp := range cps {
				ns := before[cp.name]
				index := ns[strings.LastIndexByte(ns, '-')+1:]
				if cp.name != kept.name && (item == "network namespace "+ns || strings.Contains(item, "/realnodes/"+index+"/") ||
					strings.HasSuffix(item, "/realnodes/"+index) || strings.Contains(item, " via "+cp.ip+" ")) {
					left = append(left, item)
				}
			}
		}
		if len(left) > 0 {
			return fmt.Errorf("%v", left)
		}
		return nil
	})
}

// bootstrapTook is the agent's line saying how long its kubeadm data
// took to run (node.log), or why there is none.
func (r *realWorld) bootstrapTook(machine string) string {
	b, err := os.ReadFile(filepath.Join(machineDir(r.opts.StateDir, r.name, machine), "node.log"))
	if err != nil {
		return err.Error()
	}
	for _, l := range strings.Split(string(b), "\n") {
		if strings.Contains(l, "bootstrap data run on this node") {
			if _, took, ok := strings.Cut(l, `"took":`); ok {
				took, _, _ = strings.Cut(took, ",")
				return "its kubeadm data ran in " + strings.Trim(took, `"}`) + " ms"
			}
		}
	}
	return "no line on the kubeadm data's run in its node.log"
}

// realCP is a control-plane Node of the cluster.
type realCP struct {
	name, ip       string
	created, ready time.Time
}

// controlPlanes are the cluster's want control-plane Nodes, all Ready,
// in the order their Nodes were made (the first ran kubeadm init).
func (r *realWorld) controlPlanes(want int) []realCP {
	r.t.Helper()
	var cps []realCP
	conformance.Poll(r.t, fmt.Sprintf("%d control-plane Nodes Ready", want), time.Minute, func() error {
		nl, err := r.nodes()
		if err != nil {
			return err
		}
		ready := nl.ready(r.k.Version)
		cps = nil
		for _, n := range nl.Items {
			if _, ok := n.Metadata.Labels["node-role.kubernetes.io/control-plane"]; !ok {
				continue
			}
			cp := realCP{name: n.Metadata.Name, created: n.Metadata.CreationTimestamp, ready: ready[n.Metadata.Name]}
			for _, a := range n.Status.Addresses {
				if a.Type == "InternalIP" {
					cp.ip = a.Address
				}
			}
			if cp.ready.IsZero() || cp.ip == "" {
				return fmt.Errorf("control plane %s: Ready %v, address %q", cp.name, !cp.ready.IsZero(), cp.ip)
			}
			cps = append(cps, cp)
		}
		if len(cps) != want {
			return fmt.Errorf("%d control-plane Nodes", len(cps))
		}
		return nil
	})
	sort.Slice(cps, func(i, j int) bool { return cps[i].created.Before(cps[j].created) })
	return cps
}

// checkEtcd: asked at every control plane, etcd has exactly one started
// voting member per control plane (named after its Node, peer URL on its
// address), every one healthy; and each control plane's own API server
// answers /readyz/etcd.
func (r *realWorld) checkEtcd(cps []realCP) {
	r.t.Helper()
	var members []conformance.EtcdMember
	for _, cp := range cps {
		// etcdctl as cp's API server talks to etcd: with the etcd CA capn
		// handed it and the etcd client certificate kubeadm made, read
		// from the node's /etc.
		etcdctl := r.k.Etcdctl(func(path string) ([]byte, bool) { return readNodeFile(r.opts.StateDir, r.name, cp.name, path) })
		conformance.Poll(r.t, fmt.Sprintf("etcd at %s: %d healthy voting members", cp.name, len(cps)), 3*time.Minute, func() error {
			var err error
			if members, err = etcdctl.Members([]string{"https://" + cp.ip + ":2379"}); err != nil {
				return err
			}
			var got, endpoints []string
			for _, m := range members {
				if m.IsLearner || m.Name == "" || len(m.ClientURLs) == 0 {
					return fmt.Errorf("member %x %q: learner %v, started %v", m.ID, m.Name, m.IsLearner, m.Name != "" && len(m.ClientURLs) > 0)
				}
				got = append(got, m.Name+"@"+strings.Join(m.PeerURLs, ","))
				endpoints = append(endpoints, m.ClientURLs...)
			}
			var want []string
			for _, c := range cps {
				want = append(want, c.name+"@https://"+c.ip+":2380")
			}
			slices.Sort(got)
			slices.Sort(want)
			if !slices.Equal(got, want) {
				return fmt.Errorf("members %v, want %v", got, want)
			}
			_, err = etcdctl.Health(endpoints)
			return err
		})
		out, err := r.k.Kubectl("--server=https://"+cp.ip+":6443", "get", "--raw", "/readyz/etcd")
		if err != nil || strings.TrimSpace(out) != "ok" {
			r.t.Errorf("%s's API server /readyz/etcd: %q %v", cp.name, out, err)
		}
	}
	var names []string
	for _, m := range members {
		names = append(names, fmt.Sprintf("%x %s (learner %v) %v", m.ID, m.Name, m.IsLearner, m.PeerURLs))
	}
	r.t.Logf("etcd, asked at each of the %d control planes: %d voting members, all healthy; each API server's /readyz/etcd ok: %s", len(cps), len(members), strings.Join(names, "; "))
}
