package remediator

import (
	"fmt"
	"testing"
	"time"

	"pgregory.net/rapid"

	capnv1 "github.com/capn-dev/capn/schemas/capn/v1alpha1"
	"github.com/capn-dev/capn/schemas/health/policy"
)

// genPool draws a pool with random machines, health, phases, markers and
// history.
func genPool(t *rapid.T, cp bool) Pool {
	name := "md-0"
	if cp {
		name = policy.ControlPlanePool
	}
	n := rapid.IntRange(0, 7).Draw(t, "machines")
	var ms []Machine
	for i := range n {
		m := mach(fmt.Sprintf("m%d", i))
		m.Phase = rapid.SampledFrom([]capnv1.MachinePhase{capnv1.MachineRunning, capnv1.MachineRunning, capnv1.MachineRunning, capnv1.MachineProvisioned, capnv1.MachineFailed}).Draw(t, "phase")
		m.Deleting = rapid.IntRange(0, 5).Draw(t, "deleting") == 0
		m.Skip = rapid.IntRange(0, 6).Draw(t, "skip") == 0
		m.CanReboot = rapid.Bool().Draw(t, "reboot")
		if rapid.Bool().Draw(t, "sick") {
			sick(rapid.SampledFrom([]string{"Ready", "KernelDeadlock", "InfrastructureGone", "NodeStartupTimeout"}).Draw(t, "reason"))(&m)
		}
		ms = append(ms, m)
	}
	p := pool(name, rapid.IntRange(0, 7).Draw(t, "replicas"), ms...)
	p.Policy.MaxUnhealthy = policy.MustThreshold(rapid.SampledFrom([]string{"40%", "100%", "1", "3", "[1-2]", "0"}).Draw(t, "maxUnhealthy"))
	p.Policy.MaxInFlight = rapid.IntRange(1, 3).Draw(t, "maxInFlight")
	var recs []*capnv1.RemediationRecord
	for range rapid.IntRange(0, 3).Draw(t, "records") {
		if n == 0 {
			break
		}
		recs = append(recs, rec(fmt.Sprintf("m%d", rapid.IntRange(0, n-1).Draw(t, "recMachine")),
			rapid.SampledFrom([]string{ActionReboot, ActionReplace}).Draw(t, "recAction"),
			rapid.SampledFrom([]string{OutcomeInProgress, OutcomeSucceeded, OutcomeFailed}).Draw(t, "recOutcome"),
			-time.Duration(rapid.IntRange(0, 7200).Draw(t, "recAge"))*time.Second))
	}
	if len(recs) > 0 {
		p = withHistory(p, recs...)
	}
	return p
}

// TestGuardProperties: for any pool, the new repairs Decide starts
//   - are none while the cluster is paused (not even re-drives);
//   - are none when the circuit breaker trips;
//   - never touch a machine that is deleting, failed, annotated
//     skip-remediation, or already under repair, and touch each machine
//     at most once;
//   - never bring repairs in flight above maxInFlight (1 for the control
//     plane);
//   - for an initialised control plane, never take down a member unless
//     the others keep etcd's quorum of healthy members;
//
// and Decide is deterministic.
func TestGuardProperties(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		cp := rapid.Bool().Draw(t, "controlPlane")
		p := genPool(t, cp)
		s := Snapshot{Cluster: "c1", Paused: rapid.IntRange(0, 4).Draw(t, "paused") == 0, ControlPlaneInitialized: rapid.Bool().Draw(t, "init"), Pools: []Pool{p}, Now: t0}
		d := Decide(s, Timing{})
		again := Decide(s, Timing{})
		if fmt.Sprint(d.Actions) != fmt.Sprint(again.Actions) {
			t.Fatal("not deterministic")
		}
		var fresh []Action
		for _, a := range d.Actions {
			if !a.Redrive {
				fresh = append(fresh, a)
			}
		}
		if s.Paused && len(d.Actions) > 0 {
			t.Fatalf("acted on a paused cluster: %v", d.Actions)
		}
		if len(fresh) == 0 {
			return
		}
		var inProgress []recordRef
		for _, r := range refs(p.Status) {
			if r.rec.GetOutcome() != OutcomeInProgress {
				continue
			}
			if out, _ := settle(r, p, Timing{}.withDefaults(), t0); out == OutcomeInProgress {
				inProgress = append(inProgress, r)
			}
		}
		c := count(p, inProgress)
		if !p.Policy.MaxUnhealthy.Allows(c.Unhealthy, c.Total) {
			t.Fatalf("acted although %d of %d unhealthy exceeds %s: %v", c.Unhealthy, c.Total, p.Policy.MaxUnhealthy, fresh)
		}
		limit := p.Policy.MaxInFlight
		if cp {
			limit = 1
		}
		if c.InFlight+len(fresh) > limit {
			t.Fatalf("%d in flight + %d new > %d", c.InFlight, len(fresh), limit)
		}
		seen := map[string]bool{}
		for _, a := range fresh {
			if seen[a.Machine] {
				t.Fatalf("%s repaired twice", a.Machine)
			}
			seen[a.Machine] = true
			for _, r := range inProgress {
				if r.rec.GetMachine() == a.Machine {
					t.Fatalf("%s already under repair", a.Machine)
				}
			}
			var m Machine
			for _, x := range p.Machines {
				if x.Name == a.Machine {
					m = x
				}
			}
			if m.Deleting || m.Phase == capnv1.MachineFailed || m.Skip || len(m.Reasons) == 0 {
				t.Fatalf("repaired %+v", m)
			}
			if cp && s.ControlPlaneInitialized {
				n, healthy := 0, 0
				for _, x := range p.Machines {
					if !x.Deleting {
						n++
						if x.Name != m.Name && x.healthy() {
							healthy++
						}
					}
				}
				if healthy < (n-1)/2+1 {
					t.Fatalf("took %s down leaving %d healthy of %d members", m.Name, healthy, n-1)
				}
			}
		}
	})
}
