package plan_test

import (
	"strings"
	"testing"
	"time"

	capnv1 "github.com/capn-dev/capn/schemas/capn/v1alpha1"
	"github.com/capn-dev/capn/schemas/manifest"
	"github.com/capn-dev/capn/services/cluster-planner/plan"
	"github.com/capn-dev/capn/services/cluster-planner/plan/plantest"
)

// settle steps h until a plan has nothing to do and every machine runs
// (Converged wants Ready, which a blocking add-on set holds back).
func settle(t *testing.T, h *plantest.Harness) {
	t.Helper()
	for range 100 {
		r, err := h.Step()
		if err != nil {
			t.Fatal(err)
		}
		running := len(h.Observed) == 3
		for _, st := range h.Observed {
			running = running && st.GetPhaseValue() == capnv1.MachineRunning
		}
		if len(r.Actions) == 0 && running {
			if _, err := h.Step(); err != nil { // the status of the world as it now is
				t.Fatal(err)
			}
			return
		}
	}
	t.Fatalf("not settled: phase %s", h.Status.GetPhase())
}

func addonSet(name string, order int32, blocking bool, mode string) *capnv1.AddonSet {
	return &capnv1.AddonSet{Metadata: &capnv1.ObjectMeta{Name: name, Uid: name + "-uid", Generation: 2},
		Spec: &capnv1.AddonSetSpec{Order: order, Blocking: blocking, Mode: mode}}
}

func addonRecord(s *capnv1.AddonSet, gen int64, status capnv1.ConditionStatus, reason, msg string) *capnv1.ClusterAddonStatus {
	return &capnv1.ClusterAddonStatus{AddonSet: s.GetMetadata().GetName(), SetUid: s.GetMetadata().GetUid(), AppliedGeneration: gen,
		Conditions: []*capnv1.Condition{{Type: manifest.AddonConditionApplied, Status: status.Wire(), Reason: reason, Message: msg}}}
}

// The AddonsApplied condition and the blocking gate, on a cluster whose
// machines are all ready: a blocking set not applied keeps Ready False
// (AddonsNotApplied) and a new cluster Provisioning; a set that is not
// blocking shows only in AddonsApplied; a Reconcile set applied at an
// older generation is not applied; a cluster without a Kubernetes API
// waits for nothing.
func TestAddonsAppliedCondition(t *testing.T) {
	cni := addonSet("cni", 0, true, manifest.AddonReconcile)
	metrics := addonSet("metrics", 5, false, manifest.AddonApplyOnce)
	tests := []struct {
		name                     string
		addons                   []plan.Addon
		wantReady                string
		wantReadyReason          string
		wantAddons, addonsReason string
		msgHas                   string
		wantPhase                capnv1.ClusterPhase
	}{
		{"no sets: no condition", nil, "True", plan.ReasonReady, "", "", "", capnv1.ClusterReady},
		{"blocking set without a record", []plan.Addon{{Set: cni}}, "False", plan.ReasonAddonsNotApplied, "False", plan.ReasonAddonsPending,
			"cni (blocking): not applied yet", capnv1.ClusterProvisioning},
		{"blocking set failing", []plan.Addon{{Set: cni, Record: addonRecord(cni, 0, capnv1.ConditionFalse, "ApplyFailed", "attempt 3 failed: 503")}},
			"False", plan.ReasonAddonsNotApplied, "False", plan.ReasonAddonsFailed, "cni (blocking): ApplyFailed: attempt 3 failed: 503", capnv1.ClusterProvisioning},
		{"blocking set applied at an older generation", []plan.Addon{{Set: cni, Record: addonRecord(cni, 1, capnv1.ConditionTrue, "Applied", "")}},
			"False", plan.ReasonAddonsNotApplied, "False", plan.ReasonAddonsPending, "cni (blocking): Applied", capnv1.ClusterProvisioning},
		{"blocking applied, another waiting", []plan.Addon{{Set: cni, Record: addonRecord(cni, 2, capnv1.ConditionTrue, "Applied", "")},
			{Set: metrics, Record: addonRecord(metrics, 0, capnv1.ConditionFalse, "WaitingForOrder", "waiting for set cni")}},
			"True", plan.ReasonReady, "False", plan.ReasonAddonsPending, "1 of 2 add-on sets applied; metrics: WaitingForOrder: waiting for set cni", capnv1.ClusterReady},
		{"all applied (ApplyOnce at any generation)", []plan.Addon{{Set: cni, Record: addonRecord(cni, 2, capnv1.ConditionTrue, "Applied", "")},
			{Set: metrics, Record: addonRecord(metrics, 1, capnv1.ConditionTrue, "Applied", "")}},
			"True", plan.ReasonReady, "True", plan.ReasonAddonsApplied, "2 of 2 add-on sets applied", capnv1.ClusterReady},
		{"no Kubernetes API (sim)", []plan.Addon{{Set: cni, Record: addonRecord(cni, 0, capnv1.ConditionFalse, "NoKubernetesAPI", "")}},
			"True", plan.ReasonReady, "True", plan.ReasonAddonsApplied, "1 not applied: the cluster's provider runs no Kubernetes API", capnv1.ClusterReady},
		{"a record of an earlier incarnation", []plan.Addon{{Set: cni, Record: func() *capnv1.ClusterAddonStatus {
			r := addonRecord(cni, 2, capnv1.ConditionTrue, "Applied", "")
			r.SetUid = "old"
			return r
		}()}}, "False", plan.ReasonAddonsNotApplied, "False", plan.ReasonAddonsPending, "not applied yet", capnv1.ClusterProvisioning},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			h := plantest.New(cluster(1, 2))
			h.Addons = tt.addons
			settle(t, h)
			st := h.Status
			if r := condition(st, plan.ConditionReady); r.GetStatus() != tt.wantReady || r.GetReason() != tt.wantReadyReason {
				t.Errorf("Ready %v", r)
			}
			a := condition(st, plan.ConditionAddonsApplied)
			switch {
			case tt.wantAddons == "" && a != nil:
				t.Errorf("AddonsApplied with no set: %v", a)
			case tt.wantAddons != "" && (a.GetStatus() != tt.wantAddons || a.GetReason() != tt.addonsReason || !strings.Contains(a.GetMessage(), tt.msgHas)):
				t.Errorf("AddonsApplied %v, want %s %s with %q", a, tt.wantAddons, tt.addonsReason, tt.msgHas)
			}
			if st.GetPhaseValue() != tt.wantPhase {
				t.Errorf("phase %s, want %s", st.GetPhase(), tt.wantPhase)
			}
			if tt.wantReady == "False" && !strings.Contains(condition(st, plan.ConditionReady).GetMessage(), "blocking add-on sets not applied: cni") {
				t.Errorf("Ready's message: %q", condition(st, plan.ConditionReady).GetMessage())
			}
		})
	}

	// Level-driven: the record arriving turns the cluster Ready, and a
	// new blocking set on a Ready cluster turns Ready False but keeps the
	// phase.
	h := plantest.New(cluster(1, 2))
	h.Addons = []plan.Addon{{Set: cni}}
	settle(t, h)
	h.Addons = []plan.Addon{{Set: cni, Record: addonRecord(cni, 2, capnv1.ConditionTrue, "Applied", "")}}
	h.Now = h.Now.Add(time.Second)
	if r, _ := h.Step(); r.Status.GetPhaseValue() != capnv1.ClusterReady || condition(r.Status, plan.ConditionReady).GetStatus() != "True" {
		t.Fatalf("after the record: %v", r.Status)
	}
	next := addonSet("next", 0, true, manifest.AddonApplyOnce)
	h.Addons = append(h.Addons, plan.Addon{Set: next})
	if r, _ := h.Step(); r.Status.GetPhaseValue() != capnv1.ClusterReady || condition(r.Status, plan.ConditionReady).GetReason() != plan.ReasonAddonsNotApplied {
		t.Fatalf("a new blocking set on a Ready cluster: %v", r.Status)
	}
}

// A blocking set not applied keeps the workers from being counted: the
// pools' ready and available counts are 0 and WorkersReady is False
// (AddonsNotApplied) saying how many machines are up and which set they
// wait for, while the control plane is counted as before and no machine
// is replaced or added (they are not failed). Applying the set counts them.
// A set that is not blocking changes nothing.
func TestBlockingAddonsGateWorkerCounts(t *testing.T) {
	cni := addonSet("cni", 0, true, manifest.AddonReconcile)
	metrics := addonSet("metrics", 5, false, manifest.AddonApplyOnce)
	h := plantest.New(cluster(1, 2))
	h.Addons = []plan.Addon{{Set: cni, Record: addonRecord(cni, 0, capnv1.ConditionFalse, "ApplyFailed", "attempt 2 failed: 503")}, {Set: metrics}}
	settle(t, h)
	machines := len(h.Machines)
	st := h.Status
	if cp := st.GetControlPlane(); cp.GetReady() != 1 || cp.GetAvailable() != 1 {
		t.Errorf("control plane counted %d ready, %d available: want 1, 1 (not gated)", cp.GetReady(), cp.GetAvailable())
	}
	for _, ps := range st.GetWorkerPools() {
		if ps.GetReplicas() != 2 || ps.GetReady() != 0 || ps.GetAvailable() != 0 {
			t.Errorf("pool %s: %d replicas, %d ready, %d available: want 2, 0, 0", ps.GetName(), ps.GetReplicas(), ps.GetReady(), ps.GetAvailable())
		}
	}
	w := condition(st, plan.ConditionWorkersReady)
	want := "2 machines up, not counted ready: blocking add-on sets not applied: cni (ApplyFailed: attempt 2 failed: 503)"
	if w.GetStatus() != "False" || w.GetReason() != plan.ReasonAddonsNotApplied || w.GetMessage() != want {
		t.Errorf("WorkersReady %v, want False %s %q", w, plan.ReasonAddonsNotApplied, want)
	}
	if cp := condition(st, plan.ConditionControlPlaneReady); cp.GetStatus() != "True" {
		t.Errorf("ControlPlaneReady %v: the control plane is counted as before", cp)
	}
	if r := condition(st, plan.ConditionReady); r.GetReason() != plan.ReasonAddonsNotApplied {
		t.Errorf("Ready %v, want reason %s", r, plan.ReasonAddonsNotApplied)
	}
	// Nothing is done about the uncounted workers: no replacement, no
	// surge, on step after step.
	for range 3 {
		h.Now = h.Now.Add(time.Minute)
		r, err := h.Step()
		if err != nil {
			t.Fatal(err)
		}
		if len(r.Actions) != 0 || len(h.Machines) != machines {
			t.Fatalf("uncounted workers acted on: %d actions, %d machines (were %d)", len(r.Actions), len(h.Machines), machines)
		}
	}
	// The set applied: counted, WorkersReady True, Ready True.
	h.Addons = []plan.Addon{{Set: cni, Record: addonRecord(cni, 2, capnv1.ConditionTrue, "Applied", "")}, {Set: metrics}}
	h.Now = h.Now.Add(time.Second)
	r, err := h.Step()
	if err != nil {
		t.Fatal(err)
	}
	if ps := r.Status.GetWorkerPools()[0]; ps.GetReady() != 2 || ps.GetAvailable() != 2 {
		t.Errorf("after the set applied: pool ready %d, available %d, want 2, 2", ps.GetReady(), ps.GetAvailable())
	}
	if w := condition(r.Status, plan.ConditionWorkersReady); w.GetStatus() != "True" {
		t.Errorf("after the set applied: WorkersReady %v", w)
	}
	if rd := condition(r.Status, plan.ConditionReady); rd.GetStatus() != "True" {
		t.Errorf("after the set applied: Ready %v (the pending set is not blocking)", rd)
	}
}
