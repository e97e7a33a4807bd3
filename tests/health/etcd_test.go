package health

import (
	"context"
	"testing"
	"time"

	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/capn-dev/capn/events"
	"github.com/capn-dev/capn/events/natstest"
	"github.com/capn-dev/capn/events/store"
	"github.com/capn-dev/capn/schemas/annotations"
	capnv1 "github.com/capn-dev/capn/schemas/capn/v1alpha1"
	"github.com/capn-dev/capn/schemas/keys"
)

// TestLeavingControlPlaneReportsEtcdMemberRemoved: once a control-plane
// machine's deletion is requested the health-watcher ignores its reports,
// but for EtcdMemberRemoved from its own agent (source capn-node), which
// the machine-manager waits for before deleting the infrastructure. The
// rest of the same report (KubeControlPlane) stays ignored.
func TestLeavingControlPlaneReportsEtcdMemberRemoved(t *testing.T) {
	l := newLone(t)
	l.start(t)
	ctx := context.Background()
	key := keys.Machine(l.name, "cp-0")
	m, rev, err := l.Machines.Get(ctx, key)
	if err != nil {
		t.Fatal(err)
	}
	m.Metadata.DeletionTimestamp = timestamppb.Now()
	if _, err := l.Machines.Update(ctx, key, m, rev); err != nil {
		t.Fatal(err)
	}
	pub := events.NewPublisher(l.JS, "capn-node")
	report := func(status, reason string) {
		t.Helper()
		now := time.Now()
		nc := &capnv1.NodeConditions{Cluster: l.name, Machine: "cp-0", Source: "capn-node", Time: timestamppb.New(now),
			Conditions: []*capnv1.NodeCondition{
				{Type: "KubeControlPlane", Status: "False", Reason: "Leaving", LastTransitionTime: timestamppb.New(now)},
				{Type: annotations.CondEtcdMemberRemoved, Status: status, Reason: reason, Message: "kube-local: " + reason, LastTransitionTime: timestamppb.New(now)},
			}}
		id := events.Subject("conditions", l.name, "cp-0", now.Format("150405.000000000"))
		if _, err := pub.Publish(ctx, events.HealthSubject(l.name, "cp-0", "conditions"), events.TypeNodeConditions, id, nc, events.WithSubject("cp-0")); err != nil {
			t.Fatal(err)
		}
	}
	nodes := store.NewBucket(l.Observed, func() *capnv1.NodeHealth { return new(capnv1.NodeHealth) })
	wait := func(status, reason string) {
		t.Helper()
		natstest.WaitFor(t, 10*time.Second, "EtcdMemberRemoved="+status+" in NodeHealth", func() bool {
			h, _, err := nodes.Get(ctx, keys.Node(l.name, "cp-0"))
			if err != nil {
				return false
			}
			found := false
			for _, c := range h.GetConditions() {
				if c.GetType() == "KubeControlPlane" {
					t.Fatalf("a deleting machine's KubeControlPlane was merged: %v", c)
				}
				found = found || c.GetType() == annotations.CondEtcdMemberRemoved && c.GetStatus() == status && c.GetReason() == reason && c.GetSource() == "capn-node"
			}
			return found
		})
	}
	report("False", "QuorumAtRisk")
	wait("False", "QuorumAtRisk")
	report("True", "MemberRemoved")
	wait("True", "MemberRemoved")
}
