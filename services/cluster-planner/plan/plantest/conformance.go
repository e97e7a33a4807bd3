package plantest

import (
	"context"
	"fmt"
	"maps"
	"testing"
	"time"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/capn-dev/capn/schemas/annotations"
	capnv1 "github.com/capn-dev/capn/schemas/capn/v1alpha1"
	"github.com/capn-dev/capn/services/cluster-planner/plan"
)

// ApplierWorld is one plan.Applier implementation under TestApplier, over
// one cluster.
type ApplierWorld struct {
	// Next returns the applier of the next plan, at now. It reads the world
	// as a plan does (the KV applier: the revisions RemoveMachine deletes
	// at).
	Next func(now time.Time) plan.Applier
	// Machine reads back the cluster's desired machine name; nil: there is
	// no record.
	Machine func(name string) *capnv1.Machine
	// Annotate sets an annotation on the record of machine name, as a
	// second writer does (an external holder of a lifecycle hook).
	Annotate func(name, key, value string)
	// Record reads back the cluster's control-plane record (nil: none)
	// and a revision that every write of it changes (the KV revision);
	// PutRecord writes one as its implementation would.
	Record    func() (*capnv1.ControlPlaneRecord, uint64)
	PutRecord func(rec *capnv1.ControlPlaneRecord)
	// Commands are the control-plane commands the world holds for the
	// cluster, in the order sent (one per id).
	Commands func() []Command
}

// TestApplier is the conformance test of plan.Applier (watermill's
// pubsub/tests, for capn): what each machine action does to a record —
// uid, creation time and generation stamped on create; spec, labels and
// annotations copied and the generation bumped on update, the rest kept;
// the deletion time set once — and that an action applied again does
// nothing. newWorld starts the implementation over cluster c, which has
// no machine yet; every subtest has a cluster of its own.
func TestApplier(t *testing.T, newWorld func(t *testing.T, c *capnv1.Cluster) ApplierWorld) {
	ctx := context.Background()
	t0 := time.Date(2025, 3, 1, 10, 0, 0, 0, time.UTC)
	t1, t2 := t0.Add(time.Minute), t0.Add(2*time.Minute)
	tests := []struct {
		name string
		run  func(t *testing.T, w ApplierWorld, c string)
	}{
		{"create stamps uid, creation time and generation", func(t *testing.T, w ApplierWorld, c string) {
			ap := w.Next(t0)
			must(t, ap.CreateMachine(ctx, plan.CreateMachine{Machine: machine(c, "m0")}))
			stamped := machine(c, "m1") // as the planner makes them
			stamped.Metadata.CreationTimestamp, stamped.Metadata.Generation = timestamppb.New(t0.Add(-time.Hour)), 1
			must(t, ap.CreateMachine(ctx, plan.CreateMachine{Machine: stamped}))
			m0, m1 := read(t, w, "m0"), read(t, w, "m1")
			if !proto.Equal(m0.GetSpec(), machine(c, "m0").GetSpec()) || !maps.Equal(m0.GetMetadata().GetLabels(), machine(c, "m0").GetMetadata().GetLabels()) {
				t.Errorf("record %v, want the action's spec and labels", m0)
			}
			if m0.GetMetadata().GetUid() == "" || m0.GetMetadata().GetUid() == m1.GetMetadata().GetUid() {
				t.Errorf("uids %q and %q, want two, different", m0.GetMetadata().GetUid(), m1.GetMetadata().GetUid())
			}
			if got := m0.GetMetadata().GetCreationTimestamp().AsTime(); !got.Equal(t0) {
				t.Errorf("creation time %v, want the applier's now %v", got, t0)
			}
			if got := m1.GetMetadata().GetCreationTimestamp().AsTime(); !got.Equal(t0.Add(-time.Hour)) {
				t.Errorf("creation time %v, want the plan's %v", got, t0.Add(-time.Hour))
			}
			if g0, g1 := m0.GetMetadata().GetGeneration(), m1.GetMetadata().GetGeneration(); g0 != 1 || g1 != 1 {
				t.Errorf("generations %d and %d, want 1", g0, g1)
			}
		}},
		{"create of a taken name changes nothing", func(t *testing.T, w ApplierWorld, c string) {
			must(t, w.Next(t0).CreateMachine(ctx, plan.CreateMachine{Machine: machine(c, "m0")}))
			first := read(t, w, "m0")
			other := machine(c, "m0")
			other.Spec.Version = "v1.35.0"
			must(t, w.Next(t1).CreateMachine(ctx, plan.CreateMachine{Machine: other}))
			if got := read(t, w, "m0"); !proto.Equal(got, first) {
				t.Errorf("second create made %v of %v", got, first)
			}
		}},
		{"update copies spec, labels, annotations; bumps generation once", func(t *testing.T, w ApplierWorld, c string) {
			must(t, w.Next(t0).CreateMachine(ctx, plan.CreateMachine{Machine: machine(c, "m0")}))
			created := read(t, w, "m0")
			want := machine(c, "m0") // no uid, creation time or generation: the applier keeps the record's
			want.Metadata.Generation = 42
			want.Spec.Stopped = true
			want.Spec.Labels = map[string]string{"tier": "db"}
			want.Metadata.Labels["extra"] = "1"
			want.Metadata.Annotations = map[string]string{annotations.ExcludeNodeDraining: "cluster is being deleted"}
			for range 2 {
				must(t, w.Next(t1).UpdateMachine(ctx, plan.UpdateMachine{Machine: want}))
			}
			got := read(t, w, "m0")
			if !proto.Equal(got.GetSpec(), want.GetSpec()) || !maps.Equal(got.GetMetadata().GetLabels(), want.GetMetadata().GetLabels()) ||
				!maps.Equal(got.GetMetadata().GetAnnotations(), want.GetMetadata().GetAnnotations()) {
				t.Errorf("record %v, want the action's spec, labels and annotations", got)
			}
			if g := got.GetMetadata().GetGeneration(); g != 2 {
				t.Errorf("generation %d after the same update twice, want 2", g)
			}
			if got.GetMetadata().GetUid() != created.GetMetadata().GetUid() || !got.GetMetadata().GetCreationTimestamp().AsTime().Equal(t0) {
				t.Errorf("uid %q created %v, want the record's %q and %v", got.GetMetadata().GetUid(), got.GetMetadata().GetCreationTimestamp().AsTime(), created.GetMetadata().GetUid(), t0)
			}
		}},
		{"update keeps the lifecycle hooks and the delete-machine mark their holders set", func(t *testing.T, w ApplierWorld, c string) {
			must(t, w.Next(t0).CreateMachine(ctx, plan.CreateMachine{Machine: machine(c, "m0")}))
			pre, term := annotations.PreDrainHookPrefix+"backup", annotations.PreTerminateHookPrefix+"storage"
			w.Annotate("m0", pre, "velero")
			w.Annotate("m0", term, "csi")
			// The autoscaler-provider marks a machine between a plan's
			// read and its write: the plan's view lacks the mark.
			w.Annotate("m0", annotations.DeleteMachine, "cluster-autoscaler")
			want := machine(c, "m0") // the plan's view: no hooks, one planner annotation
			want.Spec.Stopped = true
			want.Metadata.Annotations = map[string]string{annotations.ExcludeNodeDraining: "yes", annotations.PreDrainHookPrefix + "forged": "plan"}
			must(t, w.Next(t1).UpdateMachine(ctx, plan.UpdateMachine{Machine: want}))
			got := read(t, w, "m0").GetMetadata().GetAnnotations()
			wantAnn := map[string]string{annotations.ExcludeNodeDraining: "yes", pre: "velero", term: "csi", annotations.DeleteMachine: "cluster-autoscaler"}
			if !maps.Equal(got, wantAnn) {
				t.Errorf("annotations %v, want %v: the holders' hooks kept, the plan's own hooks ignored", got, wantAnn)
			}
			// Nothing else to change: the same update again writes nothing.
			g := read(t, w, "m0").GetMetadata().GetGeneration()
			must(t, w.Next(t2).UpdateMachine(ctx, plan.UpdateMachine{Machine: want}))
			if g2 := read(t, w, "m0").GetMetadata().GetGeneration(); g2 != g {
				t.Errorf("generation %d → %d: an update with nothing new wrote", g, g2)
			}
		}},
		{"update keeps the deletion time", func(t *testing.T, w ApplierWorld, c string) {
			must(t, w.Next(t0).CreateMachine(ctx, plan.CreateMachine{Machine: machine(c, "m0")}))
			must(t, w.Next(t1).DeleteMachine(ctx, plan.DeleteMachine{Name: "m0"}))
			want := machine(c, "m0")
			want.Spec.Stopped = true
			must(t, w.Next(t2).UpdateMachine(ctx, plan.UpdateMachine{Machine: want}))
			got := read(t, w, "m0")
			if !got.GetSpec().GetStopped() || got.GetMetadata().GetDeletionTimestamp() == nil || !got.GetMetadata().GetDeletionTimestamp().AsTime().Equal(t1) {
				t.Errorf("record %v, want stopped and deleting since %v", got, t1)
			}
		}},
		{"delete sets the deletion time once", func(t *testing.T, w ApplierWorld, c string) {
			must(t, w.Next(t0).CreateMachine(ctx, plan.CreateMachine{Machine: machine(c, "m0")}))
			must(t, w.Next(t1).DeleteMachine(ctx, plan.DeleteMachine{Name: "m0"}))
			must(t, w.Next(t2).DeleteMachine(ctx, plan.DeleteMachine{Name: "m0"}))
			got := read(t, w, "m0")
			if ts := got.GetMetadata().GetDeletionTimestamp(); ts == nil || !ts.AsTime().Equal(t1) {
				t.Errorf("deletion time %v, want %v", ts, t1)
			}
			if g := got.GetMetadata().GetGeneration(); g != 1 {
				t.Errorf("generation %d after a delete, want 1: the spec did not change", g)
			}
		}},
		{"remove drops the record, again is no error", func(t *testing.T, w ApplierWorld, c string) {
			must(t, w.Next(t0).CreateMachine(ctx, plan.CreateMachine{Machine: machine(c, "m0")}))
			must(t, w.Next(t1).DeleteMachine(ctx, plan.DeleteMachine{Name: "m0"}))
			ap := w.Next(t2)
			must(t, ap.RemoveMachine(ctx, plan.RemoveMachine{Name: "m0"}))
			if got := w.Machine("m0"); got != nil {
				t.Fatalf("removed record still there: %v", got)
			}
			must(t, ap.RemoveMachine(ctx, plan.RemoveMachine{Name: "m0"}))
			must(t, w.Next(t2).RemoveMachine(ctx, plan.RemoveMachine{Name: "m0"}))
		}},
		{"control-plane commands: subject, id and body, once per id", func(t *testing.T, w ApplierWorld, c string) {
			cmd := func(gen int64) *capnv1.ControlPlaneCommand {
				return &capnv1.ControlPlaneCommand{Cluster: c, Generation: gen, KubernetesVersion: "v1.34.0",
					Spec: &capnv1.ControlPlaneSpec{Type: capnv1.ControlPlaneHosted, Replicas: 1}}
			}
			ap := w.Next(t0)
			for range 2 {
				must(t, ap.EnsureControlPlane(ctx, plan.EnsureControlPlane{Implementation: capnv1.ControlPlaneHosted, Command: cmd(7)}))
			}
			must(t, w.Next(t1).EnsureControlPlane(ctx, plan.EnsureControlPlane{Implementation: capnv1.ControlPlaneHosted, Command: cmd(8)}))
			for range 2 {
				must(t, w.Next(t2).DeleteControlPlane(ctx, plan.DeleteControlPlane{Implementation: capnv1.ControlPlaneHosted, Command: cmd(9)}))
			}
			got := w.Commands()
			want := []Command{
				{Subject: "capn.controlplane.hosted.ensure." + c, ID: "controlplane-" + c + "-7-ensure", Command: cmd(7)},
				{Subject: "capn.controlplane.hosted.ensure." + c, ID: "controlplane-" + c + "-8-ensure", Command: cmd(8)},
				{Subject: "capn.controlplane.hosted.delete." + c, ID: "controlplane-" + c + "-9-delete", Command: cmd(9)},
			}
			if len(got) != len(want) {
				t.Fatalf("commands %v, want %v", got, want)
			}
			for i := range want {
				if got[i].Subject != want[i].Subject || got[i].ID != want[i].ID || !proto.Equal(got[i].Command, want[i].Command) {
					t.Errorf("command %d: %v, want %v", i, got[i], want[i])
				}
			}
		}},
		{"control-plane record: written on a change, not when it says the same, never over another implementation's", func(t *testing.T, w ApplierWorld, c string) {
			rec := func(ready int32, msg string) *capnv1.ControlPlaneRecord {
				return &capnv1.ControlPlaneRecord{Cluster: c, Implementation: capnv1.ControlPlaneMachines, Initialized: true, Version: "v1.34.0",
					Replicas: 3, ReadyReplicas: ready, Endpoint: &capnv1.Endpoint{Host: c + ".sim", Port: 6443},
					Conditions: []*capnv1.Condition{{Type: plan.ConditionReady, Status: capnv1.ConditionFalse.Wire(), Reason: plan.ReasonMachinesNotAvailable, Message: msg}}}
			}
			must(t, w.Next(t0).WriteControlPlaneRecord(ctx, rec(2, "2 of 3")))
			got, first := w.Record()
			if !proto.Equal(got, rec(2, "2 of 3")) || first == 0 {
				t.Fatalf("record %v at revision %d, want %v", got, first, rec(2, "2 of 3"))
			}
			// Only a message differs: nothing a reader acts on.
			must(t, w.Next(t1).WriteControlPlaneRecord(ctx, rec(2, "2 of 3, 1 booting")))
			if got, n := w.Record(); n != first || got.GetConditions()[0].GetMessage() != "2 of 3" {
				t.Errorf("record %v at revision %d (was %d): rewritten for its message", got, n, first)
			}
			must(t, w.Next(t2).WriteControlPlaneRecord(ctx, rec(3, "3 of 3")))
			if got, n := w.Record(); n == first || got.GetReadyReplicas() != 3 {
				t.Errorf("record %v at revision %d (was %d), want ready replicas 3 written", got, n, first)
			}
			must(t, w.Next(t2).DeleteCluster(ctx, plan.DeleteCluster{}))
			if got, _ := w.Record(); got != nil {
				t.Errorf("record %v left after the cluster's deletion", got)
			}
			hosted := &capnv1.ControlPlaneRecord{Cluster: c, Implementation: capnv1.ControlPlaneHosted, Initialized: true}
			w.PutRecord(hosted)
			_, before := w.Record()
			must(t, w.Next(t2).WriteControlPlaneRecord(ctx, rec(3, "3 of 3")))
			must(t, w.Next(t2).DeleteCluster(ctx, plan.DeleteCluster{}))
			if got, n := w.Record(); !proto.Equal(got, hosted) || n != before {
				t.Errorf("record %v (revision %d, %d before), want the hosted implementation's untouched", got, n, before)
			}
		}},
		{"no record: update and delete write none", func(t *testing.T, w ApplierWorld, c string) {
			ap := w.Next(t0)
			must(t, ap.UpdateMachine(ctx, plan.UpdateMachine{Machine: machine(c, "ghost")}))
			must(t, ap.DeleteMachine(ctx, plan.DeleteMachine{Name: "ghost"}))
			if got := w.Machine("ghost"); got != nil {
				t.Errorf("update or delete made a record: %v", got)
			}
		}},
	}
	for i, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := fmt.Sprintf("conform%d", i)
			tt.run(t, newWorld(t, conformanceCluster(c)), c)
		})
	}
}

func conformanceCluster(name string) *capnv1.Cluster {
	return &capnv1.Cluster{
		Metadata: &capnv1.ObjectMeta{Name: name, Uid: name + "-uid", Generation: 1},
		Spec: &capnv1.ClusterSpec{
			KubernetesVersion: "v1.34.0",
			ControlPlane:      &capnv1.ControlPlaneSpec{Provider: "sim", Replicas: 1},
			WorkerPools:       []*capnv1.WorkerPool{{Name: "w", Provider: "sim", Replicas: 1}},
		},
	}
}

// machine is a worker of pool w with nothing stamped.
func machine(cluster, name string) *capnv1.Machine {
	return &capnv1.Machine{
		Metadata: &capnv1.ObjectMeta{Name: name, Labels: map[string]string{plan.LabelCluster: cluster, plan.LabelPool: "w"}},
		Spec:     &capnv1.MachineSpec{Cluster: cluster, Pool: "w", Role: plan.RoleWorker, Provider: "sim", Version: "v1.34.0"},
	}
}

func read(t *testing.T, w ApplierWorld, name string) *capnv1.Machine {
	t.Helper()
	m := w.Machine(name)
	if m == nil {
		t.Fatalf("no record of %s", name)
	}
	return m
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}
