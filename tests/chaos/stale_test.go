package chaos

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/capn-dev/capn/internal/testkit"
	capnv1 "github.com/capn-dev/capn/schemas/capn/v1alpha1"
	"github.com/capn-dev/capn/tests/internal/harness"
)

// TestStaleCreateAfterDelete delivers a machine's provider create command
// again after the machine was replaced (deleted, its infrastructure gone,
// its records removed) — what a create redelivered after its AckWait, or
// delayed past the delete, does. The provider SDK re-reads only its own
// infrastructure record, finds none and creates the machine again; the
// machine-manager's orphan collector must delete that infrastructure.
func TestStaleCreateAfterDelete(t *testing.T) {
	if testing.Short() {
		t.Skip("chaos test: skipped with -short")
	}
	sys := harness.New(t, harness.Options{})
	px := startProxy(t, sys, 1, 0) // record only
	sys.StartAll()
	sys.Apply(manifestOf(0, 1))
	sys.WaitReady(clusterName(0), time.Minute)
	sys.MutateCluster(clusterName(0), func(c *capnv1.Cluster) {
		c.Spec.KubernetesVersion = toVersion
		for _, p := range c.Spec.WorkerPools {
			p.Version = toVersion
		}
	})
	sys.WaitReady(clusterName(0), time.Minute)
	waitQuiet(t, sys, time.Minute)
	px.stop()

	live := map[string]bool{}
	for _, k := range harness.Keys(t, sys.Desired, "machine.") {
		live[k] = true
	}
	n := px.replayCommands(func(verb, c, m string) bool { return verb == "create" && !live["machine."+c+"."+m] })
	if n == 0 {
		t.Fatal("no command of a replaced machine was recorded")
	}
	t.Logf("published the create commands of the %d replaced machines again, after their deletes", n)
	waitQuiet(t, sys, time.Minute)
	orphans := func() []string {
		var out []string
		for _, k := range harness.Keys(t, sys.Observed, "infra.sim.") {
			c, m, _ := strings.Cut(strings.TrimPrefix(k, "infra.sim."), ".")
			if m == "_" {
				continue
			}
			if _, _, err := sys.Machines.Get(context.Background(), "machine."+c+"."+m); err != nil {
				out = append(out, k)
			}
		}
		return out
	}
	if err := testkit.Poll(time.Minute, 100*time.Millisecond, func() error {
		if o := orphans(); len(o) > 0 {
			return fmt.Errorf("a minute after the stale creates, infrastructure without a machine: %v", o)
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
}
