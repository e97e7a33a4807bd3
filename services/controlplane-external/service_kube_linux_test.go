//go:build linux

package controlplaneexternal

import (
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"sigs.k8s.io/yaml"

	"github.com/capn-dev/capn/internal/testkit"
	"github.com/capn-dev/capn/kubeapi"
	"github.com/capn-dev/capn/kubeapi/kubeapitest"
	capnv1 "github.com/capn-dev/capn/schemas/capn/v1alpha1"
	"github.com/capn-dev/capn/schemas/conditions"
	"github.com/capn-dev/capn/schemas/keys"
	"github.com/capn-dev/capn/secrets/pki"
	"github.com/capn-dev/capn/secrets/token"
)

// TestExternalControlPlaneAgainstKubeAPIServer: an etcd and a
// kube-apiserver the test runs (not capn), whose admin applies
// deploy/external/rbac.yaml and gives capn its service account's token —
// nothing more. Through the contract (ensure and delete commands on a
// real nats-server): the record is initialized with the server's
// version, endpoint and CA, the join objects are there and let a
// bootstrap token ask for a node certificate; a kubeconfig of another
// CA or a wrong token is Ready False saying why; a server that went away
// turns Ready False by itself; delete removes what capn made for that
// cluster only and leaves the rest of the API server as it was, a
// cluster-info capn did not make included.
func TestExternalControlPlaneAgainstKubeAPIServer(t *testing.T) {
	kubeapitest.Require(t)
	caPair, _ := testCA(t, "kubernetes")
	sa, err := pki.NewServiceAccountKey()
	if err != nil {
		t.Fatal(err)
	}
	api := kubeapitest.Start(t, caPair, sa.PublicPEM, sa.PrivatePEM)
	ctx := t.Context()
	admin := api.Admin
	applyFile(t, admin, "../../deploy/external/rbac.yaml")
	saToken := serviceAccountToken(t, admin, "kube-system", "capn-external")
	wantVersion, err := admin.Version(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if bootstrapTokenMay(t, admin, "create", "") {
		t.Fatal("a bootstrap token may create CSRs before capn prepared the cluster: the test proves nothing")
	}

	w := start(t)
	px := newProxy(t, api.Port)
	w.register("prod", tokenKubeconfig(px.url, caPair.CertPEM, saToken))
	gen := w.apply("edge", "prod")
	w.command(keys.ControlPlaneEnsure, "edge", gen)
	rec := w.waitReady("edge", capnv1.ConditionTrue, ReasonAnswering)
	if !rec.GetInitialized() || rec.GetVersion() != wantVersion || rec.GetEndpoint().GetHost() != "127.0.0.1" || rec.GetEndpoint().GetPort() != int32(px.port) ||
		rec.GetCaCertificatePem() != string(caPair.CertPEM) || rec.GetReadyReplicas() != 1 || rec.GetObservedGeneration() != gen || rec.GetImplementation() != capnv1.ControlPlaneExternal {
		t.Fatalf("record %v, want initialized at %s, endpoint 127.0.0.1:%d, the cluster's CA", rec, wantVersion, px.port)
	}
	if j := conditions.Get(rec.GetConditions(), ConditionJoinPrepared); j.GetStatus() != capnv1.ConditionTrue.Wire() {
		t.Fatalf("JoinPrepared %v: the registered kubeconfig with deploy/external/rbac.yaml should be enough", j)
	}
	for _, o := range joinRBAC("edge") {
		if err := admin.GetObject(ctx, o.apiVersion, o.kind, o.namespace, o.name, &struct{}{}); err != nil {
			t.Errorf("%s: %v", o, err)
		}
	}
	var ci struct {
		Metadata struct {
			Labels map[string]string `json:"labels"`
		} `json:"metadata"`
		Data map[string]string `json:"data"`
	}
	if err := admin.Get(ctx, "/api/v1/namespaces/kube-public/configmaps/cluster-info", &ci); err != nil || !strings.Contains(ci.Data["kubeconfig"], px.url) {
		t.Fatalf("cluster-info: %v %v", ci, err)
	}
	// What the objects are for: a bootstrap token may now ask for a node
	// certificate, and have it approved.
	if !bootstrapTokenMay(t, admin, "create", "") || !bootstrapTokenMay(t, admin, "create", "nodeclient") {
		t.Error("after ensure a bootstrap token still may not create node CSRs")
	}

	// A second capn cluster on the same external cluster: its own objects.
	gen2 := w.apply("edge2", "prod")
	w.command(keys.ControlPlaneEnsure, "edge2", gen2)
	w.waitReady("edge2", capnv1.ConditionTrue, ReasonAnswering)

	// Bad kubeconfigs say why.
	otherCA, _ := testCA(t, "other")
	w.register("wrong-ca", tokenKubeconfig(api.URL, otherCA.CertPEM, saToken))
	w.command(keys.ControlPlaneEnsure, "bad-ca", w.apply("bad-ca", "wrong-ca"))
	rec = w.waitReady("bad-ca", capnv1.ConditionFalse, ReasonUnreachable)
	if msg := conditions.Get(rec.GetConditions(), ConditionReady).GetMessage(); !strings.Contains(msg, "certificate") || !strings.Contains(msg, api.URL) {
		t.Errorf("wrong CA: message %q does not name the certificate problem and the server", msg)
	}
	if rec.GetInitialized() {
		t.Error("wrong CA: initialized")
	}
	w.register("wrong-token", tokenKubeconfig(api.URL, caPair.CertPEM, "abcdef.0123456789abcdef"))
	w.command(keys.ControlPlaneEnsure, "bad-token", w.apply("bad-token", "wrong-token"))
	rec = w.waitReady("bad-token", capnv1.ConditionFalse, ReasonUnauthorized)
	if msg := conditions.Get(rec.GetConditions(), ConditionReady).GetMessage(); !strings.Contains(msg, "401") {
		t.Errorf("wrong token: message %q does not say 401", msg)
	}

	// The server goes away: the periodic check turns Ready False, and the
	// record keeps what it knew.
	px.Close()
	rec = w.waitReady("edge", capnv1.ConditionFalse, ReasonUnreachable)
	if !rec.GetInitialized() || rec.GetVersion() != wantVersion {
		t.Errorf("unreachable: record %v lost initialized or the version", rec)
	}
	// Back (the kubeconfig now names the server itself).
	w.register("prod", tokenKubeconfig(api.URL, caPair.CertPEM, saToken))
	w.waitReady("edge", capnv1.ConditionTrue, ReasonAnswering)

	// What the external cluster holds that capn did not make.
	theirs := []object{
		{apiVersion: "v1", kind: "Namespace", name: "tenant-a", body: map[string]any{"apiVersion": "v1", "kind": "Namespace", "metadata": map[string]any{"name": "tenant-a"}}},
		{apiVersion: "v1", kind: "ConfigMap", namespace: "tenant-a", name: "settings", body: map[string]any{"apiVersion": "v1", "kind": "ConfigMap",
			"metadata": map[string]any{"name": "settings", "namespace": "tenant-a"}, "data": map[string]string{"a": "b"}}},
		{apiVersion: rbacV1, kind: "ClusterRoleBinding", name: "kubeadm:kubelet-bootstrap", body: map[string]any{"apiVersion": rbacV1, "kind": "ClusterRoleBinding",
			"metadata": map[string]any{"name": "kubeadm:kubelet-bootstrap"},
			"roleRef":  map[string]any{"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": nodeBootstrapperRole},
			"subjects": []any{subject("Group", token.NodeGroup)}}},
	}
	for _, o := range theirs {
		if _, err := admin.ServerSideApply(ctx, o.body, kubeapi.ApplyOptions{}, nil); err != nil {
			t.Fatal(err)
		}
	}

	// delete: the record goes, and with it capn's objects for edge only.
	w.markDeleting("edge")
	w.command(keys.ControlPlaneDelete, "edge", gen)
	testkit.WaitFor(t, 30*time.Second, "edge's record deleted", func() bool { return w.record("edge") == nil })
	for _, o := range joinRBAC("edge") {
		if err := admin.GetObject(ctx, o.apiVersion, o.kind, o.namespace, o.name, &struct{}{}); !kubeapi.IsStatus(err, http.StatusNotFound) {
			t.Errorf("%s after delete: %v, want 404", o, err)
		}
	}
	for _, o := range append(joinRBAC("edge2"), theirs...) {
		if err := admin.GetObject(ctx, o.apiVersion, o.kind, o.namespace, o.name, &struct{}{}); err != nil {
			t.Errorf("%s, which edge's delete must not touch: %v", o, err)
		}
	}
	for _, name := range []string{"capn-external"} {
		if err := admin.Get(ctx, "/apis/rbac.authorization.k8s.io/v1/clusterroles/"+name, &struct{}{}); err != nil {
			t.Errorf("the admin's ClusterRole %s: %v", name, err)
		}
	}
	if err := admin.Get(ctx, "/api/v1/namespaces/kube-system/serviceaccounts/capn-external", &struct{}{}); err != nil {
		t.Errorf("the admin's service account: %v", err)
	}
	// cluster-info was edge's (the first to find none): gone with it, and
	// edge2's next check makes it again (level-driven).
	testkit.WaitFor(t, 30*time.Second, "cluster-info back, edge2's", func() bool {
		err := admin.Get(ctx, "/api/v1/namespaces/kube-public/configmaps/cluster-info", &ci)
		return err == nil && ci.Metadata.Labels[LabelCluster] == "edge2"
	})
	if w.record("edge2") == nil {
		t.Error("edge2's record went with edge's delete")
	}

	// A cluster-info capn did not make (kubeadm's, replacing edge2's):
	// edge2's checks leave it, and its delete does not take it.
	kubeadmInfo := kubeapi.Object{Collection: "/api/v1/namespaces/kube-public/configmaps", Name: clusterInfo, Body: map[string]any{
		"apiVersion": "v1", "kind": "ConfigMap", "metadata": map[string]any{"name": clusterInfo, "namespace": kubePublic},
		"data": map[string]string{"kubeconfig": "kubeadm's"}}}
	if err := admin.Apply(ctx, kubeadmInfo); err != nil {
		t.Fatal(err)
	}
	w.markDeleting("edge2")
	w.command(keys.ControlPlaneDelete, "edge2", gen2)
	testkit.WaitFor(t, 30*time.Second, "edge2's record deleted", func() bool { return w.record("edge2") == nil })
	ci.Metadata.Labels, ci.Data = nil, nil
	if err := admin.Get(ctx, "/api/v1/namespaces/kube-public/configmaps/cluster-info", &ci); err != nil || ci.Data["kubeconfig"] != "kubeadm's" || len(ci.Metadata.Labels) != 0 {
		t.Errorf("kubeadm's cluster-info after edge2's delete: %v %v", ci, err)
	}
	for _, o := range joinRBAC("edge2") {
		if err := admin.GetObject(ctx, o.apiVersion, o.kind, o.namespace, o.name, &struct{}{}); !kubeapi.IsStatus(err, http.StatusNotFound) {
			t.Errorf("%s after edge2's delete: %v, want 404", o, err)
		}
	}
}

// applyFile applies every document of a YAML file as the admin.
func applyFile(t *testing.T, c *kubeapi.Client, path string) {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, doc := range strings.Split(string(data), "\n---\n") {
		var obj map[string]any
		if err := yaml.Unmarshal([]byte(doc), &obj); err != nil {
			t.Fatalf("%s: %v", path, err)
		}
		if len(obj) == 0 {
			continue
		}
		if _, err := c.ServerSideApply(t.Context(), obj, kubeapi.ApplyOptions{}, nil); err != nil {
			t.Fatalf("%s: %v", path, err)
		}
		n++
	}
	if n < 7 {
		t.Fatalf("%s: %d objects", path, n)
	}
}

// serviceAccountToken asks the API server for a token of the service
// account (TokenRequest), as `kubectl create token` does.
func serviceAccountToken(t *testing.T, c *kubeapi.Client, namespace, name string) string {
	t.Helper()
	var out struct {
		Status struct {
			Token string `json:"token"`
		} `json:"status"`
	}
	body := map[string]any{"apiVersion": "authentication.k8s.io/v1", "kind": "TokenRequest", "spec": map[string]any{"expirationSeconds": 3600}}
	if err := c.Do(t.Context(), http.MethodPost, fmt.Sprintf("/api/v1/namespaces/%s/serviceaccounts/%s/token", namespace, name), "application/json", body, &out); err != nil {
		t.Fatal(err)
	}
	if out.Status.Token == "" {
		t.Fatal("no token")
	}
	return out.Status.Token
}

// bootstrapTokenMay asks the API server (SubjectAccessReview) whether a
// bootstrap token of kubeadm's node group may verb CSRs (or their
// subresource).
func bootstrapTokenMay(t *testing.T, c *kubeapi.Client, verb, subresource string) bool {
	t.Helper()
	body := map[string]any{"apiVersion": "authorization.k8s.io/v1", "kind": "SubjectAccessReview", "spec": map[string]any{
		"user":   "system:bootstrap:abcdef",
		"groups": []string{"system:bootstrappers", token.NodeGroup, "system:authenticated"},
		"resourceAttributes": map[string]any{"group": "certificates.k8s.io", "resource": "certificatesigningrequests",
			"subresource": subresource, "verb": verb},
	}}
	var out struct {
		Status struct {
			Allowed bool `json:"allowed"`
		} `json:"status"`
	}
	if err := c.Do(t.Context(), http.MethodPost, "/apis/authorization.k8s.io/v1/subjectaccessreviews", "application/json", body, &out); err != nil {
		t.Fatal(err)
	}
	return out.Status.Allowed
}

// proxy forwards TCP connections on 127.0.0.1 to the API server, until
// Close cuts them all: a server that goes away.
type proxy struct {
	ln    net.Listener
	url   string
	port  int
	mu    sync.Mutex
	conns []net.Conn
	done  bool
}

func newProxy(t *testing.T, target int) *proxy {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &proxy{ln: ln, port: ln.Addr().(*net.TCPAddr).Port}
	p.url = fmt.Sprintf("https://127.0.0.1:%d", p.port)
	t.Cleanup(p.Close)
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			d, err := net.Dial("tcp", fmt.Sprintf("127.0.0.1:%d", target))
			if err != nil {
				c.Close()
				continue
			}
			if !p.track(c, d) {
				return
			}
			go func() { _, _ = io.Copy(d, c); d.Close() }()
			go func() { _, _ = io.Copy(c, d); c.Close() }()
		}
	}()
	return p
}

func (p *proxy) track(cs ...net.Conn) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.done {
		for _, c := range cs {
			c.Close()
		}
		return false
	}
	p.conns = append(p.conns, cs...)
	return true
}

// Close stops listening and cuts every connection.
func (p *proxy) Close() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.done {
		return
	}
	p.done = true
	p.ln.Close()
	for _, c := range p.conns {
		c.Close()
	}
}
