package e2e

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/capn-dev/capn/events/natstest"
	capnv1 "github.com/capn-dev/capn/schemas/capn/v1alpha1"
	"github.com/capn-dev/capn/tests/internal/harness"
)

// TestHibernateAndWake hibernates a Ready cluster: every machine is stopped
// by its provider and keeps its identity (same provider id, no new
// machine); the cluster is Hibernated. Waking it starts the same machines
// and the cluster is Ready again.
func TestHibernateAndWake(t *testing.T) {
	w := newWorld(t)
	w.startAll()
	w.Apply(harness.Demo)
	w.WaitReady("demo", 60*time.Second)
	ctx := context.Background()
	ids := func() map[string]string {
		out := map[string]string{}
		for _, k := range harness.Keys(t, w.Observed, "infra.sim.demo.") {
			if strings.HasSuffix(k, "._") {
				continue // the cluster's own infrastructure
			}
			m, _, err := w.Infra.Get(ctx, k)
			if err != nil {
				t.Fatal(err)
			}
			out[k] = m.GetProviderId() + " " + m.GetState()
		}
		return out
	}
	before := ids()
	if len(before) != 9 {
		t.Fatalf("%d machines' infrastructure before hibernating, want 9: %v", len(before), before)
	}

	start := time.Now()
	w.MutateCluster("demo", func(c *capnv1.Cluster) { c.Spec.Hibernated = true })
	natstest.WaitFor(t, 60*time.Second, "demo Hibernated (condition True)", func() bool {
		st := w.ClusterStatus("demo")
		for _, c := range st.GetConditions() {
			if c.GetType() == "Hibernated" {
				return st.GetPhase() == "Hibernated" && c.GetStatus() == "True"
			}
		}
		return false
	})
	t.Logf("hibernate: 9 machines stopped in %s", time.Since(start).Round(time.Millisecond))
	for k, v := range ids() {
		if want := before[k]; v != stateless(want)+" Stopped" {
			t.Errorf("%s is %q after hibernating, want %q Stopped (same machine)", k, v, stateless(want))
		}
	}
	sts, err := w.MachineStatuses.List(ctx, "machine.demo.")
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range sts {
		if e.Value.GetPhase() != "Stopped" {
			t.Errorf("%s is %s while hibernated, want Stopped", e.Key, e.Value.GetPhase())
		}
	}

	start = time.Now()
	w.MutateCluster("demo", func(c *capnv1.Cluster) { c.Spec.Hibernated = false })
	w.WaitReady("demo", 60*time.Second)
	t.Logf("wake: Ready again in %s", time.Since(start).Round(time.Millisecond))
	after := ids()
	if len(after) != len(before) {
		t.Fatalf("%d machines after waking, want the same %d", len(after), len(before))
	}
	for k, v := range after {
		if v != before[k] {
			t.Errorf("%s is %q after waking, want %q", k, v, before[k])
		}
	}
}

// stateless cuts the state off an ids() value: "<provider id> <state>".
func stateless(v string) string {
	id, _, _ := strings.Cut(v, " ")
	return id
}
