package plan_test

import (
	"strings"
	"testing"

	"google.golang.org/protobuf/proto"
	"pgregory.net/rapid"

	"github.com/capn-dev/capn/schemas/annotations"
	capnv1 "github.com/capn-dev/capn/schemas/capn/v1alpha1"
	"github.com/capn-dev/capn/schemas/manifest"
	"github.com/capn-dev/capn/services/cluster-planner/plan"
	"github.com/capn-dev/capn/services/cluster-planner/plan/plantest"
)

// Tests of a control plane made by an implementation (type hosted or
// external) through the contract: the planner makes no control-plane
// machine and reads everything of the control plane from its record.

// implCluster is cluster(1, pools...) with a control plane of type typ
// (no machine fields).
func implCluster(typ string, pools ...int32) *capnv1.Cluster {
	c := cluster(1, pools...)
	c.Spec.ControlPlane = &capnv1.ControlPlaneSpec{Type: typ, Replicas: 1}
	if typ == capnv1.ControlPlaneExternal {
		c.Spec.ControlPlane.External = &capnv1.ExternalControlPlaneSpec{Kubeconfig: "prod"}
	}
	manifest.Default(c)
	return c
}

// record is an implementation's record of demo answering generation gen.
func record(typ string, gen int64, initialized bool, version string, ready bool) *capnv1.ControlPlaneRecord {
	st, reason, msg := capnv1.ConditionFalse, "Starting", "kube-apiserver starting"
	if ready {
		st, reason, msg = capnv1.ConditionTrue, "APIServersReady", "1 of 1 API servers answer"
	}
	return &capnv1.ControlPlaneRecord{Cluster: "demo", Implementation: typ, ObservedGeneration: gen, Initialized: initialized,
		Endpoint: &capnv1.Endpoint{Host: "10.0.0.7", Port: 16443}, Version: version, Replicas: 1, ReadyReplicas: map[bool]int32{true: 1}[ready],
		Conditions: []*capnv1.Condition{{Type: plan.ConditionReady, Status: st.Wire(), Reason: reason, Message: msg}}}
}

func TestImplementationPlan(t *testing.T) {
	for _, typ := range []string{capnv1.ControlPlaneHosted, capnv1.ControlPlaneExternal} {
		t.Run(typ, func(t *testing.T) {
			h := plantest.New(implCluster(typ, 2))
			h.ClusterRevision = 7

			// No record: ensure, nothing else; the workers wait.
			r := h.Plan()
			ens := of[plan.EnsureControlPlane](r)
			if len(r.Actions) != 1 || len(ens) != 1 {
				t.Fatalf("actions %v, want one ensure", r.Actions)
			}
			if e := ens[0]; e.Subject() != "capn.controlplane."+typ+".ensure.demo" || e.ID() != "controlplane-demo-7-ensure" ||
				e.Command.GetGeneration() != 7 || e.Command.GetKubernetesVersion() != "v1.33.4" || e.Command.GetSpec().GetType() != typ ||
				e.Command.GetNetwork().GetServiceDomain() != "cluster.local" {
				t.Errorf("ensure %s %s %v", e.Subject(), e.ID(), e.Command)
			}
			st := r.Status
			if c := condition(st, plan.ConditionControlPlaneInitialized); c.GetStatus() != "False" || c.GetReason() != plan.ReasonWaitingForImplementation ||
				!strings.Contains(c.GetMessage(), "waiting for the "+typ+" control plane to initialize") {
				t.Errorf("ControlPlaneInitialized %v", c)
			}
			if c := condition(st, plan.ConditionControlPlaneReady); c.GetStatus() != "False" || c.GetReason() != plan.ReasonNoControlPlaneRecord {
				t.Errorf("ControlPlaneReady %v", c)
			}
			if c := condition(st, plan.ConditionWorkersReady); c.GetReason() != plan.ReasonWaitingForControlPlane {
				t.Errorf("WorkersReady %v", c)
			}
			if st.GetPhaseValue() != capnv1.ClusterProvisioning || r.ControlPlaneRecord != nil {
				t.Errorf("phase %s, record %v", st.GetPhase(), r.ControlPlaneRecord)
			}

			// A record of this revision, not initialized: no ensure, still no worker.
			h.ControlPlane = record(typ, 7, false, "", false)
			if r := h.Plan(); len(r.Actions) != 0 {
				t.Fatalf("actions %v, want none while the control plane initializes", r.Actions)
			}

			// Initialized at v1.33.4, ready: the workers are made; the
			// status is the record's.
			h.ControlPlane = record(typ, 7, true, "v1.33.4", true)
			r = h.Plan()
			if creates := of[plan.CreateMachine](r); len(creates) != 2 || len(r.Actions) != 2 {
				t.Fatalf("actions %v, want the 2 workers", r.Actions)
			}
			for _, c := range of[plan.CreateMachine](r) {
				if c.Machine.GetSpec().GetRole() != plan.RoleWorker {
					t.Errorf("created %v", c.Machine)
				}
			}
			st = r.Status
			if !proto.Equal(st.GetControlPlaneEndpoint(), &capnv1.Endpoint{Host: "10.0.0.7", Port: 16443}) || !st.GetControlPlaneInitialized() {
				t.Errorf("endpoint %v initialized %v", st.GetControlPlaneEndpoint(), st.GetControlPlaneInitialized())
			}
			if c := condition(st, plan.ConditionControlPlaneReady); c.GetStatus() != "True" || c.GetReason() != "APIServersReady" || c.GetMessage() != "1 of 1 API servers answer" {
				t.Errorf("ControlPlaneReady %v, want the record's", c)
			}
			if cp := st.GetControlPlane(); cp.GetVersion() != "v1.33.4" || cp.GetReady() != 1 || cp.GetDesired() != 1 {
				t.Errorf("control-plane status %v", cp)
			}
			if err := h.Apply(r); err != nil {
				t.Fatal(err)
			}
			for range 5 {
				if _, err := h.Step(); err != nil {
					t.Fatal(err)
				}
			}
			if h.Status.GetPhaseValue() != capnv1.ClusterReady {
				t.Fatalf("phase %s: %v", h.Status.GetPhase(), h.Status.GetConditions())
			}

			// The record's Ready goes False: ControlPlaneReady says why.
			h.ControlPlane = record(typ, 7, true, "v1.33.4", false)
			if c := condition(h.Plan().Status, plan.ConditionControlPlaneReady); c.GetStatus() != "False" || c.GetReason() != "Starting" || c.GetMessage() != "kube-apiserver starting" {
				t.Errorf("ControlPlaneReady %v, want the record's reason and message", c)
			}
		})
	}
}

// TestImplementationVersionCeiling: a worker never runs a newer Kubernetes
// than the implementation's API servers (record.version), as a machine
// worker never outruns its control plane's oldest machine.
func TestImplementationVersionCeiling(t *testing.T) {
	h := plantest.New(implCluster(capnv1.ControlPlaneHosted, 2))
	h.ClusterRevision = 3
	h.ControlPlane = record(capnv1.ControlPlaneHosted, 3, true, "v1.33.4", true)
	converge(t, h, nil)

	// Upgrade: the desired revision moves on, the record lags.
	h.Update(func(s *capnv1.ClusterSpec) {
		s.KubernetesVersion = "v1.34.1"
		s.WorkerPools[0].Version = "v1.34.1"
	})
	h.ClusterRevision = 4
	r := h.Plan()
	if len(of[plan.EnsureControlPlane](r)) != 1 || of[plan.EnsureControlPlane](r)[0].ID() != "controlplane-demo-4-ensure" {
		t.Fatalf("actions %v, want the ensure of revision 4", r.Actions)
	}
	if n := len(of[plan.CreateMachine](r)) + len(of[plan.DeleteMachine](r)); n != 0 {
		t.Fatalf("actions %v: the workers moved before the control plane", r.Actions)
	}
	if c := condition(r.Status, plan.ConditionControlPlaneReady); c.GetStatus() != "False" || c.GetReason() != plan.ReasonControlPlaneUpdating {
		t.Errorf("ControlPlaneReady %v", c)
	}
	if c := condition(r.Status, plan.ConditionWorkersReady); !strings.Contains(c.GetMessage(), "waiting for the hosted control plane to run v1.34.1 (it runs v1.33.4)") {
		t.Errorf("WorkersReady %v", c)
	}
	// Answered, but an API server still runs the old version: still held.
	h.ControlPlane = record(capnv1.ControlPlaneHosted, 4, true, "v1.33.4", true)
	if r := h.Plan(); len(r.Actions) != 0 {
		t.Fatalf("actions %v, want none", r.Actions)
	}
	h.ControlPlane = record(capnv1.ControlPlaneHosted, 4, true, "v1.34.1", true)
	if r := h.Plan(); len(of[plan.CreateMachine](r)) == 0 {
		t.Fatalf("actions %v, want the workers' rollout", r.Actions)
	}
	converge(t, h, nil)
	for _, m := range h.Machines {
		if m.GetSpec().GetVersion() != "v1.34.1" {
			t.Errorf("%s runs %s", m.GetMetadata().GetName(), m.GetSpec().GetVersion())
		}
	}
}

// TestImplementationDeletion: workers first, then delete until the record
// is gone, then the PKI and the cluster.
// The Deleting condition says what the implementation does meanwhile.
func TestImplementationDeletion(t *testing.T) {
	saying := map[string]string{capnv1.ControlPlaneExternal: "the external control plane itself stays",
		capnv1.ControlPlaneHosted: "stopping the hosted control plane"}
	for typ, says := range saying {
		t.Run(typ, func(t *testing.T) { testImplementationDeletion(t, typ, says) })
	}
}

func testImplementationDeletion(t *testing.T, typ, says string) {
	h := plantest.New(implCluster(typ, 2))
	h.ClusterRevision = 3
	h.ControlPlane = record(typ, 3, true, "v1.33.4", true)
	converge(t, h, nil)
	h.Delete()
	h.ClusterRevision = 4
	deletes := 0
	for step := 0; !h.ClusterDeleted; step++ {
		if step > 40 {
			t.Fatalf("not deleted after %d steps: %v", step, h.Status.GetConditions())
		}
		had := h.ControlPlane != nil
		r, err := h.Step()
		if err != nil {
			t.Fatal(err) // the harness refuses teardown out of order
		}
		d := of[plan.DeleteControlPlane](r)
		if len(d) == 0 {
			continue
		}
		if len(h.Machines) > 0 {
			t.Fatalf("delete sent with %d machines left", len(h.Machines))
		}
		if d[0].ID() != "controlplane-demo-4-delete" || d[0].Subject() != "capn.controlplane."+typ+".delete.demo" {
			t.Errorf("delete %s %s", d[0].Subject(), d[0].ID())
		}
		if !had {
			continue
		}
		if n := len(r.Actions) - len(of[plan.RemoveMachine](r)); n != 1 {
			t.Errorf("actions %v beside the delete while the record exists", r.Actions)
		}
		if deletes++; deletes > 1 {
			if c := condition(r.Status, plan.ConditionDeleting); c.GetReason() != plan.ReasonDeletingImplementation ||
				!strings.Contains(c.GetMessage(), says) || !strings.Contains(c.GetMessage(), "record controlplane.demo last") {
				t.Errorf("Deleting %v, want a message saying %q", c, says)
			}
			h.ControlPlane = nil // the implementation removed what it made, then its record
		}
	}
	if deletes != 2 || len(h.Commands) != 1 {
		t.Errorf("%d plans sent delete with the record there; commands %v, want one delete", deletes, h.Commands)
	}
}

// TestMachinesRecord: the machines implementation's record follows its
// control-plane machines and is written only when what readers act on
// changes — never for a worker's change.
func TestMachinesRecord(t *testing.T) {
	h := plantest.New(cluster(1, 2))
	converge(t, h, nil)
	rec := h.ControlPlane
	if rec.GetImplementation() != capnv1.ControlPlaneMachines || !rec.GetInitialized() || rec.GetVersion() != "v1.33.4" ||
		rec.GetReplicas() != 1 || rec.GetReadyReplicas() != 1 || rec.GetEndpoint().GetHost() != "demo.sim" {
		t.Fatalf("record %v", rec)
	}
	if c := rec.GetConditions()[0]; c.GetType() != plan.ConditionReady || c.GetStatus() != "True" {
		t.Errorf("Ready %v", c)
	}
	writes := h.RecordWrites
	h.Update(func(s *capnv1.ClusterSpec) {
		s.WorkerPools[0].Replicas = 6
		s.WorkerPools[0].Labels = map[string]string{"tier": "web"}
	})
	converge(t, h, nil)
	if h.RecordWrites != writes {
		t.Errorf("%d record writes for worker changes, want none", h.RecordWrites-writes)
	}
	h.Update(func(s *capnv1.ClusterSpec) { s.ControlPlane.Replicas = 3 })
	converge(t, h, nil)
	if h.ControlPlane.GetReplicas() != 3 || h.ControlPlane.GetReadyReplicas() != 3 || h.RecordWrites == writes {
		t.Errorf("record %v after %d writes", h.ControlPlane, h.RecordWrites-writes)
	}
	h.Delete()
	for step := 0; !h.ClusterDeleted; step++ {
		if step > 60 {
			t.Fatal("not deleted")
		}
		if _, err := h.Step(); err != nil {
			t.Fatal(err)
		}
	}
	if h.ControlPlane != nil {
		t.Errorf("record %v left after the cluster's deletion", h.ControlPlane)
	}
}

// TestPropImplementation runs random hosted and external clusters against a
// record that appears, initializes, lags and catches up at random steps,
// and checks every plan: never a control-plane machine nor cluster
// infrastructure; no worker before the record says initialized nor newer
// than its version; an ensure exactly while the record is missing or
// stale; deletion in order and complete.
func TestPropImplementation(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		typ := rapid.SampledFrom([]string{capnv1.ControlPlaneHosted, capnv1.ControlPlaneExternal}).Draw(t, "type")
		c := implCluster(typ)
		for i := range rapid.IntRange(1, 3).Draw(t, "pools") {
			c.Spec.WorkerPools = append(c.Spec.WorkerPools, genPool(t, i))
		}
		manifest.Default(c)
		if err := manifest.Validate(c); err != nil {
			t.Fatalf("generated an invalid cluster: %v", err)
		}
		h := plantest.New(c)
		h.MaxActions = rapid.SampledFrom([]int{0, 1, 3}).Draw(t, "maxActions")
		h.ClusterRevision = 1
		versions := []string{"v1.32.9", "v1.33.4"}
		check := func(r plan.Result, in plan.Input) {
			rec := in.ControlPlane
			stale := rec == nil || uint64(rec.GetObservedGeneration()) < in.ClusterRevision
			if got := len(of[plan.EnsureControlPlane](r)) > 0; got != stale && in.Cluster.GetMetadata().GetDeletionTimestamp() == nil && (h.MaxActions == 0 || len(r.Actions) < h.MaxActions) {
				t.Fatalf("ensure %v with record %v at revision %d", got, rec, in.ClusterRevision)
			}
			if len(of[plan.EnsureClusterInfra](r)) > 0 {
				t.Fatalf("cluster infrastructure ensured for a %s control plane", typ)
			}
			for _, a := range of[plan.CreateMachine](r) {
				s := a.Machine.GetSpec()
				if s.GetRole() != plan.RoleWorker {
					t.Fatalf("created a %s machine", s.GetRole())
				}
				if !rec.GetInitialized() && !in.Status.GetControlPlaneInitialized() {
					t.Fatalf("created %s before the control plane initialized", a.Machine.GetMetadata().GetName())
				}
				v, _ := manifest.ParseVersion(s.GetVersion())
				ceiling, err := manifest.ParseVersion(rec.GetVersion())
				if err != nil || v.Compare(ceiling) > 0 {
					t.Fatalf("created %s at %s, the control plane runs %q", a.Machine.GetMetadata().GetName(), s.GetVersion(), rec.GetVersion())
				}
			}
		}
		step := func() {
			in := h.Input()
			r, err := h.Step()
			if err != nil {
				t.Fatal(err)
			}
			check(r, in)
		}
		for i := range 30 {
			switch rapid.IntRange(0, 5).Draw(t, "event") {
			case 0: // the implementation answers the desired revision
				v := rapid.SampledFrom(versions).Draw(t, "version")
				if h.ControlPlane.GetInitialized() {
					v = max(v, h.ControlPlane.GetVersion()) // never downgraded
				}
				h.ControlPlane = record(typ, int64(h.ClusterRevision), rapid.Bool().Draw(t, "initialized") || h.ControlPlane.GetInitialized(), v, rapid.Bool().Draw(t, "ready"))
			case 1: // the user moves the cluster to v1.33.4
				if i > 5 && h.Cluster.Spec.KubernetesVersion != "v1.33.4" {
					h.Update(func(s *capnv1.ClusterSpec) {
						s.KubernetesVersion = "v1.33.4"
						for _, p := range s.WorkerPools {
							p.Version = "v1.33.4"
						}
					})
					h.ClusterRevision++
				}
			}
			step()
		}
		// The implementation catches up; everything converges.
		h.ControlPlane = record(typ, int64(h.ClusterRevision), true, h.Cluster.Spec.KubernetesVersion, true)
		for i := 0; h.Status.GetPhaseValue() != capnv1.ClusterReady; i++ {
			if i > 200 {
				t.Fatalf("not ready: %v", h.Status.GetConditions())
			}
			step()
		}
		h.Delete()
		h.ClusterRevision++
		goneAfter := rapid.IntRange(0, 3).Draw(t, "recordGoneAfter")
		for i := 0; !h.ClusterDeleted; i++ {
			if i > 200 {
				t.Fatalf("not deleted: %v", h.Status.GetConditions())
			}
			sent := len(h.Commands)
			step()
			if len(h.Commands) > sent && h.Commands[len(h.Commands)-1].Command != nil && strings.HasSuffix(h.Commands[len(h.Commands)-1].ID, "-delete") {
				if goneAfter--; goneAfter < 0 {
					h.ControlPlane = nil
				}
			} else if h.ControlPlane != nil && len(h.Machines) == 0 {
				if goneAfter--; goneAfter < 0 {
					h.ControlPlane = nil
				}
			}
		}
		if len(h.Machines) != 0 || h.ControlPlane != nil {
			t.Fatalf("deleted with %d machines, record %v", len(h.Machines), h.ControlPlane)
		}
	})
}

// TestExternalDeletionDrainsItsNodes: deleting a cluster on an external
// control plane, whose API server stays, does not exclude its workers'
// Nodes from the drain and the Node deletion (the machine-manager then
// waits for the health-watcher to delete them); a hosted one's are
// excluded, as a machines cluster's.
func TestExternalDeletionDrainsItsNodes(t *testing.T) {
	for _, typ := range []string{capnv1.ControlPlaneHosted, capnv1.ControlPlaneExternal} {
		t.Run(typ, func(t *testing.T) {
			h := plantest.New(implCluster(typ, 2))
			h.ClusterRevision = 3
			h.ControlPlane = record(typ, 3, true, "v1.33.4", true)
			converge(t, h, nil)
			h.Delete()
			h.ClusterRevision = 4
			excluded, deleted := 0, 0
			for step := 0; step < 3; step++ {
				r, err := h.Step()
				if err != nil {
					t.Fatal(err)
				}
				for _, u := range of[plan.UpdateMachine](r) {
					if _, ok := u.Machine.GetMetadata().GetAnnotations()[annotations.ExcludeNodeDraining]; ok {
						excluded++
					}
				}
				deleted += len(of[plan.DeleteMachine](r))
			}
			if deleted == 0 {
				t.Fatal("no worker deleted")
			}
			if want := typ != capnv1.ControlPlaneExternal; (excluded > 0) != want {
				t.Errorf("%d workers excluded from the drain, want excluded: %v", excluded, want)
			}
		})
	}
}
