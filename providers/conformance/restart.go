package conformance

import (
	"testing"

	"github.com/capn-dev/capn/events/natstest"
	"github.com/capn-dev/capn/providers/sdk"
	capnv1 "github.com/capn-dev/capn/schemas/capn/v1alpha1"
)

// restart: machines outlive a restart of the provider — none lost, none
// duplicated, identities and states kept, no false drift — and what
// changed while it was down (a machine removed out of band) is reported
// after it.
func (s *suite) restart(t *testing.T, e *Env) {
	e.StartProvider()
	names := []string{"m1", "m2", "m3"}
	before := map[string]*capnv1.InfraMachine{}
	for _, m := range names {
		e.Create(m, "create-"+m)
	}
	for _, m := range names {
		before[m] = e.WaitState(m, sdk.StateRunning)
	}
	if s.f.StopStart {
		e.Power("m3", sdk.ActionStop)
		before["m3"] = e.WaitState("m3", sdk.StateStopped)
	}
	lastBeat := s.beat(e, "m1", "")
	e.WaitDrained()
	e.StopProvider()
	if s.f.OutOfBandDelete != nil {
		s.f.OutOfBandDelete(t, e, e.Cluster, "m2")
	}

	e.StartProvider()
	// A redelivered create of a machine it has, and a new machine.
	e.Create("m1", "create-m1-after-restart")
	e.Create("m4", "create-m4")
	m4 := e.WaitState("m4", sdk.StateRunning)
	e.WaitDrained()
	if s.f.OutOfBandDelete != nil {
		e.waitDrift("m2", sdk.DriftGone)
		e.WaitState("m2", sdk.StateDeleted)
	}
	// A few drift passes over the adopted machines (the SDK counts them),
	// then none may have reported drift.
	passes := e.Counter(sdk.MetricDriftPasses)
	natstest.WaitFor(t, e.s.f.Timeout, "three more drift passes", func() bool {
		return e.Counter(sdk.MetricDriftPasses) >= passes+3
	})
	for _, m := range names {
		if m == "m2" && s.f.OutOfBandDelete != nil {
			continue
		}
		now, ok := e.Machine(e.Provider, e.Cluster, m)
		if !ok || now.GetState() != before[m].GetState() || !sameIdentity(before[m], now) {
			t.Errorf("%s after the restart:\n before %v\n after  %v", m, before[m], now)
		}
		if d, ok := e.LastDrift(e.Cluster, m); ok {
			t.Errorf("%s: drift %s reported for a machine that did not change: %s", m, d.GetKind(), d.GetMessage())
		}
	}
	if keys := e.Keys(sdk.InfraPrefix(e.Provider) + e.Cluster + "."); len(keys) != 4 {
		t.Errorf("records after the restart: %v", keys)
	}
	for _, m := range names {
		if m == "m2" && s.f.OutOfBandDelete != nil {
			continue // gone: its address may be given out again
		}
		for _, a := range before[m].GetAddresses() {
			for _, b := range m4.GetAddresses() {
				if a.GetType() == "InternalIP" && b.GetType() == "InternalIP" && a.GetAddress() == b.GetAddress() {
					t.Errorf("the new machine m4 got %s's address %s", m, a.GetAddress())
				}
			}
		}
	}
	s.beat(e, "m1", lastBeat)
	for _, m := range append(names, "m4") {
		e.Delete(m, "delete-"+m)
	}
	for _, m := range append(names, "m4") {
		e.WaitGone(m)
	}
	e.waitNoLeftovers(e.Cluster)
}
