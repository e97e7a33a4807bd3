package bootstrapper_test

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"net"
	"net/http"
	"net/http/httptest"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/capn-dev/capn/events"
	"github.com/capn-dev/capn/events/natstest"
	"github.com/capn-dev/capn/events/reconcile"
	"github.com/capn-dev/capn/events/store"
	capnv1 "github.com/capn-dev/capn/schemas/capn/v1alpha1"
	"github.com/capn-dev/capn/secrets/pki"
	"github.com/capn-dev/capn/secrets/seal"
	"github.com/capn-dev/capn/secrets/token"
	"github.com/capn-dev/capn/services/bootstrapper"
)

// fakeAPI is a workload cluster's API server as far as join tokens go: the
// Secrets of kube-system over TLS with a serving certificate of the
// cluster CA, answering only the cluster's admin (a client certificate of
// the same CA in system:masters), with kube-apiserver's conventions
// (stringData folded into data, resourceVersion checked on update, 409 on
// create of an existing name, label selectors on lists).
type fakeAPI struct {
	srv   *httptest.Server
	conns atomic.Int32

	mu       sync.Mutex
	secrets  map[string]*fakeSecret
	rv       int
	requests []string
}

type fakeSecret struct {
	Labels, Annotations map[string]string
	Type                string
	Data                map[string]string
	RV                  string
}

// newFakeAPI serves on ln (nil: a new 127.0.0.1 port) for the cluster whose
// CA is ca.
func newFakeAPI(t *testing.T, ca *capnv1.KeyPairPEM, ln net.Listener) *fakeAPI {
	t.Helper()
	now := time.Now()
	parsed, err := pki.ParseCA(pki.KeyPair{CertPEM: []byte(ca.GetCertPem()), KeyPEM: []byte(ca.GetKeyPem())}, now)
	if err != nil {
		t.Fatal(err)
	}
	serving, err := pki.IssueLeaf(parsed, pki.LeafRequest{CommonName: "kube-apiserver", IPAddresses: []net.IP{net.ParseIP("127.0.0.1")}}, now)
	if err != nil {
		t.Fatal(err)
	}
	cert, err := tls.X509KeyPair(serving.CertPEM, serving.KeyPEM)
	if err != nil {
		t.Fatal(err)
	}
	pool := x509.NewCertPool()
	pool.AddCert(parsed.Cert)
	f := &fakeAPI{secrets: map[string]*fakeSecret{}}
	f.srv = httptest.NewUnstartedServer(f)
	if ln != nil {
		f.srv.Listener.Close()
		f.srv.Listener = ln
	}
	f.srv.Config.ConnState = func(_ net.Conn, s http.ConnState) {
		if s == http.StateNew {
			f.conns.Add(1)
		}
	}
	f.srv.TLS = &tls.Config{Certificates: []tls.Certificate{cert}, ClientCAs: pool, ClientAuth: tls.RequireAndVerifyClientCert}
	f.srv.StartTLS()
	t.Cleanup(f.srv.Close)
	return f
}

func (f *fakeAPI) port() int32 { return int32(f.srv.Listener.Addr().(*net.TCPAddr).Port) }

const secretsPath = "/api/v1/namespaces/kube-system/secrets"

func status(w http.ResponseWriter, code int, reason, msg string) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	json.NewEncoder(w).Encode(map[string]any{"kind": "Status", "status": "Failure", "reason": reason, "message": msg, "code": code})
}

func (f *fakeAPI) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.requests = append(f.requests, r.Method+" "+r.URL.Path)
	user := r.TLS.PeerCertificates[0].Subject
	if user.CommonName != "kubernetes-admin" || !slices.Contains(user.Organization, "system:masters") {
		status(w, 403, "Forbidden", fmt.Sprintf("user %q cannot manage secrets", user.CommonName))
		return
	}
	name, item := strings.CutPrefix(r.URL.Path, secretsPath+"/")
	switch {
	case r.URL.Path == secretsPath && r.Method == http.MethodGet:
		sel := r.URL.Query().Get("labelSelector")
		k, v, _ := strings.Cut(sel, "=")
		var items []any
		for _, n := range slices.Sorted(maps.Keys(f.secrets)) {
			if s := f.secrets[n]; sel == "" || s.Labels[k] == v {
				items = append(items, s.object(n))
			}
		}
		json.NewEncoder(w).Encode(map[string]any{"kind": "SecretList", "apiVersion": "v1", "items": items})
	case r.URL.Path == secretsPath && r.Method == http.MethodPost:
		n, s, err := decodeSecret(r.Body)
		if err != nil {
			status(w, 400, "BadRequest", err.Error())
			return
		}
		if _, ok := f.secrets[n]; ok {
			status(w, 409, "AlreadyExists", fmt.Sprintf("secrets %q already exists", n))
			return
		}
		f.rv++
		s.RV = strconv.Itoa(f.rv)
		f.secrets[n] = s
		w.WriteHeader(201)
		json.NewEncoder(w).Encode(s.object(n))
	case item && f.secrets[name] == nil:
		status(w, 404, "NotFound", fmt.Sprintf("secrets %q not found", name))
	case item && r.Method == http.MethodGet:
		json.NewEncoder(w).Encode(f.secrets[name].object(name))
	case item && r.Method == http.MethodPut:
		n, s, err := decodeSecret(r.Body)
		if err != nil || n != name {
			status(w, 400, "BadRequest", fmt.Sprintf("name %q in the body of %s: %v", n, name, err))
			return
		}
		if s.RV != f.secrets[name].RV {
			status(w, 409, "Conflict", "the object has been modified")
			return
		}
		f.rv++
		s.RV = strconv.Itoa(f.rv)
		f.secrets[name] = s
		json.NewEncoder(w).Encode(s.object(n))
	case item && r.Method == http.MethodDelete:
		delete(f.secrets, name)
		json.NewEncoder(w).Encode(map[string]any{"kind": "Status", "status": "Success"})
	default:
		status(w, 404, "NotFound", "the server could not find the requested resource")
	}
}

func decodeSecret(r io.Reader) (string, *fakeSecret, error) {
	var in struct {
		Metadata struct {
			Name, Namespace, ResourceVersion string
			Labels, Annotations              map[string]string
		}
		Type       string
		Data       map[string][]byte
		StringData map[string]string
	}
	if err := json.NewDecoder(r).Decode(&in); err != nil {
		return "", nil, err
	}
	if in.Metadata.Namespace != "" && in.Metadata.Namespace != "kube-system" {
		return "", nil, fmt.Errorf("namespace %q in a kube-system request", in.Metadata.Namespace)
	}
	s := &fakeSecret{Labels: in.Metadata.Labels, Annotations: in.Metadata.Annotations, Type: in.Type, RV: in.Metadata.ResourceVersion, Data: map[string]string{}}
	for k, v := range in.Data {
		s.Data[k] = string(v)
	}
	maps.Copy(s.Data, in.StringData)
	return in.Metadata.Name, s, nil
}

func (s *fakeSecret) object(name string) map[string]any {
	data := map[string][]byte{}
	for k, v := range s.Data {
		data[k] = []byte(v)
	}
	return map[string]any{"apiVersion": "v1", "kind": "Secret", "type": s.Type, "data": data,
		"metadata": map[string]any{"name": name, "namespace": "kube-system", "labels": s.Labels, "annotations": s.Annotations, "resourceVersion": s.RV}}
}

func (f *fakeAPI) secret(name string) *fakeSecret {
	f.mu.Lock()
	defer f.mu.Unlock()
	if s := f.secrets[name]; s != nil {
		c := *s
		c.Data = maps.Clone(s.Data)
		return &c
	}
	return nil
}

func (f *fakeAPI) put(name string, s *fakeSecret) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.rv++
	s.RV = strconv.Itoa(f.rv)
	f.secrets[name] = s
}

func (f *fakeAPI) names() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return slices.Sorted(maps.Keys(f.secrets))
}

// --- cluster helpers ------------------------------------------------------

// realProvider is the control-plane provider of applyClusterWith's
// clusters: it announces real-kubernetes (as the process provider with
// Kubernetes binaries does), so their API servers are asked.
const realProvider = "kube"

// announce writes provider's announcement with caps, as the provider SDK
// does.
func (e *env) announce(provider string, caps ...string) {
	e.t.Helper()
	b := store.NewBucket(e.kv(events.BucketObserved), func() *capnv1.ProviderAnnouncement { return new(capnv1.ProviderAnnouncement) })
	if _, _, err := b.Mutate(context.Background(), "provider."+provider, func(*capnv1.ProviderAnnouncement, bool) (*capnv1.ProviderAnnouncement, error) {
		return &capnv1.ProviderAnnouncement{Name: provider, Capabilities: caps, Time: timestamppb.Now(), Instance: "test"}, nil
	}); err != nil {
		e.t.Fatal(err)
	}
}

func (e *env) applyClusterWith(name, provider, userData string) {
	e.t.Helper()
	e.applyClusterOn(name, realProvider, provider, userData)
}

// applyClusterOn applies a cluster whose control plane is on cpProvider,
// announcing realProvider's real-kubernetes first.
func (e *env) applyClusterOn(name, cpProvider, provider, userData string) {
	e.t.Helper()
	e.announce(realProvider, "stop-start", "real-kubernetes")
	c := &capnv1.Cluster{ApiVersion: "capn.dev/v1alpha1", Kind: "Cluster",
		Metadata: &capnv1.ObjectMeta{Name: name, CreationTimestamp: timestamppb.Now()},
		Spec: &capnv1.ClusterSpec{KubernetesVersion: "v1.34.2",
			ControlPlane: &capnv1.ControlPlaneSpec{Provider: cpProvider, Replicas: 1},
			WorkerPools:  []*capnv1.WorkerPool{{Name: "w", Provider: "sim", Replicas: 2}},
			Network:      &capnv1.NetworkSpec{PodCidrs: []string{"192.168.0.0/16"}, ServiceCidrs: []string{"10.96.0.0/12"}, ServiceDomain: "cluster.local"},
			Bootstrap:    &capnv1.BootstrapSpec{Provider: provider, UserData: userData}}}
	b := store.NewBucket(e.kv(events.BucketDesired), func() *capnv1.Cluster { return new(capnv1.Cluster) })
	if _, err := b.Create(context.Background(), "cluster."+name, c); err != nil {
		e.t.Fatal(err)
	}
}

func (e *env) reportEndpointAt(cluster string, port int32) {
	e.t.Helper()
	e.reportEndpointOn(realProvider, cluster, port)
}

func (e *env) reportEndpointOn(provider, cluster string, port int32) {
	e.t.Helper()
	b := store.NewBucket(e.kv(events.BucketObserved), func() *capnv1.InfraCluster { return new(capnv1.InfraCluster) })
	ic := &capnv1.InfraCluster{Provider: provider, Cluster: cluster, Ready: true, ControlPlaneEndpoint: &capnv1.Endpoint{Host: "127.0.0.1", Port: port}}
	if _, err := b.Create(context.Background(), "infra."+provider+"."+cluster+"._", ic); err != nil {
		e.t.Fatal(err)
	}
}

// generate wants the machine (desired), asks for its bootstrap data and
// waits for bootstrap.ready.
// want makes machine of cluster desired, as the planner does before its
// bootstrap is generated.
func (e *env) want(cluster, machine string) {
	e.t.Helper()
	machines := store.NewBucket(e.kv(events.BucketDesired), func() *capnv1.Machine { return new(capnv1.Machine) })
	if _, err := machines.Create(context.Background(), "machine."+cluster+"."+machine, &capnv1.Machine{Metadata: &capnv1.ObjectMeta{Name: machine}}); err != nil {
		e.t.Fatal(err)
	}
}

func (e *env) generate(events_ <-chan *events.Message, cluster, machine, role string, first bool, spec *capnv1.BootstrapSpec) {
	e.t.Helper()
	e.want(cluster, machine)
	cmd := &capnv1.GenerateBootstrap{Cluster: cluster, Machine: machine, Role: role, FirstControlPlane: first, Version: "v1.34.2", Bootstrap: spec}
	if _, err := e.pub.Publish(context.Background(), events.CommandSubject("bootstrap", "generate", cluster, machine), events.TypeGenerateBootstrap, "gen-"+cluster+"-"+machine, cmd); err != nil {
		e.t.Fatal(err)
	}
	m := next(e.t, events_)
	if m.Event.Type() != events.TypeBootstrapReady {
		e.t.Fatalf("generate %s/%s: got %s: %s", cluster, machine, m.Event.Type(), m.Event.Data())
	}
}

func (e *env) record(ring *seal.Keyring, cluster, machine string) *capnv1.BootstrapData {
	e.t.Helper()
	b := store.NewBucket(e.kv(events.BucketSecrets), func() *capnv1.BootstrapData { return new(capnv1.BootstrapData) }, store.WithSealer(ring))
	rec, _, err := b.Get(context.Background(), "bootstrap."+cluster+"."+machine)
	if err != nil {
		e.t.Fatalf("bootstrap.%s.%s: %v", cluster, machine, err)
	}
	return rec
}

func (e *env) setPhase(cluster, machine, phase string) {
	e.t.Helper()
	b := store.NewBucket(e.kv(events.BucketObserved), func() *capnv1.MachineStatus { return new(capnv1.MachineStatus) })
	if _, _, err := b.Mutate(context.Background(), "machine."+cluster+"."+machine, func(st *capnv1.MachineStatus, _ bool) (*capnv1.MachineStatus, error) {
		st.Phase = phase
		return st, nil
	}); err != nil {
		e.t.Fatal(err)
	}
}

func (e *env) joinCondition(cluster string) *capnv1.Condition {
	for _, c := range e.status(cluster).GetConditions() {
		if c.GetType() == bootstrapper.ConditionJoinTokensRegistered {
			return c
		}
	}
	return nil
}

func (e *env) waitPKI(ring *seal.Keyring, cluster string) *capnv1.KeyPairPEM {
	e.t.Helper()
	natstest.WaitFor(e.t, 10*time.Second, "PKI of "+cluster, func() bool { return e.status(cluster).GetPkiReady() })
	return e.openPKI(ring, cluster).GetCa()
}

type clock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *clock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.t
}

func (c *clock) Add(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.t = c.t.Add(d)
}

// wantSecret checks the Secret of machine's current token holds what
// `kubeadm token create` writes, with the record's expiration.
func wantSecret(t *testing.T, f *fakeAPI, rec *capnv1.BootstrapData, cluster, machine string) bool {
	t.Helper()
	tok, err := token.Parse(rec.GetToken())
	if err != nil {
		t.Fatalf("%s: token: %v", machine, err)
	}
	s := f.secret(token.SecretName(tok))
	if s == nil {
		return false
	}
	want := token.SecretData(tok, rec.GetTokenExpires().AsTime(), "capn: join token of machine "+machine+" of cluster "+cluster)
	return s.Type == token.SecretType && maps.Equal(s.Data, want) &&
		s.Labels["app.kubernetes.io/managed-by"] == bootstrapper.JoinTokenManagedBy &&
		s.Annotations["capn.dev/machine"] == machine && rec.GetTokenSecret() == token.SecretName(tok)
}

// A kube-local cluster whose API server answers: every machine that has
// not joined gets its token Secret, with the record's expiration (renewed
// with it); a machine that joined, or is deleted, loses it; the
// bootstrapper's Secrets no machine wants are swept, others left alone.
func TestJoinTokensRegisteredUntilJoined(t *testing.T) {
	e := newEnv(t)
	ring := keyring(t, newKey(t))
	clk := &clock{t: time.Now()}
	e.startWith(bootstrapper.Config{Keyring: ring, Workers: 2, Now: clk.Now, TokenCheckEvery: 200 * time.Millisecond,
		JoinTokenBackoff: reconcile.Backoff{Base: 100 * time.Millisecond, Max: 500 * time.Millisecond}, KubeAPITimeout: 5 * time.Second})
	const c = "kl"
	e.applyClusterWith(c, "kube-local", "")
	api := newFakeAPI(t, e.waitPKI(ring, c), nil)
	// An earlier incarnation's Secret (ours, no machine wants it) and the
	// first control plane's own (not ours).
	api.put("bootstrap-token-old000", &fakeSecret{Type: token.SecretType, Labels: map[string]string{"app.kubernetes.io/managed-by": bootstrapper.JoinTokenManagedBy}, Data: map[string]string{"token-id": "old000"}})
	api.put("bootstrap-token-node00", &fakeSecret{Type: token.SecretType, Data: map[string]string{"token-id": "node00"}})
	// Another capn cluster's, joining workers to the same (external)
	// cluster: not ours to sweep.
	api.put("bootstrap-token-other0", &fakeSecret{Type: token.SecretType, Labels: map[string]string{"app.kubernetes.io/managed-by": bootstrapper.JoinTokenManagedBy},
		Annotations: map[string]string{"capn.dev/cluster": "other"}, Data: map[string]string{"token-id": "other0"}})
	e.reportEndpointAt(c, api.port())
	got := e.collect(c)
	spec := &capnv1.BootstrapSpec{Provider: "kube-local"}
	e.generate(got, c, "kl-cp-0", "control-plane", true, spec)
	e.generate(got, c, "kl-w-0", "worker", false, spec)
	e.generate(got, c, "kl-w-1", "worker", false, spec)
	e.setPhase(c, "kl-w-1", "Provisioned") // its token is renewed while it joins

	machines := []string{"kl-cp-0", "kl-w-0", "kl-w-1"}
	natstest.WaitFor(t, 15*time.Second, "the token Secrets of the three joining machines", func() bool {
		for _, m := range machines {
			if !wantSecret(t, api, e.record(ring, c, m), c, m) {
				return false
			}
		}
		return true
	})
	natstest.WaitFor(t, 5*time.Second, "the stale Secret swept", func() bool { return api.secret("bootstrap-token-old000") == nil })
	if api.secret("bootstrap-token-other0") == nil {
		t.Error("another cluster's token Secret was swept")
	}
	natstest.WaitFor(t, 5*time.Second, "condition Registered", func() bool {
		cond := e.joinCondition(c)
		return cond.GetStatus() == "True" && cond.GetReason() == bootstrapper.ReasonRegistered && strings.Contains(cond.GetMessage(), "3 joining machine(s)")
	})

	// The first control plane and a worker join: their Secrets go.
	cpSecret, w0Secret := e.record(ring, c, "kl-cp-0").GetTokenSecret(), e.record(ring, c, "kl-w-0").GetTokenSecret()
	e.setPhase(c, "kl-cp-0", "Running")
	e.setPhase(c, "kl-w-0", "Running")
	natstest.WaitFor(t, 10*time.Second, "the joined machines' Secrets deleted and forgotten", func() bool {
		cp, w0 := e.record(ring, c, "kl-cp-0"), e.record(ring, c, "kl-w-0")
		return api.secret(cpSecret) == nil && api.secret(w0Secret) == nil &&
			cp.GetJoined() && cp.GetTokenSecret() == "" && w0.GetJoined() && w0.GetTokenSecret() == ""
	})
	if !wantSecret(t, api, e.record(ring, c, "kl-w-1"), c, "kl-w-1") {
		t.Fatal("the Secret of kl-w-1, still joining, changed or went")
	}

	// Eleven minutes on, kl-w-1's token is renewed: the Secret follows.
	before := e.record(ring, c, "kl-w-1").GetTokenExpires().AsTime()
	clk.Add(11 * time.Minute)
	natstest.WaitFor(t, 10*time.Second, "the renewed expiration in the Secret", func() bool {
		rec := e.record(ring, c, "kl-w-1")
		return rec.GetTokenExpires().AsTime().After(before) && wantSecret(t, api, rec, c, "kl-w-1")
	})

	// kl-w-1 is deleted before it joined: its Secret goes.
	w1Secret := e.record(ring, c, "kl-w-1").GetTokenSecret()
	desired := store.NewBucket(e.kv(events.BucketDesired), func() *capnv1.Machine { return new(capnv1.Machine) })
	if _, _, err := desired.Mutate(context.Background(), "machine."+c+".kl-w-1", func(m *capnv1.Machine, _ bool) (*capnv1.Machine, error) {
		m.Metadata.DeletionTimestamp = timestamppb.Now()
		return m, nil
	}); err != nil {
		t.Fatal(err)
	}
	natstest.WaitFor(t, 10*time.Second, "the deleted machine's Secret deleted", func() bool {
		return api.secret(w1Secret) == nil && e.record(ring, c, "kl-w-1").GetTokenSecret() == ""
	})
	natstest.WaitFor(t, 5*time.Second, "condition NoMachineJoining", func() bool {
		cond := e.joinCondition(c)
		return cond.GetStatus() == "True" && cond.GetReason() == bootstrapper.ReasonNoMachineJoining
	})
	if names := api.names(); !slices.Equal(names, []string{"bootstrap-token-node00", "bootstrap-token-other0"}) {
		t.Fatalf("Secrets left: %v; want only the one the bootstrapper did not make and another cluster's", names)
	}
	// Nothing is left to do: the API server is not asked again.
	api.mu.Lock()
	n := len(api.requests)
	api.mu.Unlock()
	time.Sleep(time.Second) //sleep-ok: nothing happens for 1s; no later event of the bootstrapper's to wait for instead
	api.mu.Lock()
	defer api.mu.Unlock()
	if len(api.requests) != n {
		t.Fatalf("requests after the last machine was done with: %v", api.requests[n:])
	}
}

// Clusters whose API server does not answer cost a request per backoff
// step and hold up no other cluster; a script cluster is never asked.
func TestJoinTokensUnreachableAPIBacksOffAndBlocksNothing(t *testing.T) {
	e := newEnv(t)
	ring := keyring(t, newKey(t))
	e.startWith(bootstrapper.Config{Keyring: ring, Workers: 2,
		JoinTokenBackoff: reconcile.Backoff{Base: 300 * time.Millisecond, Max: 1200 * time.Millisecond}, KubeAPITimeout: time.Second})

	// hang accepts connections and never answers; flaky closes each at
	// once (a refusing placeholder), counting them.
	listen := func() net.Listener {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		return ln
	}
	hang, flaky := listen(), listen()
	var held []net.Conn
	var heldMu sync.Mutex
	t.Cleanup(func() {
		hang.Close()
		heldMu.Lock()
		defer heldMu.Unlock()
		for _, c := range held {
			c.Close()
		}
	})
	go func() {
		for {
			c, err := hang.Accept()
			if err != nil {
				return
			}
			heldMu.Lock()
			held = append(held, c)
			heldMu.Unlock()
		}
	}()
	var flakyConns atomic.Int32
	flakyDone := make(chan struct{})
	go func() {
		defer close(flakyDone)
		for {
			c, err := flaky.Accept()
			if err != nil {
				return
			}
			flakyConns.Add(1)
			c.Close()
		}
	}()
	port := func(ln net.Listener) int32 { return int32(ln.Addr().(*net.TCPAddr).Port) }

	for _, c := range []string{"hang", "flaky", "up"} {
		e.applyClusterWith(c, "", "") // kubeadm, the default
	}
	e.applyClusterWith("scr", "script", "#!/bin/sh\necho hi\n")
	up := newFakeAPI(t, e.waitPKI(ring, "up"), nil)
	scr := newFakeAPI(t, e.waitPKI(ring, "scr"), nil)

	e.reportEndpointAt("hang", port(hang))
	e.reportEndpointAt("flaky", port(flaky))
	for _, c := range []string{"hang", "flaky"} {
		e.generate(e.collect(c), c, c+"-w-0", "worker", false, nil)
	}
	start := time.Now()
	e.reportEndpointAt("up", up.port())
	e.generate(e.collect("up"), "up", "up-w-0", "worker", false, nil)
	e.reportEndpointAt("scr", scr.port())
	e.generate(e.collect("scr"), "scr", "scr-w-0", "worker", false, &capnv1.BootstrapSpec{Provider: "script", UserData: "#!/bin/sh\necho hi\n"})

	natstest.WaitFor(t, 10*time.Second, "up's token Secret", func() bool {
		return wantSecret(t, up, e.record(ring, "up", "up-w-0"), "up", "up-w-0")
	})
	t.Logf("up's Secret registered %s after its endpoint, with hang and flaky failing", time.Since(start).Round(time.Millisecond))
	for _, c := range []string{"hang", "flaky"} {
		natstest.WaitFor(t, 10*time.Second, c+": condition APIServerUnreachable", func() bool {
			cond := e.joinCondition(c)
			return cond.GetStatus() == "False" && cond.GetReason() == bootstrapper.ReasonAPIServerUnreachable &&
				strings.Contains(cond.GetMessage(), fmt.Sprintf("https://127.0.0.1:%d", port(map[string]net.Listener{"hang": hang, "flaky": flaky}[c])))
		})
		if !e.status(c).GetKubeconfigReady() {
			t.Fatalf("%s: the cluster's own reconcile is held up: kubeconfig not ready", c)
		}
	}
	if cond := e.joinCondition("hang"); !strings.Contains(cond.GetMessage(), "Timeout") && !strings.Contains(cond.GetMessage(), "deadline") {
		t.Errorf("hang: condition message %q does not say it timed out", cond.GetMessage())
	}

	// Backoff: 0.3s doubling to 1.2s. Five more connections are at least
	// three attempts (each makes one or two), at least 0.6s apart first to
	// last; a retry without backoff would make them in milliseconds.
	from, since := flakyConns.Load(), time.Now()
	natstest.WaitFor(t, 10*time.Second, "flaky: five more connections", func() bool { return flakyConns.Load()-from >= 5 })
	if d := time.Since(since); d < 600*time.Millisecond {
		t.Errorf("flaky: five connections in %s with backoff 0.3s..1.2s; want at least 0.6s", d)
	}

	// The script cluster's API server was never asked, and its status has
	// no join-token condition.
	if n := scr.conns.Load(); n != 0 {
		t.Errorf("script cluster: %d connections to its API server, want none", n)
	}
	if st := e.status("scr"); !st.GetKubeconfigReady() || e.joinCondition("scr") != nil {
		t.Errorf("script cluster status: kubeconfig ready %v, condition %v", st.GetKubeconfigReady(), e.joinCondition("scr"))
	}

	// flaky's API server comes up on its address: the next retry registers
	// the token, without any other change to kick it.
	addr := flaky.Addr().String()
	flaky.Close()
	<-flakyDone
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	flakyAPI := newFakeAPI(t, e.openPKI(ring, "flaky").GetCa(), ln)
	natstest.WaitFor(t, 10*time.Second, "flaky's token Secret once its API server answers", func() bool {
		return wantSecret(t, flakyAPI, e.record(ring, "flaky", "flaky-w-0"), "flaky", "flaky-w-0")
	})
	natstest.WaitFor(t, 5*time.Second, "flaky: condition Registered", func() bool {
		cond := e.joinCondition("flaky")
		return cond.GetStatus() == "True" && cond.GetReason() == bootstrapper.ReasonRegistered
	})
}

// The record says which Secret the bootstrapper made: a machine that
// joins while no bootstrapper runs still loses its Secret after a restart.
func TestJoinTokenSecretDeletedAfterRestart(t *testing.T) {
	e := newEnv(t)
	ring := keyring(t, newKey(t))
	cfg := bootstrapper.Config{Keyring: ring, Workers: 2}
	stop := e.startWith(cfg)
	const c = "rs"
	e.applyClusterWith(c, "kube-local", "")
	api := newFakeAPI(t, e.waitPKI(ring, c), nil)
	e.reportEndpointAt(c, api.port())
	e.generate(e.collect(c), c, "rs-w-0", "worker", false, &capnv1.BootstrapSpec{Provider: "kube-local"})
	natstest.WaitFor(t, 10*time.Second, "the worker's token Secret", func() bool {
		return wantSecret(t, api, e.record(ring, c, "rs-w-0"), c, "rs-w-0")
	})
	secret := e.record(ring, c, "rs-w-0").GetTokenSecret()
	stop()

	e.setPhase(c, "rs-w-0", "Running")
	e.startWith(cfg)
	natstest.WaitFor(t, 10*time.Second, "the Secret deleted by the restarted bootstrapper", func() bool {
		rec := e.record(ring, c, "rs-w-0")
		return api.secret(secret) == nil && rec.GetJoined() && rec.GetTokenSecret() == ""
	})
}

// A cluster whose control-plane provider does not announce real
// Kubernetes (sim) has no API server to register tokens in: its endpoint
// is never asked and its status has no join-token condition. Once the
// provider announces real-kubernetes, the pass runs without any other
// change to kick it; once it stops, the condition goes again.
func TestJoinTokensSkipClustersWithoutRealKubernetes(t *testing.T) {
	e := newEnv(t)
	ring := keyring(t, newKey(t))
	e.startWith(bootstrapper.Config{Keyring: ring, Workers: 2,
		JoinTokenBackoff: reconcile.Backoff{Base: 100 * time.Millisecond, Max: 500 * time.Millisecond}, KubeAPITimeout: 5 * time.Second})
	const c = "simc"
	e.announce("sim", "stop-start", "reboot")
	e.applyClusterOn(c, "sim", "kube-local", "")
	api := newFakeAPI(t, e.waitPKI(ring, c), nil)
	e.reportEndpointOn("sim", c, api.port())
	spec := &capnv1.BootstrapSpec{Provider: "kube-local"}
	got := e.collect(c)
	e.generate(got, c, "simc-w-0", "worker", false, spec)
	natstest.WaitFor(t, 10*time.Second, "the kubeconfig written", func() bool { return e.status(c).GetKubeconfigReady() })
	// A second machine's pass (woken by its desired record) runs after the
	// first's: once its record exists, both passes are done.
	e.generate(got, c, "simc-w-1", "worker", false, spec)
	natstest.WaitFor(t, 10*time.Second, "the second record", func() bool { return e.record(ring, c, "simc-w-1").GetToken() != "" })
	// Without the skip, the passes those writes wake would register both
	// tokens (as in the tests above). Nothing must happen, so wait for two
	// whole passes instead: each purges a machine generated and then
	// deleted, and one cluster's passes run one at a time, so once the
	// second purge is seen, the pass that saw both tokens wanted returned.
	for _, m := range []string{"simc-b-0", "simc-b-1"} {
		e.generate(got, c, m, "worker", false, spec)
		if err := e.kv(events.BucketDesired).Delete(context.Background(), "machine."+c+"."+m); err != nil {
			t.Fatal(err)
		}
		natstest.WaitFor(t, 10*time.Second, m+"'s data purged by a pass", func() bool {
			_, err := e.kv(events.BucketSecrets).Get(context.Background(), "bootstrap."+c+"."+m)
			return errors.Is(err, jetstream.ErrKeyNotFound)
		})
	}
	if n := api.conns.Load(); n != 0 {
		t.Fatalf("sim cluster: %d connections to its endpoint, want none", n)
	}
	if cond := e.joinCondition(c); cond != nil {
		t.Fatalf("sim cluster: join-token condition %v, want none", cond)
	}

	// The provider now announces real Kubernetes: the tokens are registered.
	e.announce("sim", "stop-start", "reboot", "real-kubernetes")
	natstest.WaitFor(t, 10*time.Second, "the token Secrets once the provider announces real-kubernetes", func() bool {
		return wantSecret(t, api, e.record(ring, c, "simc-w-0"), c, "simc-w-0") && wantSecret(t, api, e.record(ring, c, "simc-w-1"), c, "simc-w-1")
	})
	natstest.WaitFor(t, 5*time.Second, "condition Registered", func() bool {
		cond := e.joinCondition(c)
		return cond.GetStatus() == "True" && cond.GetReason() == bootstrapper.ReasonRegistered
	})

	// It stops announcing it: the condition goes.
	e.announce("sim", "stop-start", "reboot")
	natstest.WaitFor(t, 10*time.Second, "the condition removed", func() bool { return e.joinCondition(c) == nil })
}
