package plan_test

import (
	"fmt"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"google.golang.org/protobuf/proto"

	capnv1 "github.com/capn-dev/capn/schemas/capn/v1alpha1"
	"github.com/capn-dev/capn/services/cluster-planner/plan"
	"github.com/capn-dev/capn/services/cluster-planner/plan/plantest"
)

func TestStatusWhileProvisioning(t *testing.T) {
	h := plantest.New(cluster(3, 2))
	h.Cluster.Metadata.Generation = 4
	h.Infra = plan.Infra{Exists: true, Ready: true, Endpoint: &capnv1.Endpoint{Host: "10.0.0.1", Port: 6443}}
	r, _ := h.Step()
	st := r.Status
	if st.GetPhaseValue() != capnv1.ClusterProvisioning || st.ObservedGeneration != 4 || st.ControlPlaneInitialized {
		t.Fatalf("status %v", st)
	}
	if st.ControlPlaneEndpoint.GetHost() != "10.0.0.1" {
		t.Errorf("endpoint %v", st.ControlPlaneEndpoint)
	}
	r, _ = h.Step()
	c := condition(r.Status, plan.ConditionControlPlaneInitialized)
	if c.Status != "False" || c.Reason != "WaitingForFirstMachine" || !strings.Contains(c.Message, "demo-control-plane-") || !strings.Contains(c.Message, "(Provisioning)") {
		t.Errorf("ControlPlaneInitialized %v", c)
	}
	w := condition(r.Status, plan.ConditionWorkersReady)
	if w.Status != "False" || w.Reason != "WaitingForControlPlane" || !strings.Contains(w.Message, "pool md-0: 0 of 2 updated, 0 available (waiting for the control plane to initialize)") {
		t.Errorf("WorkersReady %v", w)
	}
	// Ready's message is the whole progress: the control plane's, then
	// every pool's that is not ready.
	if ready := condition(r.Status, plan.ConditionReady); ready.Status != "False" || ready.Reason != "ControlPlaneNotReady" ||
		ready.Message != "control plane: "+c.Message+"; "+w.Message {
		t.Errorf("Ready %v", ready)
	}
	converge(t, h, nil)
	st = h.Status
	if st.GetPhaseValue() != capnv1.ClusterReady || !st.ControlPlaneInitialized {
		t.Fatalf("status %v", st)
	}
	for _, typ := range []string{plan.ConditionControlPlaneInitialized, plan.ConditionControlPlaneReady, plan.ConditionWorkersReady, plan.ConditionReady} {
		if c := condition(st, typ); c.Status != "True" || c.Severity != "" {
			t.Errorf("%s: %v", typ, c)
		}
	}
	if p := condition(st, plan.ConditionPaused); p.Status != "False" {
		t.Errorf("Paused %v", p)
	}
	want := &capnv1.PoolStatus{Name: "md-0", Desired: 2, Replicas: 2, Ready: 2, Updated: 2, Available: 2, Version: "v1.33.4"}
	if got := st.WorkerPools[0]; got.String() != want.String() {
		t.Errorf("pool status %v, want %v", got, want)
	}
	if cp := st.ControlPlane; cp.Name != "control-plane" || cp.Available != 3 {
		t.Errorf("control-plane status %v", cp)
	}
}

func TestStatusUpgrading(t *testing.T) {
	h := started(t, cluster(1, 3))
	h.Update(func(s *capnv1.ClusterSpec) {
		s.KubernetesVersion = "v1.34.1"
		s.WorkerPools[0].Version = "v1.34.1"
	})
	r, _ := h.Step()
	if r.Status.GetPhaseValue() != capnv1.ClusterUpgrading {
		t.Errorf("phase %s", r.Status.Phase)
	}
	cp := condition(r.Status, plan.ConditionControlPlaneReady)
	if cp.Reason != "RollingOut" || cp.Message != "0 of 1 updated, 1 available" {
		t.Errorf("ControlPlaneReady %v", cp)
	}
	if v := r.Status.WorkerPools[0].Version; v != "v1.33.4" {
		t.Errorf("pool version %s: the status reports the oldest version running", v)
	}
	if r.RequeueAfter != plan.ProgressResync {
		t.Errorf("RequeueAfter %v while upgrading", r.RequeueAfter)
	}
	converge(t, h, nil)
	if v := h.Status.WorkerPools[0].Version; v != "v1.34.1" {
		t.Errorf("pool version %s after the upgrade", v)
	}
}

func TestConditionTransitionTimeKept(t *testing.T) {
	h := started(t, cluster(1))
	before := condition(h.Status, plan.ConditionReady).LastTransitionTime.AsTime()
	updated := h.Status.Updated.AsTime()
	h.Now = h.Now.Add(time.Hour)
	r := h.Plan()
	if got := condition(r.Status, plan.ConditionReady).LastTransitionTime.AsTime(); !got.Equal(before) {
		t.Errorf("Ready's transition time moved from %v to %v without a change", before, got)
	}
	// Nothing changed: the status is the same, Updated included, so the
	// planner has nothing to write.
	if got := r.Status.Updated.AsTime(); !got.Equal(updated) {
		t.Errorf("updated %v after a plan that changed nothing, want %v (the last change)", got, updated)
	}
	if !proto.Equal(r.Status, h.Status) {
		t.Errorf("a plan that changed nothing computed a different status:\n%v\nwas\n%v", r.Status, h.Status)
	}
	h.SetPhase(h.Names(cpPool)[0], capnv1.MachineProvisioning)
	r = h.Plan()
	if got := condition(r.Status, plan.ConditionReady).LastTransitionTime.AsTime(); !got.Equal(h.Now) {
		t.Errorf("Ready changed but its transition time is %v", got)
	}
	if got := r.Status.Updated.AsTime(); !got.Equal(h.Now) {
		t.Errorf("updated %v after a change, want now", got)
	}
}

func TestStatusInvalidSpec(t *testing.T) {
	c := cluster(1, 1)
	c.Spec.ControlPlane.Replicas = 2
	h := plantest.New(c)
	r := h.Plan()
	if len(r.Actions) != 0 || r.Status.GetPhaseValue() != capnv1.ClusterFailed {
		t.Fatalf("invalid spec: phase %s, actions %v", r.Status.Phase, r.Actions)
	}
	ready := condition(r.Status, plan.ConditionReady)
	if ready.Reason != "InvalidSpec" || ready.Severity != "Error" || !strings.Contains(ready.Message, "spec.controlPlane.replicas: 2: must be odd") {
		t.Errorf("Ready %v", ready)
	}
}

func TestStatusFailedControlPlane(t *testing.T) {
	h := started(t, cluster(1))
	h.SetPhase(h.Names(cpPool)[0], capnv1.MachineFailed)
	r := h.Plan()
	if r.Status.GetPhaseValue() != capnv1.ClusterFailed {
		t.Errorf("phase %s with the only control-plane machine failed", r.Status.Phase)
	}
	if len(of[plan.DeleteMachine](r)) != 1 {
		t.Errorf("the failed machine is not replaced: %v", r.Actions)
	}
	c := condition(r.Status, plan.ConditionControlPlaneReady)
	if c.Reason != "MachinesNotAvailable" || !strings.Contains(c.Message, "(Failed)") {
		t.Errorf("ControlPlaneReady %v", c)
	}
}

// TestStatusRolloutCounts follows a surge rollout of a pool of 5: no count
// in a pool's message exceeds the desired 5 but the surge, named as such;
// the message when the surge machine boots is the kubectl rollout status
// one. The old message said "5 of 5 machines available, 5 up to date; not
// available: demo-md-0-… (Pending)" there, and the CLI "11/10 ready".
func TestStatusRolloutCounts(t *testing.T) {
	h := started(t, cluster(1, 5))
	h.Update(func(s *capnv1.ClusterSpec) {
		s.KubernetesVersion = "v1.34.1"
		s.WorkerPools[0].Version = "v1.34.1"
	})
	counts := regexp.MustCompile(`(\d+) of (\d+) updated|(\d+) available`)
	surgeBooting := regexp.MustCompile(`^pool md-0: (\d) of 5 updated, 1 surge machine booting, 5 available; not available: demo-md-0-[0-9a-f]{5}-\d \((Pending|Provisioning)\)$`)
	seen := map[string]bool{}
	converge(t, h, func(rec plantest.Record) error {
		w := condition(rec.Result.Status, plan.ConditionWorkersReady)
		if w.Status == "True" {
			return nil
		}
		for _, m := range counts.FindAllStringSubmatch(w.Message, -1) {
			for _, n := range []string{m[1], m[3]} {
				if v, _ := strconv.Atoi(n); v > 5 {
					return fmt.Errorf("a count above the desired 5: %q", w.Message)
				}
			}
		}
		if surgeBooting.MatchString(w.Message) {
			seen["surge booting"] = true
		}
		if strings.HasPrefix(w.Message, "pool md-0: 5 of 5 updated, 1 surge machine, 5 available") {
			seen["surge ready"] = true
		}
		if ps := rec.Result.Status.WorkerPools[0]; ps.Replicas > 5 {
			seen["replicas above desired"] = true
		}
		return nil
	})
	for _, s := range []string{"surge booting", "surge ready", "replicas above desired"} {
		if !seen[s] {
			t.Errorf("the rollout never showed %q", s)
		}
	}
	if w := condition(h.Status, plan.ConditionWorkersReady); w.Message != "all 1 worker pools ready" {
		t.Errorf("after the rollout: %v", w)
	}
}

func TestPoolProgressMessages(t *testing.T) {
	// Scale 2 → 4 while one machine of the pool fails to boot.
	h := started(t, cluster(1, 2))
	h.Update(func(s *capnv1.ClusterSpec) { s.WorkerPools[0].Replicas = 4 })
	h.Step()
	r := h.Plan()
	if w := condition(r.Status, plan.ConditionWorkersReady); !regexp.MustCompile(`^pool md-0: 4 of 4 updated, 2 booting, 2 available; not available: demo-md-0-[0-9a-f]{5}-2 \(Provisioning\), demo-md-0-[0-9a-f]{5}-3 \(Provisioning\)$`).MatchString(w.Message) {
		t.Errorf("scaling up: %q", w.Message)
	}
	converge(t, h, nil)
	// Scale down: the status is computed before the plan marks machines,
	// so the extra ones show as to remove, not as a count above desired.
	h.DeleteSteps = func(string) int { return 3 }
	h.Update(func(s *capnv1.ClusterSpec) { s.WorkerPools[0].Replicas = 1 })
	r = h.Plan()
	if w := condition(r.Status, plan.ConditionWorkersReady); w.Message != "pool md-0: 1 of 1 updated, 3 to remove, 1 available" {
		t.Errorf("scaling down: %q", w.Message)
	}
	h.Step()
	r = h.Plan()
	if w := condition(r.Status, plan.ConditionWorkersReady); w.Message != "pool md-0: 1 of 1 updated, 1 available, 3 deleting" {
		t.Errorf("scaling down, deleting: %q", w.Message)
	}
}

// An autoscaled pool's status carries its bounds and the autoscaler's last
// action on it (Input.Autoscaler); a pool without autoscaling neither.
func TestStatusAutoscaledPool(t *testing.T) {
	c := cluster(1, 2, 1)
	c.Spec.WorkerPools[0].Autoscaling = &capnv1.Autoscaling{Min: 1, Max: 5}
	h := plantest.New(c)
	in := h.Input()
	act := &capnv1.AutoscalerAction{Reason: "ScaledUp", From: 1, To: 2, Message: "autoscaler scaled md-0 1 → 2"}
	in.Autoscaler = map[string]*capnv1.AutoscalerAction{"md-0": act, "md-1": act}
	st := plan.Plan(in).Status
	md0, md1 := st.GetWorkerPools()[0], st.GetWorkerPools()[1]
	if md0.GetAutoscaling().GetMin() != 1 || md0.GetAutoscaling().GetMax() != 5 || !proto.Equal(md0.GetLastAutoscalerAction(), act) {
		t.Errorf("md-0 status %v, want autoscaling 1..5 and the last action", md0)
	}
	if md1.GetAutoscaling() != nil || md1.GetLastAutoscalerAction() != nil {
		t.Errorf("md-1 is not autoscaled, yet its status says %v", md1)
	}
}

// The maintenance service's record (Input.Maintenance) shows in the
// status as it is; without one the status has neither part.
func TestStatusMaintenance(t *testing.T) {
	h := plantest.New(cluster(1, 2, 1))
	in := h.Input()
	if st := plan.Plan(in).Status; st.GetMaintenance() != nil || st.GetHibernation() != nil {
		t.Fatalf("no record, yet the status says %v %v", st.GetMaintenance(), st.GetHibernation())
	}
	rec := &capnv1.MaintenanceRecord{
		Maintenance: &capnv1.MaintenanceStatus{Waiting: []*capnv1.MaintenanceWait{{Change: "AutoPatch", From: "v1.34.2", To: "v1.34.5"}}},
		Hibernation: &capnv1.HibernationStatus{Override: true, Message: "woken by hand"},
	}
	in.Maintenance = rec
	st := plan.Plan(in).Status
	if !proto.Equal(st.GetMaintenance(), rec.Maintenance) || !proto.Equal(st.GetHibernation(), rec.Hibernation) {
		t.Errorf("status %v %v, want the record's", st.GetMaintenance(), st.GetHibernation())
	}
}
