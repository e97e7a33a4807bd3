package autoscalerprovider_test

import (
	"crypto/tls"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	corev1 "k8s.io/api/core/v1"

	"github.com/capn-dev/capn/events"
	"github.com/capn-dev/capn/events/natstest"
	"github.com/capn-dev/capn/events/store"
	capnv1 "github.com/capn-dev/capn/schemas/capn/v1alpha1"
	"github.com/capn-dev/capn/schemas/externalgrpc"
	"github.com/capn-dev/capn/schemas/keys"
)

func wantCode(t *testing.T, err error, code codes.Code, says string) {
	t.Helper()
	if status.Code(err) != code || !strings.Contains(status.Convert(err).Message(), says) {
		t.Fatalf("err = %v, want %s saying %q", err, code, says)
	}
}

// demo: md-0 autoscaled 1..5 with two running machines, md-1 not
// autoscaled, a control plane.
func demo(w *world) {
	md0 := pool("md-0", 2, 1, 5)
	md0.Labels = map[string]string{"tier": "web"}
	md0.Taints = []*capnv1.Taint{{Key: "dedicated", Value: "web", Effect: "NoSchedule"}}
	md0.Template = &capnv1.MachineTemplate{Parameters: map[string]string{"cpu": "2", "memory": "4Gi", "pods": "110"}}
	md0.Version = "v1.37.2"
	w.cluster("demo", md0, pool("md-1", 1, 0, 0))
	w.machine("demo", "control-plane", "demo-cp-0", capnv1.MachineRunning)
	w.machine("demo", "md-0", "demo-md-0-a-0", capnv1.MachineRunning)
	w.machine("demo", "md-0", "demo-md-0-a-1", capnv1.MachineRunning)
	w.machine("demo", "md-1", "demo-md-1-b-0", capnv1.MachineRunning)
}

// TestNodeGroupsAndNodes: the node groups are the caller's autoscaled
// pools; a Node maps to its machine's group by provider id or name (none
// for the control plane and unautoscaled pools); a group's instances are
// its machines with their provider ids and states.
func TestNodeGroupsAndNodes(t *testing.T) {
	w := newWorld(t)
	demo(w)
	w.machine("demo", "md-0", "demo-md-0-a-2", capnv1.MachineProvisioning)
	c := w.client("demo")
	gs, err := c.NodeGroups(ctx(t), &externalgrpc.NodeGroupsRequest{})
	if err != nil {
		t.Fatal(err)
	}
	if len(gs.GetNodeGroups()) != 1 || gs.GetNodeGroups()[0].GetId() != "md-0" || gs.GetNodeGroups()[0].GetMinSize() != 1 || gs.GetNodeGroups()[0].GetMaxSize() != 5 {
		t.Fatalf("node groups %v, want md-0 1..5 only", gs.GetNodeGroups())
	}
	for _, tt := range []struct{ providerID, name, want string }{
		{"process://demo/demo-md-0-a-1", "demo-md-0-a-1", "md-0"},
		{"", "demo-md-0-a-0", "md-0"},
		{"process://demo/demo-cp-0", "demo-cp-0", ""},
		{"process://demo/demo-md-1-b-0", "demo-md-1-b-0", ""},
		{"process://demo/nobody", "nobody", ""},
	} {
		g, err := c.NodeGroupForNode(ctx(t), &externalgrpc.NodeGroupForNodeRequest{Node: &externalgrpc.ExternalGrpcNode{ProviderID: tt.providerID, Name: tt.name}})
		if err != nil || g.GetNodeGroup().GetId() != tt.want {
			t.Errorf("NodeGroupForNode(%s %s) = %q, %v; want %q", tt.providerID, tt.name, g.GetNodeGroup().GetId(), err, tt.want)
		}
	}
	natstest.WaitFor(t, 5*time.Second, "three instances", func() bool {
		ns, err := c.NodeGroupNodes(ctx(t), &externalgrpc.NodeGroupNodesRequest{Id: "md-0"})
		return err == nil && len(ns.GetInstances()) == 3
	})
	ns, _ := c.NodeGroupNodes(ctx(t), &externalgrpc.NodeGroupNodesRequest{Id: "md-0"})
	got := map[string]externalgrpc.InstanceStatus_InstanceState{}
	for _, in := range ns.GetInstances() {
		got[in.GetId()] = in.GetStatus().GetInstanceState()
	}
	want := map[string]externalgrpc.InstanceStatus_InstanceState{
		"process://demo/demo-md-0-a-0": externalgrpc.InstanceStatus_instanceRunning,
		"process://demo/demo-md-0-a-1": externalgrpc.InstanceStatus_instanceRunning,
		"capn://demo/demo-md-0-a-2":    externalgrpc.InstanceStatus_instanceCreating, // no provider id yet
	}
	for id, st := range want {
		if got[id] != st {
			t.Errorf("instances %v, want %v", got, want)
			break
		}
	}
	ts, err := c.NodeGroupTargetSize(ctx(t), &externalgrpc.NodeGroupTargetSizeRequest{Id: "md-0"})
	if err != nil || ts.GetTargetSize() != 2 {
		t.Errorf("target size %d, %v; want 2", ts.GetTargetSize(), err)
	}
	_, err = c.NodeGroupTargetSize(ctx(t), &externalgrpc.NodeGroupTargetSizeRequest{Id: "md-1"})
	wantCode(t, err, codes.NotFound, "no autoscaled pool md-1")
	_, err = c.NodeGroupGetOptions(ctx(t), &externalgrpc.NodeGroupAutoscalingOptionsRequest{Id: "md-0"})
	wantCode(t, err, codes.Unimplemented, "")
	_, err = c.PricingNodePrice(ctx(t), &externalgrpc.PricingNodePriceRequest{})
	wantCode(t, err, codes.Unimplemented, "")
}

// TestTemplateNodeInfo: a pool's template Node has the template
// parameters' capacity, the pool's labels and taints, and is Ready.
func TestTemplateNodeInfo(t *testing.T) {
	w := newWorld(t)
	demo(w)
	res, err := w.client("demo").NodeGroupTemplateNodeInfo(ctx(t), &externalgrpc.NodeGroupTemplateNodeInfoRequest{Id: "md-0"})
	if err != nil {
		t.Fatal(err)
	}
	var n corev1.Node
	if err := n.Unmarshal(res.GetNodeBytes()); err != nil {
		t.Fatal(err)
	}
	for r, want := range map[corev1.ResourceName]string{"cpu": "2", "memory": "4Gi", "pods": "110"} {
		if q := n.Status.Capacity[r]; q.String() != want {
			t.Errorf("capacity %s = %s, want %s", r, q.String(), want)
		}
		if q := n.Status.Allocatable[r]; q.String() != want {
			t.Errorf("allocatable %s = %s, want %s", r, q.String(), want)
		}
	}
	if n.Labels["tier"] != "web" || n.Labels["kubernetes.io/os"] != "linux" {
		t.Errorf("labels %v", n.Labels)
	}
	if len(n.Spec.Taints) != 1 || n.Spec.Taints[0].Key != "dedicated" || n.Spec.Taints[0].Effect != corev1.TaintEffectNoSchedule {
		t.Errorf("taints %v", n.Spec.Taints)
	}
	if len(n.Status.Conditions) != 1 || n.Status.Conditions[0].Type != corev1.NodeReady || n.Status.Conditions[0].Status != corev1.ConditionTrue {
		t.Errorf("conditions %v", n.Status.Conditions)
	}
}

// TestIncreaseSize: a scale-up is a CAS write of the pool's replicas in the
// desired cluster, its generation bumped, bounded by max; it is recorded in
// observed autoscaler.<c>.<pool> and as an event on the cluster's timeline.
func TestIncreaseSize(t *testing.T) {
	w := newWorld(t)
	demo(w)
	c := w.client("demo")
	gen := w.get("demo").GetMetadata().GetGeneration()
	if _, err := c.NodeGroupIncreaseSize(ctx(t), &externalgrpc.NodeGroupIncreaseSizeRequest{Id: "md-0", Delta: 2}); err != nil {
		t.Fatal(err)
	}
	if r := w.replicas("demo", "md-0"); r != 4 {
		t.Fatalf("replicas %d after +2 from 2", r)
	}
	if g := w.get("demo").GetMetadata().GetGeneration(); g != gen+1 {
		t.Errorf("generation %d, want %d", g, gen+1)
	}
	_, err := c.NodeGroupIncreaseSize(ctx(t), &externalgrpc.NodeGroupIncreaseSizeRequest{Id: "md-0", Delta: 2})
	wantCode(t, err, codes.InvalidArgument, "over its autoscaling.max 5")
	_, err = c.NodeGroupIncreaseSize(ctx(t), &externalgrpc.NodeGroupIncreaseSizeRequest{Id: "md-0", Delta: 0})
	wantCode(t, err, codes.InvalidArgument, "must be positive")
	_, err = c.NodeGroupIncreaseSize(ctx(t), &externalgrpc.NodeGroupIncreaseSizeRequest{Id: "md-1", Delta: 1})
	wantCode(t, err, codes.NotFound, "no autoscaled pool md-1")
	if r := w.replicas("demo", "md-0"); r != 4 {
		t.Fatalf("refused increases changed replicas to %d", r)
	}

	st, _, err := store.NewBucket(w.observed, store.New[capnv1.AutoscalerStatus]()).Get(ctx(t), keys.Autoscaler("demo", "md-0"))
	if err != nil {
		t.Fatal(err)
	}
	if a := st.GetLastAction(); a.GetReason() != "ScaledUp" || a.GetFrom() != 2 || a.GetTo() != 4 || a.GetMessage() != "autoscaler scaled md-0 2 → 4" {
		t.Errorf("last action %v", a)
	}
	evs := timeline(t, w, "demo")
	if len(evs) != 1 || evs[0].GetReason() != "ScaledUp" || evs[0].GetTo() != 4 {
		t.Errorf("timeline %v, want one ScaledUp event", evs)
	}
}

// timeline is the cluster's autoscaler events.
func timeline(t *testing.T, w *world, cluster string) []*capnv1.AutoscalerEvent {
	t.Helper()
	cons, err := w.js.OrderedConsumer(ctx(t), events.StreamEvents, jetstream.OrderedConsumerConfig{
		FilterSubjects: []string{events.EventSubject("autoscaler", "*", cluster, "*")}})
	if err != nil {
		t.Fatal(err)
	}
	var out []*capnv1.AutoscalerEvent
	for {
		msg, err := cons.Next(jetstream.FetchMaxWait(500 * time.Millisecond))
		if err != nil {
			return out
		}
		e, err := events.FromMsg(msg.Headers(), msg.Data())
		if err != nil {
			t.Fatal(err)
		}
		ev := &capnv1.AutoscalerEvent{}
		if err := events.DataAs(e, ev); err != nil {
			t.Fatal(err)
		}
		out = append(out, ev)
	}
}

// TestDeleteNodes: the named machines are marked and replicas lowered by
// their number; a retry changes nothing; a node of another group, a
// deletion below min and a pool with a user's mark are refused, changing
// nothing.
func TestDeleteNodes(t *testing.T) {
	w := newWorld(t)
	demo(w)
	w.machine("demo", "md-0", "demo-md-0-a-2", capnv1.MachineRunning)
	// md-0: 3 machines, replicas 3.
	c0 := w.get("demo")
	c0.Spec.WorkerPools[0].Replicas = 3
	w.put(w.desired, keys.Cluster("demo"), c0)
	c := w.client("demo")
	node := func(m string) *externalgrpc.ExternalGrpcNode {
		return &externalgrpc.ExternalGrpcNode{ProviderID: "process://demo/" + m, Name: m}
	}
	del := func(ns ...*externalgrpc.ExternalGrpcNode) error {
		_, err := c.NodeGroupDeleteNodes(ctx(t), &externalgrpc.NodeGroupDeleteNodesRequest{Id: "md-0", Nodes: ns})
		return err
	}

	err := del(node("demo-md-1-b-0"))
	wantCode(t, err, codes.InvalidArgument, "not of node group md-0")
	if err := del(node("demo-md-0-a-1")); err != nil {
		t.Fatal(err)
	}
	if r := w.replicas("demo", "md-0"); r != 2 {
		t.Fatalf("replicas %d, want 2", r)
	}
	if a := w.annotations("demo", "demo-md-0-a-1"); a["capn.dev/delete-machine"] != "cluster-autoscaler" {
		t.Fatalf("named machine's annotations %v", a)
	}
	// The autoscaler asks again before the planner acted: nothing more.
	if err := del(node("demo-md-0-a-1")); err != nil {
		t.Fatal(err)
	}
	if r := w.replicas("demo", "md-0"); r != 2 {
		t.Fatalf("a repeated DeleteNodes lowered replicas again: %d", r)
	}
	// Below min 1: 2 - 2 = 0.
	err = del(node("demo-md-0-a-0"), node("demo-md-0-a-2"))
	wantCode(t, err, codes.FailedPrecondition, "below its autoscaling.min 1")
	for _, m := range []string{"demo-md-0-a-0", "demo-md-0-a-2"} {
		if _, marked := w.annotations("demo", m)["capn.dev/delete-machine"]; marked {
			t.Errorf("refused deletion marked %s", m)
		}
	}
	// A user's mark on another machine: the planner would take it first.
	m, rev, _ := w.machines.Get(ctx(t), keys.Machine("demo", "demo-md-0-a-2"))
	m.Metadata.Annotations = map[string]string{"capn.dev/delete-machine": "alice"}
	if _, err := w.machines.Update(ctx(t), keys.Machine("demo", "demo-md-0-a-2"), m, rev); err != nil {
		t.Fatal(err)
	}
	err = del(node("demo-md-0-a-0"))
	wantCode(t, err, codes.FailedPrecondition, "demo-md-0-a-2 (alice)")
	if r := w.replicas("demo", "md-0"); r != 2 {
		t.Fatalf("refused deletions changed replicas: %d", r)
	}
	evs := timeline(t, w, "demo")
	if len(evs) != 1 || evs[0].GetReason() != "DeletedNodes" || !slices.Equal(evs[0].GetMachines(), []string{"demo-md-0-a-1"}) {
		t.Errorf("timeline %v, want one DeletedNodes of demo-md-0-a-1", evs)
	}
}

// TestDecreaseTargetSize: only machines not made yet are given up.
func TestDecreaseTargetSize(t *testing.T) {
	w := newWorld(t)
	demo(w) // md-0: replicas 2, 2 machines
	c := w.client("demo")
	if _, err := c.NodeGroupIncreaseSize(ctx(t), &externalgrpc.NodeGroupIncreaseSizeRequest{Id: "md-0", Delta: 2}); err != nil {
		t.Fatal(err)
	}
	if _, err := c.NodeGroupDecreaseTargetSize(ctx(t), &externalgrpc.NodeGroupDecreaseTargetSizeRequest{Id: "md-0", Delta: -1}); err != nil {
		t.Fatal(err)
	}
	if r := w.replicas("demo", "md-0"); r != 3 {
		t.Fatalf("replicas %d, want 3", r)
	}
	_, err := c.NodeGroupDecreaseTargetSize(ctx(t), &externalgrpc.NodeGroupDecreaseTargetSizeRequest{Id: "md-0", Delta: -2})
	wantCode(t, err, codes.FailedPrecondition, "attempt to delete existing machines")
}

// TestCallersSeeOnlyTheirCluster: the attack — an autoscaler with
// another cluster's certificate, or none, or one of another CA, cannot
// see or scale demo's pools.
func TestCallersSeeOnlyTheirCluster(t *testing.T) {
	w := newWorld(t)
	demo(w)
	w.cluster("other", pool("md-0", 1, 1, 3))
	o := w.client("other")
	gs, err := o.NodeGroups(ctx(t), &externalgrpc.NodeGroupsRequest{})
	if err != nil || len(gs.GetNodeGroups()) != 1 || !strings.Contains(gs.GetNodeGroups()[0].GetDebug(), "cluster other") {
		t.Fatalf("other's node groups %v, %v", gs.GetNodeGroups(), err)
	}
	if _, err := o.NodeGroupIncreaseSize(ctx(t), &externalgrpc.NodeGroupIncreaseSizeRequest{Id: "md-0", Delta: 1}); err != nil {
		t.Fatal(err)
	}
	if w.replicas("demo", "md-0") != 2 || w.replicas("other", "md-0") != 2 {
		t.Fatalf("other's scale-up changed demo (%d) or not other (%d)", w.replicas("demo", "md-0"), w.replicas("other", "md-0"))
	}
	_, err = o.NodeGroupDeleteNodes(ctx(t), &externalgrpc.NodeGroupDeleteNodesRequest{Id: "md-0",
		Nodes: []*externalgrpc.ExternalGrpcNode{{ProviderID: "process://demo/demo-md-0-a-0", Name: "demo-md-0-a-0"}}})
	wantCode(t, err, codes.InvalidArgument, "no machine of cluster other")
	g, err := o.NodeGroupForNode(ctx(t), &externalgrpc.NodeGroupForNodeRequest{Node: &externalgrpc.ExternalGrpcNode{ProviderID: "process://demo/demo-md-0-a-0", Name: "demo-md-0-a-0"}})
	if err != nil || g.GetNodeGroup().GetId() != "" {
		t.Fatalf("other sees demo's node in group %q, %v", g.GetNodeGroup().GetId(), err)
	}

	// No client certificate: the handshake fails.
	_, err = w.dial(&tls.Config{RootCAs: w.roots(), MinVersion: tls.VersionTLS13}).NodeGroups(ctx(t), &externalgrpc.NodeGroupsRequest{})
	if status.Code(err) != codes.Unavailable {
		t.Fatalf("without a client certificate: %v", err)
	}
	if w.replicas("demo", "md-0") != 2 {
		t.Fatal("demo changed")
	}
}

// TestSizesSurviveRestarts: the provider keeps no state of its own — after
// its restart, and after NATS's, the target sizes are the ones written.
func TestSizesSurviveRestarts(t *testing.T) {
	w := newWorld(t)
	demo(w)
	if _, err := w.client("demo").NodeGroupIncreaseSize(ctx(t), &externalgrpc.NodeGroupIncreaseSizeRequest{Id: "md-0", Delta: 1}); err != nil {
		t.Fatal(err)
	}
	w.stop()
	w.ns.Restart()
	w.start()
	c := w.client("demo")
	var got int32
	natstest.WaitFor(t, 20*time.Second, "target size after restarts", func() bool {
		ts, err := c.NodeGroupTargetSize(ctx(t), &externalgrpc.NodeGroupTargetSizeRequest{Id: "md-0"})
		got = ts.GetTargetSize()
		return err == nil
	})
	if got != 3 {
		t.Fatalf("target size %d after restarts, want 3", got)
	}
}
