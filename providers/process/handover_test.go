package process_test

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"google.golang.org/protobuf/proto"

	"github.com/capn-dev/capn/events"
	"github.com/capn-dev/capn/events/natstest"
	"github.com/capn-dev/capn/events/replyseal"
	"github.com/capn-dev/capn/providers/process"
	"github.com/capn-dev/capn/providers/process/rehome"
	"github.com/capn-dev/capn/providers/sdk"
	capnv1 "github.com/capn-dev/capn/schemas/capn/v1alpha1"
)

// deployment is one capn deployment's NATS and process provider: what
// a capn dev data dir has, without the services.
type deployment struct {
	srv  *natstest.Server
	p    *process.Provider
	opts process.Options
}

func newDeployment(t *testing.T) *deployment {
	t.Helper()
	srv := natstest.Start(t)
	_, js := srv.Connect(t)
	if err := events.Provision(context.Background(), js, events.DefaultTopology(1)); err != nil {
		t.Fatal(err)
	}
	opts := options(t, t.TempDir())
	opts.NodeNATSURL = srv.URL()
	p, err := process.New(opts)
	if err != nil {
		t.Fatal(err)
	}
	return &deployment{srv: srv, p: p, opts: opts}
}

// serveBootstrap answers every machine of cluster c1 with real kubeadm
// worker data (a bootstrapper stand-in), sealed with the machine's
// credential; it returns the data's checksum.
func (d *deployment) serveBootstrap(t *testing.T) string {
	t.Helper()
	// testdata/worker-bootstrap.data: kubeadm worker data as the
	// bootstrapper renders it (bootstraptest's fixture), kept as a file:
	// a provider's tests import no service.
	raw, err := os.ReadFile(filepath.Join("testdata", "worker-bootstrap.data"))
	if err != nil {
		t.Fatal(err)
	}
	data := &capnv1.BootstrapData{Format: "cloud-config", Data: raw, Checksum: sdk.Checksum(raw)}
	nc, _ := d.srv.Connect(t)
	sub, err := nc.Subscribe(sdk.BootstrapFetchSubject("c1", "*"), func(m *nats.Msg) {
		reply := nats.NewMsg(m.Reply)
		b, _ := proto.Marshal(data)
		reply.Data, _ = replyseal.Seal(m.Header.Get(sdk.HeaderBootstrapCredential), m.Subject, b)
		_ = m.RespondMsg(reply)
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = sub.Unsubscribe() })
	return data.GetChecksum()
}

func readPID(t *testing.T, stateDir, machine string) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(machineDir(stateDir, "c1", machine), "pid"))
	if err != nil {
		t.Fatal(err)
	}
	return strings.Fields(string(b))[0]
}

func connectedTo(stateDir, machine string) string {
	c, err := rehome.ReadConnected(filepath.Join(machineDir(stateDir, "c1", machine), "node"))
	if err != nil {
		return ""
	}
	return c.URL
}

// Two deployments' process providers on one host (capn move of a process
// cluster): the target adopts a running cluster by the source's records —
// the machines keep their processes, identity and data; their agents
// move to the target's NATS; the endpoint keeps running — and refuses a
// record that is not the machine it names, changing nothing. Given back
// (a move undone), the cluster is the source's again, its agents back on
// the source's NATS; and adopted again, a machine started on the target
// runs from the target's state dir.
func TestAdoptFromAnotherStateDirKeepsTheMachinesAndMovesTheirAgents(t *testing.T) {
	ctx := context.Background()
	src, dst := newDeployment(t), newDeployment(t)
	sum := src.serveBootstrap(t)
	ic, err := src.p.EnsureCluster(ctx, "c1", nil)
	if err != nil {
		t.Fatal(err)
	}
	var recs []*capnv1.InfraMachine
	for i, m := range []string{"cp-0", "w-0"} {
		role := "worker"
		if i == 0 {
			role = process.RoleControlPlane
		}
		im, err := src.p.CreateMachine(ctx, &capnv1.CreateMachine{Cluster: "c1", Machine: m, Role: role, Version: "v1.33.4",
			BootstrapChecksum: sum, BootstrapCredential: "cred-" + m})
		if err != nil {
			t.Fatal(err)
		}
		recs = append(recs, im)
	}
	for _, m := range []string{"cp-0", "w-0"} {
		natstest.WaitFor(t, 20*time.Second, m+" bootstrapped and connected to the source", func() bool {
			applied, _ := os.ReadFile(filepath.Join(machineDir(src.opts.StateDir, "c1", m), "node", "capn-node", "applied"))
			return strings.TrimSpace(string(applied)) == sum && connectedTo(src.opts.StateDir, m) == src.srv.URL()
		})
	}
	pids := map[string]string{"cp-0": readPID(t, src.opts.StateDir, "cp-0"), "w-0": readPID(t, src.opts.StateDir, "w-0")}
	endpointPID, _ := os.ReadFile(filepath.Join(src.opts.StateDir, "clusters", "c1", "endpoint.pid"))
	srcCluster := filepath.Join(src.opts.StateDir, "clusters", "c1")

	// Refused, nothing changed: a record whose location is another
	// machine's, one of another address, one outside any state dir.
	other := proto.Clone(recs[0]).(*capnv1.InfraMachine)
	other.Location = recs[1].GetLocation()
	wrongAddr := proto.Clone(recs[1]).(*capnv1.InfraMachine)
	wrongAddr.Addresses[0].Address = "127.9.9.9"
	outside := proto.Clone(recs[1]).(*capnv1.InfraMachine)
	outside.Location = "/etc"
	otherID := proto.Clone(recs[1]).(*capnv1.InfraMachine)
	otherID.ProviderId = "process://c1/w-9"
	for _, tt := range []struct {
		name string
		im   *capnv1.InfraMachine
		want string
	}{
		{"another machine's location", other, "is not a process machine directory of c1/cp-0"},
		{"another provider id", otherID, "has provider id process://c1/w-0, not process://c1/w-9"},
		{"another address", wrongAddr, "has address"},
		{"not a machine directory", outside, "is not a process machine directory"},
	} {
		err := dst.p.Adopt(ctx, []*capnv1.InfraMachine{tt.im}, nil)
		if err == nil || !strings.Contains(err.Error(), tt.want) || !sdk.IsPermanent(err) {
			t.Errorf("%s: adopt = %v, want a permanent refusal saying %q", tt.name, err, tt.want)
		}
		if fi, err := os.Lstat(srcCluster); err != nil || !fi.IsDir() {
			t.Fatalf("%s: the source's cluster dir changed: %v", tt.name, err)
		}
		if _, err := os.Lstat(filepath.Join(dst.opts.StateDir, "clusters", "c1")); err == nil {
			t.Fatalf("%s: the target has a cluster dir after a refusal", tt.name)
		}
	}
	if connectedTo(src.opts.StateDir, "w-0") != src.srv.URL() {
		t.Fatal("a refused adopt moved an agent")
	}

	adopt := func() {
		t.Helper()
		if err := dst.p.Adopt(ctx, nil, []*capnv1.InfraCluster{ic}); err != nil {
			t.Fatal(err)
		}
		for _, im := range recs {
			if err := dst.p.Adopt(ctx, []*capnv1.InfraMachine{im}, nil); err != nil {
				t.Fatal(err)
			}
		}
	}
	adopt()
	for _, im := range recs {
		m := im.GetMachine()
		got, err := dst.p.Describe(ctx, "c1", m)
		if err != nil || got.GetStateValue() != sdk.StateRunning || got.GetProviderId() != im.GetProviderId() || internalIP(got) != internalIP(im) {
			t.Fatalf("target describes %s as %v, %v; want Running %s at %s", m, got, err, im.GetProviderId(), internalIP(im))
		}
		if pid := readPID(t, dst.opts.StateDir, m); pid != pids[m] {
			t.Errorf("%s runs as pid %s, was %s: recreated", m, pid, pids[m])
		}
		if got := connectedTo(dst.opts.StateDir, m); got != dst.srv.URL() {
			t.Errorf("%s's agent is connected to %q, want the target's %s", m, got, dst.srv.URL())
		}
	}
	if to, err := os.Readlink(srcCluster); err != nil || to != filepath.Join(dst.opts.StateDir, "clusters", "c1") {
		t.Errorf("the source keeps %s as %q, %v; want a link to the target's dir", srcCluster, to, err)
	}
	if l, err := src.p.List(ctx); err != nil || len(l) != 0 {
		t.Errorf("the source still lists %v, %v", l, err)
	}
	// The endpoint runs on, the same process, and the target's ensure
	// keeps it.
	again, err := dst.p.EnsureCluster(ctx, "c1", nil)
	if err != nil || again.GetControlPlaneEndpoint().GetPort() != ic.GetControlPlaneEndpoint().GetPort() {
		t.Fatalf("target ensure: %v, %v", again, err)
	}
	if now, _ := os.ReadFile(filepath.Join(dst.opts.StateDir, "clusters", "c1", "endpoint.pid")); string(now) != string(endpointPID) {
		t.Errorf("the endpoint was restarted: %s, was %s", now, endpointPID)
	}
	// Adopting again (a redelivered command) changes nothing.
	adopt()

	// Undone: the target lets go, the source has it back as it was.
	if err := dst.p.OrphanMachine(ctx, "c1", "cp-0"); err != nil {
		t.Fatal(err)
	}
	if fi, err := os.Lstat(srcCluster); err != nil || !fi.IsDir() {
		t.Fatalf("the cluster dir was not given back: %v", err)
	}
	for _, m := range []string{"cp-0", "w-0"} {
		got, err := src.p.Describe(ctx, "c1", m)
		if err != nil || got.GetStateValue() != sdk.StateRunning || readPID(t, src.opts.StateDir, m) != pids[m] {
			t.Fatalf("source describes %s as %v, %v after the give-back", m, got, err)
		}
		natstest.WaitFor(t, 10*time.Second, m+"'s agent back on the source's NATS", func() bool {
			return connectedTo(src.opts.StateDir, m) == src.srv.URL()
		})
	}
	if l, err := dst.p.List(ctx); err != nil || len(l) != 0 {
		t.Errorf("the target still lists %v, %v", l, err)
	}

	// Adopted again, then restarted on the target: it runs from there.
	adopt()
	if err := dst.p.Stop(ctx, "c1", "w-0"); err != nil {
		t.Fatal(err)
	}
	if err := dst.p.Start(ctx, "c1", "w-0"); err != nil {
		t.Fatal(err)
	}
	natstest.WaitFor(t, 10*time.Second, "the restarted w-0 connected to the target", func() bool {
		return connectedTo(dst.opts.StateDir, "w-0") == dst.srv.URL()
	})
	args, _ := os.ReadFile("/proc/" + readPID(t, dst.opts.StateDir, "w-0") + "/cmdline")
	if !strings.Contains(string(args), "--data-dir="+filepath.Join(dst.opts.StateDir, "clusters", "c1", "machines", "w-0", "node")) {
		t.Errorf("restarted on the target, w-0 runs with %q", strings.ReplaceAll(string(args), "\x00", " "))
	}
}
