package bench

import (
	"context"
	"fmt"
	"time"

	"github.com/capn-dev/capn/events"
	"github.com/capn-dev/capn/events/store"
	"github.com/capn-dev/capn/providers/sim"
	capnv1 "github.com/capn-dev/capn/schemas/capn/v1alpha1"
	"github.com/capn-dev/capn/schemas/keys"
	"github.com/capn-dev/capn/secrets/seal"
)

// upgradeRun is one rolling upgrade of a worker pool.
type upgradeRun struct {
	Pool      int           // machines in the pool
	Surge     int           // maxSurge as a count
	Boot      time.Duration // the sim provider's boot latency
	ControlCP time.Duration // from the version change until the control plane was upgraded
	Elapsed   time.Duration // from the version change until the whole cluster was upgraded and Ready
}

// Ideal is the pool's lower bound: pool/surge waves of one boot each.
func (r upgradeRun) Ideal() time.Duration {
	waves := (r.Pool + r.Surge - 1) / r.Surge
	return time.Duration(waves) * r.Boot
}

// measureUpgrade creates one cluster (1 control-plane machine and a pool
// of `pool` workers with maxSurge 10% and maxUnavailable 0) on the sim
// provider booting in `boot`, waits until it is Ready, changes its
// Kubernetes version as `capn apply` would (a new generation) and times
// the rollout until every machine runs the new version and the cluster is
// Ready again. The control plane upgrades first, as in Cluster API.
func measureUpgrade(ctx context.Context, pool int, boot, timeout time.Duration) (upgradeRun, error) {
	key, _ := seal.GenerateKey()
	ring, _ := seal.NewKeyring(key)
	e, err := startEnv(ctx, events.DefaultTopology(1), services(ring, sim.Options{BootLatency: boot})...)
	if err != nil {
		return upgradeRun{}, err
	}
	defer e.Close()
	c, err := benchCluster("upgrade", fmt.Sprintf(`  - name: md-0
    provider: sim
    replicas: %d
    strategy: {type: RollingUpdate, maxSurge: "10%%", maxUnavailable: "0"}
`, pool))
	if err != nil {
		return upgradeRun{}, err
	}
	clusters := store.NewBucket(e.kv(ctx, events.BucketDesired), store.New[capnv1.Cluster]())
	statuses := store.NewBucket(e.kv(ctx, events.BucketObserved), store.New[capnv1.ClusterStatus]())
	if _, err := clusters.Create(ctx, keys.Cluster("upgrade"), c); err != nil {
		return upgradeRun{}, err
	}
	upgraded := func(st *capnv1.ClusterStatus, gen int64, version string) (cp, all bool) {
		cps := st.GetControlPlane()
		cp = st.GetObservedGeneration() >= gen && cps.GetUpdated() == cps.GetDesired() && cps.GetReplicas() == cps.GetDesired() && cps.GetVersion() == version
		all = cp && st.GetPhaseValue() == capnv1.ClusterReady
		for _, p := range st.GetWorkerPools() {
			all = all && p.GetUpdated() == int32(pool) && p.GetReplicas() == int32(pool) && p.GetAvailable() == int32(pool) && p.GetVersion() == version
		}
		return cp, all
	}
	wait := func(what string, gen int64, version string, onCP func()) error {
		deadline := time.Now().Add(timeout)
		cpDone := false
		return poll(ctx, 50*time.Millisecond, func() (bool, error) {
			st, _, err := statuses.Get(ctx, keys.Cluster("upgrade"))
			if err == nil {
				cp, all := upgraded(st, gen, version)
				if cp && !cpDone && onCP != nil {
					cpDone = true
					onCP()
				}
				if all {
					return true, nil
				}
			}
			if time.Now().After(deadline) {
				return false, fmt.Errorf("upgrade benchmark: %s not done within %s (phase %q, control plane %v, pools %v)", what, timeout, st.GetPhase(), st.GetControlPlane(), st.GetWorkerPools())
			}
			return false, nil
		})
	}
	if err := wait("the create", 1, "v1.34.2", nil); err != nil {
		return upgradeRun{}, err
	}
	r := upgradeRun{Pool: pool, Surge: (pool + 9) / 10, Boot: boot}
	start := time.Now()
	if _, _, err := clusters.Mutate(ctx, keys.Cluster("upgrade"), func(cur *capnv1.Cluster, exists bool) (*capnv1.Cluster, error) {
		// A manifest that names only the cluster's version: pools default
		// to it.
		cur.Spec.KubernetesVersion = "v1.34.3"
		for _, p := range cur.Spec.WorkerPools {
			p.Version = "v1.34.3"
		}
		cur.Metadata.Generation++
		return cur, nil
	}); err != nil {
		return upgradeRun{}, err
	}
	if err := wait("the upgrade", 2, "v1.34.3", func() { r.ControlCP = time.Since(start) }); err != nil {
		return upgradeRun{}, err
	}
	r.Elapsed = time.Since(start)
	return r, nil
}
