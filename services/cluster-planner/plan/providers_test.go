package plan_test

import (
	"strings"
	"testing"
	"time"

	"google.golang.org/protobuf/types/known/timestamppb"

	capnv1 "github.com/capn-dev/capn/schemas/capn/v1alpha1"
	"github.com/capn-dev/capn/services/cluster-planner/plan"
	"github.com/capn-dev/capn/services/cluster-planner/plan/plantest"
)

var stopStart = []string{plan.CapabilityStopStart, "reboot"}

// onProvider puts the pool (control-plane or md-<i>) on provider.
func onProvider(c *capnv1.Cluster, pool, provider string) *capnv1.Cluster {
	if pool == plan.RoleControlPlane {
		c.Spec.ControlPlane.Provider = provider
		return c
	}
	for _, wp := range c.Spec.WorkerPools {
		if wp.Name == pool {
			wp.Provider = provider
		}
	}
	return c
}

func wantCondition(t *testing.T, st *capnv1.ClusterStatus, typ, status, reason string, msgHas ...string) *capnv1.Condition {
	t.Helper()
	c := condition(st, typ)
	if c == nil {
		t.Fatalf("no %s condition in %v", typ, st.GetConditions())
	}
	if c.GetStatus() != status || c.GetReason() != reason {
		t.Errorf("%s=%s %s (%s), want %s %s", typ, c.GetStatus(), c.GetReason(), c.GetMessage(), status, reason)
	}
	for _, s := range msgHas {
		if !strings.Contains(c.GetMessage(), s) {
			t.Errorf("%s message %q lacks %q", typ, c.GetMessage(), s)
		}
	}
	return c
}

func TestMissingProviderRefusesClusterUntilItRuns(t *testing.T) {
	h := plantest.New(onProvider(cluster(3, 2, 1), "md-1", "docker"))
	h.Providers = map[string][]string{"sim": stopStart}
	for range 5 {
		r, err := h.Step()
		if err != nil {
			t.Fatal(err)
		}
		if len(r.Actions) != 0 {
			t.Fatalf("a cluster naming a provider that does not run got actions %v", r.Actions)
		}
		if r.Status.GetPhaseValue() != capnv1.ClusterPending {
			t.Errorf("phase %s, want Pending", r.Status.Phase)
		}
		if r.RequeueAfter == 0 {
			t.Error("a refused cluster is never looked at again")
		}
		c := wantCondition(t, r.Status, plan.ConditionProvidersReady, "False", plan.ReasonProviderNotRunning,
			"provider docker (pool md-1) is not running", "no announcement", "start the docker provider service", "nothing is created")
		if c.GetSeverity() != "Warning" {
			t.Errorf("severity %q", c.GetSeverity())
		}
		wantCondition(t, r.Status, plan.ConditionReady, "False", plan.ReasonProviderNotRunning, "docker")
	}
	if len(h.Machines) != 0 {
		t.Fatalf("machines %v", h.Names(""))
	}

	h.Providers["docker"] = nil // it starts: no capability needed
	converge(t, h, nil)
	wantCondition(t, h.Status, plan.ConditionProvidersReady, "True", plan.ReasonProvidersRunning, "docker (md-1)", "sim (control-plane, md-0)")
	if n := len(h.Names("md-1")); n != 1 {
		t.Errorf("md-1 has %d machines", n)
	}
}

func TestMissingControlPlaneProvider(t *testing.T) {
	h := plantest.New(onProvider(cluster(1, 1), plan.RoleControlPlane, "process"))
	h.Providers = map[string][]string{"sim": stopStart}
	r, _ := h.Step()
	if len(r.Actions) != 0 {
		t.Fatalf("actions %v (not even EnsureClusterInfra may go to a provider that does not run)", r.Actions)
	}
	wantCondition(t, r.Status, plan.ConditionProvidersReady, "False", plan.ReasonProviderNotRunning, "provider process (pool control-plane)")
	h.Providers["process"] = stopStart
	r, _ = h.Step()
	if len(of[plan.EnsureClusterInfra](r)) != 1 || len(of[plan.CreateMachine](r)) != 1 {
		t.Fatalf("once the provider runs: %v", r.Actions)
	}
	if r.Status.GetPhaseValue() != capnv1.ClusterProvisioning {
		t.Errorf("phase %s, want Provisioning", r.Status.Phase)
	}
}

func TestStaleAnnouncementIsNotRunning(t *testing.T) {
	now := time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC)
	in := func(age time.Duration) plan.Input {
		return plan.Input{Cluster: cluster(1), Now: now, Providers: map[string]*capnv1.ProviderAnnouncement{
			"sim": {Name: "sim", Time: timestamppb.New(now.Add(-age))},
		}}
	}
	r := plan.Plan(in(plan.ProviderStale + time.Second))
	if len(r.Actions) != 0 || r.Status.GetPhaseValue() != capnv1.ClusterPending {
		t.Fatalf("stale announcement: actions %v, phase %s", r.Actions, r.Status.Phase)
	}
	wantCondition(t, r.Status, plan.ConditionProvidersReady, "False", plan.ReasonProviderNotRunning,
		"its last announcement, at 2024-12-31T23:59:29Z, is more than 30s old")
	r = plan.Plan(in(plan.ProviderStale))
	if len(of[plan.CreateMachine](r)) != 1 {
		t.Fatalf("an announcement %s old counts as running: %v", plan.ProviderStale, r.Actions)
	}
	// An announcement without a time says nothing.
	i := in(0)
	i.Providers["sim"].Time = nil
	if r := plan.Plan(i); len(r.Actions) != 0 {
		t.Fatalf("announcement without time: %v", r.Actions)
	}
}

func TestProviderGoneHoldsItsPoolsOnly(t *testing.T) {
	h := plantest.New(onProvider(cluster(1, 2, 2), "md-1", "docker"))
	h.Providers = map[string][]string{"sim": stopStart, "docker": stopStart}
	converge(t, h, nil)
	before := h.Names("md-1")

	delete(h.Providers, "docker") // stopped cleanly: announcement withdrawn
	r, _ := h.Step()
	if len(r.Actions) != 0 || r.Status.GetPhaseValue() != capnv1.ClusterReady {
		t.Fatalf("a Ready cluster whose provider went away: actions %v, phase %s", r.Actions, r.Status.Phase)
	}
	wantCondition(t, r.Status, plan.ConditionReady, "True", "Ready")
	wantCondition(t, r.Status, plan.ConditionProvidersReady, "False", plan.ReasonProviderNotRunning,
		"provider docker (pool md-1)", "the machines these pools have stay")

	// Scale both pools up and fail a docker machine: md-0 moves, md-1 waits
	// and keeps its machines, failed one included.
	h.Update(func(s *capnv1.ClusterSpec) {
		s.WorkerPools[0].Replicas = 3
		s.WorkerPools[1].Replicas = 4
	})
	h.SetPhase(before[0], capnv1.MachineFailed)
	for range 6 {
		r, err := h.Step()
		if err != nil {
			t.Fatal(err)
		}
		for _, a := range r.Actions {
			switch a := a.(type) {
			case plan.CreateMachine:
				if a.Machine.Spec.Pool == "md-1" {
					t.Fatalf("created %s in md-1 while docker does not run", a.Machine.Metadata.Name)
				}
			case plan.DeleteMachine:
				if poolOf(h, a.Name) == "md-1" {
					t.Fatalf("deleted %s in md-1 while docker does not run", a.Name)
				}
			}
		}
		if r.Status.GetPhaseValue() == capnv1.ClusterFailed || r.Status.GetPhaseValue() == capnv1.ClusterPending {
			t.Fatalf("phase %s", r.Status.Phase)
		}
	}
	if got := h.Names("md-1"); strings.Join(got, ",") != strings.Join(before, ",") {
		t.Errorf("md-1 machines %v, want %v kept", got, before)
	}
	if n := len(h.Names("md-0")); n != 3 {
		t.Errorf("md-0 has %d machines, want 3: a pool on a running provider is not held", n)
	}
	wantCondition(t, h.Status, plan.ConditionWorkersReady, "False", plan.ReasonProviderNotRunning, "waiting for provider docker to run")

	h.Providers["docker"] = stopStart
	converge(t, h, nil)
	if n := len(h.Names("md-1")); n != 4 {
		t.Errorf("md-1 has %d machines once docker runs again, want 4", n)
	}
	for _, n := range h.Names("md-1") {
		if n == before[0] {
			t.Errorf("failed machine %s not replaced", n)
		}
	}
}

func TestHibernateNeedsStopStart(t *testing.T) {
	h := plantest.New(onProvider(cluster(1, 2), "md-0", "bare"))
	h.Providers = map[string][]string{"sim": stopStart, "bare": nil}
	converge(t, h, nil)
	wantCondition(t, h.Status, plan.ConditionProvidersReady, "True", plan.ReasonProvidersRunning)

	h.Update(func(s *capnv1.ClusterSpec) { s.Hibernated = true })
	r, _ := h.Step()
	ups := of[plan.UpdateMachine](r)
	if len(ups) != 1 || len(r.Actions) != 1 || ups[0].Machine.Spec.Pool != plan.RoleControlPlane || !ups[0].Machine.Spec.Stopped {
		t.Fatalf("actions %v, want the control-plane machine stopped only", r.Actions)
	}
	c := wantCondition(t, r.Status, plan.ConditionProvidersReady, "False", plan.ReasonProviderLacksCapability,
		"provider bare (pool md-0) does not announce stop-start, which spec.hibernated needs", "clear spec.hibernated")
	if c.GetSeverity() != "Error" {
		t.Errorf("severity %q", c.GetSeverity())
	}
	r, _ = h.Step()
	if len(r.Actions) != 0 || r.RequeueAfter != 0 {
		t.Errorf("hibernated as far as it can: actions %v, requeue %v", r.Actions, r.RequeueAfter)
	}
	wantCondition(t, r.Status, plan.ConditionHibernated, "False", plan.ReasonProviderLacksCapability, "1 of 1 machines that can stop", "md-0 keep running")
	// Hibernated as far as it can be: the event says which machines run on.
	if want := "hibernated: 1 machine stopped, its disk kept; 2 machines of md-0 keep running (the provider cannot stop); capn wake demo starts it"; r.Status.GetPhaseValue() != capnv1.ClusterHibernated || r.PhaseMessage != want {
		t.Errorf("phase %s, message %q, want Hibernated: %q", r.Status.Phase, r.PhaseMessage, want)
	}
	for _, n := range h.Names("md-0") {
		if h.Machines[n].Spec.Stopped {
			t.Errorf("%s marked stopped on a provider that cannot stop", n)
		}
	}

	// A new cluster that asks for hibernation on such a provider is refused.
	nh := plantest.New(onProvider(cluster(1, 1), "md-0", "bare"))
	nh.Cluster.Spec.Hibernated = true
	nh.Providers = map[string][]string{"sim": stopStart, "bare": {"reboot"}}
	r, _ = nh.Step()
	if len(r.Actions) != 0 || r.Status.GetPhaseValue() != capnv1.ClusterPending {
		t.Fatalf("new hibernated cluster: actions %v, phase %s", r.Actions, r.Status.Phase)
	}
	wantCondition(t, r.Status, plan.ConditionReady, "False", plan.ReasonProviderLacksCapability, "bare")
}

func TestProvidersNotCheckedWithoutAnnouncements(t *testing.T) {
	h := plantest.New(onProvider(cluster(1, 1), "md-0", "nowhere"))
	converge(t, h, nil)
	if c := condition(h.Status, plan.ConditionProvidersReady); c != nil {
		t.Errorf("ProvidersReady written though providers were not checked: %v", c)
	}
}

func TestUnusedPoolNeedsNoProvider(t *testing.T) {
	h := plantest.New(onProvider(cluster(1, 1, 0), "md-1", "nowhere"))
	h.Providers = map[string][]string{"sim": stopStart}
	converge(t, h, nil)
	wantCondition(t, h.Status, plan.ConditionProvidersReady, "True", plan.ReasonProvidersRunning, "sim (control-plane, md-0)")
}

// TestWindowsPoolNeedsAProviderThatRunsWindows: a pool of an os its
// provider does not announce creates nothing and says why, while the
// rest of the cluster goes on; once the provider announces it, the pool's
// machines are made with that os (and a new template hash).
func TestWindowsPoolNeedsAProviderThatRunsWindows(t *testing.T) {
	c := cluster(1, 1, 2)
	c.Spec.WorkerPools[1].Os = "windows"
	h := plantest.New(c)
	h.Providers = map[string][]string{"sim": stopStart}
	for range 40 {
		if _, err := h.Step(); err != nil {
			t.Fatal(err)
		}
	}
	if n := len(h.Names("md-1")); n != 0 {
		t.Fatalf("md-1 (windows) got %d machines on a linux-only provider", n)
	}
	if len(h.Names("md-0")) != 1 || len(h.Names(plan.RoleControlPlane)) != 1 {
		t.Fatalf("the linux pools were held too: %v", h.Names(""))
	}
	c2 := wantCondition(t, h.Status, plan.ConditionProvidersReady, "False", plan.ReasonProviderLacksOS,
		"provider sim (pool md-1) does not run windows machines (it announces linux): no machine of the pool is created", "set the pool's os")
	if c2.GetSeverity() != "Error" {
		t.Errorf("severity %q", c2.GetSeverity())
	}
	wantCondition(t, h.Status, plan.ConditionWorkersReady, "False", plan.ReasonProviderLacksOS, "provider sim does not run windows machines")

	h.ProviderOS = map[string][]string{"sim": {"linux", "windows"}}
	converge(t, h, nil)
	names := h.Names("md-1")
	if len(names) != 2 {
		t.Fatalf("md-1 has %v", names)
	}
	for _, n := range names {
		if os := h.Machines[n].GetSpec().GetOs(); os != "windows" {
			t.Errorf("%s: os %q, want windows", n, os)
		}
	}
	if os := h.Machines[h.Names("md-0")[0]].GetSpec().GetOs(); os != "linux" {
		t.Errorf("md-0 machine os %q, want linux", os)
	}
}
