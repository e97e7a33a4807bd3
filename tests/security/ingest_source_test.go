package security

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/cloudevents/sdk-go/v2/event"
	"github.com/nats-io/nats.go/jetstream"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/capn-dev/capn/events"
	"github.com/capn-dev/capn/events/natstest"
	"github.com/capn-dev/capn/events/store"
	"github.com/capn-dev/capn/gateway"
	"github.com/capn-dev/capn/gateway/api"
	"github.com/capn-dev/capn/gateway/client"
	capnv1 "github.com/capn-dev/capn/schemas/capn/v1alpha1"
	"github.com/capn-dev/capn/schemas/keys"
	"github.com/capn-dev/capn/tests/internal/harness"
)

// deadlockCluster is a sim cluster whose policy makes KernelDeadlock=True
// unhealthy at once, with more lines under spec.health.
const deadlockCluster = `apiVersion: capn.dev/v1alpha1
kind: Cluster
metadata:
  name: %s
spec:
  kubernetesVersion: v1.34.2
  controlPlane:
    provider: sim
    replicas: 1
  health:
    unhealthyConditions:
    - {type: KernelDeadlock, status: "True", timeout: 0s}
%s
  workerPools:
  - name: md-0
    provider: sim
    replicas: 1
`

// ingestWorld is the core services, no remediator, and a gateway with an
// ingest token limited to cluster a and an unlimited one, monitoring.
type ingestWorld struct {
	*harness.System
	t                 *testing.T
	scoped, monitored *client.Client
	nodes             *store.Bucket[*capnv1.NodeHealth]
}

func newIngestWorld(t *testing.T) *ingestWorld {
	t.Helper()
	s := harness.New(t, harness.Options{})
	// The harness runs services with SkipProvision, the gateway's stream too.
	if err := events.Provision(context.Background(), s.JS, gateway.Topology(1)); err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	gw := gateway.New(gateway.Options{Listener: ln, Tokens: []gateway.Token{
		{Name: "scoped-a", Secret: "scoped-a-secret", Scopes: []api.Scope{api.ScopeIngest}, Clusters: []string{"a"}},
		{Name: "monitoring", Secret: "monitoring-secret", Scopes: []api.Scope{api.ScopeIngest}},
	}})
	s.StartService(harness.Gateway, gw)
	s.StartAll(harness.Core...)
	natstest.WaitFor(t, 30*time.Second, "the gateway listening", func() bool { return gw.URL() != "" })
	url := "http://" + ln.Addr().String()
	w := &ingestWorld{System: s, t: t, nodes: store.NewBucket(s.Observed, func() *capnv1.NodeHealth { return new(capnv1.NodeHealth) })}
	for _, c := range []struct {
		c     **client.Client
		token string
	}{{&w.scoped, "scoped-a-secret"}, {&w.monitored, "monitoring-secret"}} {
		if *c.c, err = client.New(url, client.WithToken(c.token)); err != nil {
			t.Fatal(err)
		}
	}
	return w
}

// machines are the names of cluster's machines, control plane first.
func (w *ingestWorld) machines(cluster string) []string {
	w.t.Helper()
	es, err := w.Machines.List(context.Background(), "machine."+cluster+".")
	if err != nil {
		w.t.Fatal(err)
	}
	var out []string
	for _, e := range es {
		out = append(out, e.Value.GetMetadata().GetName())
	}
	slices.Sort(out) // <c>-control-plane-… before <c>-md-0-…
	return out
}

// deadlock is a KernelDeadlock=True report of machine as a CloudEvent.
func deadlock(cluster, machine, source string) event.Event {
	now := time.Now()
	nc := &capnv1.NodeConditions{Cluster: cluster, Machine: machine, Source: source, Time: timestamppb.New(now),
		Conditions: []*capnv1.NodeCondition{{Type: "KernelDeadlock", Status: "True", Reason: "DockerHung", Message: "forged",
			LastTransitionTime: timestamppb.New(now)}}}
	b, err := protojson.Marshal(nc)
	if err != nil {
		panic(err)
	}
	e := event.New()
	e.SetID(fmt.Sprintf("forged-%s-%d", machine, now.UnixNano()))
	e.SetSource("attacker/" + machine)
	e.SetType(events.TypeNodeConditions)
	if err := e.SetData(event.ApplicationJSON, b); err != nil {
		panic(err)
	}
	return e
}

func (w *ingestWorld) node(cluster, machine string) *capnv1.NodeHealth {
	h, _, err := w.nodes.Get(context.Background(), keys.Node(cluster, machine))
	if err != nil && !errors.Is(err, store.ErrNotFound) {
		w.t.Fatal(err)
	}
	return h
}

func hasCondition(h *capnv1.NodeHealth, typ, source string) bool {
	return slices.ContainsFunc(h.GetConditions(), func(c *capnv1.NodeCondition) bool {
		return c.GetType() == typ && c.GetSource() == source
	})
}

// TestScopedIngestTokenCannotReachAnotherCluster is finding 4: an ingest
// token limited to cluster a gets a 403 naming cluster b for a report of
// b's machine, and nothing is stored.
func TestScopedIngestTokenCannotReachAnotherCluster(t *testing.T) {
	w := newIngestWorld(t)
	for _, c := range []string{"a", "b"} {
		w.Apply(fmt.Sprintf(deadlockCluster, c, ""))
	}
	for _, c := range []string{"a", "b"} {
		w.WaitReady(c, 60*time.Second)
	}
	victim := w.machines("b")[0]
	_, err := w.scoped.Ingest(context.Background(), deadlock("b", victim, "node-problem-detector"))
	var ce *client.Error
	if !errors.As(err, &ce) || ce.StatusCode != http.StatusForbidden || !strings.Contains(ce.Error(), "cluster b") {
		t.Fatalf("ingest for cluster b with a token of cluster a: %v, want 403 naming cluster b", err)
	}
	if h := w.node("b", victim); hasCondition(h, "KernelDeadlock", "node-problem-detector") || len(h.GetUnhealthyReasons()) > 0 {
		t.Fatalf("the refused report reached %s: %v", victim, h)
	}
	info, err := w.JS.Stream(context.Background(), gateway.StreamIngest)
	if err != nil {
		t.Fatal(err)
	}
	if n := info.CachedInfo().State.Msgs; n != 0 {
		t.Fatalf("%d events stored for a refused request", n)
	}
	// Its own cluster it may report on (and its report is recorded as its own).
	own := w.machines("a")[0]
	if _, err := w.scoped.Ingest(context.Background(), deadlock("a", own, "node-problem-detector")); err != nil {
		t.Fatalf("ingest for cluster a: %v", err)
	}
	natstest.WaitFor(t, 20*time.Second, "a's report recorded as ingest:scoped-a", func() bool {
		return hasCondition(w.node("a", own), "KernelDeadlock", "ingest:scoped-a")
	})
}

// TestUntrustedIngestIsRecordedNotJudged is finding 4: an unlimited ingest
// token's report that a machine is dead is recorded with the token as its
// source (and shown in the machine's NodeHealthy condition), but a source
// the cluster's health policy does not trust makes no machine unhealthy
// (so nothing is remediated) — while the same report
// over NATS, from the machine, does; and once the policy lists the token,
// its report counts.
func TestUntrustedIngestIsRecordedNotJudged(t *testing.T) {
	w := newIngestWorld(t)
	w.Apply(fmt.Sprintf(deadlockCluster, "b", ""))
	w.WaitReady("b", 60*time.Second)
	ms := w.machines("b")
	victim, witness := ms[1], ms[0]

	// The report claims to be node-problem-detector; the gateway says who
	// sent it.
	if _, err := w.monitored.Ingest(context.Background(), deadlock("b", victim, "node-problem-detector")); err != nil {
		t.Fatal(err)
	}
	natstest.WaitFor(t, 20*time.Second, "the report recorded as ingest:monitoring", func() bool {
		return hasCondition(w.node("b", victim), "KernelDeadlock", "ingest:monitoring")
	})
	// The same report of another machine of the cluster over NATS, as its
	// node agent sends it: judged, and — evaluated after the forged one
	// was recorded — the witness that the forged one was judged too.
	e := deadlock("b", witness, "node-problem-detector")
	pub := events.NewPublisher(w.JS, "capn/npd-bridge/"+witness)
	nc := new(capnv1.NodeConditions)
	if err := events.DataAs(&e, nc); err != nil {
		t.Fatal(err)
	}
	if _, err := pub.Publish(context.Background(), events.HealthSubject("b", witness, "conditions"), events.TypeNodeConditions, e.ID(), nc); err != nil {
		t.Fatal(err)
	}
	natstest.WaitFor(t, 20*time.Second, witness+" unhealthy from its own report", func() bool {
		return len(w.node("b", witness).GetUnhealthyReasons()) > 0
	})
	if h := w.node("b", victim); !h.GetHealthy() || len(h.GetUnhealthyReasons()) > 0 {
		t.Fatalf("an untrusted token made %s unhealthy: %v", victim, h.GetUnhealthyReasons())
	}
	if n := unhealthyEvents(t, w, "b", victim); n != 0 {
		t.Fatalf("%d machine.unhealthy events for %s: the remediator would act", n, victim)
	}
	// What describe shows: the machine healthy, the token's report named.
	natstest.WaitFor(t, 20*time.Second, victim+"'s status shows the token's report", func() bool {
		st, _, err := w.MachineStatuses.Get(context.Background(), "machine.b."+victim)
		return err == nil && slices.ContainsFunc(st.GetConditions(), func(c *capnv1.Condition) bool {
			return c.GetType() == "NodeHealthy" && c.GetStatus() == "True" && strings.Contains(c.GetMessage(), "KernelDeadlock=True from ingest:monitoring")
		})
	})

	// The operator trusts the token: its report now counts.
	w.Apply(fmt.Sprintf(deadlockCluster, "b", "    trustedSources: [monitoring]"))
	natstest.WaitFor(t, 20*time.Second, victim+" unhealthy once monitoring is trusted", func() bool {
		return len(w.node("b", victim).GetUnhealthyReasons()) > 0
	})
}

// unhealthyEvents counts machine.unhealthy events of a machine.
func unhealthyEvents(t *testing.T, w *ingestWorld, cluster, machine string) uint64 {
	t.Helper()
	st, err := w.JS.Stream(context.Background(), events.StreamEvents)
	if err != nil {
		t.Fatal(err)
	}
	subject := events.EventSubject("machine", "unhealthy", cluster, machine)
	info, err := st.Info(context.Background(), jetstream.WithSubjectFilter(subject))
	if err != nil {
		t.Fatal(err)
	}
	return info.State.Subjects[subject]
}
