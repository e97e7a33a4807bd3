package gateway

import (
	"context"
	"net/http"
	"slices"
	"strings"
	"testing"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/capn-dev/capn/gateway/api"
	capnv1 "github.com/capn-dev/capn/schemas/capn/v1alpha1"
)

// TestDryRun sends every kind of write with ?dryRun=All: each answers as
// the write would (status code, the cluster as it would be stored, the same
// refusals, checked against the stored cluster) and nothing reaches the
// desired bucket: its last revision and its keys stay as they were.
func TestDryRun(t *testing.T) {
	e := newEnv(t)
	stored := e.apply(demoYAML)
	rv := stored.GetMetadata().GetResourceVersion()
	const dry = "?dryRun=All"
	tests := []struct {
		name   string
		method string
		path   string
		body   string
		status int
		paths  []string // a refusal's field paths
		check  func(t *testing.T, c *capnv1.Cluster)
	}{
		{name: "create", method: http.MethodPost, path: "/v1/clusters" + dry, body: manifestNamed("new", "{env: qa}"), status: http.StatusCreated,
			check: func(t *testing.T, c *capnv1.Cluster) {
				md := c.GetMetadata()
				if md.GetName() != "new" || md.GetGeneration() != 1 || md.GetUid() == "" || md.GetCreationTimestamp() == nil || md.GetResourceVersion() != "" {
					t.Errorf("would-be metadata %v: want name new, generation 1, a uid and creation time, no resourceVersion (nothing is stored)", md)
				}
				if c.GetSpec().GetWorkerPools()[0].GetVersion() != "v1.34.2" {
					t.Errorf("defaults not applied: %v", c.GetSpec().GetWorkerPools()[0])
				}
				if c.GetStatus().GetPhase() != "Pending" || c.GetStatus().GetObservedGeneration() != 0 {
					t.Errorf("would-be status %v, want phase Pending and no observedGeneration", c.GetStatus())
				}
			}},
		{name: "update", method: http.MethodPost, path: "/v1/clusters" + dry, body: strings.Replace(demoYAML, "replicas: 2}", "replicas: 5}", 1), status: http.StatusOK,
			check: func(t *testing.T, c *capnv1.Cluster) {
				if c.GetSpec().GetWorkerPools()[0].GetReplicas() != 5 || c.GetMetadata().GetGeneration() != 2 ||
					c.GetMetadata().GetUid() != stored.GetMetadata().GetUid() || c.GetMetadata().GetResourceVersion() != rv {
					t.Errorf("would-be cluster %v: want replicas 5, generation 2, the stored uid and resourceVersion %s", c.GetMetadata(), rv)
				}
			}},
		{name: "update with the current resourceVersion", method: http.MethodPut, path: "/v1/clusters/demo" + dry,
			body: strings.Replace(strings.Replace(demoYAML, "  name: demo\n", "  name: demo\n  resourceVersion: \""+rv+"\"\n", 1), "team: a", "team: b", 1), status: http.StatusOK,
			check: func(t *testing.T, c *capnv1.Cluster) {
				if c.GetMetadata().GetLabels()["team"] != "b" || c.GetMetadata().GetGeneration() != 1 {
					t.Errorf("would-be metadata %v: want label team=b, generation 1 (labels are not spec)", c.GetMetadata())
				}
			}},
		{name: "unchanged", method: http.MethodPost, path: "/v1/clusters" + dry, body: demoYAML, status: http.StatusOK},
		{name: "invalid spec", method: http.MethodPost, path: "/v1/clusters" + dry, body: strings.Replace(demoYAML, "replicas: 2}", "replicas: -1}", 1),
			status: http.StatusUnprocessableEntity, paths: []string{"spec.workerPools[0].replicas"}},
		{name: "immutable field (needs the stored cluster)", method: http.MethodPost, path: "/v1/clusters" + dry,
			body:   strings.Replace(demoYAML, "controlPlane: {provider: sim", "controlPlane: {provider: other", 1),
			status: http.StatusUnprocessableEntity, paths: []string{"spec.controlPlane.provider"}},
		{name: "version skew (needs the stored cluster)", method: http.MethodPost, path: "/v1/clusters" + dry,
			body:   strings.Replace(demoYAML, "kubernetesVersion: v1.34.2", "kubernetesVersion: v1.36.0", 1),
			status: http.StatusUnprocessableEntity, paths: []string{"spec.kubernetesVersion"}},
		{name: "stale resourceVersion", method: http.MethodPost, path: "/v1/clusters" + dry,
			body: strings.Replace(demoYAML, "  name: demo\n", "  name: demo\n  resourceVersion: \"999\"\n", 1), status: http.StatusConflict},
		{name: "scale", method: http.MethodPost, path: "/v1/clusters/demo/scale" + dry, body: `{"pool":"md-0","replicas":7}`, status: http.StatusOK,
			check: func(t *testing.T, c *capnv1.Cluster) {
				if c.GetSpec().GetWorkerPools()[0].GetReplicas() != 7 {
					t.Errorf("would-be replicas %d, want 7", c.GetSpec().GetWorkerPools()[0].GetReplicas())
				}
			}},
		{name: "refused upgrade", method: http.MethodPost, path: "/v1/clusters/demo/upgrade" + dry, body: `{"version":"v1.36.0"}`,
			status: http.StatusUnprocessableEntity, paths: []string{"spec.kubernetesVersion"}},
		{name: "pause", method: http.MethodPost, path: "/v1/clusters/demo/pause" + dry, status: http.StatusOK,
			check: func(t *testing.T, c *capnv1.Cluster) {
				if !c.GetSpec().GetPaused() {
					t.Error("would-be cluster is not paused")
				}
			}},
		{name: "delete", method: http.MethodDelete, path: "/v1/clusters/demo" + dry, status: http.StatusAccepted,
			check: func(t *testing.T, c *capnv1.Cluster) {
				if c.GetMetadata().GetDeletionTimestamp() == nil {
					t.Error("would-be cluster has no deletion timestamp")
				}
			}},
		{name: "repeated All", method: http.MethodPost, path: "/v1/clusters?dryRun=All&dryRun=All", body: manifestNamed("twice", "{}"), status: http.StatusCreated},
		{name: "bad value", method: http.MethodPost, path: "/v1/clusters?dryRun=true", body: manifestNamed("x", "{}"), status: http.StatusBadRequest, paths: []string{"dryRun"}},
		{name: "empty value", method: http.MethodPost, path: "/v1/clusters?dryRun=", body: manifestNamed("x", "{}"), status: http.StatusBadRequest, paths: []string{"dryRun"}},
		{name: "bad value on PUT", method: http.MethodPut, path: "/v1/clusters/demo?dryRun=server", body: demoYAML, status: http.StatusBadRequest, paths: []string{"dryRun"}},
		{name: "bad value on delete", method: http.MethodDelete, path: "/v1/clusters/demo?dryRun=1", status: http.StatusBadRequest, paths: []string{"dryRun"}},
		{name: "bad value on an action", method: http.MethodPost, path: "/v1/clusters/demo/resume?dryRun=all", status: http.StatusBadRequest, paths: []string{"dryRun"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			before, keys := e.lastSeq(e.desired), e.keys(e.desired)
			var body any
			if tt.body != "" {
				body = tt.body
			}
			r := e.do(tt.method, tt.path, tokWrite, body, "Content-Type", api.MediaYAML)
			if tt.status >= 400 {
				p := r.wantProblem(t, tt.status, tt.paths...)
				if slices.Contains(tt.paths, "dryRun") && !strings.Contains(p.Errors[0].Reason, `"All"`) {
					t.Errorf("the dryRun problem does not say what is allowed: %s", r.body)
				}
			} else {
				if r.status != tt.status {
					t.Fatalf("status %d, want %d: %s", r.status, tt.status, r.body)
				}
				if loc := r.header.Get("Location"); loc != "" {
					t.Errorf("a dry run answered Location %q: nothing was created there", loc)
				}
				if tt.check != nil {
					tt.check(t, r.cluster(t))
				}
			}
			if after := e.lastSeq(e.desired); after != before {
				t.Errorf("a dry run wrote the desired bucket: revision %d -> %d", before, after)
			}
			if after := e.keys(e.desired); !slices.Equal(after, keys) {
				t.Errorf("a dry run changed the desired bucket's keys: %v -> %v", keys, after)
			}
		})
	}
	if got := e.do(http.MethodGet, "/v1/clusters/demo", tokRead, nil).cluster(t); got.GetMetadata().GetResourceVersion() != rv {
		t.Errorf("after the dry runs demo is at resourceVersion %s, want %s", got.GetMetadata().GetResourceVersion(), rv)
	}
}

// keys lists a bucket's keys, sorted.
func (e *env) keys(kv jetstream.KeyValue) []string {
	e.t.Helper()
	lister, err := kv.ListKeys(context.Background())
	if err != nil {
		e.t.Fatal(err)
	}
	var out []string
	for k := range lister.Keys() {
		out = append(out, k)
	}
	slices.Sort(out)
	return out
}
