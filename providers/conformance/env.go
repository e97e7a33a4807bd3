package conformance

import (
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/capn-dev/capn/events/natstest"
	"github.com/capn-dev/capn/providers/sdk"
	"github.com/capn-dev/capn/providers/sdk/sdktest"
	capnv1 "github.com/capn-dev/capn/schemas/capn/v1alpha1"
	"github.com/capn-dev/capn/schemas/keys"
)

// Version is the Kubernetes version of the suite's machines.
const Version = "v1.33.4"

// Env is one check's world: an embedded server with capn's topology
// (sdktest.Env: Send, Machine, WaitDrift, LastHeartbeat, ...), the
// provider's state, and names unique to this test run.
type Env struct {
	*sdktest.Env
	// Provider is the provider's name.
	Provider string
	// Dir is a fresh directory for the provider's state.
	Dir string
	// NATSURL is the server's client URL.
	NATSURL string
	// Deployment is unique to this check: a provider whose objects are
	// global (docker) scopes them with it.
	Deployment string
	// Cluster is the check's cluster name, unique to this test run.
	Cluster string
	// SDK are the SDK options New should run the provider with.
	SDK sdk.Options
	// KubeBin, set by the Kubernetes checks, lists the directories of
	// Kubernetes binaries, one per version, colon-separated, that New must
	// run the provider's machines with (the process provider's
	// --kube-bin): each machine runs those of its version.
	KubeBin string

	t       *testing.T
	s       *suite
	stop    func()
	fixture *fixture
}

func (s *suite) newEnv(t *testing.T) *Env {
	e := &Env{
		Env: sdktest.New(t), Provider: s.p.Name, Dir: t.TempDir(),
		Deployment: uniqueName("cf"), Cluster: uniqueName("c"), SDK: SDKOptions(), t: t, s: s,
	}
	e.NATSURL = e.Server.URL()
	e.WaitTimeout = s.f.Timeout // sdktest's waits (drained, drift) as long as the suite's
	return e
}

// StartProvider runs a new instance of the provider (a restart when one
// ran before) and waits for its announcement.
func (e *Env) StartProvider() {
	e.t.Helper()
	e.stop = e.Run(e.s.p.New(e.t, e))
	natstest.WaitFor(e.t, e.s.f.Timeout, "the provider's announcement", func() bool {
		_, ok := e.Announcement(e.Provider)
		return ok
	})
}

// StopProvider stops the running instance cleanly.
func (e *Env) StopProvider() {
	e.t.Helper()
	if e.stop != nil {
		e.stop()
		e.stop = nil
	}
}

// Create sends a CreateMachine for machine of the env's cluster with
// event id id (the bootstrap checksum is the fixture's when NodeAgent).
func (e *Env) Create(machine, id string) {
	e.t.Helper()
	req := &capnv1.CreateMachine{
		Cluster: e.Cluster, Machine: machine, Role: "worker", Version: Version,
		BootstrapSecretKey: keys.Bootstrap(e.Cluster, machine),
		BootstrapChecksum:  e.bootstrapFixture().checksum,
		Labels:             map[string]string{"capn.dev/conformance": "true"},
	}
	e.Send(e.Provider, sdk.KindMachine, "create", id, req)
}

// Delete sends a DeleteMachine.
func (e *Env) Delete(machine, id string) {
	e.t.Helper()
	e.Send(e.Provider, sdk.KindMachine, "delete", id, &capnv1.DeleteMachine{Cluster: e.Cluster, Machine: machine})
}

// Power sends a MachinePower (stop, start, reboot) with a fresh event id.
func (e *Env) Power(machine, action string) {
	e.t.Helper()
	id := fmt.Sprintf("%s.%s.%s.%d", action, e.Cluster, machine, time.Now().UnixNano())
	e.Send(e.Provider, sdk.KindMachine, action, id, &capnv1.MachinePower{Cluster: e.Cluster, Machine: machine, Action: action})
}

// WaitState waits (Features.Timeout) for the machine's record in state.
func (e *Env) WaitState(machine string, state capnv1.InfraState) *capnv1.InfraMachine {
	e.t.Helper()
	var got *capnv1.InfraMachine
	natstest.WaitFor(e.t, e.s.f.Timeout, fmt.Sprintf("%s/%s in state %s", e.Cluster, machine, state.Wire()), func() bool {
		m, ok := e.Machine(e.Provider, e.Cluster, machine)
		if ok && m.GetStateValue() == state {
			got = m
			return true
		}
		if ok && m.GetStateValue() == sdk.StateFailed && state != sdk.StateFailed {
			e.t.Fatalf("%s/%s failed: %s", e.Cluster, machine, m.GetMessage())
		}
		return false
	})
	return got
}

// WaitGone waits for the machine's record to be deleted.
func (e *Env) WaitGone(machine string) {
	e.t.Helper()
	natstest.WaitFor(e.t, e.s.f.Timeout, fmt.Sprintf("%s/%s record deleted", e.Cluster, machine), func() bool {
		_, ok := e.Machine(e.Provider, e.Cluster, machine)
		return !ok
	})
}

// WaitDrained waits until the provider handled every command sent.
func (e *Env) WaitDrained() {
	e.t.Helper()
	natstest.WaitFor(e.t, e.s.f.Timeout, "provider commands handled", func() bool {
		return e.Pending("CAPN_PROVIDERS") == 0
	})
}

// WaitHeartbeat waits for a heartbeat of the machine other than the one
// with id after ("" for any), and returns it and its id.
func (e *Env) WaitHeartbeat(machine, after string) (*capnv1.NodeHeartbeat, string) {
	e.t.Helper()
	var hb *capnv1.NodeHeartbeat
	var id string
	natstest.WaitFor(e.t, e.s.f.Timeout, fmt.Sprintf("a heartbeat of %s/%s", e.Cluster, machine), func() bool {
		var ok bool
		hb, id, ok = e.LastHeartbeat(e.Cluster, machine)
		return ok && id != after
	})
	return hb, id
}

// leftovers is Features.Leftovers, or nothing.
func (e *Env) leftovers(cluster string) []string {
	if e.s.f.Leftovers == nil {
		return nil
	}
	return e.s.f.Leftovers(e.t, e, cluster)
}

// waitNoLeftovers waits until the provider holds nothing of cluster.
func (e *Env) waitNoLeftovers(cluster string) {
	e.t.Helper()
	if e.s.f.Leftovers == nil {
		return
	}
	var left []string
	if natstest.Poll(e.s.f.Timeout, 50*time.Millisecond, func() error {
		if left = e.leftovers(cluster); len(left) > 0 {
			return errors.New("leftovers")
		}
		return nil
	}) != nil {
		e.t.Fatalf("after %s the provider still holds for %s: %v", e.s.f.Timeout, cluster, left)
	}
}
