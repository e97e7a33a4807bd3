package gateway

import (
	"context"
	"encoding/json"
	"net/http"
	"strings"
	"testing"

	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"

	"github.com/capn-dev/capn/gateway/api"
	"github.com/capn-dev/capn/gateway/client"
	capnv1 "github.com/capn-dev/capn/schemas/capn/v1alpha1"
	"github.com/capn-dev/capn/schemas/keys"
)

// TestApplyRefusals sends bad manifests and requests: each gets its status
// and a problem naming the bad fields, and nothing reaches the bucket.
func TestApplyRefusals(t *testing.T) {
	e := newEnv(t, func(o *Options) { o.Limits.ManifestBytes = 8 << 10 })
	e.apply(demoYAML)
	e.apply(strings.Replace(demoYAML, "team: a", "team: z", 1)) // resourceVersion 2: 1 is stale
	tests := []struct {
		name        string
		method      string
		path        string
		token       string
		contentType string
		body        string
		status      int
		typ         string
		paths       []string
		detail      string
	}{
		{name: "malformed YAML", body: "apiVersion: capn.dev/v1alpha1\nkind: [\n",
			status: 400, typ: api.ProblemInvalidManifest, detail: "parse manifest"},
		{name: "malformed JSON", contentType: api.MediaJSON, body: `{"apiVersion": "capn.dev/v1alpha1", "kind": `,
			status: 400, typ: api.ProblemInvalidManifest, detail: "parse manifest"},
		{name: "unknown fields", body: strings.Replace(strings.Replace(demoYAML, "controlPlane", "controlplane", 1), "replicas: 2", "replica: 2", 1),
			status: 400, typ: api.ProblemInvalidManifest, paths: []string{"spec.controlplane", "spec.workerPools[0].replica"}},
		{name: "wrong types", body: strings.Replace(demoYAML, "replicas: 1}", "replicas: one}", 1),
			status: 400, typ: api.ProblemInvalidManifest, paths: []string{"spec.controlPlane.replicas"}},
		{name: "invalid spec", body: strings.Replace(strings.Replace(demoYAML, "replicas: 1}", "replicas: 2}", 1), "{name: md-0, provider: sim,", "{name: md-0,", 1),
			status: 422, typ: api.ProblemInvalidSpec, paths: []string{"spec.controlPlane.replicas", "spec.workerPools[0].provider"}},
		{name: "no apiVersion", body: strings.Replace(manifestNamed("noapi", "{}"), "apiVersion: capn.dev/v1alpha1\n", "", 1),
			status: 422, typ: api.ProblemInvalidSpec, paths: []string{"apiVersion"}},
		{name: "no name", body: strings.Replace(demoYAML, "  name: demo\n", "", 1),
			status: 422, typ: api.ProblemInvalidSpec, paths: []string{"metadata.name"}},
		{name: "Cluster API manifest", body: "apiVersion: cluster.x-k8s.io/v1beta1\nkind: Cluster\nmetadata: {name: x}\n",
			status: 400, typ: api.ProblemInvalidManifest, paths: []string{"apiVersion"}},
		{name: "two documents", body: demoYAML + "---\n" + manifestNamed("two", "{}"),
			status: 400, typ: api.ProblemInvalidManifest, detail: "one Cluster per request"},
		{name: "empty", body: "# nothing\n", status: 400, typ: api.ProblemInvalidManifest, detail: "empty"},
		{name: "oversized", body: demoYAML + "#" + strings.Repeat("x", 9<<10) + "\n", status: 413, typ: api.ProblemTooLarge},
		{name: "unsupported media type", contentType: "application/xml", body: demoYAML, status: 415, typ: api.ProblemUnsupportedMedia},
		{name: "immutable provider", body: strings.Replace(demoYAML, "controlPlane: {provider: sim", "controlPlane: {provider: other", 1),
			status: 422, typ: api.ProblemInvalidSpec, paths: []string{"spec.controlPlane.provider"}},
		{name: "control plane skips a minor", body: strings.Replace(demoYAML, "kubernetesVersion: v1.34.2", "kubernetesVersion: v1.36.0", 1),
			status: 422, typ: api.ProblemInvalidSpec, paths: []string{"spec.kubernetesVersion"}},
		{name: "stale resourceVersion", body: strings.Replace(demoYAML, "  name: demo\n", "  name: demo\n  resourceVersion: \"1\"\n", 1),
			status: 409, typ: api.ProblemConflict, detail: "stale"},
		{name: "bad resourceVersion", body: strings.Replace(demoYAML, "  name: demo\n", "  name: demo\n  resourceVersion: abc\n", 1),
			status: 400, typ: api.ProblemInvalidRequest, paths: []string{"metadata.resourceVersion"}},
		{name: "resourceVersion of a cluster that does not exist", body: strings.Replace(manifestNamed("ghost", "{}"), "  name: ghost\n", "  name: ghost\n  resourceVersion: \"7\"\n", 1),
			status: 409, typ: api.ProblemConflict, detail: "does not exist"},
		{name: "uid of another incarnation", body: strings.Replace(demoYAML, "  name: demo\n", "  name: demo\n  uid: 00000000-0000-0000-0000-000000000000\n", 1),
			status: 409, typ: api.ProblemConflict, detail: "created again"},
		{name: "PUT to another name", method: http.MethodPut, path: "/v1/clusters/other", body: demoYAML,
			status: 400, typ: api.ProblemInvalidRequest, paths: []string{"metadata.name"}},
		{name: "PUT to a bad name", method: http.MethodPut, path: "/v1/clusters/Bad_Name", body: demoYAML,
			status: 400, typ: api.ProblemInvalidRequest, paths: []string{"name"}},
		{name: "bad token", token: "nope", body: demoYAML, status: 401, typ: api.ProblemUnauthorized},
		{name: "no token", token: "-", body: demoYAML, status: 401, typ: api.ProblemUnauthorized},
		{name: "read-only token", token: tokRead, body: demoYAML, status: 403, typ: api.ProblemForbidden},
		{name: "ingest token", token: tokIngest, body: demoYAML, status: 403, typ: api.ProblemForbidden},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			method, path, token, ct := tt.method, tt.path, tt.token, tt.contentType
			if method == "" {
				method, path = http.MethodPost, "/v1/clusters"
			}
			switch token {
			case "":
				token = tokAdmin
			case "-":
				token = ""
			}
			if ct == "" {
				ct = api.MediaYAML
			}
			before := e.lastSeq(e.desired)
			r := e.do(method, path, token, tt.body, "Content-Type", ct)
			p := r.wantProblem(t, tt.status, tt.paths...)
			if p.Type != tt.typ {
				t.Errorf("problem type %q, want %q", p.Type, tt.typ)
			}
			if !strings.Contains(p.Detail, tt.detail) {
				t.Errorf("detail %q does not contain %q", p.Detail, tt.detail)
			}
			if after := e.lastSeq(e.desired); after != before {
				t.Errorf("the desired bucket was written: revision %d -> %d", before, after)
			}
		})
	}
}

// TestApplyRefusesControlPlaneTypeChange: a live cluster's control-plane
// implementation cannot change (there is no migration): the apply is
// refused with the field, what it is and what to do, and the stored
// cluster is untouched; the same apply naming the same implementation
// ("machines", the default) passes.
func TestApplyRefusesControlPlaneTypeChange(t *testing.T) {
	e := newEnv(t)
	e.apply(demoYAML)
	before := e.lastSeq(e.desired)
	hosted := strings.Replace(demoYAML, "controlPlane: {provider: sim, replicas: 1}", "controlPlane: {type: hosted, replicas: 1}", 1)
	r := e.do(http.MethodPost, "/v1/clusters", tokAdmin, hosted, "Content-Type", api.MediaYAML)
	p := r.wantProblem(t, http.StatusUnprocessableEntity, "spec.controlPlane.type")
	found := false
	for _, fe := range p.Errors {
		found = found || fe.Path == "spec.controlPlane.type" && fe.Reason == "is machines, cannot change to hosted on a live cluster; create a new cluster"
	}
	if !found || p.Type != api.ProblemInvalidSpec {
		t.Errorf("problem %s, want spec.controlPlane.type: is machines, cannot change to hosted on a live cluster; create a new cluster", r.body)
	}
	if after := e.lastSeq(e.desired); after != before {
		t.Errorf("the desired bucket was written: revision %d -> %d", before, after)
	}
	// A new cluster may be hosted: no provider, no maxSurge defaulted.
	fresh := strings.Replace(strings.Replace(hosted, "name: demo", "name: fresh", 1), "labels: {env: dev, team: a}", "labels: {env: dev}", 1)
	if r := e.do(http.MethodPost, "/v1/clusters", tokAdmin, fresh, "Content-Type", api.MediaYAML); r.status != http.StatusCreated {
		t.Fatalf("create of a hosted cluster: %d %s", r.status, r.body)
	} else if cp := r.cluster(t).GetSpec().GetControlPlane(); cp.GetType() != capnv1.ControlPlaneHosted || cp.MaxSurge != nil || cp.GetProvider() != "" {
		t.Errorf("stored control plane %v", cp)
	}
	same := strings.Replace(demoYAML, "controlPlane: {provider: sim,", "controlPlane: {type: machines, provider: sim,", 1)
	if r := e.do(http.MethodPost, "/v1/clusters", tokAdmin, same, "Content-Type", api.MediaYAML); r.status != http.StatusOK {
		t.Fatalf("apply of type machines on a machines cluster: %d %s", r.status, r.body)
	}
}

// TestApplyLifecycle walks a cluster through create, no-op, label and spec
// changes, optimistic concurrency and a round trip of what GET returns.
func TestApplyLifecycle(t *testing.T) {
	e := newEnv(t)
	r := e.do(http.MethodPost, "/v1/clusters", tokWrite, demoYAML, "Content-Type", api.MediaYAML)
	if r.status != http.StatusCreated || r.header.Get("Location") != "/v1/clusters/demo" {
		t.Fatalf("create: %d %s (Location %q)", r.status, r.body, r.header.Get("Location"))
	}
	c := r.cluster(t)
	md := c.GetMetadata()
	if md.GetUid() == "" || md.GetGeneration() != 1 || md.GetCreationTimestamp() == nil || md.GetResourceVersion() == "" {
		t.Fatalf("server-owned metadata not set: %v", md)
	}
	if got := c.GetSpec().GetWorkerPools()[0].GetVersion(); got != "v1.34.2" {
		t.Errorf("pool version %q: defaults were not applied", got)
	}
	stored, rev, err := e.clusters.Get(context.Background(), "cluster.demo")
	if err != nil {
		t.Fatal(err)
	}
	if stored.GetMetadata().GetResourceVersion() != "" || stored.GetStatus() != nil || md.GetResourceVersion() != resourceVersion(rev) {
		t.Errorf("stored %v at %d; answered resourceVersion %s", stored.GetMetadata(), rev, md.GetResourceVersion())
	}

	// The same manifest again changes nothing and writes nothing.
	before := e.lastSeq(e.desired)
	r = e.do(http.MethodPost, "/v1/clusters", tokWrite, demoYAML)
	if r.status != http.StatusOK || r.cluster(t).GetMetadata().GetResourceVersion() != md.GetResourceVersion() {
		t.Fatalf("re-apply: %d %s", r.status, r.body)
	}
	if e.lastSeq(e.desired) != before {
		t.Error("re-applying the same manifest wrote to the bucket")
	}

	// Labels are not spec: the generation stays.
	c2 := e.apply(strings.Replace(demoYAML, "team: a", "team: b", 1))
	if c2.GetMetadata().GetGeneration() != 1 || c2.GetMetadata().GetLabels()["team"] != "b" || c2.GetMetadata().GetUid() != md.GetUid() {
		t.Errorf("label change: %v", c2.GetMetadata())
	}
	// A spec change bumps it; uid and creation time stay.
	c3 := e.apply(strings.Replace(demoYAML, "replicas: 2}", "replicas: 3}", 1))
	if c3.GetMetadata().GetGeneration() != 2 || c3.GetMetadata().GetUid() != md.GetUid() ||
		!c3.GetMetadata().GetCreationTimestamp().AsTime().Equal(md.GetCreationTimestamp().AsTime()) {
		t.Errorf("spec change: %v", c3.GetMetadata())
	}

	// Round trip: what GET returns, status, uid and timestamps included,
	// applies again with its resourceVersion; status is ignored.
	e.put(e.observed, "cluster.demo", &capnv1.ClusterStatus{Phase: "Ready", ObservedGeneration: 2})
	got := e.do(http.MethodGet, "/v1/clusters/demo", tokRead, nil).cluster(t)
	if got.GetStatus().GetPhase() != "Ready" {
		t.Fatalf("GET: status not merged: %v", got.GetStatus())
	}
	got.Spec.WorkerPools[0].Replicas = 4
	got.Status.Phase = "Hacked"
	body, err := protojson.Marshal(got)
	if err != nil {
		t.Fatal(err)
	}
	r = e.do(http.MethodPost, "/v1/clusters", tokWrite, body, "Content-Type", api.MediaJSON)
	if r.status != http.StatusOK {
		t.Fatalf("round trip: %d %s", r.status, r.body)
	}
	if c4 := r.cluster(t); c4.GetSpec().GetWorkerPools()[0].GetReplicas() != 4 || c4.GetStatus().GetPhase() != "Ready" || c4.GetMetadata().GetGeneration() != 3 {
		t.Errorf("round trip stored %v", c4)
	}
	stored, _, _ = e.clusters.Get(context.Background(), "cluster.demo")
	if stored.GetStatus() != nil {
		t.Errorf("a client's status reached the desired bucket: %v", stored.GetStatus())
	}
	// The same body again is now stale.
	r = e.do(http.MethodPost, "/v1/clusters", tokWrite, body, "Content-Type", api.MediaJSON)
	r.wantProblem(t, http.StatusConflict)

	// PUT creates under the path's name when the manifest has none.
	r = e.do(http.MethodPut, "/v1/clusters/other", tokWrite, strings.Replace(demoYAML, "  name: demo\n", "", 1))
	if r.status != http.StatusCreated || r.cluster(t).GetMetadata().GetName() != "other" {
		t.Fatalf("PUT create: %d %s", r.status, r.body)
	}
}

func TestDelete(t *testing.T) {
	e := newEnv(t)
	e.apply(demoYAML)
	r := e.do(http.MethodDelete, "/v1/clusters/demo", tokWrite, nil)
	if r.status != http.StatusAccepted {
		t.Fatalf("delete: %d %s", r.status, r.body)
	}
	ts := r.cluster(t).GetMetadata().GetDeletionTimestamp()
	if ts == nil {
		t.Fatal("no deletion timestamp")
	}
	if _, _, err := e.clusters.Get(context.Background(), "cluster.demo"); err != nil {
		t.Fatalf("the key must stay for the planner to tear down: %v", err)
	}
	// Deleting again is accepted and keeps the first timestamp.
	r = e.do(http.MethodDelete, "/v1/clusters/demo", tokWrite, nil)
	if r.status != http.StatusAccepted || !r.cluster(t).GetMetadata().GetDeletionTimestamp().AsTime().Equal(ts.AsTime()) {
		t.Fatalf("second delete: %d %s", r.status, r.body)
	}
	before := e.lastSeq(e.desired)
	// Changes are refused while it is deleted, but pause (which stops the
	// teardown) is allowed.
	e.do(http.MethodPost, "/v1/clusters", tokWrite, demoYAML).wantProblem(t, http.StatusConflict)
	e.do(http.MethodPost, "/v1/clusters/demo/scale", tokWrite, `{"pool":"md-0","replicas":1}`).wantProblem(t, http.StatusConflict)
	if e.lastSeq(e.desired) != before {
		t.Error("refused changes were written")
	}
	if r := e.do(http.MethodPost, "/v1/clusters/demo/pause", tokWrite, nil); r.status != http.StatusOK || !r.cluster(t).GetSpec().GetPaused() {
		t.Errorf("pause while deleting: %d %s", r.status, r.body)
	}
	e.do(http.MethodDelete, "/v1/clusters/nope", tokWrite, nil).wantProblem(t, http.StatusNotFound)
	e.do(http.MethodDelete, "/v1/clusters/demo?resourceVersion=1", tokWrite, nil).wantProblem(t, http.StatusConflict)
	e.do(http.MethodDelete, "/v1/clusters/demo", tokRead, nil).wantProblem(t, http.StatusForbidden)
}

// ?propagationPolicy=Orphan (capn move) records the Orphan policy with
// the deletion; the first delete decides, and apply cannot set it.
func TestDeleteWithTheOrphanPolicy(t *testing.T) {
	e := newEnv(t)
	e.apply(demoYAML)
	e.do(http.MethodDelete, "/v1/clusters/demo?propagationPolicy=Foreground", tokWrite, nil).wantProblem(t, http.StatusBadRequest, "propagationPolicy")
	if r := e.do(http.MethodDelete, "/v1/clusters/demo?propagationPolicy=Orphan&dryRun=All", tokWrite, nil); r.status != http.StatusAccepted ||
		r.cluster(t).GetMetadata().GetDeletionPolicy() != capnv1.DeletionOrphan {
		t.Fatalf("dry run: %d %s", r.status, r.body)
	}
	if c, _, _ := e.clusters.Get(context.Background(), "cluster.demo"); c.GetMetadata().GetDeletionTimestamp() != nil {
		t.Fatal("a dry run deleted")
	}
	r := e.do(http.MethodDelete, "/v1/clusters/demo?propagationPolicy=Orphan", tokWrite, nil)
	if r.status != http.StatusAccepted || r.cluster(t).GetMetadata().GetDeletionPolicy() != capnv1.DeletionOrphan {
		t.Fatalf("orphan delete: %d %s", r.status, r.body)
	}
	stored, _, err := e.clusters.Get(context.Background(), "cluster.demo")
	if err != nil || !stored.GetMetadata().Orphaning() {
		t.Fatalf("stored %v, %v", stored.GetMetadata(), err)
	}
	if r := e.do(http.MethodDelete, "/v1/clusters/demo?propagationPolicy=Orphan", tokWrite, nil); r.status != http.StatusAccepted {
		t.Errorf("the same delete again: %d %s", r.status, r.body)
	}
	p := e.do(http.MethodDelete, "/v1/clusters/demo", tokWrite, nil).wantProblem(t, http.StatusConflict)
	if !strings.Contains(p.Detail, "already being deleted with propagationPolicy Orphan") {
		t.Errorf("detail %q", p.Detail)
	}
	if c, _, _ := e.clusters.Get(context.Background(), "cluster.demo"); !c.GetMetadata().Orphaning() {
		t.Error("a plain delete turned an orphaning deletion into a teardown")
	}

	// Apply cannot set the policy.
	e.apply(strings.Replace(manifestNamed("other", ""), "metadata:\n", "metadata:\n  deletionPolicy: Orphan\n", 1))
	if c, _, _ := e.clusters.Get(context.Background(), "cluster.other"); c.GetMetadata().GetDeletionPolicy() != "" {
		t.Errorf("apply set the deletion policy: %v", c.GetMetadata())
	}
}

// A hosted control plane runs in this deployment: nothing else could
// adopt it, so an Orphan delete (capn move's last step) is refused and
// changes nothing; a plain delete still tears it down.
func TestOrphanDeleteOfAHostedClusterIsRefused(t *testing.T) {
	e := newEnv(t)
	e.apply(strings.Replace(demoYAML, "controlPlane: {provider: sim, replicas: 1}", "controlPlane: {type: hosted, replicas: 1}", 1))
	for _, q := range []string{"propagationPolicy=Orphan&dryRun=All", "propagationPolicy=Orphan"} {
		p := e.do(http.MethodDelete, "/v1/clusters/demo?"+q, tokWrite, nil).wantProblem(t, http.StatusConflict, "propagationPolicy")
		if !strings.Contains(p.Detail, "hosted control plane") {
			t.Errorf("%s: detail %q names no hosted control plane", q, p.Detail)
		}
		if c, _, _ := e.clusters.Get(context.Background(), "cluster.demo"); c.GetMetadata().GetDeletionTimestamp() != nil {
			t.Fatalf("%s: the refused delete deleted", q)
		}
	}
	if r := e.do(http.MethodDelete, "/v1/clusters/demo", tokWrite, nil); r.status != http.StatusAccepted {
		t.Fatalf("a plain delete of a hosted cluster: %d %s", r.status, r.body)
	}
}

func TestGetAndList(t *testing.T) {
	e := newEnv(t)
	e.do(http.MethodGet, "/v1/clusters/demo", tokRead, nil).wantProblem(t, http.StatusNotFound)
	if r := e.do(http.MethodGet, "/v1/clusters", tokRead, nil); r.status != 200 || !strings.Contains(string(r.body), `"items":[]`) {
		t.Fatalf("empty list: %d %s", r.status, r.body)
	}
	e.apply(demoYAML)
	e.apply(manifestNamed("prod", "{env: prod}"))
	e.apply(manifestNamed("lab", "{env: dev, tier: x}"))
	e.put(e.observed, "cluster.demo", &capnv1.ClusterStatus{Phase: "Ready"})

	tests := []struct {
		selector string
		want     string
	}{
		{"", "demo,lab,prod"},
		{"env=dev", "demo,lab"},
		{"env==dev", "demo,lab"},
		{"env!=dev", "prod"},
		{"team", "demo"},
		{"!team", "lab,prod"},
		{"env in (prod,qa)", "prod"},
		{"env notin (prod)", "demo,lab"},
		{"env=dev,team!=a", "lab"},
		{"env=nope", ""},
	}
	for _, tt := range tests {
		t.Run(tt.selector, func(t *testing.T) {
			r := e.do(http.MethodGet, "/v1/clusters?labelSelector="+urlQuery(tt.selector), tokRead, nil)
			if r.status != http.StatusOK {
				t.Fatalf("%d %s", r.status, r.body)
			}
			var l api.List
			if err := json.Unmarshal(r.body, &l); err != nil {
				t.Fatal(err)
			}
			if l.Kind != api.KindClusterList || l.APIVersion != api.APIVersion {
				t.Errorf("list is %s %s", l.APIVersion, l.Kind)
			}
			var names []string
			for _, raw := range l.Items {
				c := new(capnv1.Cluster)
				if err := protojson.Unmarshal(raw, c); err != nil {
					t.Fatal(err)
				}
				names = append(names, c.GetMetadata().GetName())
				if c.GetMetadata().GetName() == "demo" && c.GetStatus().GetPhase() != "Ready" {
					t.Errorf("demo's status not merged: %s", raw)
				}
				if c.GetSpec() == nil || c.GetMetadata().GetResourceVersion() == "" {
					t.Errorf("item lacks spec or resourceVersion: %s", raw)
				}
			}
			if got := strings.Join(names, ","); got != tt.want {
				t.Errorf("selected %q, want %q", got, tt.want)
			}
		})
	}
	e.do(http.MethodGet, "/v1/clusters?labelSelector="+urlQuery("env=(x"), tokRead, nil).wantProblem(t, http.StatusBadRequest, "labelSelector")
	e.do(http.MethodGet, "/v1/clusters", "", nil).wantProblem(t, http.StatusUnauthorized)
	e.do(http.MethodGet, "/v1/clusters", tokIngest, nil).wantProblem(t, http.StatusForbidden)
}

func urlQuery(s string) string {
	return strings.NewReplacer(" ", "%20", "!", "%21", "=", "%3D", ",", "%2C", "(", "%28", ")", "%29").Replace(s)
}

// TestControlPlaneRecordAPI: GET /v1/clusters/{c}/controlplane answers the
// observed control-plane record (read scope; the client's ControlPlane),
// 404 saying why while the implementation has not written one.
func TestControlPlaneRecordAPI(t *testing.T) {
	e := newEnv(t)
	e.apply(demoYAML)
	c, err := client.New(e.url, client.WithToken(tokRead))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.ControlPlane(context.Background(), "demo"); !client.IsNotFound(err) || !strings.Contains(err.Error(), "has not reported yet") {
		t.Fatalf("no record: %v, want not found saying why", err)
	}
	rec := &capnv1.ControlPlaneRecord{Cluster: "demo", Implementation: capnv1.ControlPlaneHosted, ObservedGeneration: 3, Initialized: true,
		Endpoint: &capnv1.Endpoint{Host: "10.0.0.7", Port: 16443}, Version: "v1.34.2", Replicas: 2, ReadyReplicas: 1,
		Conditions: []*capnv1.Condition{{Type: "Ready", Status: "False", Reason: "APIServersNotReady", Message: "1 of 2 API servers answer"}}}
	e.put(e.observed, keys.ControlPlane("demo"), rec)
	got, err := c.ControlPlane(context.Background(), "demo")
	if err != nil {
		t.Fatal(err)
	}
	if !proto.Equal(got, rec) {
		t.Errorf("record %v, want %v", got, rec)
	}
	e.do(http.MethodGet, "/v1/clusters/demo/controlplane", "", nil).wantProblem(t, http.StatusUnauthorized)
}
