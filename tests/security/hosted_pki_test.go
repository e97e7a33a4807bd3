package security

import (
	"context"
	"strings"
	"testing"
	"time"

	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/capn-dev/capn/deploy/natsconfig"
	"github.com/capn-dev/capn/deploy/natsconfig/natsconfigtest"
	"github.com/capn-dev/capn/events"
	"github.com/capn-dev/capn/events/store"
	capnv1 "github.com/capn-dev/capn/schemas/capn/v1alpha1"
	"github.com/capn-dev/capn/schemas/keys"
	"github.com/capn-dev/capn/secrets/pki"
	controlplanehosted "github.com/capn-dev/capn/services/controlplane-hosted"
)

// A hosted control plane's CA keys (docs/security.md, "Hosted control
// planes"): on the rendered deployment's nats-server with the real
// bootstrapper, the controlplane-hosted user gets a hosted cluster's PKI
// sealed to its own key; it does not get the PKI of a cluster whose
// control plane runs on machines; and no other service user can ask at
// all (the server refuses the publish).
func TestHostedPKIOnlyForTheHostedServiceAndHostedClusters(t *testing.T) {
	d := natsconfig.Compose()
	d.Servers, d.Replicas = d.Servers[:1], 1
	c := natsconfigtest.Start(t, d)
	c.Provision()
	c.StartBootstrapper(0)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()

	_, gjs, _ := c.Connect(natsconfig.Gateway, 0)
	des, err := gjs.KeyValue(ctx, events.BucketDesired)
	if err != nil {
		t.Fatal(err)
	}
	clusters := store.NewBucket(des, store.New[capnv1.Cluster]())
	for name, typ := range map[string]string{"hosted1": capnv1.ControlPlaneHosted, "machines1": capnv1.ControlPlaneMachines} {
		if _, err := clusters.Create(ctx, keys.Cluster(name), &capnv1.Cluster{ApiVersion: "capn.dev/v1alpha1", Kind: "Cluster",
			Metadata: &capnv1.ObjectMeta{Name: name, CreationTimestamp: timestamppb.Now()},
			Spec: &capnv1.ClusterSpec{KubernetesVersion: "v1.34.2",
				ControlPlane: &capnv1.ControlPlaneSpec{Provider: "sim", Replicas: 1, Type: typ}}}); err != nil {
			t.Fatal(err)
		}
	}

	hnc, _, hv := c.Connect(natsconfig.ControlPlaneHosted, 0)
	set, err := controlplanehosted.RequestPKI(ctx, hnc, "hosted1")
	if err != nil {
		t.Fatalf("controlplane-hosted: the hosted cluster's PKI: %v (violations %v)", err, hv.All())
	}
	if _, err := pki.ParseCA(set.CA, time.Now()); err != nil {
		t.Fatalf("the hosted cluster's CA: %v", err)
	}

	// The attack from a compromised hosted service: the CA keys of a
	// cluster whose control plane it does not run.
	if _, err := controlplanehosted.RequestPKI(ctx, hnc, "machines1"); err == nil || !strings.Contains(err.Error(), "(403)") {
		t.Fatalf("controlplane-hosted asked for a machines cluster's PKI: got %v, want a 403 refusal", err)
	}

	// The attack from every other service user: the request is refused
	// by the server, and nothing answers.
	for _, user := range []string{natsconfig.ClusterPlanner, natsconfig.MachineManager, natsconfig.Gateway,
		natsconfig.AddonManager, natsconfig.HealthWatcher, natsconfig.ProviderUser("sim")} {
		nc, _, v := c.Connect(user, 0)
		rctx, rcancel := context.WithTimeout(ctx, 2*time.Second)
		_, err := controlplanehosted.RequestPKI(rctx, nc, "hosted1")
		rcancel()
		if err == nil {
			t.Errorf("%s got the hosted cluster's PKI", user)
		}
		if !v.Wait(keys.BootstrapHosted("hosted1"), 3*time.Second) {
			t.Errorf("%s asked for the hosted cluster's PKI: no permissions violation from the server (violations %v)", user, v.All())
		}
	}
}
