package addonmanager_test

import (
	"context"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/capn-dev/capn/events"
	"github.com/capn-dev/capn/events/natstest"
	"github.com/capn-dev/capn/events/store"
	"github.com/capn-dev/capn/kubeapi"
	"github.com/capn-dev/capn/kubeapi/kubeapitest"
	capnv1 "github.com/capn-dev/capn/schemas/capn/v1alpha1"
	"github.com/capn-dev/capn/schemas/keys"
	"github.com/capn-dev/capn/schemas/manifest"
	"github.com/capn-dev/capn/secrets/kubeconfig"
	"github.com/capn-dev/capn/secrets/pki"
	"github.com/capn-dev/capn/secrets/seal"
	addonmanager "github.com/capn-dev/capn/services/addon-manager"
	"github.com/capn-dev/capn/services/daemon"
)

// world is a real kube-apiserver (the binaries of `make kube`,
// $CAPN_KUBE_BIN), a real NATS with capn's buckets, a cluster written as
// capn's services write it (an announcement of real-kubernetes, an
// initialised control plane, the sealed admin kubeconfig), and the
// addon-manager running through daemon.Run as a deployment runs it.
type world struct {
	t        *testing.T
	api      *kubeapitest.Server
	js       jetstream.JetStream
	desired  jetstream.KeyValue
	observed jetstream.KeyValue
	secrets  jetstream.KeyValue
	ring     *seal.Keyring
	gen      map[string]int64
}

const cl = "addons"

func newWorld(t *testing.T) *world {
	kubeapitest.Require(t)
	ctx := context.Background()
	caPair, err := pki.NewCA("kubernetes", time.Now())
	if err != nil {
		t.Fatal(err)
	}
	sa, err := pki.NewServiceAccountKey()
	if err != nil {
		t.Fatal(err)
	}
	api := kubeapitest.Start(t, caPair, sa.PublicPEM, sa.PrivatePEM)
	srv := natstest.Start(t)
	_, js := srv.Connect(t)
	if err := events.Provision(ctx, js, events.DefaultTopology(1)); err != nil {
		t.Fatal(err)
	}
	bucket := func(name string) jetstream.KeyValue {
		b, err := js.KeyValue(ctx, name)
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	key, err := seal.GenerateKey()
	if err != nil {
		t.Fatal(err)
	}
	ring, err := seal.NewKeyring(key)
	if err != nil {
		t.Fatal(err)
	}
	w := &world{t: t, api: api, js: js, desired: bucket(events.BucketDesired), observed: bucket(events.BucketObserved),
		secrets: bucket(events.BucketSecrets), ring: ring, gen: map[string]int64{}}
	put(t, w.observed, keys.Provider("process"), &capnv1.ProviderAnnouncement{Name: "process", Capabilities: []string{"real-kubernetes"}, Time: timestamppb.Now()})
	w.cluster(map[string]string{"cni": "demo", "tier": "web"})
	put(t, w.observed, keys.Cluster(cl), &capnv1.ClusterStatus{ControlPlaneInitialized: true})
	config, err := kubeconfig.Render(kubeconfig.Input{ClusterName: cl, Host: "127.0.0.1", Port: int32(api.Port),
		CACertPEM: caPair.CertPEM, ClientCertPEM: api.AdminPair.CertPEM, ClientKeyPEM: api.AdminPair.KeyPEM})
	if err != nil {
		t.Fatal(err)
	}
	put(t, w.secrets, keys.Kubeconfig(cl), &capnv1.AdminKubeconfig{Kubeconfig: config, Server: api.URL}, store.WithSealer(ring))

	svc := addonmanager.New(addonmanager.Config{Keyring: ring, BackoffBase: 200 * time.Millisecond, BackoffMax: time.Second})
	runCtx, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() {
		done <- daemon.Run(runCtx, daemon.Config{Name: addonmanager.Name, NATS: daemon.NATSConfig{URL: srv.URL()}}, svc, daemon.WithoutHTTP())
	}()
	t.Cleanup(func() {
		cancel()
		select {
		case err := <-done:
			if err != nil {
				t.Errorf("addon-manager: %v", err)
			}
		case <-time.After(15 * time.Second):
			t.Error("addon-manager did not stop")
		}
	})
	return w
}

func (w *world) cluster(labels map[string]string) {
	put(w.t, w.desired, keys.Cluster(cl), &capnv1.Cluster{Metadata: &capnv1.ObjectMeta{Name: cl, Uid: "c-uid", Labels: labels},
		Spec: &capnv1.ClusterSpec{KubernetesVersion: "v1.36.5", ControlPlane: &capnv1.ControlPlaneSpec{Provider: "process", Replicas: 1}}})
}

// set writes an add-on set as the gateway does: defaulted, validated, its
// generation bumped on every write.
func (w *world) set(s *capnv1.AddonSet) {
	w.t.Helper()
	manifest.DefaultAddonSet(s)
	if err := manifest.ValidateAddonSet(s); err != nil {
		w.t.Fatal(err)
	}
	name := s.GetMetadata().GetName()
	w.gen[name]++
	s.Metadata.Uid, s.Metadata.Generation = name+"-uid", w.gen[name]
	put(w.t, w.desired, keys.AddonSet(name), s)
}

func (w *world) record(set string) *capnv1.ClusterAddonStatus {
	b := store.NewBucket(w.observed, store.New[capnv1.ClusterAddonStatus]())
	r, _, err := b.Get(context.Background(), keys.Addon(cl, set))
	if err != nil {
		return nil
	}
	return r
}

func (w *world) applied(set string, gen int64) bool {
	r := w.record(set)
	for _, c := range r.GetConditions() {
		if c.GetType() == manifest.AddonConditionApplied {
			return c.GetStatus() == "True" && r.GetAppliedGeneration() == gen && r.GetLastError() == ""
		}
	}
	return false
}

// exists says whether the object is in the API server; data is its data
// (a ConfigMap's).
func (w *world) exists(apiVersion, kind, ns, name string) (bool, map[string]string) {
	var o struct {
		Data map[string]string `json:"data"`
	}
	err := w.api.Admin.GetObject(context.Background(), apiVersion, kind, ns, name, &o)
	if kubeapi.IsStatus(err, http.StatusNotFound) {
		return false, nil
	}
	if err != nil {
		w.t.Fatal(err)
	}
	return true, o.Data
}

const baseYAML = `apiVersion: v1
kind: ConfigMap
metadata:
  name: cni-config
  namespace: demo-cni
data:
  mtu: "%s"
---
apiVersion: apps/v1
kind: DaemonSet
metadata:
  name: cni-agent
  namespace: demo-cni
spec:
  selector:
    matchLabels: {app: cni-agent}
  template:
    metadata:
      labels: {app: cni-agent}
    spec:
      containers:
      - name: agent
        image: registry.k8s.io/pause:3.10
---
apiVersion: v1
kind: Namespace
metadata:
  name: demo-cni
`

const deploymentYAML = `apiVersion: apps/v1
kind: Deployment
metadata:
  name: cni-controller
  namespace: demo-cni
spec:
  replicas: 1
  selector:
    matchLabels: {app: cni-controller}
  template:
    metadata:
      labels: {app: cni-controller}
    spec:
      containers:
      - name: controller
        image: registry.k8s.io/pause:3.10
`

func cniSet(mtu string, withDeployment bool) *capnv1.AddonSet {
	ms := []*capnv1.AddonManifest{{Name: "base", Yaml: strings.Replace(baseYAML, "%s", mtu, 1)}}
	if withDeployment {
		ms = append(ms, &capnv1.AddonManifest{Name: "controller", Yaml: deploymentYAML})
	}
	return &capnv1.AddonSet{Metadata: &capnv1.ObjectMeta{Name: "cni"}, Spec: &capnv1.AddonSetSpec{
		ClusterSelector: &capnv1.LabelSelector{MatchLabels: map[string]string{"cni": "demo"}},
		Mode:            manifest.AddonReconcile, Blocking: true, OnRemove: manifest.AddonRemoveDelete,
		ReconcileInterval: durationpb.New(5 * time.Second), Manifests: ms}}
}

func configMapSet(name, mode, onRemove string, order int32, sel map[string]string, value string) *capnv1.AddonSet {
	s := &capnv1.AddonSet{Metadata: &capnv1.ObjectMeta{Name: name}, Spec: &capnv1.AddonSetSpec{
		ClusterSelector: &capnv1.LabelSelector{MatchLabels: sel}, Mode: mode, OnRemove: onRemove, Order: order,
		Manifests: []*capnv1.AddonManifest{{Yaml: "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: " + name + "\n  namespace: default\ndata:\n  v: \"" + value + "\"\n"}}}}
	if mode == manifest.AddonReconcile {
		s.Spec.ReconcileInterval = durationpb.New(5 * time.Second)
	}
	return s
}

// The proof of issue 25's add-ons against a real kube-apiserver: a
// blocking Reconcile set (a Namespace, a ConfigMap, a DaemonSet and a
// Deployment) is applied and visible through the API, a deleted ConfigMap
// comes back within the reconcile interval, a changed set is rolled out
// (the ConfigMap changed, the Deployment it dropped deleted), an ApplyOnce
// set is not applied again (neither when its object is deleted nor when it
// changes), a set reading an add-on secret applies the secret's objects,
// and a cluster leaving the selectors keeps the objects of a Leave set and
// loses those of a Delete set.
func TestAddonSetsAgainstKubeAPIServer(t *testing.T) {
	w := newWorld(t)
	ctx := context.Background()

	begin := time.Now()
	w.set(cniSet("1450", true))
	natstest.WaitFor(t, 30*time.Second, "the cni set applied", func() bool { return w.applied("cni", 1) })
	t.Logf("a 4-object set applied %s after it was written", time.Since(begin).Round(10*time.Millisecond))
	for _, o := range [][4]string{{"v1", "Namespace", "", "demo-cni"}, {"v1", "ConfigMap", "demo-cni", "cni-config"},
		{"apps/v1", "DaemonSet", "demo-cni", "cni-agent"}, {"apps/v1", "Deployment", "demo-cni", "cni-controller"}} {
		if ok, _ := w.exists(o[0], o[1], o[2], o[3]); !ok {
			t.Fatalf("%s %s/%s not in the API server", o[1], o[2], o[3])
		}
	}
	rec := w.record("cni")
	if len(rec.GetObjects()) != 4 || rec.GetObjects()[0].GetKind() != "Namespace" || !rec.GetBlocking() || rec.GetAppliedHash() == "" {
		t.Fatalf("record: %v", rec)
	}

	// An ApplyOnce set, a Leave set and a set reading an add-on secret,
	// after the cni set (order).
	w.set(configMapSet("once", manifest.AddonApplyOnce, manifest.AddonRemoveLeave, 1, map[string]string{"tier": "web"}, "a"))
	w.set(configMapSet("kept", manifest.AddonReconcile, manifest.AddonRemoveLeave, 1, map[string]string{"tier": "web"}, "k"))
	put(t, w.secrets, keys.AddonSecret("creds"), &capnv1.AddonSecret{Name: "creds",
		Yaml: "apiVersion: v1\nkind: Secret\nmetadata:\n  name: cni-credentials\n  namespace: demo-cni\nstringData:\n  token: s3cret\n"}, store.WithSealer(w.ring))
	w.set(&capnv1.AddonSet{Metadata: &capnv1.ObjectMeta{Name: "secret"}, Spec: &capnv1.AddonSetSpec{
		ClusterSelector: &capnv1.LabelSelector{MatchLabels: map[string]string{"cni": "demo"}}, Order: 2, OnRemove: manifest.AddonRemoveDelete,
		Manifests: []*capnv1.AddonManifest{{Secret: "creds"}}}})
	natstest.WaitFor(t, 30*time.Second, "the once, kept and secret sets applied", func() bool {
		return w.applied("once", 1) && w.applied("kept", 1) && w.applied("secret", 1)
	})
	if ok, _ := w.exists("v1", "Secret", "demo-cni", "cni-credentials"); !ok {
		t.Fatal("the add-on secret's Secret is not in the API server")
	}

	// Drift: the ConfigMap of the Reconcile set and the ApplyOnce set's
	// are deleted by hand; only the first comes back.
	for _, name := range [][2]string{{"demo-cni", "cni-config"}, {"default", "once"}} {
		if gone, err := w.api.Admin.DeleteObject(ctx, "v1", "ConfigMap", name[0], name[1]); err != nil || !gone {
			t.Fatalf("delete %s: %v %v", name[1], gone, err)
		}
	}
	deleted := time.Now()
	natstest.WaitFor(t, 15*time.Second, "the deleted ConfigMap back within the 5s reconcile interval", func() bool {
		ok, _ := w.exists("v1", "ConfigMap", "demo-cni", "cni-config")
		return ok
	})
	back := time.Since(deleted)
	t.Logf("the deleted ConfigMap came back after %s (reconcile interval 5s)", back.Round(10*time.Millisecond))
	// The interval counts from the last apply, before the deletion; the
	// slack is for the apply itself on a loaded machine.
	if back > 5*time.Second+2500*time.Millisecond {
		t.Errorf("the ConfigMap took %s to come back: more than the 5s reconcile interval (and 2.5s of slack)", back)
	}
	// kept (Reconcile, 5s) is applied again after the deletion too: by
	// then the ApplyOnce set had every chance.
	keptAt := w.record("kept").GetLastApplied().AsTime()
	natstest.WaitFor(t, 15*time.Second, "the kept set applied again", func() bool {
		return w.record("kept").GetLastApplied().AsTime().After(keptAt)
	})
	if ok, _ := w.exists("v1", "ConfigMap", "default", "once"); ok {
		t.Error("the ApplyOnce set was applied again after its ConfigMap was deleted")
	}

	// A changed set is rolled out; an ApplyOnce set's change is not.
	w.set(cniSet("9000", false))
	w.set(configMapSet("once", manifest.AddonApplyOnce, manifest.AddonRemoveLeave, 1, map[string]string{"tier": "web"}, "b"))
	natstest.WaitFor(t, 30*time.Second, "the changed cni set rolled out", func() bool {
		_, data := w.exists("v1", "ConfigMap", "demo-cni", "cni-config")
		gone, _ := w.exists("apps/v1", "Deployment", "demo-cni", "cni-controller")
		return w.applied("cni", 2) && data["mtu"] == "9000" && !gone
	})
	// once (order 1) waited for cni's new generation first; once cni is
	// applied, once's record says it is not applied again.
	natstest.WaitFor(t, 30*time.Second, "the ApplyOnce record says its change is not applied", func() bool {
		r := w.record("once")
		return len(r.GetConditions()) > 0 && strings.Contains(r.GetConditions()[0].GetMessage(), "ApplyOnce does not apply it again")
	})
	if r := w.record("once"); r.GetAppliedGeneration() != 1 {
		t.Errorf("the ApplyOnce record after its set changed: %v", r)
	}

	// The cluster leaves every selector: Delete sets' objects go, Leave
	// sets' stay; every record goes.
	w.cluster(map[string]string{"tier": "db"})
	natstest.WaitFor(t, 30*time.Second, "the records of sets no longer selecting the cluster gone", func() bool {
		return w.record("cni") == nil && w.record("secret") == nil && w.record("kept") == nil && w.record("once") == nil
	})
	for _, o := range [][4]string{{"v1", "ConfigMap", "demo-cni", "cni-config"}, {"apps/v1", "DaemonSet", "demo-cni", "cni-agent"}, {"v1", "Secret", "demo-cni", "cni-credentials"}} {
		if ok, _ := w.exists(o[0], o[1], o[2], o[3]); ok {
			t.Errorf("%s %s of a Delete set is still there", o[1], o[3])
		}
	}
	if ok, _ := w.exists("v1", "ConfigMap", "default", "kept"); !ok {
		t.Error("the ConfigMap of a Leave set was deleted")
	}
}

// A set that cannot be applied (a kind the API server does not serve) is
// recorded as failed with the error, its attempts counted, and a failed
// event on the cluster's timeline; once fixed it is applied.
func TestAddonSetFailureIsRecorded(t *testing.T) {
	w := newWorld(t)
	bad := &capnv1.AddonSet{Metadata: &capnv1.ObjectMeta{Name: "widgets"}, Spec: &capnv1.AddonSetSpec{Mode: manifest.AddonReconcile,
		Manifests: []*capnv1.AddonManifest{{Yaml: "apiVersion: example.com/v1\nkind: Widget\nmetadata:\n  name: w1\n"}}}}
	w.set(proto.CloneOf(bad))
	natstest.WaitFor(t, 30*time.Second, "the failure recorded, retried", func() bool {
		r := w.record("widgets")
		return r.GetAttempts() >= 2 && strings.Contains(r.GetLastError(), "no such kind") && r.GetConditions()[0].GetReason() == addonmanager.ReasonApplyFailed
	})
	cons, err := w.js.OrderedConsumer(context.Background(), events.StreamEvents, jetstream.OrderedConsumerConfig{
		FilterSubjects: []string{events.EventSubject("addon", "failed", cl, "widgets")}})
	if err != nil {
		t.Fatal(err)
	}
	m, err := cons.Next(jetstream.FetchMaxWait(5 * time.Second))
	if err != nil {
		t.Fatalf("no addon.failed event: %v", err)
	}
	ev, err := events.FromMsg(m.Headers(), m.Data())
	if err != nil || !strings.HasPrefix(ev.Type(), events.TypeAddonEvent) {
		t.Fatalf("event %v: %v", ev, err)
	}
	fixed := proto.CloneOf(bad)
	fixed.Spec.Manifests[0].Yaml = "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: w1\n"
	w.set(fixed)
	natstest.WaitFor(t, 30*time.Second, "the fixed set applied", func() bool { return w.applied("widgets", 2) })
	if r := w.record("widgets"); r.GetAttempts() != 0 || r.GetLastError() != "" {
		t.Errorf("record after success: %v", r)
	}
}

func put[T proto.Message](t *testing.T, kv jetstream.KeyValue, key string, v T, opts ...store.BucketOption) {
	t.Helper()
	b := store.NewBucket(kv, func() T { return v.ProtoReflect().New().Interface().(T) }, opts...)
	if _, _, err := b.Mutate(context.Background(), key, func(T, bool) (T, error) { return v, nil }); err != nil {
		t.Fatal(err)
	}
}
