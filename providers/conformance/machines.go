package conformance

import (
	"bytes"
	"fmt"
	"slices"
	"testing"
	"time"

	"google.golang.org/protobuf/proto"

	"github.com/capn-dev/capn/events/natstest"
	"github.com/capn-dev/capn/providers/sdk"
	capnv1 "github.com/capn-dev/capn/schemas/capn/v1alpha1"
)

// announces: provider.<name> holds the name and exactly the power
// capabilities Features claims.
func (s *suite) announces(t *testing.T, e *Env) {
	e.StartProvider()
	a, _ := e.Announcement(e.Provider)
	if a.GetName() != e.Provider || a.GetTime() == nil {
		t.Errorf("announcement = %v", a)
	}
	for _, c := range []struct {
		capability string
		claimed    bool
	}{{sdk.CapabilityStopStart, s.f.StopStart}, {sdk.CapabilityReboot, s.f.Reboot}} {
		if got := slices.Contains(a.GetCapabilities(), c.capability); got != c.claimed {
			t.Errorf("announces %s: %v, Features say %v (capabilities %v)", c.capability, got, c.claimed, a.GetCapabilities())
		}
	}
	e.StopProvider()
	if _, ok := e.Announcement(e.Provider); ok {
		t.Error("the announcement is left after a clean stop")
	}
}

// createIsIdempotent: the same create three times (a redelivery with the
// same id, a retry with another) makes one machine, with an identity.
func (s *suite) createIsIdempotent(t *testing.T, e *Env) {
	e.StartProvider()
	for _, id := range []string{"create-a", "create-a", "create-b"} {
		e.Create("m1", id)
	}
	m := e.WaitState("m1", sdk.StateRunning)
	e.WaitDrained()
	if keys := e.Keys(sdk.InfraPrefix(e.Provider) + e.Cluster + "."); len(keys) != 1 {
		t.Errorf("records after three creates: %v", keys)
	}
	if m.GetProviderId() == "" || len(m.GetAddresses()) == 0 || m.GetUpdated() == nil {
		t.Errorf("record lacks an identity: %v", m)
	}
	// The same create after it runs changes nothing.
	e.Create("m1", "create-c")
	e.WaitDrained()
	again, _ := e.Machine(e.Provider, e.Cluster, "m1")
	if !sameIdentity(m, again) || again.GetStateValue() != sdk.StateRunning {
		t.Errorf("a repeated create changed the machine:\n before %v\n after  %v", m, again)
	}
	if s.f.Heartbeats {
		hb, _ := e.WaitHeartbeat("m1", "")
		if !hb.GetReady() || hb.GetKubeletVersion() != Version || hb.GetMachine() != "m1" || hb.GetCluster() != e.Cluster {
			t.Errorf("heartbeat = %v", hb)
		}
	}
	if s.f.NodeAgent && e.fixture.fetches.Load() == 0 {
		t.Error("the node never fetched its bootstrap data")
	}
	e.Delete("m1", "delete-m1")
	e.WaitGone("m1")
	e.waitNoLeftovers(e.Cluster)
}

// deleteMissing: deleting what never existed succeeds and writes nothing.
func (s *suite) deleteMissing(t *testing.T, e *Env) {
	e.StartProvider()
	e.Delete("nope", "delete-nope")
	e.WaitDrained()
	if keys := e.Keys(sdk.InfraPrefix(e.Provider)); len(keys) != 0 {
		t.Errorf("deleting a missing machine left %v", keys)
	}
	e.waitNoLeftovers(e.Cluster)
}

// deleteLeavesNothing: after a delete, neither a record nor anything on
// the host is left.
func (s *suite) deleteLeavesNothing(t *testing.T, e *Env) {
	e.StartProvider()
	e.Create("m1", "create-m1")
	e.Create("m2", "create-m2")
	e.WaitState("m1", sdk.StateRunning)
	e.WaitState("m2", sdk.StateRunning)
	if s.f.Leftovers != nil && len(e.leftovers(e.Cluster)) == 0 {
		t.Error("Leftovers finds nothing of two running machines: it cannot tell a clean delete")
	}
	e.Delete("m1", "delete-m1")
	e.Delete("m2", "delete-m2")
	e.WaitGone("m1")
	e.WaitGone("m2")
	e.waitNoLeftovers(e.Cluster)
	// A repeated delete of a deleted machine succeeds too.
	e.Delete("m1", "delete-m1-again")
	e.WaitDrained()
	if _, ok := e.Machine(e.Provider, e.Cluster, "m1"); ok {
		t.Error("a repeated delete wrote a record")
	}
}

// outOfBandDelete: a machine removed behind capn's back is reported Gone
// and recorded Deleted; capn's delete then clears it.
func (s *suite) outOfBandDelete(t *testing.T, e *Env) {
	e.StartProvider()
	e.Create("m1", "create-m1")
	before := e.WaitState("m1", sdk.StateRunning)
	s.f.OutOfBandDelete(t, e, e.Cluster, "m1")
	start := time.Now()
	d := e.waitDrift("m1", sdk.DriftGone)
	gone := e.WaitState("m1", sdk.StateDeleted)
	t.Logf("out-of-band delete reported Gone after %s", time.Since(start).Round(time.Millisecond))
	if d.GetProvider() != e.Provider || gone.GetProviderId() != before.GetProviderId() {
		t.Errorf("drift %v, record %v", d, gone)
	}
	e.Delete("m1", "delete-m1")
	e.WaitGone("m1")
	e.waitNoLeftovers(e.Cluster)
}

// stopStart: stop and start keep the provider id, the addresses and the
// disk; stopping twice is fine.
func (s *suite) stopStart(t *testing.T, e *Env) {
	e.StartProvider()
	e.Create("m1", "create-m1")
	before := e.WaitState("m1", sdk.StateRunning)
	lastBeat := s.beat(e, "m1", "")
	marker := s.writeMarker(t, e, "m1")
	e.Power("m1", sdk.ActionStop)
	stopped := e.WaitState("m1", sdk.StateStopped)
	e.Power("m1", sdk.ActionStop)
	e.WaitDrained()
	if m, _ := e.Machine(e.Provider, e.Cluster, "m1"); m.GetStateValue() != sdk.StateStopped {
		t.Errorf("a second stop left %v", m)
	}
	e.Power("m1", sdk.ActionStart)
	after := e.WaitState("m1", sdk.StateRunning)
	for _, m := range []*capnv1.InfraMachine{stopped, after} {
		if !sameIdentity(before, m) {
			t.Errorf("identity changed:\n before %v\n now    %v", before, m)
		}
	}
	s.checkMarker(t, e, "m1", marker)
	s.beat(e, "m1", lastBeat)
	e.Delete("m1", "delete-m1")
	e.WaitGone("m1")
	e.waitNoLeftovers(e.Cluster)
}

// reboot keeps the identity and the disk, and the node reports again.
func (s *suite) reboot(t *testing.T, e *Env) {
	e.StartProvider()
	e.Create("m1", "create-m1")
	before := e.WaitState("m1", sdk.StateRunning)
	lastBeat := s.beat(e, "m1", "")
	marker := s.writeMarker(t, e, "m1")
	e.Power("m1", sdk.ActionReboot)
	e.WaitDrained()
	after := e.WaitState("m1", sdk.StateRunning)
	if !sameIdentity(before, after) {
		t.Errorf("identity changed:\n before %v\n after  %v", before, after)
	}
	s.checkMarker(t, e, "m1", marker)
	s.beat(e, "m1", lastBeat)
	e.Delete("m1", "delete-m1")
	e.WaitGone("m1")
}

// beat waits for a heartbeat after the one with id after, if the
// provider's nodes report.
func (s *suite) beat(e *Env, machine, after string) string {
	if !s.f.Heartbeats {
		return ""
	}
	_, id := e.WaitHeartbeat(machine, after)
	return id
}

const markerPath = "/var/lib/capn-conformance/marker"

func (s *suite) writeMarker(t *testing.T, e *Env, machine string) []byte {
	if s.f.Disk == nil {
		return nil
	}
	data := []byte("written by the conformance suite at " + time.Now().Format(time.RFC3339Nano))
	s.f.Disk.Write(t, e, e.Cluster, machine, markerPath, data)
	return data
}

func (s *suite) checkMarker(t *testing.T, e *Env, machine string, want []byte) {
	if s.f.Disk == nil {
		return
	}
	got, ok := s.f.Disk.Read(t, e, e.Cluster, machine, markerPath)
	if !ok || !bytes.Equal(got, want) {
		t.Errorf("the machine's disk lost a file: read %q (exists %v), wrote %q", got, ok, want)
	}
}

// sameIdentity compares provider id and addresses.
func sameIdentity(a, b *capnv1.InfraMachine) bool {
	if a.GetProviderId() != b.GetProviderId() || len(a.GetAddresses()) != len(b.GetAddresses()) {
		return false
	}
	for i := range a.GetAddresses() {
		if !proto.Equal(a.GetAddresses()[i], b.GetAddresses()[i]) {
			return false
		}
	}
	return true
}

// waitDrift waits (Features.Timeout) for a drift report of kind.
func (e *Env) waitDrift(machine, kind string) *capnv1.DriftReport {
	e.t.Helper()
	var got *capnv1.DriftReport
	natstest.WaitFor(e.t, e.s.f.Timeout, fmt.Sprintf("a drift report %s of %s/%s", kind, e.Cluster, machine), func() bool {
		d, ok := e.LastDrift(e.Cluster, machine)
		if ok && d.GetKind() == kind {
			got = d
		}
		return got != nil
	})
	return got
}
