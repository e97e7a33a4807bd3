package kube_test

import (
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"net/http"
	"net/http/httptest"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/capn-dev/capn/cmd/capn-node/kube"
	capnv1 "github.com/capn-dev/capn/schemas/capn/v1alpha1"
	"github.com/capn-dev/capn/services/bootstrapper/bootstrap/bootstraptest"
	"github.com/capn-dev/capn/services/bootstrapper/bootstrap/kubelocal"
)

// roundTrip is what the API server would read: the object as JSON,
// decoded generically.
func roundTrip(t *testing.T, o kube.Object) map[string]any {
	t.Helper()
	b, err := json.Marshal(o.Body)
	if err != nil {
		t.Fatal(err)
	}
	var m map[string]any
	if err := json.Unmarshal(b, &m); err != nil {
		t.Fatal(err)
	}
	return m
}

func TestJoinRBACIsKubeadms(t *testing.T) {
	type binding struct{ role, kind, subject string }
	want := map[string]binding{
		"kubeadm:kubelet-bootstrap":                     {"system:node-bootstrapper", "Group", "system:bootstrappers:kubeadm:default-node-token"},
		"kubeadm:get-nodes":                             {"kubeadm:get-nodes", "Group", "system:bootstrappers:kubeadm:default-node-token"},
		"kubeadm:node-autoapprove-bootstrap":            {"system:certificates.k8s.io:certificatesigningrequests:nodeclient", "Group", "system:bootstrappers:kubeadm:default-node-token"},
		"kubeadm:node-autoapprove-certificate-rotation": {"system:certificates.k8s.io:certificatesigningrequests:selfnodeclient", "Group", "system:nodes"},
		"kubeadm:apiserver-kubelet-client":              {"system:kubelet-api-admin", "User", "kube-apiserver-kubelet-client"},
		// capn\'s: kwok reads nodes and leases with the node\'s credentials.
		"capn:kube-local:kwok-node": {"capn:kube-local:kwok-node", "Group", "system:nodes"},
	}
	got := map[string]binding{}
	kinds := map[string]int{}
	for _, o := range kube.JoinRBAC() {
		m := roundTrip(t, o)
		kind := m["kind"].(string)
		kinds[kind]++
		if m["metadata"].(map[string]any)["name"] != o.Name || !strings.HasPrefix(o.Collection, "/apis/rbac.authorization.k8s.io/v1/") || m["apiVersion"] != "rbac.authorization.k8s.io/v1" {
			t.Errorf("%s: %v at %s", o, m["metadata"], o.Collection)
		}
		if kind != "ClusterRoleBinding" {
			continue
		}
		ref := m["roleRef"].(map[string]any)
		subs := m["subjects"].([]any)
		if len(subs) != 1 || ref["kind"] != "ClusterRole" || ref["apiGroup"] != "rbac.authorization.k8s.io" {
			t.Errorf("%s: roleRef %v subjects %v", o.Name, ref, subs)
			continue
		}
		s := subs[0].(map[string]any)
		got[o.Name] = binding{ref["name"].(string), s["kind"].(string), s["name"].(string)}
	}
	if !maps.Equal(got, want) {
		t.Errorf("cluster role bindings\n%v\nwant\n%v", got, want)
	}
	if !maps.Equal(kinds, map[string]int{"ClusterRoleBinding": 6, "ClusterRole": 2, "Role": 1, "RoleBinding": 1}) {
		t.Errorf("kinds %v", kinds)
	}
}

func TestTokenSecret(t *testing.T) {
	now := time.Date(2026, 12, 3, 10, 0, 0, 0, time.UTC)
	o := kube.TokenSecret(bootstraptest.Token, 15*time.Minute, now, "kl")
	m := roundTrip(t, o)
	if o.Collection != "/api/v1/namespaces/kube-system/secrets" || o.Name != "bootstrap-token-abcdef" || m["type"] != "bootstrap.kubernetes.io/token" {
		t.Fatalf("%s at %s type %v", o.Name, o.Collection, m["type"])
	}
	data := m["stringData"].(map[string]any)
	for k, v := range map[string]string{
		"token-id": "abcdef", "token-secret": bootstraptest.Token.Secret, "expiration": "2026-12-03T10:15:00Z",
		"usage-bootstrap-authentication": "true", "usage-bootstrap-signing": "true",
		"auth-extra-groups": "system:bootstrappers:kubeadm:default-node-token",
	} {
		if data[k] != v {
			t.Errorf("stringData.%s = %v, want %s", k, data[k], v)
		}
	}
}

func TestClusterInfo(t *testing.T) {
	set := bootstraptest.PKI(t)
	o, err := kube.ClusterInfo("https://127.0.0.1:41234", set.CA.CertPEM)
	if err != nil {
		t.Fatal(err)
	}
	m := roundTrip(t, o)
	kc := m["data"].(map[string]any)["kubeconfig"].(string)
	if o.Collection != "/api/v1/namespaces/kube-public/configmaps" || o.Name != "cluster-info" ||
		!strings.Contains(kc, "server: https://127.0.0.1:41234") || !strings.Contains(kc, "certificate-authority-data: ") || strings.Contains(kc, "client-key") {
		t.Errorf("cluster-info %s:\n%s", o.Path(), kc)
	}
}

func TestNodeFor(t *testing.T) {
	set := bootstraptest.PKI(t)
	cfg, _ := machine{Labels: map[string]string{"tier": "web"}, Taints: []*capnv1.Taint{{Key: "dedicated", Value: "db", Effect: "NoSchedule"}}}.render(t, set)
	n := kube.NodeFor(cfg, "127.0.0.7", "process://kl/kl-cp-0")
	m := roundTrip(t, n.Object())
	meta := m["metadata"].(map[string]any)
	labels := meta["labels"].(map[string]any)
	for k, v := range map[string]string{
		"tier": "web", "node-role.kubernetes.io/control-plane": "", "kubernetes.io/hostname": "kl-cp-0",
		"kubernetes.io/os": "linux", "kubernetes.io/arch": runtime.GOARCH,
	} {
		if got, ok := labels[k]; !ok || got != v {
			t.Errorf("label %s = %v (%v), want %q", k, got, ok, v)
		}
	}
	if meta["annotations"].(map[string]any)["kwok.x-k8s.io/node"] != "fake" {
		t.Errorf("annotations %v", meta["annotations"])
	}
	spec := m["spec"].(map[string]any)
	if spec["providerID"] != "process://kl/kl-cp-0" || fmt.Sprint(spec["taints"]) != "[map[effect:NoSchedule key:dedicated value:db]]" {
		t.Errorf("spec %v", spec)
	}
	status := m["status"].(map[string]any)
	if ni := status["nodeInfo"].(map[string]any); ni["kubeProxyVersion"] != "v1.37.2" {
		t.Errorf("nodeInfo %v: kubeProxyVersion is not the machine's version", ni)
	}
	if status["nodeInfo"].(map[string]any)["kubeletVersion"] != "v1.37.2" || fmt.Sprint(status["addresses"]) != "[map[address:127.0.0.7 type:InternalIP] map[address:kl-cp-0 type:Hostname]]" {
		t.Errorf("status %v", status)
	}

	// A worker has no role label; no providerID means none set; it sets
	// its taints when it creates its Node, never after (NodeRestriction).
	w := kube.NodeFor(&kubelocal.NodeConfig{NodeName: "w", Role: "worker", KubernetesVersion: "v1.37.2", Taints: []kubelocal.Taint{{Key: "a", Effect: "NoSchedule"}}}, "127.0.0.8", "")
	if _, ok := w.Labels["node-role.kubernetes.io/control-plane"]; ok {
		t.Error("worker labelled control-plane")
	}
	ws := roundTrip(t, w.Object())["spec"].(map[string]any)
	if _, ok := ws["providerID"]; ok || fmt.Sprint(ws["taints"]) != "[map[effect:NoSchedule key:a]]" {
		t.Errorf("worker spec %v", ws)
	}
	if spec := w.Patch(nil)["spec"].(map[string]any); len(spec) != 0 {
		t.Errorf("worker update patches spec %v", spec)
	}

	// An update keeps the node controllers' taints and drops stale own ones.
	p := n.Patch([]kubelocal.Taint{{Key: "node.kubernetes.io/not-ready", Effect: "NoSchedule"}, {Key: "dedicated", Value: "old", Effect: "NoSchedule"}, {Key: "gone", Effect: "NoExecute"}})
	taints, _ := json.Marshal(p["spec"].(map[string]any)["taints"])
	if string(taints) != `[{"effect":"NoSchedule","key":"dedicated","value":"db"},{"effect":"NoSchedule","key":"node.kubernetes.io/not-ready"}]` {
		t.Errorf("patched taints %s", taints)
	}
}

// fakeAPI is a small in-memory API server: POST to a collection, GET,
// PUT with resourceVersion, JSON merge PATCH (status too), with the
// Status bodies of the real one.
type fakeAPI struct {
	mu       sync.Mutex
	objects  map[string]map[string]any
	requests []string
	rv       int
	// conflictPUTs makes the next n PUTs fail with 409.
	conflictPUTs int
}

func (f *fakeAPI) status(w http.ResponseWriter, code int, reason, msg string) {
	w.WriteHeader(code)
	json.NewEncoder(w).Encode(map[string]any{"kind": "Status", "status": "Failure", "reason": reason, "message": msg, "code": code})
}

func (f *fakeAPI) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.requests = append(f.requests, r.Method+" "+r.URL.Path)
	body, _ := io.ReadAll(r.Body)
	var in map[string]any
	if len(body) > 0 {
		if err := json.Unmarshal(body, &in); err != nil {
			f.status(w, 400, "BadRequest", err.Error())
			return
		}
	}
	path := strings.TrimSuffix(r.URL.Path, "/status")
	switch r.Method {
	case http.MethodPost:
		name := in["metadata"].(map[string]any)["name"].(string)
		key := r.URL.Path + "/" + name
		if _, ok := f.objects[key]; ok {
			f.status(w, 409, "AlreadyExists", fmt.Sprintf("%q already exists", name))
			return
		}
		f.rv++
		in["metadata"].(map[string]any)["resourceVersion"] = strconv.Itoa(f.rv)
		f.objects[key] = in
		w.WriteHeader(201)
		json.NewEncoder(w).Encode(in)
	case http.MethodGet:
		o, ok := f.objects[path]
		if !ok {
			f.status(w, 404, "NotFound", "not found")
			return
		}
		json.NewEncoder(w).Encode(o)
	case http.MethodPut:
		o, ok := f.objects[path]
		if !ok {
			f.status(w, 404, "NotFound", "not found")
			return
		}
		if f.conflictPUTs > 0 || in["metadata"].(map[string]any)["resourceVersion"] != o["metadata"].(map[string]any)["resourceVersion"] {
			f.conflictPUTs--
			f.rv++ // someone else wrote it
			o["metadata"].(map[string]any)["resourceVersion"] = strconv.Itoa(f.rv)
			f.status(w, 409, "Conflict", "the object has been modified")
			return
		}
		f.rv++
		in["metadata"].(map[string]any)["resourceVersion"] = strconv.Itoa(f.rv)
		f.objects[path] = in
		json.NewEncoder(w).Encode(in)
	case http.MethodPatch:
		if r.Header.Get("Content-Type") != "application/merge-patch+json" {
			f.status(w, 415, "UnsupportedMediaType", r.Header.Get("Content-Type"))
			return
		}
		o, ok := f.objects[path]
		if !ok {
			f.status(w, 404, "NotFound", "not found")
			return
		}
		f.objects[path] = mergePatch(o, in).(map[string]any)
		json.NewEncoder(w).Encode(f.objects[path])
	}
}

// mergePatch is RFC 7386.
func mergePatch(target, patch any) any {
	p, ok := patch.(map[string]any)
	if !ok {
		return patch
	}
	t, ok := target.(map[string]any)
	if !ok {
		t = map[string]any{}
	}
	for k, v := range p {
		if v == nil {
			delete(t, k)
		} else {
			t[k] = mergePatch(t[k], v)
		}
	}
	return t
}

func newFakeAPI(t *testing.T) (*fakeAPI, *kube.Client) {
	f := &fakeAPI{objects: map[string]map[string]any{}}
	srv := httptest.NewTLSServer(f)
	t.Cleanup(srv.Close)
	return f, &kube.Client{Server: srv.URL, HTTP: srv.Client()}
}

func (f *fakeAPI) take() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	r := f.requests
	f.requests = nil
	return r
}

func TestApplyCreatesThenUpdates(t *testing.T) {
	f, c := newFakeAPI(t)
	ctx := t.Context()
	o := kube.JoinRBAC()[0]
	if err := c.Apply(ctx, o); err != nil {
		t.Fatal(err)
	}
	if got := f.take(); !slices.Equal(got, []string{"POST /apis/rbac.authorization.k8s.io/v1/clusterrolebindings"}) {
		t.Errorf("create: %v", got)
	}
	f.conflictPUTs = 1
	if err := c.Apply(ctx, o); err != nil {
		t.Fatal(err)
	}
	p := "/apis/rbac.authorization.k8s.io/v1/clusterrolebindings/kubeadm:kubelet-bootstrap"
	if got := f.take(); !slices.Equal(got, []string{"POST /apis/rbac.authorization.k8s.io/v1/clusterrolebindings", "GET " + p, "PUT " + p, "GET " + p, "PUT " + p}) {
		t.Errorf("update with one conflict: %v", got)
	}
	// Create leaves an existing object alone.
	sec := kube.TokenSecret(bootstraptest.Token, time.Minute, time.Now(), "kl")
	created, err := c.Create(ctx, sec)
	if err != nil || !created {
		t.Fatalf("Create: %v %v", created, err)
	}
	created, err = c.Create(ctx, sec)
	if err != nil || created {
		t.Fatalf("Create again: %v %v", created, err)
	}
	// Errors carry the API's message and the object.
	err = c.Get(ctx, "/api/v1/nodes/nope", &struct{}{})
	if !kube.IsStatus(err, 404) || !strings.Contains(err.Error(), "GET /api/v1/nodes/nope: 404 not found") {
		t.Errorf("Get missing: %v", err)
	}
}

func TestRegisterNode(t *testing.T) {
	f, c := newFakeAPI(t)
	ctx := t.Context()
	set := bootstraptest.PKI(t)
	cfg, _ := machine{Labels: map[string]string{"tier": "web"}}.render(t, set)
	n := kube.NodeFor(cfg, "127.0.0.7", "process://kl/kl-cp-0")
	if err := kube.RegisterNode(ctx, c, n); err != nil {
		t.Fatal(err)
	}
	if got := f.take(); !slices.Equal(got, []string{"POST /api/v1/nodes", "PATCH /api/v1/nodes/kl-cp-0/status"}) {
		t.Errorf("new node: %v", got)
	}
	// The controllers have been at it: a pod CIDR, a not-ready taint.
	node := f.objects["/api/v1/nodes/kl-cp-0"]
	node["spec"].(map[string]any)["podCIDR"] = "10.244.0.0/24"
	node["spec"].(map[string]any)["taints"] = []any{map[string]any{"key": "node.kubernetes.io/not-ready", "effect": "NoSchedule"}}
	// A pool label changed since (the health-watcher's sync applies that,
	// not a restarted node).
	n.LabelsOnCreate["tier"] = "db"
	if err := kube.RegisterNode(ctx, c, n); err != nil {
		t.Fatal(err)
	}
	if got := f.take(); !slices.Equal(got, []string{"POST /api/v1/nodes", "GET /api/v1/nodes/kl-cp-0", "PATCH /api/v1/nodes/kl-cp-0", "PATCH /api/v1/nodes/kl-cp-0/status"}) {
		t.Errorf("existing node: %v", got)
	}
	node = f.objects["/api/v1/nodes/kl-cp-0"]
	spec := node["spec"].(map[string]any)
	if spec["podCIDR"] != "10.244.0.0/24" || node["metadata"].(map[string]any)["labels"].(map[string]any)["tier"] != "web" {
		t.Errorf("after update: %v", node)
	}
	if taints, _ := json.Marshal(spec["taints"]); string(taints) != `[{"effect":"NoSchedule","key":"node-role.kubernetes.io/control-plane"},{"effect":"NoSchedule","key":"node.kubernetes.io/not-ready"}]` {
		t.Errorf("taints %s", taints)
	}
	if v := node["status"].(map[string]any)["nodeInfo"].(map[string]any)["kubeletVersion"]; v != "v1.37.2" {
		t.Errorf("kubeletVersion %v", v)
	}
	// Another machine's providerID is never overwritten.
	n.ProviderID = "process://kl/other"
	if err := kube.RegisterNode(ctx, c, n); err == nil || !strings.Contains(err.Error(), "has providerID process://kl/kl-cp-0, this machine is process://kl/other") {
		t.Errorf("providerID clash: %v", err)
	}
}
