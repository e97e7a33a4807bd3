// Package security performs the attacks of capn's trust-boundary review
// (issue 17) against real processes: one embedded nats-server, the real
// gateway and services on their own connections (tests/internal/harness).
// Each test fails on the code before its fix; docs/security.md links them.
package security

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/capn-dev/capn/events/natstest"
	"github.com/capn-dev/capn/gateway/client"
	capnv1 "github.com/capn-dev/capn/schemas/capn/v1alpha1"
	"github.com/capn-dev/capn/tests/internal/harness"
)

func newSystem(t *testing.T, o harness.Options) *harness.System {
	t.Helper()
	if testing.Short() {
		t.Skip("attack against real processes: skipped with -short")
	}
	return harness.New(t, o)
}

// clusterYAML is a manifest on the sim provider: one control-plane machine
// and a pool md-<i> of each size.
func clusterYAML(name string, pools ...int) string {
	var b strings.Builder
	fmt.Fprintf(&b, "apiVersion: capn.dev/v1alpha1\nkind: Cluster\nmetadata: {name: %s}\nspec:\n  kubernetesVersion: v1.33.4\n  controlPlane: {provider: sim, replicas: 1}\n  workerPools:\n", name)
	for i, r := range pools {
		fmt.Fprintf(&b, "  - {name: md-%d, provider: sim, replicas: %d}\n", i, r)
	}
	return b.String()
}

// machineManager stands in for the machine-manager where a test needs
// thousands of machines without provisioning them: it writes the observed
// status a machine would reach.
type machineManager struct {
	t   *testing.T
	sys *harness.System
}

func (mm machineManager) set(cluster, machine, phase string) {
	mm.t.Helper()
	_, _, err := mm.sys.MachineStatuses.Mutate(context.Background(), "machine."+cluster+"."+machine, func(st *capnv1.MachineStatus, _ bool) (*capnv1.MachineStatus, error) {
		st.Phase = phase
		st.PhaseSince = timestamppb.Now()
		return st, nil
	})
	if err != nil {
		mm.t.Fatal(err)
	}
}

// machines are a cluster's desired machine records that decode.
func (mm machineManager) machines(cluster string) []*capnv1.Machine {
	mm.t.Helper()
	es, _, err := mm.sys.Machines.ListSkipping(context.Background(), "machine."+cluster+".")
	if err != nil {
		mm.t.Fatal(err)
	}
	out := make([]*capnv1.Machine, 0, len(es))
	for _, e := range es {
		out = append(out, e.Value)
	}
	return out
}

// runControlPlane waits for a cluster's first control-plane machine and
// reports it Running, which lets its worker pools start.
func (mm machineManager) runControlPlane(cluster string, timeout time.Duration) {
	mm.t.Helper()
	var cp string
	natstest.WaitFor(mm.t, timeout, cluster+"'s control-plane machine", func() bool {
		for _, m := range mm.machines(cluster) {
			if m.GetSpec().GetPool() == "control-plane" {
				cp = m.GetMetadata().GetName()
				return true
			}
		}
		return false
	})
	mm.set(cluster, cp, "Running")
}

func asError(err error, target **client.Error) bool { return errors.As(err, target) }
