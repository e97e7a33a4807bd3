package machinemanager

import (
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
	earlier := &capnv1.NodeHealth{Updated: timestamppb.New(t0.Add(-time.Minute)), UnhealthyReasons: unhealthy.UnhealthyReasons}
	tests := []struct {
		name                   string
		node                   *capnv1.NodeHealth
		wantHealthy, wantReady string
	}{
		{"no record: nothing said", nil, "", ""},
		{"unhealthy node", unhealthy, "False", "Unknown"},
		{"healthy node", healthy, "True", "True"},
		{"record of an earlier machine of the same name ignored", earlier, "", ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			out := Step(Input{Cluster: "c1", Name: "m1", Desired: created, Status: status(PhaseRunning, withBootstrap, running), Infra: infra("Running"),
				Node: tt.node, Now: t0.Add(2 * time.Minute)}, Timeouts{})
			if out.Status.GetPhase() != PhaseRunning {
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
		})
	}
}
