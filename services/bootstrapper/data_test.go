package bootstrapper_test

import (
	"bytes"
	"context"
	"fmt"
	"testing"
	"time"

	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/capn-dev/capn/events"
	"github.com/capn-dev/capn/events/natstest"
	"github.com/capn-dev/capn/events/store"
	capnv1 "github.com/capn-dev/capn/schemas/capn/v1alpha1"
	"github.com/capn-dev/capn/secrets/pki"
	"github.com/capn-dev/capn/secrets/token"
	"github.com/capn-dev/capn/services/bootstrapper/bootstrap"
	"github.com/capn-dev/capn/services/bootstrapper/bootstrap/bootstraptest"
	"github.com/capn-dev/capn/services/bootstrapper/bootstrap/builtin"
)

// TestDataIsTheRenderOfItsInputs checks that every machine's stored data
// is byte for byte what the bootstrap provider renders from the inputs
// the bucket holds — the command (or the desired machine), the cluster's
// endpoint and network, its PKI as stored, and the token in the record —
// for the first machine of a cluster as for the ones after it (which the
// service renders from what it remembers of the cluster: the PKI it
// checked, the CA's pin, the cached cluster), for every built-in provider
// and format, by command and from the desired spec alone.
func TestDataIsTheRenderOfItsInputs(t *testing.T) {
	e := newEnv(t)
	ring := keyring(t, newKey(t))
	e.start(ring)
	e.applyCluster("c1", nil)
	e.reportEndpoint("c1")
	e.waitPKI(ring, "c1")
	got := e.collect("c1")

	full := bootstraptest.FullSpec("kubeadm")
	full.IgnorePreflightErrors = []string{"ImagePull"}
	ignition := bootstraptest.FullSpec("kubeadm")
	ignition.Format = "ignition"
	ignition.CommandTimeout = durationpb.New(90 * time.Second)
	script := &capnv1.BootstrapSpec{Provider: "script", UserData: "#!/bin/sh\nkubeadm join \"$CAPN_API_ENDPOINT\" --token \"$CAPN_JOIN_TOKEN\"\n", Files: full.Files}
	local := &capnv1.BootstrapSpec{Provider: "kube-local", PreCommands: []string{"echo pre"}}
	type machine struct {
		name, role string
		first      bool
		spec       *capnv1.BootstrapSpec
		labels     map[string]string
	}
	byCommand := []machine{
		{"cp-0", "control-plane", true, &capnv1.BootstrapSpec{}, nil},
		{"cp-1", "control-plane", false, full, nil},
		{"w-0", "worker", false, &capnv1.BootstrapSpec{}, bootstraptest.Labels},
		{"w-1", "worker", false, &capnv1.BootstrapSpec{}, nil},
		{"w-full", "worker", false, full, bootstraptest.Labels},
		{"w-ignition", "worker", false, ignition, nil},
		{"w-script", "worker", false, script, nil},
		{"w-local", "worker", false, local, nil},
		{"cp-local", "control-plane", false, local, nil},
	}
	cmds := map[string]*capnv1.GenerateBootstrap{}
	for _, m := range byCommand {
		e.want("c1", m.name)
		cmd := &capnv1.GenerateBootstrap{Cluster: "c1", Machine: m.name, Role: m.role, FirstControlPlane: m.first, Version: "v1.34.2",
			Bootstrap: m.spec, Labels: m.labels}
		if _, err := e.pub.Publish(context.Background(), events.CommandSubject("bootstrap", "generate", "c1", m.name), events.TypeGenerateBootstrap, "gen-"+m.name, cmd); err != nil {
			t.Fatal(err)
		}
		if ev := next(t, got); ev.Event.Type() != events.TypeBootstrapReady {
			t.Fatalf("%s: got %s: %s", m.name, ev.Event.Type(), ev.Event.Data())
		}
		cmds[m.name] = cmd
	}
	// From the desired spec alone (the machines loop): a pool's workers.
	machines := store.NewBucket(e.kv(events.BucketDesired), func() *capnv1.Machine { return new(capnv1.Machine) })
	for i := range 4 {
		name := fmt.Sprintf("md-%d", i)
		m := &capnv1.Machine{Metadata: &capnv1.ObjectMeta{Name: name, Uid: "uid-" + name},
			Spec: &capnv1.MachineSpec{Provider: "sim", Role: "worker", Version: "v1.34.2", Labels: map[string]string{"pool": "md"},
				Bootstrap: full}}
		if _, err := machines.Create(context.Background(), "machine.c1."+name, m); err != nil {
			t.Fatal(err)
		}
		cmds[name] = capnv1.NewGenerateBootstrap("c1", name, m)
	}
	boots := store.NewBucket(e.kv(events.BucketSecrets), func() *capnv1.BootstrapData { return new(capnv1.BootstrapData) }, store.WithSealer(ring))
	natstest.WaitFor(t, 15*time.Second, "data of every machine", func() bool {
		for name := range cmds {
			if _, _, err := boots.Get(context.Background(), "bootstrap.c1."+name); err != nil {
				return false
			}
		}
		return true
	})

	set := pki.FromProto(e.openPKI(ring, "c1"))
	network := &capnv1.NetworkSpec{PodCidrs: []string{"192.168.0.0/16"}, ServiceCidrs: []string{"10.96.0.0/12"}, ServiceDomain: "cluster.local"}
	for name, cmd := range cmds {
		rec := e.record(ring, "c1", name)
		tok, err := token.Parse(rec.GetToken())
		if err != nil {
			t.Fatalf("%s: token: %v", name, err)
		}
		in, err := bootstrap.NewInput(cmd, bootstrap.Cluster{Endpoint: bootstrap.Endpoint{Host: "127.0.0.1", Port: 6443}, Network: network, PKI: set}, tok)
		if err != nil {
			t.Fatalf("%s: input: %v", name, err)
		}
		want, err := builtin.Registry().Render(in)
		if err != nil {
			t.Fatalf("%s: render: %v", name, err)
		}
		if !bytes.Equal(rec.GetData(), want.Data) || rec.GetChecksum() != want.Checksum() || rec.GetFormat() != string(want.Format) {
			t.Errorf("%s: stored data (%s, %d bytes, %s) is not the render of its inputs (%s, %d bytes, %s)",
				name, rec.GetFormat(), len(rec.GetData()), rec.GetChecksum(), want.Format, len(want.Data), want.Checksum())
		}
	}
}
