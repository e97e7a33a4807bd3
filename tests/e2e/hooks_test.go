package e2e

import (
	"context"
	"errors"
	"maps"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/capn-dev/capn/events/natstest"
	"github.com/capn-dev/capn/events/store"
	"github.com/capn-dev/capn/gateway/api"
	"github.com/capn-dev/capn/gateway/client"
	"github.com/capn-dev/capn/schemas/annotations"
	capnv1 "github.com/capn-dev/capn/schemas/capn/v1alpha1"
	"github.com/capn-dev/capn/schemas/conditions"
	"github.com/capn-dev/capn/schemas/keys"
	"github.com/capn-dev/capn/tests/internal/harness"
)

// hookWorld is every core service and the gateway with the demo cluster
// Ready, and a client of the gateway (what capn hook and capn delete
// machine call).
func hookWorld(t *testing.T) (*world, *client.Client) {
	t.Helper()
	w := newWorld(t)
	w.startAll()
	w.Start(harness.Gateway)
	w.Apply(harness.Demo)
	w.WaitReady("demo", 60*time.Second)
	return w, w.Client()
}

// workers are the names of a pool's machines that are not being deleted.
func (w *world) workers(pool string) []string {
	w.t.Helper()
	var out []string
	for key, m := range harness.Entries(w.t, w.Desired, w.Machines, keys.MachinesOf("demo"), nil) {
		if m.GetSpec().GetPool() == pool && m.GetMetadata().GetDeletionTimestamp() == nil {
			out = append(out, strings.TrimPrefix(key, keys.MachinesOf("demo")))
		}
	}
	return out
}

// recordHistory collects every value the desired record of machine takes
// from now on (puts; deletions as nil), until the test ends.
func (w *world) recordHistory(machine string) func() []*capnv1.Machine {
	w.t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	w.t.Cleanup(cancel)
	kw, err := w.Desired.Watch(ctx, keys.Machine("demo", machine), jetstream.UpdatesOnly())
	if err != nil {
		w.t.Fatal(err)
	}
	hist := make(chan *capnv1.Machine, 100)
	go func() {
		defer close(hist)
		for e := range kw.Updates() {
			if e == nil {
				continue
			}
			if e.Operation() != jetstream.KeyValuePut {
				hist <- nil
				continue
			}
			if m, err := store.Decode(e.Value(), func() *capnv1.Machine { return new(capnv1.Machine) }); err == nil {
				hist <- m
			}
		}
	}()
	return func() []*capnv1.Machine {
		cancel()
		var out []*capnv1.Machine
		for m := range hist {
			out = append(out, m)
		}
		return out
	}
}

// TestHookSurvivesThePlanner: a pre-terminate hook added through the
// gateway to a worker stays on it while the cluster-planner rewrites the
// machine (an in-place label change of its pool) and while it processes
// the machine's deletion (capn delete machine) and creates a
// replacement: every value the machine's record takes carries the hook.
func TestHookSurvivesThePlanner(t *testing.T) {
	w, c := hookWorld(t)
	ctx := context.Background()
	machine := w.workers("md-0")[0]
	key := annotations.PreTerminateHookPrefix + "backup"
	if _, added, err := c.AddHook(ctx, "demo", machine, api.HookRequest{Phase: api.HookPreTerminate, Name: "backup", Holder: "e2e"}); err != nil || !added {
		t.Fatalf("add hook: added %v, %v", added, err)
	}
	history := w.recordHistory(machine)

	// The planner rewrites the machine in place: labels of its pool.
	w.MutateCluster("demo", func(cl *capnv1.Cluster) {
		for _, p := range cl.Spec.WorkerPools {
			if p.Name == "md-0" {
				p.Labels = map[string]string{"tier": "batch"}
			}
		}
	})
	natstest.WaitFor(t, 30*time.Second, machine+" has the pool's new labels", func() bool {
		m, _, err := w.Machines.Get(ctx, keys.Machine("demo", machine))
		return err == nil && maps.Equal(m.GetSpec().GetLabels(), map[string]string{"tier": "batch"})
	})

	before := map[string]bool{}
	for _, n := range w.workers("md-0") {
		before[n] = true
	}
	start := time.Now()
	m, err := c.DeleteMachine(ctx, "demo", machine)
	if err != nil || m.GetMetadata().GetDeletionTimestamp() == nil {
		t.Fatalf("delete machine: %v %v", m, err)
	}
	if _, err := c.DeleteMachine(ctx, "demo", machine); !client.IsConflict(err) {
		t.Errorf("a second delete: %v, want a conflict", err)
	}
	var replacement string
	natstest.WaitFor(t, 60*time.Second, "a Running replacement of "+machine, func() bool {
		for _, n := range w.workers("md-0") {
			if !before[n] {
				st, _, err := w.MachineStatuses.Get(ctx, keys.Machine("demo", n))
				if err == nil && st.GetPhaseValue() == capnv1.MachineRunning {
					replacement = n
					return true
				}
			}
		}
		return false
	})
	t.Logf("replacement %s Running %s after the delete", replacement, time.Since(start).Round(time.Millisecond))
	if cur, _, err := w.Machines.Get(ctx, keys.Machine("demo", machine)); err == nil {
		if cur.GetMetadata().GetAnnotations()[key] != "e2e" {
			t.Errorf("the deleting machine lost its hook: %v", cur.GetMetadata().GetAnnotations())
		}
	} else if !errors.Is(err, store.ErrNotFound) {
		t.Fatal(err)
	}
	if n := len(w.workers("md-0")); n != 3 {
		t.Errorf("md-0 has %d machines not being deleted, want 3 (replicas unchanged)", n)
	}

	puts, deleting := 0, 0
	for _, v := range history() {
		if v == nil {
			continue // the record removed once the machine is Deleted
		}
		puts++
		if v.GetMetadata().GetDeletionTimestamp() != nil {
			deleting++
		}
		if v.GetMetadata().GetAnnotations()[key] != "e2e" {
			t.Errorf("a write of %s (generation %d, deleting %v) dropped the hook: %v", machine, v.GetMetadata().GetGeneration(),
				v.GetMetadata().GetDeletionTimestamp() != nil, v.GetMetadata().GetAnnotations())
		}
	}
	if puts < 2 || deleting < 1 {
		t.Errorf("saw %d writes of %s (%d deleting): want the label change and the deletion", puts, machine, deleting)
	}
}

// TestHookHoldsDeletionUntilReleased: a deleting machine with a pre-drain
// hook waits before its drain, one with a pre-terminate hook before its
// infrastructure is deleted — each with its condition False
// WaitingExternalHook, listed as holding — until the holder releases the
// hook; then both go.
func TestHookHoldsDeletionUntilReleased(t *testing.T) {
	w, c := hookWorld(t)
	ctx := context.Background()
	held := map[string]string{ // machine → phase
		w.workers("md-0")[0]: api.HookPreDrain,
		w.workers("md-1")[0]: api.HookPreTerminate,
	}
	cond := map[string]string{api.HookPreDrain: "PreDrainDeleteHookSucceeded", api.HookPreTerminate: "PreTerminateDeleteHookSucceeded"}
	for m, phase := range held {
		if _, _, err := c.AddHook(ctx, "demo", m, api.HookRequest{Phase: phase, Name: "hold", Holder: "e2e"}); err != nil {
			t.Fatal(err)
		}
		if _, err := c.DeleteMachine(ctx, "demo", m); err != nil {
			t.Fatal(err)
		}
	}
	for m, phase := range held {
		natstest.WaitFor(t, 30*time.Second, m+" held at "+phase, func() bool {
			st, _, err := w.MachineStatuses.Get(ctx, keys.Machine("demo", m))
			hc := conditions.Get(st.GetConditions(), cond[phase])
			return err == nil && st.GetPhaseValue() == capnv1.MachineDeleting &&
				hc.GetStatusValue() == capnv1.ConditionFalse && hc.GetReason() == "WaitingExternalHook"
		})
	}
	hooks, err := c.Hooks(ctx, "demo")
	if err != nil {
		t.Fatal(err)
	}
	for _, h := range hooks {
		if !h.Holding || h.MachinePhase != "Deleting" {
			t.Errorf("hook %+v is not holding", h)
		}
	}
	// Held: the pre-terminate machine's infrastructure is still there.
	for m, phase := range held {
		if _, _, err := w.Infra.Get(ctx, keys.Infra("sim", "demo", m)); phase == api.HookPreTerminate && err != nil {
			t.Errorf("%s held at pre-terminate has no infrastructure: %v", m, err)
		}
	}
	for m, phase := range held {
		if _, err := c.ReleaseHook(ctx, "demo", m, phase, "hold", client.ReleaseOptions{Holder: "e2e"}); err != nil {
			t.Fatal(err)
		}
	}
	for m := range held {
		natstest.WaitFor(t, 60*time.Second, m+" gone after its hook's release", func() bool {
			_, _, err := w.MachineStatuses.Get(ctx, keys.Machine("demo", m))
			return errors.Is(err, store.ErrNotFound)
		})
	}
	w.WaitReady("demo", 60*time.Second)
}
