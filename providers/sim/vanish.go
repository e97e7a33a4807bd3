package sim

import (
	"context"
	"fmt"

	"github.com/rs/zerolog"

	"github.com/capn-dev/capn/events"
	"github.com/capn-dev/capn/providers/sdk"
	capnv1 "github.com/capn-dev/capn/schemas/capn/v1alpha1"
)

// The vanish test hook: a command that makes a machine disappear out of
// band, as if someone deleted the VM behind capn's back, so that tests of
// other services can trigger drift on demand.
//
//	subject: capn.provider.sim.machine.vanish.<cluster>.<machine>
//	type:    TypeVanish (dev.capn.provider.command.machine.vanish)
//	data:    DeleteMachine{cluster, machine}
//
// The machine is forgotten (no heartbeats any more) and the SDK checks it
// at once: DriftReport{Gone} on capn.evt.drift.<provider>.<cluster>.<machine>
// and its record set to Deleted. Vanishing a missing machine does nothing.
const (
	VerbVanish = "vanish"
	TypeVanish = events.TypeProviderCommand + "." + sdk.KindMachine + "." + VerbVanish
)

// Commands adds the vanish hook to the SDK's commands.
func (p *Provider) Commands() map[string]events.Handler {
	return map[string]events.Handler{TypeVanish: events.Typed(p.vanishCommand)}
}

func (p *Provider) vanishCommand(ctx context.Context, msg *events.Message, req *capnv1.DeleteMachine) error {
	c, name := req.GetCluster(), req.GetMachine()
	if want := events.ProviderSubject(Name, sdk.KindMachine, VerbVanish, c, name); msg.Subject != want {
		return events.Permanent(fmt.Errorf("subject %s does not match the data (%s)", msg.Subject, want))
	}
	if !p.Vanish(c, name) {
		zerolog.Ctx(ctx).Info().Msg("vanish: no such machine")
		return nil
	}
	zerolog.Ctx(ctx).Info().Msg("simulated machine vanished out of band (test hook)")
	return nil
}

// Vanish makes a machine disappear out of band and asks the SDK to check
// it now. It reports whether the machine existed.
func (p *Provider) Vanish(cluster, machine string) bool {
	p.mu.Lock()
	_, ok := p.machines[key(cluster, machine)]
	delete(p.machines, key(cluster, machine))
	p.mu.Unlock()
	if ok {
		if env := p.env.Load(); env != nil {
			env.Reporter.Recheck(cluster, machine)
		}
	}
	return ok
}
