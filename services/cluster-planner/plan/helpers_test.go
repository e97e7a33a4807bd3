package plan_test

import (
	"testing"

	capnv1 "github.com/capn-dev/capn/schemas/capn/v1alpha1"
	"github.com/capn-dev/capn/schemas/manifest"
	"github.com/capn-dev/capn/services/cluster-planner/plan"
	"github.com/capn-dev/capn/services/cluster-planner/plan/plantest"
)

// cluster returns a valid cluster: cp control-plane replicas and one pool
// per entry of pools (name md-<i>, that many replicas).
func cluster(cp int32, pools ...int32) *capnv1.Cluster {
	c := &capnv1.Cluster{
		ApiVersion: manifest.APIVersion,
		Kind:       manifest.KindCluster,
		Metadata:   &capnv1.ObjectMeta{Name: "demo", Generation: 1},
		Spec: &capnv1.ClusterSpec{
			KubernetesVersion: "v1.33.4",
			ControlPlane:      &capnv1.ControlPlaneSpec{Provider: "sim", Replicas: cp},
		},
	}
	for i, r := range pools {
		c.Spec.WorkerPools = append(c.Spec.WorkerPools, &capnv1.WorkerPool{
			Name: "md-" + string(rune('0'+i)), Provider: "sim", Replicas: r,
		})
	}
	manifest.Default(c)
	return c
}

// converge runs h until Ready, failing the test if it does not get there or
// if check fails on a step.
func converge(t *testing.T, h *plantest.Harness, check func(plantest.Record) error) int {
	t.Helper()
	n, err := h.Run(300, check)
	if err != nil {
		t.Fatal(err)
	}
	return n
}

// started returns a harness whose cluster already converged.
func started(t *testing.T, c *capnv1.Cluster) *plantest.Harness {
	t.Helper()
	h := plantest.New(c)
	converge(t, h, nil)
	return h
}

// of returns the actions of type T in r.
func of[T plan.Action](r plan.Result) []T {
	var out []T
	for _, a := range r.Actions {
		if v, ok := a.(T); ok {
			out = append(out, v)
		}
	}
	return out
}

// poolOf is the pool of a machine the harness holds.
func poolOf(h *plantest.Harness, name string) string {
	return h.Machines[name].GetSpec().GetPool()
}

// condition returns the status's condition of a type.
func condition(st *capnv1.ClusterStatus, typ string) *capnv1.Condition {
	for _, c := range st.GetConditions() {
		if c.GetType() == typ {
			return c
		}
	}
	return nil
}
