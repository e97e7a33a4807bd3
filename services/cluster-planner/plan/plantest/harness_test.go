package plantest

import (
	"errors"
	"testing"
	"time"

	"google.golang.org/protobuf/proto"

	capnv1 "github.com/capn-dev/capn/schemas/capn/v1alpha1"
	"github.com/capn-dev/capn/schemas/manifest"
	"github.com/capn-dev/capn/services/cluster-planner/plan"
)

func testCluster() *capnv1.Cluster {
	return &capnv1.Cluster{
		ApiVersion: manifest.APIVersion,
		Kind:       manifest.KindCluster,
		Metadata:   &capnv1.ObjectMeta{Name: "h"},
		Spec: &capnv1.ClusterSpec{
			KubernetesVersion: "v1.34.0",
			ControlPlane:      &capnv1.ControlPlaneSpec{Provider: "sim", Replicas: 1},
			WorkerPools:       []*capnv1.WorkerPool{{Name: "w", Provider: "sim", Replicas: 2}},
		},
	}
}

func TestHarnessConvergesAndRecords(t *testing.T) {
	h := New(testCluster())
	n, err := h.Run(50, nil)
	if err != nil {
		t.Fatal(err)
	}
	if n != len(h.History) || n != h.Steps {
		t.Errorf("%d steps, %d records, Steps %d", n, len(h.History), h.Steps)
	}
	last := h.History[len(h.History)-1]
	if c := last.After["w"]; c.Total != 2 || c.Available != 2 || c.Outdated != 0 {
		t.Errorf("counts %+v", c)
	}
	if h.Status.GetPhaseValue() != capnv1.ClusterReady || !h.Infra.Exists {
		t.Errorf("phase %s, infra %v", h.Status.GetPhase(), h.Infra)
	}
}

func TestHarnessCASCreate(t *testing.T) {
	h := New(testCluster())
	r := h.Plan()
	if err := h.Apply(r); err != nil {
		t.Fatal(err)
	}
	// A second planner that planned from the same state loses the race.
	if err := h.Apply(r); !errors.Is(err, ErrConflict) {
		t.Errorf("second create: %v, want ErrConflict", err)
	}
}

func TestHarnessRefusesOutOfOrderTeardown(t *testing.T) {
	h := New(testCluster())
	if _, err := h.Run(50, nil); err != nil {
		t.Fatal(err)
	}
	if err := h.Apply(plan.Result{Actions: []plan.Action{plan.DeleteClusterInfra{}}}); err == nil {
		t.Error("deleted infrastructure under machines")
	}
	if err := h.Apply(plan.Result{Actions: []plan.Action{plan.RemoveMachine{Name: h.Names("w")[0]}}}); err == nil {
		t.Error("removed a running machine's record")
	}
}

func TestHarnessReportsNoConvergence(t *testing.T) {
	h := New(testCluster())
	h.BootSteps = func(string) int { return 1000 }
	if _, err := h.Run(5, nil); err == nil {
		t.Error("Run converged with machines that never boot")
	}
}

func TestHarnessConforms(t *testing.T) {
	TestApplier(t, func(_ *testing.T, c *capnv1.Cluster) ApplierWorld {
		h := New(c)
		return ApplierWorld{
			Next: func(now time.Time) plan.Applier { h.Now = now; return h },
			Machine: func(name string) *capnv1.Machine {
				if m, ok := h.Machines[name]; ok {
					return proto.Clone(m).(*capnv1.Machine)
				}
				return nil
			},
			Annotate: h.Annotate,
			Record: func() (*capnv1.ControlPlaneRecord, uint64) {
				return proto.CloneOf(h.ControlPlane), uint64(h.RecordWrites)
			},
			PutRecord: func(rec *capnv1.ControlPlaneRecord) {
				h.ControlPlane = proto.CloneOf(rec)
				h.RecordWrites++
			},
			Commands: func() []Command { return h.Commands },
		}
	})
}
