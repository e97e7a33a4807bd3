package machinemanager

import (
	"fmt"
	"time"

	"google.golang.org/protobuf/types/known/timestamppb"

	capnv1 "github.com/capn-dev/capn/schemas/capn/v1alpha1"
)

// Machines handed between capn deployments (docs/operations.md, Backup and
// restore; capn move):
//
//   - A restored status carries an Adoption: the machine is held — no
//     step at all, so nothing is bootstrapped, created, deleted or failed
//     — until its desired record is back and, when the backup recorded
//     infrastructure, its provider adopted it (the infra record is back).
//     Then the adoption is cleared and the machine goes on from its
//     restored phase.
//   - A machine deleted with the Orphan policy is let go without touching
//     it: no hook, no drain, no Node or etcd step; its provider is asked to
//     orphan it (drop its record, leave the machine running), and it is
//     Deleted once that record is gone.

// CondAdopted says where a restored machine's adoption stands.
const CondAdopted = "Adopted"

// Reasons of CondAdopted and of an orphaning deletion.
const (
	ReasonWaitingForDesiredMachine = "WaitingForDesiredMachine"
	ReasonWaitingForAdoption       = "WaitingForAdoption"
	ReasonAdopted                  = "Adopted"
	ReasonOrphaning                = "Orphaning"
)

// CmdOrphan asks the provider to let go of the machine.
const CmdOrphan = "orphan"

// adoptionRecheck is how often a held machine is looked at when nothing
// wakes it (its desired record or its infrastructure record arriving do).
const adoptionRecheck = 30 * time.Second

// adoption holds or releases a restored machine. It reports true when the
// machine is held (out is complete: the status with its Adopted
// condition); false when it may go on (st's adoption cleared, Adopted
// True). On release, the command the machine was waiting on when the
// backup was read is sent again — it was in the other deployment's
// streams, which a restore does not bring: the bootstrap request of a
// machine Bootstrapping, the create of one Provisioning whose provider
// had not recorded it yet (ids are per machine incarnation, so a provider
// that did handle the create is asked for what it has). The clock of a
// phase that times out (Bootstrapping, Provisioning, Provisioned) starts
// again at the release: the time the backup spent on a shelf is not the
// machine's.
func adoption(out *Output, st *capnv1.MachineStatus, in Input, id func(string) string) bool {
	a := st.GetAdoption()
	if a == nil {
		return false
	}
	provider := st.GetProvider()
	if p := in.Desired.GetSpec().GetProvider(); p != "" {
		provider = p
	}
	switch {
	case in.Desired == nil:
		setCondition(st, CondAdopted, capnv1.ConditionFalse, ReasonWaitingForDesiredMachine,
			fmt.Sprintf("restored from %s: waiting for the desired machine to be restored", a.GetSource()), in.Now)
	case a.GetProviderId() != "" && in.Infra == nil:
		setCondition(st, CondAdopted, capnv1.ConditionFalse, ReasonWaitingForAdoption,
			fmt.Sprintf("restored from %s: waiting for provider %s to adopt %s", a.GetSource(), provider, a.GetProviderId()), in.Now)
	default:
		msg := fmt.Sprintf("restored from %s", a.GetSource())
		if a.GetProviderId() != "" {
			msg += fmt.Sprintf("; provider %s adopted %s (%s)", provider, a.GetProviderId(), in.Infra.GetState())
		}
		st.Adoption = nil
		setCondition(st, CondAdopted, capnv1.ConditionTrue, ReasonAdopted, msg, in.Now)
		switch st.GetPhaseValue() {
		case capnv1.MachineBootstrapping, capnv1.MachineProvisioning, capnv1.MachineProvisioned:
			st.PhaseSince = timestamppb.New(in.Now)
		}
		switch {
		case in.Desired.GetMetadata().GetDeletionTimestamp() != nil:
		case st.GetPhaseValue() == capnv1.MachineBootstrapping && st.GetBootstrapDataChecksum() == "":
			out.Commands = append(out.Commands, Command{CmdBootstrap, id(CmdBootstrap)})
		case st.GetPhaseValue() == capnv1.MachineProvisioning && in.Infra == nil:
			out.Commands = append(out.Commands, Command{CmdCreate, id(CmdCreate)})
		}
		return false
	}
	out.Status, out.RequeueAfter = st, adoptionRecheck
	return true
}

// orphanStep lets go of a machine deleted with the Orphan policy: the
// provider is asked to orphan it until its infra record is gone, then the
// machine is Deleted. A machine whose create was never sent has nothing
// for a provider to let go of.
func orphanStep(out *Output, st *capnv1.MachineStatus, in Input, orphanID string) {
	now := in.Now
	setPhase(st, capnv1.MachineDeleting, now)
	setCondition(st, CondReady, capnv1.ConditionFalse, "Deleting", "", now)
	provider := "the provider"
	if p := st.GetProvider(); p != "" {
		provider = "provider " + p
	}
	if in.Infra != nil && in.Infra.GetStateValue() != capnv1.InfraDeleted {
		setCondition(st, CondDeleting, capnv1.ConditionTrue, ReasonOrphaning,
			fmt.Sprintf("orphaning: %s drops its record and leaves the machine running (capn move)", provider), now)
		out.Commands = append(out.Commands, Command{CmdOrphan, orphanID})
		if out.RequeueAfter == 0 {
			out.RequeueAfter = 30 * time.Second
		}
		return
	}
	setPhase(st, capnv1.MachineDeleted, now)
	setCondition(st, CondDeleting, capnv1.ConditionTrue, ReasonOrphaning, "orphaned: left running, no record of it kept here", now)
}
