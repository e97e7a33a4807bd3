package sim_test

import (
	"testing"
	"time"

	"github.com/capn-dev/capn/providers/conformance"
	"github.com/capn-dev/capn/providers/sdk"
	"github.com/capn-dev/capn/providers/sim"
	capnv1 "github.com/capn-dev/capn/schemas/capn/v1alpha1"
	"github.com/capn-dev/capn/services/daemon"
)

func TestMain(m *testing.M) { conformance.Main(m) }

// The sim provider passes the provider conformance suite: its machines
// are records whose simulated nodes heartbeat, re-adopted from observed
// KV after a restart; "out of band" is its vanish test hook.
func TestConformance(t *testing.T) {
	conformance.Run(t, conformance.Provider{
		Name: sim.Name,
		New: func(_ *testing.T, env *conformance.Env) daemon.Service {
			return sim.NewService(sim.Options{HeartbeatEvery: 100 * time.Millisecond}, env.SDK)
		},
	}, conformance.Features{
		StopStart: true, Reboot: true, RestartSafe: true, Heartbeats: true,
		OutOfBandDelete: func(_ *testing.T, env *conformance.Env, cluster, machine string) {
			env.Send(sim.Name, sdk.KindMachine, sim.VerbVanish, "vanish-"+cluster+"-"+machine,
				&capnv1.DeleteMachine{Cluster: cluster, Machine: machine})
		},
		Capn: conformance.CorePrograms(),
	})
}
