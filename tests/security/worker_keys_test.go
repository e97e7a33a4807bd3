package security

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/capn-dev/capn/events"
	"github.com/capn-dev/capn/events/natstest"
	"github.com/capn-dev/capn/events/store"
	capnv1 "github.com/capn-dev/capn/schemas/capn/v1alpha1"
	"github.com/capn-dev/capn/tests/internal/harness"
)

// Finding 1: a worker's bootstrap data carries no private key of the
// cluster — kubeadm's join needs only the CA certificate's hash and a
// bootstrap token; only control-plane machines get the CA keys. The data
// checked is what the real bootstrapper sealed for the fetch to serve.
// (The bootstrapper already rendered workers without keys before issue
// 17; this test holds the line.)
func TestWorkerBootstrapDataHoldsNoPrivateKey(t *testing.T) {
	sys, _, _ := credsSystem(t, harness.Options{})
	sys.Apply(credsCluster)
	worker := machineOf(t, sys, "sec", "worker")
	cp := machineOf(t, sys, "sec", "control-plane")
	boots := store.NewBucket(kv(t, sys, events.BucketSecrets), func() *capnv1.BootstrapData { return new(capnv1.BootstrapData) }, store.WithSealer(sys.Ring))
	data := func(m string) string {
		var d string
		natstest.WaitFor(t, 60*time.Second, m+"'s bootstrap data", func() bool {
			rec, _, err := boots.Get(context.Background(), "bootstrap.sec."+m)
			d = string(rec.GetData())
			return err == nil && d != ""
		})
		return d
	}
	w, c := data(worker), data(cp)
	for _, bad := range []string{"ca.key", "sa.key", "front-proxy-ca.key", "PRIVATE KEY"} {
		if strings.Contains(w, bad) {
			t.Errorf("the worker's bootstrap data holds %q", bad)
		}
	}
	if !strings.Contains(c, "ca.key") {
		t.Error("the control-plane machine's data holds no ca.key: the check above proves nothing")
	}
}
