package security

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/capn-dev/capn/events"
	"github.com/capn-dev/capn/events/natstest"
	"github.com/capn-dev/capn/events/store"
	"github.com/capn-dev/capn/providers/sdk"
	capnv1 "github.com/capn-dev/capn/schemas/capn/v1alpha1"
	"github.com/capn-dev/capn/services/bootstrapper"
	"github.com/capn-dev/capn/services/machine-manager"
	"github.com/capn-dev/capn/tests/internal/harness"
)

const credsCluster = `apiVersion: capn.dev/v1alpha1
kind: Cluster
metadata: {name: sec}
spec:
  kubernetesVersion: v1.33.4
  controlPlane: {provider: sim, replicas: 1}
  workerPools:
  - {name: md-0, provider: sim, replicas: 1}
`

// Finding 1: a read token shows every machine's bootstrap checksum, and
// the checksum alone used to open the fetch of its bootstrap data (the
// control plane's carries the cluster CA's private key). The fetch now
// needs the machine's credential, which shows nowhere a read token, the
// timeline or the observed records reach, and is refused once the
// machine has joined.
func TestBootstrapFetchWithThePublicChecksumIsRefused(t *testing.T) {
	// The machines never finish booting, so the control-plane machine stays
	// before its join while the attack runs.
	slow := harness.TestSim()
	slow.BootLatency = time.Hour
	sys, url, token := credsSystem(t, harness.Options{Sim: &slow})
	sys.Apply(credsCluster)
	cp := machineOf(t, sys, "sec", "control-plane")
	sum := publicChecksum(t, url, token, "sec", cp)

	// What a node of any cluster can do: ask with the public checksum.
	nc, _ := sys.Srv.Connect(t)
	if code, data := fetch(t, nc, "sec", cp, map[string]string{bootstrapper.HeaderChecksum: sum}); code != "403" || len(data) != 0 {
		t.Fatalf("the fetch with the public checksum alone answered code %q with %d bytes of bootstrap data (CA keys: %v); want 403",
			code, len(data), strings.Contains(string(data), "ca.key"))
	}

	// The credential the bootstrapper keeps (sealed) opens the fetch, and
	// nothing a read token or the timeline sees holds it. The sim runs no
	// node agents (it does not announce node-agent), so none was minted
	// with the data; its provider's request mints it, as the SDK's
	// request before a node-agent provider's create would get it.
	boots := store.NewBucket(kv(t, sys, events.BucketSecrets), func() *capnv1.BootstrapData { return new(capnv1.BootstrapData) }, store.WithSealer(sys.Ring))
	rec, _, err := boots.Get(context.Background(), "bootstrap.sec."+cp)
	if err != nil {
		t.Fatal(err)
	}
	if rec.GetFetchCredential() != "" {
		t.Fatal("a credential was minted with the data of a machine whose provider runs no node agents")
	}
	cred, err := sdk.BootstrapCredential(context.Background(), nc, "sim", "sec", cp, sum)
	if err != nil {
		t.Fatal(err)
	}
	if rec, _, err = boots.Get(context.Background(), "bootstrap.sec."+cp); err != nil || rec.GetFetchCredential() != cred {
		t.Fatalf("the credential answered is not the one the record keeps (%v)", err)
	}
	if len(cred) < 43 {
		t.Fatalf("credential %q: want at least 256 bits", cred)
	}
	if code, _ := fetch(t, nc, "sec", cp, map[string]string{bootstrapper.HeaderChecksum: sum, bootstrapper.HeaderCredential: cred[:len(cred)-1] + "x"}); code != "403" {
		t.Fatalf("a wrong credential: code %q, want 403", code)
	}
	if code, data := fetch(t, nc, "sec", cp, map[string]string{bootstrapper.HeaderChecksum: sum, bootstrapper.HeaderCredential: cred}); code != "" || len(data) == 0 {
		t.Fatalf("the machine's own credential was refused: %q", code)
	}
	// Whoever else reads the reply (every node agent shares the node user's
	// inbox prefix) reads ciphertext: it is sealed with the credential.
	if code, data := fetch(t, nc, "sec", cp, map[string]string{bootstrapper.HeaderChecksum: sum, bootstrapper.HeaderCredential: cred}); code != "" || strings.Contains(string(data), "ca.key") {
		t.Fatalf("the fetch reply is readable without the credential (code %q)", code)
	}
	// A machine's credential opens no other machine's data: another
	// cluster's control plane, with its public checksum and this one's
	// credential.
	sys.Apply(strings.Replace(credsCluster, "name: sec}", "name: sec2}", 1))
	other := machineOf(t, sys, "sec2", "control-plane")
	osum := publicChecksum(t, url, token, "sec2", other)
	if code, data := fetch(t, nc, "sec2", other, map[string]string{bootstrapper.HeaderChecksum: osum, bootstrapper.HeaderCredential: cred}); code != "403" || len(data) != 0 {
		t.Fatalf("sec's credential fetched sec2's control-plane data: code %q, %d bytes", code, len(data))
	}
	public := map[string]string{
		"GET machine":  string(readGET(t, url, token, "/v1/clusters/sec/machines/"+cp)),
		"GET machines": string(readGET(t, url, token, "/v1/clusters/sec/machines")),
		"the timeline": string(readGET(t, url, token, "/v1/clusters/sec/events")),
		"observed":     bucketDump(t, kv(t, sys, events.BucketObserved)),
		"desired":      bucketDump(t, kv(t, sys, events.BucketDesired)),
		"events":       streamDump(t, sys.JS, events.StreamEvents),
		"commands":     streamDump(t, sys.JS, events.StreamCommands),
		"providers":    streamDump(t, sys.JS, events.StreamProviders),
	}
	for where, text := range public {
		if strings.Contains(text, cred) {
			t.Errorf("the credential shows in %s", where)
		}
	}

	// The join: the machine-manager records the machine Running (what it
	// does once its node reported ready). Then the credential is spent.
	sys.Stop(machinemanager.Name)
	if _, _, err := sys.MachineStatuses.Mutate(context.Background(), "machine.sec."+cp, func(st *capnv1.MachineStatus, _ bool) (*capnv1.MachineStatus, error) {
		st.Phase, st.PhaseSince = "Running", timestamppb.Now()
		return st, nil
	}); err != nil {
		t.Fatal(err)
	}
	natstest.WaitFor(t, 10*time.Second, "the fetch refused after the join (410)", func() bool {
		code, _ := fetch(t, nc, "sec", cp, map[string]string{bootstrapper.HeaderChecksum: sum, bootstrapper.HeaderCredential: cred})
		return code == "410"
	})
	// And the record forgets it: a copy of the secrets bucket (and its
	// key) taken after the join holds no credential of the machine.
	natstest.WaitFor(t, 10*time.Second, "the record forgets the credential after the join", func() bool {
		rec, _, err := boots.Get(context.Background(), "bootstrap.sec."+cp)
		return err == nil && rec.GetFetchCredential() == "" && rec.GetJoined()
	})
	if _, err := sdk.BootstrapCredential(context.Background(), nc, "sim", "sec", cp, sum); err == nil {
		t.Fatal("the provider got a credential after the join")
	}
}

func kv(t *testing.T, sys *harness.System, bucket string) jetstream.KeyValue {
	t.Helper()
	b, err := sys.JS.KeyValue(context.Background(), bucket)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// bucketDump is every current value of a bucket, as raw text.
func bucketDump(t *testing.T, b jetstream.KeyValue) string {
	t.Helper()
	var out strings.Builder
	for _, k := range harness.Keys(t, b, "") {
		e, err := b.Get(context.Background(), k)
		if err == nil {
			out.Write(e.Value())
		}
	}
	return out.String()
}

// streamDump is every message of a stream, as raw text (headers too).
func streamDump(t *testing.T, js jetstream.JetStream, stream string) string {
	t.Helper()
	ctx := context.Background()
	s, err := js.Stream(ctx, stream)
	if err != nil {
		t.Fatal(err)
	}
	info, err := s.Info(ctx)
	if err != nil {
		t.Fatal(err)
	}
	var out strings.Builder
	for seq := info.State.FirstSeq; seq <= info.State.LastSeq && info.State.Msgs > 0; seq++ {
		m, err := s.GetMsg(ctx, seq)
		if errors.Is(err, jetstream.ErrMsgNotFound) {
			continue
		}
		if err != nil {
			t.Fatal(err)
		}
		out.Write(m.Data)
		for k, v := range m.Header {
			out.WriteString(k + ":" + strings.Join(v, ",") + "\n")
		}
	}
	return out.String()
}
