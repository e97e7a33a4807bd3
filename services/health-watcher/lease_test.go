package healthwatcher

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"

	"github.com/capn-dev/capn/events"
	capnv1 "github.com/capn-dev/capn/schemas/capn/v1alpha1"
	"github.com/capn-dev/capn/schemas/keys"
)

// A settled cluster's wakes are answered by its heartbeats without an
// evaluation, until a node falls silent: the wake at its grace's end then
// evaluates the cluster and records the node's Ready as Unknown.
func TestSettledWakeRenewedByHeartbeats(t *testing.T) {
	ctx := context.Background()
	clk := t0
	s, _ := steadyCluster(t, 3, "control-plane", t0, Config{Now: func() time.Time { return clk }})
	beat := func(machines ...string) {
		for _, m := range machines {
			ev, err := events.New("capn-node", events.TypeNodeHeartbeat, fmt.Sprintf("hb-%s-%d", m, clk.UnixNano()),
				&capnv1.NodeHeartbeat{Cluster: "c1", Machine: m, Ready: true, NodeName: m, KubeletVersion: "v1.37.2"})
			if err != nil {
				t.Fatal(err)
			}
			msg := &events.Message{Event: &ev, Subject: keys.Health("c1", m, keys.HealthHeartbeat), Metadata: &jetstream.MsgMetadata{Timestamp: clk}}
			if err := s.onHealth(ctx, msg); err != nil {
				t.Fatal(err)
			}
		}
	}
	step := func(at time.Duration, wantAfter time.Duration, wantEvaluations, wantRenewals uint64) {
		t.Helper()
		clk = t0.Add(at)
		res, err := s.reconcile(ctx, "c1")
		if err != nil {
			t.Fatal(err)
		}
		ev, rn := sampleCount(t, s.metrics.evaluate), sampleCount(t, s.metrics.renewals)
		if res.RequeueAfter != wantAfter || ev != wantEvaluations || rn != wantRenewals {
			t.Fatalf("at %s: wake after %s, %d evaluations, %d renewals; want %s, %d, %d", at, res.RequeueAfter, ev, rn, wantAfter, wantEvaluations, wantRenewals)
		}
	}
	step(0, time.Minute, 1, 0) // the whole cluster; the wake at ResyncEvery (the graces end at 2m)
	clk = t0.Add(50 * time.Second)
	beat("w-0", "w-1", "w-2")
	step(time.Minute, time.Minute, 1, 1) // all heard from: renewed to the next ResyncEvery
	clk = t0.Add(100 * time.Second)
	beat("w-0", "w-1")                        // w-2 falls silent after 50s
	step(2*time.Minute, 50*time.Second, 1, 2) // renewed to w-2's grace, 50s+2m
	if ready := readyOf(t, s, "w-2"); ready != capnv1.ConditionTrue.Wire() {
		t.Fatalf("w-2 Ready %s before its grace ran out", ready)
	}
	step(2*time.Minute+50*time.Second, 50*time.Second, 2, 2) // w-2's grace ran out: evaluated; next, w-0's (100s+2m)
	if ready := readyOf(t, s, "w-2"); ready != capnv1.ConditionUnknown.Wire() {
		t.Fatalf("w-2 Ready %s after its grace ran out, want Unknown", ready)
	}
	if ready := readyOf(t, s, "w-0"); ready != capnv1.ConditionTrue.Wire() {
		t.Fatalf("w-0 Ready %s, want True", ready)
	}
}

// readyOf is the Ready condition recorded for machine of c1.
func readyOf(t *testing.T, s *Service, machine string) string {
	t.Helper()
	h, _, err := s.nodes.Get(context.Background(), keys.Node("c1", machine))
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range h.GetConditions() {
		if c.GetType() == ConditionReady {
			return c.GetStatus()
		}
	}
	return ""
}

// sampleCount is a counter's value or a histogram's count of observations.
func sampleCount(t *testing.T, m prometheus.Metric) uint64 {
	t.Helper()
	var d dto.Metric
	if err := m.Write(&d); err != nil {
		t.Fatal(err)
	}
	if h := d.GetHistogram(); h != nil {
		return h.GetSampleCount()
	}
	return uint64(d.GetCounter().GetValue())
}
