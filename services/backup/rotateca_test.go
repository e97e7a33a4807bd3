package backup

import (
	"context"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"
	"sigs.k8s.io/yaml"

	"github.com/capn-dev/capn/events"
	"github.com/capn-dev/capn/events/store"
	capnv1 "github.com/capn-dev/capn/schemas/capn/v1alpha1"
	"github.com/capn-dev/capn/schemas/keys"
	"github.com/capn-dev/capn/secrets/pki"
	"github.com/capn-dev/capn/secrets/seal"
)

// pkiAgent answers the certificates commands of one machine as capn-node
// does (cmd/capn-node/agent/pki.go) and records what it was sent.
type pkiAgent struct {
	name      string
	mu        sync.Mutex
	failPhase string
	got       []*capnv1.CertificatesNodeCommand
	ops       []string
}

func (a *pkiAgent) serve(t *testing.T, nc *nats.Conn, cluster string) {
	t.Helper()
	sub, err := nc.Subscribe(keys.PKICommand(cluster, a.name, "*"), func(m *nats.Msg) {
		op := m.Subject[strings.LastIndex(m.Subject, ".")+1:]
		cmd := &capnv1.CertificatesNodeCommand{}
		_ = proto.Unmarshal(m.Data, cmd)
		a.mu.Lock()
		a.ops = append(a.ops, op+":"+cmd.GetPhase())
		a.got = append(a.got, cmd)
		reply := &capnv1.CertificatesNodeReply{}
		if op == opCAPhase && cmd.GetPhase() == a.failPhase {
			reply.Error = "the API server did not accept this machine's new credentials within 2m"
		}
		reply.Certificates = []*capnv1.CertificateExpiry{{Machine: a.name, Name: "apiserver", NotAfter: timestamppb.New(time.Now().Add(time.Duration(len(a.name)) * time.Hour))}}
		a.mu.Unlock()
		data, _ := proto.Marshal(reply)
		_ = m.Respond(data)
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = sub.Unsubscribe() })
	if err := nc.Flush(); err != nil {
		t.Fatal(err)
	}
}

func (a *pkiAgent) phases() []string {
	a.mu.Lock()
	defer a.mu.Unlock()
	var out []string
	for _, o := range a.ops {
		if strings.HasPrefix(o, opCAPhase+":") {
			out = append(out, strings.TrimPrefix(o, opCAPhase+":"))
		}
	}
	return out
}

func (a *pkiAgent) last(phase string) *capnv1.CertificatesNodeCommand {
	a.mu.Lock()
	defer a.mu.Unlock()
	for i := len(a.got) - 1; i >= 0; i-- {
		if a.got[i].GetPhase() == phase {
			return a.got[i]
		}
	}
	return nil
}

func bundleLen(t *testing.T, b string) int {
	t.Helper()
	c, err := pki.BundleCertificates([]byte(b))
	if err != nil {
		t.Fatal(err)
	}
	return len(c)
}

// A CA rotation on embedded NATS with the agents' protocol: every
// machine gets each phase in turn, control planes first; it holds where
// asked, refuses a second rotation naming the phase, stops on a machine
// that fails and resumes there with continue; between phases the cluster
// CA and the admin kubeconfig move to the new CA; at the end the old CA's
// key is gone and the status says Complete with the earliest expiry.
func TestRotateCA(t *testing.T) {
	key, _ := seal.GenerateKey()
	ring, _ := seal.NewKeyring(key)
	js, _ := run(t, Config{Keyring: ring})
	nc := js.Conn()
	ctx := context.Background()
	putProto(t, js, events.BucketDesired, keys.Cluster("c1"), &capnv1.Cluster{Metadata: &capnv1.ObjectMeta{Name: "c1"},
		Spec: &capnv1.ClusterSpec{Bootstrap: &capnv1.BootstrapSpec{Provider: KubeLocal}}})
	putProto(t, js, events.BucketDesired, keys.Cluster("c2"), &capnv1.Cluster{Metadata: &capnv1.ObjectMeta{Name: "c2"}, Spec: &capnv1.ClusterSpec{}})
	for _, m := range []string{"w-0", "cp-1", "cp-0"} {
		role := "control-plane"
		if strings.HasPrefix(m, "w") {
			role = "worker"
		}
		putProto(t, js, events.BucketDesired, keys.Machine("c1", m), &capnv1.Machine{Metadata: &capnv1.ObjectMeta{Name: m}, Spec: &capnv1.MachineSpec{Cluster: "c1", Role: role}})
	}
	set, _, err := pki.Ensure(pki.Set{}, pki.Options{Now: time.Now()})
	if err != nil {
		t.Fatal(err)
	}
	skv, err := js.KeyValue(ctx, events.BucketSecrets)
	if err != nil {
		t.Fatal(err)
	}
	pkis := store.NewBucket(skv, store.New[capnv1.ClusterPKI](), store.WithSealer(ring))
	kcs := store.NewBucket(skv, store.New[capnv1.AdminKubeconfig](), store.WithSealer(ring))
	kp := func(k pki.KeyPair) *capnv1.KeyPairPEM {
		return &capnv1.KeyPairPEM{CertPem: string(k.CertPEM), KeyPem: string(k.KeyPEM)}
	}
	if _, err := pkis.Create(ctx, keys.PKI("c1"), &capnv1.ClusterPKI{Ca: kp(set.CA), EtcdCa: kp(set.EtcdCA), FrontProxyCa: kp(set.FrontProxyCA)}); err != nil {
		t.Fatal(err)
	}
	if _, err := kcs.Create(ctx, keys.Kubeconfig("c1"), &capnv1.AdminKubeconfig{Server: "https://127.0.0.1:6443", Kubeconfig: []byte("old")}); err != nil {
		t.Fatal(err)
	}
	agents := map[string]*pkiAgent{}
	for _, m := range []string{"cp-0", "cp-1", "w-0"} {
		agents[m] = &pkiAgent{name: m}
		agents[m].serve(t, nc, "c1")
	}
	rotate := func(until string, cont bool) *capnv1.CARotationResult {
		t.Helper()
		return ask(t, nc, VerbRotateCA, &capnv1.CARotationRequest{Cluster: "c1", Until: until, Continue: cont, RequestedBy: "test"}, &capnv1.CARotationResult{})
	}
	adminKubeconfig := func() (caCerts int, clientIssuer string) {
		t.Helper()
		kc, _, err := kcs.Get(ctx, keys.Kubeconfig("c1"))
		if err != nil {
			t.Fatal(err)
		}
		var doc struct {
			Clusters []struct {
				Cluster struct {
					CA []byte `json:"certificate-authority-data"`
				} `json:"cluster"`
			} `json:"clusters"`
			Users []struct {
				User struct {
					Cert []byte `json:"client-certificate-data"`
				} `json:"user"`
			} `json:"users"`
		}
		if err := yaml.Unmarshal(kc.GetKubeconfig(), &doc); err != nil {
			t.Fatal(err)
		}
		c, err := pki.ParseCertificate(doc.Users[0].User.Cert)
		if err != nil {
			t.Fatal(err)
		}
		return bundleLen(t, string(doc.Clusters[0].Cluster.CA)), c.Issuer.CommonName
	}

	// Refused: a cluster capn does not run, a bad phase, continue with
	// nothing under way.
	if r := ask(t, nc, VerbRotateCA, &capnv1.CARotationRequest{Cluster: "c2"}, &capnv1.CARotationResult{}); r.GetError().GetCode() != CodeInvalid ||
		!strings.Contains(r.GetError().GetMessage(), "not run by capn") {
		t.Errorf("c2 (kubeadm): %v", r.GetError())
	}
	if r := rotate("trust", false); r.GetError().GetCode() != CodeInvalid || !strings.Contains(r.GetError().GetMessage(), "until") {
		t.Errorf("until trust: %v", r.GetError())
	}
	if r := rotate("", true); r.GetError().GetCode() != CodeInvalid || !strings.Contains(r.GetError().GetMessage(), "no CA rotation") {
		t.Errorf("continue with none: %v", r.GetError())
	}

	// Phase 1, held after it.
	r := rotate("TrustBoth", false)
	if r.GetError() != nil || r.GetStatus().GetState() != StateHeld || r.GetStatus().GetPhase() != string(pki.PhaseTrust) {
		t.Fatalf("until TrustBoth: %v %v", r.GetStatus(), r.GetError())
	}
	for name, a := range agents {
		c := a.last(string(pki.PhaseTrust))
		if c == nil || bundleLen(t, c.GetBundlePem()) != 2 || c.GetSigner().GetCertPem() != string(set.CA.CertPEM) {
			t.Fatalf("%s: TrustBoth command %v", name, c)
		}
		if (name == "w-0") != (c.GetSigner().GetKeyPem() == "") {
			t.Errorf("%s: the signer's key sent: %v (only control planes get it)", name, c.GetSigner().GetKeyPem() != "")
		}
	}
	if kc, _, _ := kcs.Get(ctx, keys.Kubeconfig("c1")); string(kc.GetKubeconfig()) != "old" {
		t.Error("TrustBoth rewrote the admin kubeconfig: it stays the old CA's until Reissue")
	}
	// A second rotation is refused naming the phase.
	if r := rotate("", false); r.GetError().GetCode() != CodeConflict || !strings.Contains(r.GetError().GetMessage(), "phase TrustBoth") {
		t.Fatalf("second rotation: %v", r.GetError())
	}

	// Phase 2 stops on cp-1; cp-0 is done, the cluster CA is the new one.
	agents["cp-1"].mu.Lock()
	agents["cp-1"].failPhase = string(pki.PhaseReissue)
	agents["cp-1"].mu.Unlock()
	r = rotate("", true)
	if r.GetError() == nil || !strings.Contains(r.GetError().GetMessage(), "machine cp-1") || r.GetStatus().GetState() != StateFailed {
		t.Fatalf("Reissue with cp-1 failing: %v %v", r.GetStatus(), r.GetError())
	}
	cur, _, err := pkis.Get(ctx, keys.PKI("c1"))
	if err != nil {
		t.Fatal(err)
	}
	newCA := cur.GetCaRotation().GetNewCa().GetCertPem()
	if cur.GetCa().GetCertPem() != newCA || cur.GetCaRotation().GetPhase() != string(pki.PhaseReissue) || strings.Join(cur.GetCaRotation().GetDone(), ",") != "cp-0" {
		t.Fatalf("after the stop: CA is new %v, state %v", cur.GetCa().GetCertPem() == newCA, cur.GetCaRotation().GetDone())
	}
	if n, iss := adminKubeconfig(); n != 2 || !strings.HasPrefix(iss, "kubernetes-") {
		t.Errorf("Reissue: the admin kubeconfig trusts %d CAs, its client is %q's; want both, the new CA's", n, iss)
	}
	st, _, err := store.NewBucket(mustKV(t, js, events.BucketObserved), store.New[capnv1.CARotationStatus]()).Get(ctx, keys.CARotationStatus("c1"))
	if err != nil || st.GetState() != StateFailed || st.GetCondition().GetStatus() != "False" || !strings.Contains(st.GetMessage(), "cp-1") {
		t.Fatalf("status after the stop: %v %v", st, err)
	}

	// Resumed: to the end.
	agents["cp-1"].mu.Lock()
	agents["cp-1"].failPhase = ""
	agents["cp-1"].mu.Unlock()
	r = rotate("", true)
	if r.GetError() != nil || r.GetStatus().GetState() != StateComplete || r.GetStatus().GetCondition().GetStatus() != "True" {
		t.Fatalf("continue: %v %v", r.GetStatus(), r.GetError())
	}
	want := map[string]string{
		"cp-0": "TrustBoth,Reissue,RemoveOld",
		"cp-1": "TrustBoth,Reissue,Reissue,RemoveOld",
		"w-0":  "TrustBoth,Reissue,RemoveOld",
	}
	for name, a := range agents {
		if got := strings.Join(a.phases(), ","); got != want[name] {
			t.Errorf("%s got phases %s, want %s", name, got, want[name])
		}
	}
	if c := agents["w-0"].last(string(pki.PhaseReissue)); c.GetNodeClient().GetCertPem() == "" || c.GetSigner().GetKeyPem() != "" {
		t.Errorf("w-0's Reissue: node client %v, signer key sent %v", c.GetNodeClient().GetCertPem() != "", c.GetSigner().GetKeyPem() != "")
	} else {
		nc, _ := pki.ParseCertificate([]byte(c.GetNodeClient().GetCertPem()))
		ca, _ := pki.ParseCertificate([]byte(newCA))
		if nc.Subject.CommonName != "system:node:w-0" || nc.CheckSignatureFrom(ca) != nil {
			t.Errorf("w-0's node client: %s, signed by the new CA: %v", nc.Subject, nc.CheckSignatureFrom(ca))
		}
	}
	for name, a := range agents {
		if c := a.last(string(pki.PhaseRemoveOld)); bundleLen(t, c.GetBundlePem()) != 1 || c.GetIntermediatePem() != "" {
			t.Errorf("%s: RemoveOld bundle %d certs, intermediate %q", name, bundleLen(t, c.GetBundlePem()), c.GetIntermediatePem())
		}
	}
	if c := agents["cp-0"].last(string(pki.PhaseReissue)); c.GetIntermediatePem() == "" {
		t.Error("Reissue without the cross-signed intermediate")
	}
	if n, _ := adminKubeconfig(); n != 1 {
		t.Errorf("done: the admin kubeconfig trusts %d CAs, want the new one alone", n)
	}
	cur, _, _ = pkis.Get(ctx, keys.PKI("c1"))
	if cur.GetCaRotation().GetPhase() != string(pki.PhaseDone) || cur.GetCaRotation().GetOldCa().GetKeyPem() != "" || cur.GetCaRotation().GetCrossSignedPem() != "" {
		t.Errorf("done: state %s, old key kept %v", cur.GetCaRotation().GetPhase(), cur.GetCaRotation().GetOldCa().GetKeyPem() != "")
	}
	certs, _, err := store.NewBucket(mustKV(t, js, events.BucketObserved), store.New[capnv1.CertificatesStatus]()).Get(ctx, keys.CertificatesStatus("c1"))
	if err != nil || certs.GetEarliest().GetMachine() != "w-0" || certs.GetCondition().GetType() != ConditionCertificatesReady ||
		!strings.Contains(certs.GetCondition().GetMessage(), "apiserver on w-0") {
		t.Errorf("certificates status: %v %v", certs, err)
	}
	// A new rotation may start once one is done.
	if r := rotate("TrustBoth", false); r.GetError() != nil || r.GetStatus().GetPhase() != string(pki.PhaseTrust) {
		t.Errorf("a second rotation after the first: %v", r.GetError())
	}
}

func mustKV(t *testing.T, js jetstream.JetStream, bucket string) jetstream.KeyValue {
	t.Helper()
	kv, err := js.KeyValue(context.Background(), bucket)
	if err != nil {
		t.Fatal(err)
	}
	return kv
}
