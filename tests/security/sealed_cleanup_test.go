package security

import (
	"testing"
	"time"

	"github.com/capn-dev/capn/events"
	"github.com/capn-dev/capn/events/natstest"
	capnv1 "github.com/capn-dev/capn/schemas/capn/v1alpha1"
	"github.com/capn-dev/capn/tests/internal/harness"
)

// Finding 1: the sealed bootstrap data of a deleted machine is removed
// from `secrets` (it used to stay: a cluster of 8 machines kept 16
// entries), so a gone machine's join token and CA keys are not kept.
func TestDeletedMachinesBootstrapDataIsPurged(t *testing.T) {
	sys, _, _ := credsSystem(t, harness.Options{})
	sys.Apply(`apiVersion: capn.dev/v1alpha1
kind: Cluster
metadata: {name: sec}
spec:
  kubernetesVersion: v1.33.4
  controlPlane: {provider: sim, replicas: 1}
  workerPools:
  - {name: md-0, provider: sim, replicas: 3}
`)
	sys.WaitReady("sec", 60*time.Second)
	secrets := kv(t, sys, events.BucketSecrets)
	if n := len(harness.Keys(t, secrets, "bootstrap.sec.")); n != 4 {
		t.Fatalf("%d bootstrap records for 4 machines", n)
	}
	sys.MutateCluster("sec", func(c *capnv1.Cluster) { c.Spec.WorkerPools[0].Replicas = 1 })
	natstest.WaitFor(t, 60*time.Second, "2 machines desired and 2 bootstrap records", func() bool {
		return len(harness.Keys(t, sys.Desired, "machine.sec.")) == 2 && len(harness.Keys(t, secrets, "bootstrap.sec.")) == 2
	})
	for _, k := range harness.Keys(t, secrets, "bootstrap.sec.") {
		if len(harness.Keys(t, sys.Desired, "machine.sec."+k[len("bootstrap.sec."):])) != 1 {
			t.Errorf("%s is kept for a machine that is gone", k)
		}
	}
}
