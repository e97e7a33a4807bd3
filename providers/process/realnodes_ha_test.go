//go:build linux

package process_test

import (
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/capn-dev/capn/providers/conformance"
	"github.com/capn-dev/capn/providers/process"
	"github.com/capn-dev/capn/providers/process/realnode"
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
// control plane's own API server answers /readyz/etcd. Deleting a
// control plane is not tested here (docs/providers.md, real nodes).
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

	r.deleteAndCheck()
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
