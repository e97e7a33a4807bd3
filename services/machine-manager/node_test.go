package machinemanager

import (
	"strings"
	"testing"
	"time"

	"google.golang.org/protobuf/types/known/timestamppb"

	capnv1 "github.com/capn-dev/capn/schemas/capn/v1alpha1"
)

func TestStepReflectsNodeHealth(t *testing.T) {
	running := func(s *capnv1.MachineStatus) { s.NodeReadyTime = timestamppb.New(t0) }
	created := machine(false)
	created.Metadata.CreationTimestamp = timestamppb.New(t0)
	unhealthy := &capnv1.NodeHealth{Updated: timestamppb.New(t0.Add(time.Minute)),
		Conditions:       []*capnv1.NodeCondition{{Type: "Ready", Status: "Unknown", Reason: "NodeStatusUnknown", Message: "no heartbeat"}},
		UnhealthyReasons: []*capnv1.Condition{{Type: "KernelDeadlock", Status: "False", Message: "KernelDeadlock=True for 0s"}}}
	healthy := &capnv1.NodeHealth{Updated: timestamppb.New(t0.Add(time.Minute)), Healthy: true,
		Conditions: []*capnv1.NodeCondition{{Type: "Ready", Status: "True", Reason: "KubeletReady"}}}
	forged := &capnv1.NodeHealth{Updated: timestamppb.New(t0.Add(time.Minute)), Healthy: true,
		Conditions: []*capnv1.NodeCondition{
			{Type: "KernelDeadlock", Status: "True", Source: "ingest:monitoring"},
			{Type: "Ready", Status: "True", Reason: "KubeletReady"},
			{Type: "Ready", Status: "False", Source: "ingest:monitoring"},
		}}
	earlier := &capnv1.NodeHealth{Updated: timestamppb.New(t0.Add(-time.Minute)), UnhealthyReasons: unhealthy.UnhealthyReasons}
	tests := []struct {
		name                   string
		node                   *capnv1.NodeHealth
		wantHealthy, wantReady string
	}{
		{"no record: nothing said", nil, "", ""},
		{"unhealthy node", unhealthy, "False", "Unknown"},
		{"healthy node", healthy, "True", "True"},
		{"a gateway token's report is shown, not taken as the node's", forged, "True", "True"},
		{"record of an earlier machine of the same name ignored", earlier, "", ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			out := Step(Input{Cluster: "c1", Name: "m1", Desired: created, Status: status(capnv1.MachineRunning.Wire(), withBootstrap, running), Infra: infra("Running"),
				Node: tt.node, Now: t0.Add(2 * time.Minute)}, Timeouts{})
			if out.Status.GetPhase() != capnv1.MachineRunning.Wire() {
				t.Fatalf("phase %s", out.Status.GetPhase())
			}
			got := map[string]string{}
			for _, c := range out.Status.GetConditions() {
				got[c.GetType()] = c.GetStatus()
			}
			if got[CondNodeHealthy] != tt.wantHealthy {
				t.Errorf("NodeHealthy %q, want %q", got[CondNodeHealthy], tt.wantHealthy)
			}
			if got[CondNodeReady] != tt.wantReady {
				t.Errorf("NodeReady %q, want %q", got[CondNodeReady], tt.wantReady)
			}
			for _, c := range out.Status.GetConditions() {
				if c.GetType() == CondNodeHealthy && tt.node == forged && !strings.Contains(c.GetMessage(), "KernelDeadlock=True from ingest:monitoring") {
					t.Errorf("NodeHealthy message %q does not show the gateway's report", c.GetMessage())
				}
			}
		})
	}
}

// A provisioned machine runs once the health-watcher's record of its node
// says ready; the name, version and first ready time come from that record,
// and a record of an earlier machine of the same name moves nothing.
func TestStepTakesNodeReadyFromTheRecord(t *testing.T) {
	created := machine(false)
	created.Metadata.CreationTimestamp = timestamppb.New(t0)
	beat := timestamppb.New(t0.Add(30 * time.Second))
	tests := []struct {
		name      string
		phase     string
		node      *capnv1.NodeHealth
		wantPhase string
		wantReady *timestamppb.Timestamp
	}{
		{"no record: waits", capnv1.MachineProvisioned.Wire(), nil, capnv1.MachineProvisioned.Wire(), nil},
		{"not ready: waits", capnv1.MachineProvisioned.Wire(), &capnv1.NodeHealth{Updated: beat, LastHeartbeat: beat, NodeName: "n1"}, capnv1.MachineProvisioned.Wire(), nil},
		{"ready: runs", capnv1.MachineProvisioned.Wire(), &capnv1.NodeHealth{Updated: beat, LastHeartbeat: beat, Ready: true, NodeName: "n1", KubeletVersion: "v1.37.2"}, capnv1.MachineRunning.Wire(), beat},
		{"ready before the infrastructure: remembered", capnv1.MachineProvisioning.Wire(), &capnv1.NodeHealth{Updated: beat, LastHeartbeat: beat, Ready: true}, capnv1.MachineProvisioning.Wire(), beat},
		{"an earlier machine's record: waits", capnv1.MachineProvisioned.Wire(),
			&capnv1.NodeHealth{Updated: timestamppb.New(t0.Add(-time.Minute)), LastHeartbeat: timestamppb.New(t0.Add(-time.Minute)), Ready: true, NodeName: "old"}, capnv1.MachineProvisioned.Wire(), nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			infraState := "Running"
			if tt.phase == capnv1.MachineProvisioning.Wire() {
				infraState = "Provisioning"
			}
			out := Step(Input{Cluster: "c1", Name: "m1", Desired: created, Status: status(tt.phase, withBootstrap), Infra: infra(infraState),
				Node: tt.node, Now: t0.Add(time.Minute)}, Timeouts{})
			st := out.Status
			if st.GetPhase() != tt.wantPhase {
				t.Errorf("phase %s, want %s", st.GetPhase(), tt.wantPhase)
			}
			if !st.GetNodeReadyTime().AsTime().Equal(tt.wantReady.AsTime()) || (st.GetNodeReadyTime() == nil) != (tt.wantReady == nil) {
				t.Errorf("nodeReadyTime %v, want %v", st.GetNodeReadyTime(), tt.wantReady)
			}
			if tt.wantReady != nil && tt.node.GetNodeName() != st.GetNodeName() {
				t.Errorf("nodeName %q, want %q", st.GetNodeName(), tt.node.GetNodeName())
			}
			if tt.node.GetKubeletVersion() != "" && st.GetKubeletVersion() != tt.node.GetKubeletVersion() {
				t.Errorf("kubeletVersion %q, want %q", st.GetKubeletVersion(), tt.node.GetKubeletVersion())
			}
			if tt.name == "an earlier machine's record: waits" && st.GetNodeName() == "old" {
				t.Error("took the node name of an earlier machine's record")
			}
		})
	}
}
