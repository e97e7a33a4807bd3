package machinemanager

import (
	"testing"
	"time"

	"google.golang.org/protobuf/types/known/timestamppb"

	capnv1 "github.com/capn-dev/capn/schemas/capn/v1alpha1"
	"github.com/capn-dev/capn/schemas/conditions"
)

// restored is a status a restore wrote: Running, held for adoption of
// the infrastructure the backup recorded (pid, "" for none).
func restored(phase, pid string) *capnv1.MachineStatus {
	return status(phase, withBootstrap, func(s *capnv1.MachineStatus) {
		s.ProviderId = pid
		s.Adoption = &capnv1.Adoption{ProviderId: pid, Since: timestamppb.New(t0), Source: "backup-1"}
	})
}

// orphaning is a machine deleted with the Orphan policy (capn move).
func orphaning() *capnv1.Machine {
	m := machine(true)
	m.Metadata.DeletionPolicy = capnv1.DeletionOrphan
	return m
}

func TestAdoptionHoldsARestoredMachine(t *testing.T) {
	tests := []struct {
		name      string
		in        Input
		held      bool
		reason    string
		wantPhase capnv1.MachinePhase
		wantCmds  []string
	}{
		{"no desired machine yet: held, never deleted", Input{Status: restored("Running", "sim://c1/m1")}, true, ReasonWaitingForDesiredMachine, capnv1.MachineRunning, nil},
		{"deleting, no desired machine yet: held", Input{Status: restored("Deleting", "sim://c1/m1")}, true, ReasonWaitingForDesiredMachine, capnv1.MachineDeleting, nil},
		{"not adopted yet: held, never InfrastructureGone", Input{Desired: machine(false), Status: restored("Running", "sim://c1/m1")}, true, ReasonWaitingForAdoption, capnv1.MachineRunning, nil},
		{"adopted: goes on Running", Input{Desired: machine(false), Status: restored("Running", "sim://c1/m1"), Infra: infra("Running")}, false, ReasonAdopted, capnv1.MachineRunning, nil},
		{"adopt found nothing: the infrastructure is gone", Input{Desired: machine(false), Status: restored("Running", "sim://c1/m1"), Infra: infra("Deleted")}, false, ReasonAdopted, capnv1.MachineFailed, nil},
		{"no infrastructure was recorded: goes on at once", Input{Desired: machine(false), Status: restored("Bootstrapping", "")}, false, ReasonAdopted, capnv1.MachineProvisioning, []string{CmdCreate}},
		{"bootstrapping: the bootstrap request is sent again", Input{Desired: machine(false), Status: status("Bootstrapping", func(s *capnv1.MachineStatus) {
			s.Adoption = &capnv1.Adoption{Source: "backup-1"}
		})}, false, ReasonAdopted, capnv1.MachineBootstrapping, []string{CmdBootstrap}},
		{"provisioning, its create never handled: sent again", Input{Desired: machine(false), Status: restored("Provisioning", "")}, false, ReasonAdopted, capnv1.MachineProvisioning, []string{CmdCreate}},
		{"restored long after the backup: no phase timeout", Input{Desired: machine(false), Status: restored("Provisioning", "sim://c1/m1"), Infra: infra("Creating"), Now: t0.Add(3 * time.Hour)}, false, ReasonAdopted, capnv1.MachineProvisioning, nil},
		{"provisioning, adopted: nothing sent", Input{Desired: machine(false), Status: restored("Provisioning", "sim://c1/m1"), Infra: infra("Creating")}, false, ReasonAdopted, capnv1.MachineProvisioning, nil},
		{"a restored deletion goes on once adopted", Input{Desired: machine(true), Status: restored("Deleting", "sim://c1/m1"), Infra: infra("Running")}, false, ReasonAdopted, capnv1.MachineDeleting, []string{CmdDelete}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			tt.in.Cluster, tt.in.Name = "c1", "m1"
			if tt.in.Now.IsZero() {
				tt.in.Now = t0.Add(time.Minute)
			}
			out := Step(tt.in, Timeouts{})
			if out.Status == nil {
				t.Fatal("the status was forgotten")
			}
			if got := out.Status.GetPhaseValue(); got != tt.wantPhase {
				t.Errorf("phase %s, want %s", got, tt.wantPhase)
			}
			if held := out.Status.GetAdoption() != nil; held != tt.held {
				t.Errorf("held = %v, want %v", held, tt.held)
			}
			c := conditions.Get(out.Status.GetConditions(), CondAdopted)
			if c.GetReason() != tt.reason || (c.GetStatusValue() == capnv1.ConditionTrue) == tt.held {
				t.Errorf("Adopted condition %v, want reason %s", c, tt.reason)
			}
			var cmds []string
			for _, c := range out.Commands {
				cmds = append(cmds, c.Kind)
			}
			if len(cmds) != len(tt.wantCmds) || (len(cmds) > 0 && cmds[0] != tt.wantCmds[0]) {
				t.Errorf("commands %v, want %v", cmds, tt.wantCmds)
			}
			if tt.held && (out.RequeueAfter != adoptionRecheck || len(out.Events) != 0) {
				t.Errorf("a held machine: requeue %v, events %v", out.RequeueAfter, out.Events)
			}
		})
	}
}

func TestOrphanDeletionTouchesNothing(t *testing.T) {
	hooked := orphaning()
	hooked.Metadata.Annotations = map[string]string{
		"pre-drain.delete.hook.machine.capn.dev/backup":     "velero",
		"pre-terminate.delete.hook.machine.capn.dev/backup": "velero",
	}
	withNode := &capnv1.NodeHealth{NodeUid: "n1", NodeName: "m1", Updated: timestamppb.New(t0), LastHeartbeat: timestamppb.New(t0.Add(50 * time.Second))}
	tests := []struct {
		name      string
		in        Input
		wantPhase capnv1.MachinePhase
		wantCmds  []string
	}{
		{"a running machine: the provider is asked to orphan it", Input{Desired: orphaning(), Status: status("Running", withBootstrap), Infra: infra("Running"), Node: withNode}, capnv1.MachineDeleting, []string{CmdOrphan}},
		{"hooks and a Node do not hold it: nothing drains or terminates", Input{Desired: hooked, Status: status("Running", withBootstrap), Infra: infra("Running"), Node: withNode}, capnv1.MachineDeleting, []string{CmdOrphan}},
		{"its record gone: Deleted, no delete ever sent", Input{Desired: orphaning(), Status: status("Deleting", withBootstrap)}, capnv1.MachineDeleted, nil},
		{"never created: nothing to let go of", Input{Desired: orphaning(), Status: status("Bootstrapping")}, capnv1.MachineDeleted, nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			tt.in.Cluster, tt.in.Name, tt.in.Now = "c1", "m1", t0.Add(time.Minute)
			out := Step(tt.in, Timeouts{})
			if got := out.Status.GetPhaseValue(); got != tt.wantPhase {
				t.Errorf("phase %s, want %s", got, tt.wantPhase)
			}
			var cmds []string
			for _, c := range out.Commands {
				cmds = append(cmds, c.Kind)
				if c.Kind == CmdDelete {
					t.Errorf("an orphaning machine sent a delete: %v", c)
				}
			}
			if len(cmds) != len(tt.wantCmds) {
				t.Errorf("commands %v, want %v", cmds, tt.wantCmds)
			}
			if out.Status.GetDrainStartTime() != nil || out.Status.GetNodeDeletionStartTime() != nil {
				t.Errorf("an orphaning machine started a Node step: %v", out.Status)
			}
			if c := conditions.Get(out.Status.GetConditions(), CondDeleting); c.GetReason() != ReasonOrphaning {
				t.Errorf("Deleting condition %v, want reason %s", c, ReasonOrphaning)
			}
		})
	}
}
