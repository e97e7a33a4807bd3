package plan_test

import (
	"fmt"
	"hash/fnv"
	"strconv"
	"testing"
	"time"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"
	"pgregory.net/rapid"

	capnv1 "github.com/capn-dev/capn/schemas/capn/v1alpha1"
	"github.com/capn-dev/capn/schemas/manifest"
	"github.com/capn-dev/capn/services/cluster-planner/plan"
	"github.com/capn-dev/capn/services/cluster-planner/plan/plantest"
)

// Property tests of the planner. Each check builds a random cluster, runs it
// in the plantest simulator to Ready, changes it at random (versions,
// templates, replicas, strategies, labels, machines marked for deletion) a
// few times, runs it to Ready again, then deletes it — checking the
// invariants of every single plan on the way. Machines boot and delete in a
// random number of steps and some fail on boot. Run longer with
// -rapid.checks=1000.

var (
	intOrPercent = []string{"0", "1", "2", "3", "25%", "50%", "100%"}
	orders       = []string{manifest.DeletionOrderRandom, manifest.DeletionOrderOldest, manifest.DeletionOrderNewest}
)

func genPool(t *rapid.T, i int) *capnv1.WorkerPool {
	p := &capnv1.WorkerPool{
		Name:          "md-" + strconv.Itoa(i),
		Provider:      "sim",
		Replicas:      int32(rapid.IntRange(0, 5).Draw(t, "replicas")),
		DeletionOrder: rapid.SampledFrom(orders).Draw(t, "order"),
		Strategy:      genStrategy(t),
	}
	return p
}

func genStrategy(t *rapid.T) *capnv1.RolloutStrategy {
	if rapid.IntRange(0, 4).Draw(t, "onDelete") == 0 {
		return &capnv1.RolloutStrategy{Type: manifest.StrategyOnDelete}
	}
	s := &capnv1.RolloutStrategy{
		Type:           manifest.StrategyRollingUpdate,
		MaxSurge:       rapid.SampledFrom(intOrPercent).Draw(t, "maxSurge"),
		MaxUnavailable: rapid.SampledFrom(intOrPercent).Draw(t, "maxUnavailable"),
	}
	if (s.MaxSurge == "0" || s.MaxSurge == "0%") && s.MaxUnavailable == "0" {
		s.MaxSurge = "1"
	}
	return s
}

func genCPSurge(t *rapid.T, replicas int32) *int32 {
	s := int32(1)
	if replicas >= 3 && rapid.Bool().Draw(t, "cpSurge0") {
		s = 0
	}
	return &s
}

func genCluster(t *rapid.T) *capnv1.Cluster {
	cp := int32(rapid.SampledFrom([]int{1, 3, 5}).Draw(t, "cpReplicas"))
	c := cluster(cp)
	c.Spec.ControlPlane.MaxSurge = genCPSurge(t, cp)
	for i := range rapid.IntRange(0, 3).Draw(t, "pools") {
		c.Spec.WorkerPools = append(c.Spec.WorkerPools, genPool(t, i))
	}
	manifest.Default(c)
	if err := manifest.Validate(c); err != nil {
		t.Fatalf("generated an invalid cluster: %v", err)
	}
	return c
}

// mutate changes the spec as a user re-applying a manifest might.
func mutate(t *rapid.T, h *plantest.Harness, round int) {
	old := proto.Clone(h.Cluster).(*capnv1.Cluster)
	h.Update(func(s *capnv1.ClusterSpec) {
		v, _ := manifest.ParseVersion(s.KubernetesVersion)
		switch rapid.IntRange(0, 2).Draw(t, "versionChange") {
		case 1:
			v.Patch++
		case 2:
			v.Minor, v.Patch = v.Minor+1, 0
		}
		s.KubernetesVersion = v.String()
		if rapid.Bool().Draw(t, "cpChange") {
			s.ControlPlane.Replicas = int32(rapid.SampledFrom([]int{1, 3, 5}).Draw(t, "cpReplicas"))
			s.ControlPlane.MaxSurge = genCPSurge(t, s.ControlPlane.Replicas)
			if rapid.Bool().Draw(t, "cpTemplate") {
				s.ControlPlane.Template = &capnv1.MachineTemplate{Parameters: map[string]string{"round": strconv.Itoa(round)}}
			}
		}
		for _, p := range s.WorkerPools {
			if rapid.Bool().Draw(t, "poolFollows") {
				p.Version = s.KubernetesVersion
			}
			if rapid.Bool().Draw(t, "poolReplicas") {
				p.Replicas = int32(rapid.IntRange(0, 6).Draw(t, "replicas"))
			}
			if rapid.Bool().Draw(t, "poolTemplate") {
				p.Template = &capnv1.MachineTemplate{Parameters: map[string]string{"round": strconv.Itoa(round)}}
			}
			if rapid.Bool().Draw(t, "poolStrategy") {
				p.Strategy = genStrategy(t)
			}
			if rapid.Bool().Draw(t, "poolLabels") {
				p.Labels = map[string]string{"round": strconv.Itoa(round)}
				p.Taints = []*capnv1.Taint{{Key: "round", Value: strconv.Itoa(round), Effect: manifest.TaintNoSchedule}}
			}
		}
	})
	if err := manifest.ValidateUpdate(old, h.Cluster); err != nil {
		t.Fatalf("generated an invalid update: %v", err)
	}
	// The user marks some machines for deletion.
	for pool := range h.Counts() {
		for _, name := range h.Names(pool) {
			if rapid.IntRange(0, 9).Draw(t, "mark") == 0 {
				h.Annotate(name, plan.AnnotationDeleteMachine, "")
			}
		}
	}
}

// world sets random but reproducible boot and delete times and failures.
func world(t *rapid.T, h *plantest.Harness) {
	seed := rapid.Uint64().Draw(t, "seed")
	maxFail := rapid.IntRange(0, 3).Draw(t, "maxFailures")
	hash := func(s string) uint64 {
		f := fnv.New64a()
		fmt.Fprintf(f, "%d/%s", seed, s)
		return f.Sum64()
	}
	h.BootSteps = func(name string) int { return 1 + int(hash("boot/"+name)%4) }
	h.DeleteSteps = func(name string) int { return 1 + int(hash("delete/"+name)%3) }
	failed := 0
	h.FailBoot = func(name string) bool {
		if failed < maxFail && hash("fail/"+name)%6 == 0 {
			failed++
			return true
		}
		return false
	}
}

type poolRules struct {
	replicas, surge, unav int
	onDelete              bool
}

func rules(c *capnv1.Cluster) map[string]poolRules {
	s := c.Spec
	out := map[string]poolRules{}
	cpUnav := 0
	if s.ControlPlane.GetMaxSurge() == 0 {
		cpUnav = 1
	}
	out[manifest.ControlPlanePool] = poolRules{replicas: int(s.ControlPlane.Replicas), surge: int(s.ControlPlane.GetMaxSurge()), unav: cpUnav}
	for _, p := range s.WorkerPools {
		r := poolRules{replicas: int(p.Replicas), onDelete: p.Strategy.Type == manifest.StrategyOnDelete}
		if !r.onDelete {
			r.surge, _ = manifest.ResolveIntOrPercent(p.Strategy.MaxSurge, r.replicas, true)
			r.unav, _ = manifest.ResolveIntOrPercent(p.Strategy.MaxUnavailable, r.replicas, false)
			if r.surge == 0 && r.unav == 0 {
				r.unav = 1
			}
		}
		out[p.Name] = r
	}
	return out
}

// checkStep asserts the invariants of one plan.
func checkStep(h *plantest.Harness, rec plantest.Record) error {
	rs := rules(h.Cluster)
	creates := map[string]int{}
	deletes := map[string]int{}
	// markedGone counts available machines deleted because a user marked
	// them: scale-down takes them first even though they serve (Cluster API).
	markedGone := map[string]int{}
	// cpChanges counts control-plane creates and deletes other than of
	// failed machines.
	cpChanges := 0
	for _, a := range rec.Result.Actions {
		switch a := a.(type) {
		case plan.CreateMachine:
			name := a.Machine.Metadata.Name
			if !manifest.IsDNSLabel(name) {
				return fmt.Errorf("machine name %q is not a DNS label", name)
			}
			creates[a.Machine.Spec.Pool]++
			if a.Machine.Spec.Pool == manifest.ControlPlanePool {
				cpChanges++
			}
		case plan.DeleteMachine:
			m := h.Machines[a.Name]
			deletes[m.GetSpec().GetPool()]++
			if m.GetSpec().GetPool() == manifest.ControlPlanePool && h.Observed[a.Name].GetPhaseValue() != capnv1.MachineFailed {
				cpChanges++
			}
			if _, marked := m.GetMetadata().GetAnnotations()[plan.AnnotationDeleteMachine]; marked && h.Observed[a.Name].GetPhaseValue() == capnv1.MachineRunning {
				markedGone[m.GetSpec().GetPool()]++
			}
			if rs[m.GetSpec().GetPool()].onDelete && m.GetSpec().GetTemplateHash() != h.DesiredHash(m.GetSpec().GetPool()) &&
				h.Observed[a.Name].GetPhaseValue() != capnv1.MachineFailed && rec.Before[m.GetSpec().GetPool()].Active <= rs[m.GetSpec().GetPool()].replicas &&
				h.Cluster.Metadata.DeletionTimestamp == nil {
				return fmt.Errorf("OnDelete pool: planner deleted outdated machine %s itself", a.Name)
			}
		}
	}
	cpBefore := rec.Before[manifest.ControlPlanePool]
	if h.Cluster.Metadata.DeletionTimestamp == nil && cpChanges > 0 && (cpBefore.Total != cpBefore.Active || cpBefore.Available != cpBefore.Active) {
		return fmt.Errorf("control plane changed while not settled: %+v", cpBefore)
	}
	initialized := rec.Result.Status.GetControlPlaneInitialized()
	for pool, r := range rs {
		before, after := rec.Before[pool], rec.After[pool]
		if creates[pool] > 0 && !r.onDelete && after.Total > r.replicas+r.surge {
			return fmt.Errorf("pool %s: %d machines after creating %d, more than replicas %d + maxSurge %d (before %+v)", pool, after.Total, creates[pool], r.replicas, r.surge, before)
		}
		if h.Cluster.Metadata.DeletionTimestamp == nil && after.Available+markedGone[pool] < min(before.Available, r.replicas-r.unav) {
			return fmt.Errorf("pool %s: %d available after the plan, %d before; replicas %d - maxUnavailable %d", pool, after.Available, before.Available, r.replicas, r.unav)
		}
		if pool == manifest.ControlPlanePool {
			if creates[pool] > 1 || deletes[pool] > 1 && h.Cluster.Metadata.DeletionTimestamp == nil {
				return fmt.Errorf("control plane: %d creates and %d deletes in one plan", creates[pool], deletes[pool])
			}
			if !initialized && creates[pool] > 0 && after.Total > 1 {
				return fmt.Errorf("control plane: %d machines before initialization", after.Total)
			}
			continue
		}
		if creates[pool] > 0 && !initialized {
			return fmt.Errorf("pool %s: created machines before the control plane was initialized", pool)
		}
		if creates[pool] > 0 && cpBefore.OutdatedAll > 0 {
			return fmt.Errorf("pool %s: created machines while the control plane rolls (%d outdated)", pool, cpBefore.OutdatedAll)
		}
	}
	return nil
}

// userDeletesOutdated plays the user of OnDelete pools: one outdated machine
// per pool deleted per step.
func userDeletesOutdated(h *plantest.Harness) {
	for _, p := range h.Cluster.Spec.WorkerPools {
		if p.Strategy.Type != manifest.StrategyOnDelete {
			continue
		}
		hash := h.DesiredHash(p.Name)
		for _, name := range h.Names(p.Name) {
			m := h.Machines[name]
			if m.Spec.TemplateHash != hash && m.Metadata.DeletionTimestamp == nil {
				m.Metadata.DeletionTimestamp = timestamppb.New(h.Now)
				break
			}
		}
	}
}

func assertConverged(t *rapid.T, h *plantest.Harness) {
	for pool, r := range rules(h.Cluster) {
		c := h.Counts()[pool]
		if c.Total != r.replicas || c.Active != r.replicas || c.Available != r.replicas || c.Outdated != 0 {
			t.Fatalf("pool %s converged to %+v, want %d up-to-date available machines", pool, c, r.replicas)
		}
	}
}

func stepBound(c *capnv1.Cluster) int {
	n := int(c.Spec.ControlPlane.Replicas)
	for _, p := range c.Spec.WorkerPools {
		n += int(p.Replicas)
	}
	// Every machine may need a boot (≤4 steps), a delete (≤3) and a replan,
	// one control-plane machine at a time; failures add a few rounds.
	return 60 + 12*n
}

// stepsFor is stepBound for h: a bounded plan may take a step per action.
func stepsFor(h *plantest.Harness) int {
	if h.MaxActions > 0 {
		return 3 * stepBound(h.Cluster)
	}
	return stepBound(h.Cluster)
}

func TestPropertyLifecycle(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		h := plantest.New(genCluster(t))
		world(t, h)
		// A bounded plan (the planner's --max-actions-per-plan) keeps every
		// rule and converges, only in more steps.
		h.MaxActions = rapid.SampledFrom([]int{0, 0, 1, 3}).Draw(t, "maxActions")
		check := func(rec plantest.Record) error {
			if n := len(rec.Result.Actions); h.MaxActions > 0 && n > h.MaxActions {
				return fmt.Errorf("%d actions in a plan bounded to %d", n, h.MaxActions)
			}
			if err := checkStep(h, rec); err != nil {
				return err
			}
			userDeletesOutdated(h)
			return nil
		}
		if _, err := h.Run(stepsFor(h), check); err != nil {
			t.Fatalf("create: %v", err)
		}
		assertConverged(t, h)

		for round := range rapid.IntRange(1, 3).Draw(t, "rounds") {
			mutate(t, h, round+1)
			bound := stepsFor(h) * 2
			if _, err := h.Run(bound, check); err != nil {
				t.Fatalf("round %d: %v", round+1, err)
			}
			assertConverged(t, h)
			if err := labelsPropagated(h); err != nil {
				t.Fatal(err)
			}
		}

		h.Delete()
		deleteCheck := func(rec plantest.Record) error {
			workers := 0
			for pool, c := range rec.Before {
				if pool != manifest.ControlPlanePool {
					workers += c.Total
				}
			}
			for _, a := range rec.Result.Actions {
				if d, ok := a.(plan.DeleteMachine); ok && h.Machines[d.Name].GetSpec().GetPool() == manifest.ControlPlanePool && workers > 0 {
					return fmt.Errorf("deleted control-plane machine %s while %d worker machines exist", d.Name, workers)
				}
			}
			return nil
		}
		if _, err := h.Run(stepsFor(h), deleteCheck); err != nil {
			t.Fatalf("delete: %v", err)
		}
		if len(h.Machines) != 0 || h.Infra.Exists || h.PKI || !h.ClusterDeleted {
			t.Fatalf("after delete: %d machines, infra %t, pki %t, cluster deleted %t", len(h.Machines), h.Infra.Exists, h.PKI, h.ClusterDeleted)
		}
	})
}

func labelsPropagated(h *plantest.Harness) error {
	for _, p := range h.Cluster.Spec.WorkerPools {
		for _, name := range h.Names(p.Name) {
			m := h.Machines[name]
			if len(p.Labels) > 0 && m.Spec.Labels["round"] != p.Labels["round"] {
				return fmt.Errorf("machine %s labels %v, pool %v", name, m.Spec.Labels, p.Labels)
			}
		}
	}
	return nil
}

// TestPropertyRandomSnapshots plans once for arbitrary observed states —
// machines of current and old templates in every phase, deleting or not,
// marked, unhealthy — and checks the plan's invariants, that it is
// deterministic and that it does not modify its input.
func TestPropertyRandomSnapshots(t *testing.T) {
	phases := []capnv1.MachinePhase{capnv1.MachinePending, capnv1.MachineProvisioning, capnv1.MachineRunning, capnv1.MachineRunning,
		capnv1.MachineRunning, capnv1.MachineFailed, capnv1.MachineStopped, capnv1.MachineDeleted}
	rapid.Check(t, func(t *rapid.T) {
		c := genCluster(t)
		h := plantest.New(c)
		oldHash := map[string]string{}
		pools := []string{manifest.ControlPlanePool}
		for _, p := range c.Spec.WorkerPools {
			pools = append(pools, p.Name)
		}
		for _, pool := range pools {
			oldHash[pool] = "0ld0ld0ld0"
		}
		for i := range rapid.IntRange(0, 14).Draw(t, "machines") {
			pool := rapid.SampledFrom(pools).Draw(t, "pool")
			hash := h.DesiredHash(pool)
			if rapid.Bool().Draw(t, "old") {
				hash = oldHash[pool]
			}
			name := plan.MachineName("demo", pool, hash, i)
			m := &capnv1.Machine{
				Metadata: &capnv1.ObjectMeta{Name: name, CreationTimestamp: timestamppb.New(h.Now.Add(-timeDraw(t)))},
				Spec:     &capnv1.MachineSpec{Cluster: "demo", Pool: pool, TemplateHash: hash, FirstControlPlane: pool == manifest.ControlPlanePool && i == 0},
			}
			phase := rapid.SampledFrom(phases).Draw(t, "phase")
			if phase == capnv1.MachineDeleted || rapid.IntRange(0, 5).Draw(t, "deleting") == 0 {
				m.Metadata.DeletionTimestamp = timestamppb.New(h.Now)
			}
			st := &capnv1.MachineStatus{Phase: phase.Wire()}
			switch rapid.IntRange(0, 6).Draw(t, "health") {
			case 0:
				st.Conditions = []*capnv1.Condition{{Type: plan.ConditionNodeHealthy, Status: "False"}}
			case 1:
				m.Metadata.Annotations = map[string]string{plan.AnnotationUnhealthy: ""}
			case 2:
				m.Metadata.Annotations = map[string]string{plan.AnnotationDeleteMachine: ""}
			}
			h.Machines[name] = m
			if rapid.IntRange(0, 6).Draw(t, "noStatus") > 0 {
				h.Observed[name] = st
			}
		}
		if rapid.Bool().Draw(t, "initialized") {
			h.Status = &capnv1.ClusterStatus{ControlPlaneInitialized: true, Phase: capnv1.ClusterReady.Wire()}
		}

		in := h.Input()
		inCopy := cloneInput(in)
		r1 := plan.Plan(in)
		r2 := plan.Plan(cloneInput(in))
		if !sameInput(in, inCopy) {
			t.Fatal("Plan modified its input")
		}
		if fmt.Sprint(describeActions(r1)) != fmt.Sprint(describeActions(r2)) || !proto.Equal(r1.Status, r2.Status) {
			t.Fatalf("Plan is not deterministic:\n%v\n%v", describeActions(r1), describeActions(r2))
		}
		before := h.Counts()
		if err := h.Apply(r1); err != nil {
			t.Fatalf("apply: %v (actions %v)", err, describeActions(r1))
		}
		if err := checkStep(h, plantest.Record{Before: before, After: h.Counts(), Result: r1}); err != nil {
			t.Fatalf("%v (actions %v)", err, describeActions(r1))
		}
	})
}

func timeDraw(t *rapid.T) time.Duration {
	return time.Duration(rapid.IntRange(0, 1000).Draw(t, "age")) * time.Second
}

func describeActions(r plan.Result) []string {
	var out []string
	for _, a := range r.Actions {
		switch a := a.(type) {
		case plan.CreateMachine:
			out = append(out, "create "+a.Machine.Metadata.Name+" "+a.Reason)
		case plan.DeleteMachine:
			out = append(out, "delete "+a.Name+" "+a.Reason)
		case plan.UpdateMachine:
			out = append(out, "update "+a.Machine.Metadata.Name+" "+a.Reason)
		default:
			out = append(out, fmt.Sprintf("%T%+v", a, a))
		}
	}
	return out
}

func cloneInput(in plan.Input) plan.Input {
	out := in
	out.Cluster = proto.Clone(in.Cluster).(*capnv1.Cluster)
	out.Machines = map[string]*capnv1.Machine{}
	for k, v := range in.Machines {
		out.Machines[k] = proto.Clone(v).(*capnv1.Machine)
	}
	out.Observed = map[string]*capnv1.MachineStatus{}
	for k, v := range in.Observed {
		out.Observed[k] = proto.Clone(v).(*capnv1.MachineStatus)
	}
	if in.Status != nil {
		out.Status = proto.Clone(in.Status).(*capnv1.ClusterStatus)
	}
	return out
}

func sameInput(a, b plan.Input) bool {
	if !proto.Equal(a.Cluster, b.Cluster) || !proto.Equal(a.Status, b.Status) || len(a.Machines) != len(b.Machines) || len(a.Observed) != len(b.Observed) {
		return false
	}
	for k, v := range a.Machines {
		if !proto.Equal(v, b.Machines[k]) {
			return false
		}
	}
	for k, v := range a.Observed {
		if !proto.Equal(v, b.Observed[k]) {
			return false
		}
	}
	return true
}
