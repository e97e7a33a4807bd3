package gateway

import (
	"net/http"
	"strings"
	"testing"

	"github.com/capn-dev/capn/gateway/api"
	"github.com/capn-dev/capn/schemas/annotations"
	capnv1 "github.com/capn-dev/capn/schemas/capn/v1alpha1"
)

func TestActions(t *testing.T) {
	e := newEnv(t)
	start := e.apply(demoYAML)
	rv := start.GetMetadata().GetResourceVersion()

	tests := []struct {
		name   string
		path   string // under /v1/clusters/
		token  string
		body   string
		status int
		paths  []string
		only   bool // paths are every error of the problem
		detail string
		check  func(t *testing.T, c *capnv1.Cluster)
	}{
		{name: "scale a pool", path: "demo/scale", body: `{"pool":"md-0","replicas":5}`, status: 200,
			check: func(t *testing.T, c *capnv1.Cluster) {
				if r := c.GetSpec().GetWorkerPools()[0].GetReplicas(); r != 5 {
					t.Errorf("md-0 replicas %d", r)
				}
			}},
		{name: "scale a pool to zero", path: "demo/scale", body: `{"pool":"pinned","replicas":0}`, status: 200,
			check: func(t *testing.T, c *capnv1.Cluster) {
				if r := c.GetSpec().GetWorkerPools()[1].GetReplicas(); r != 0 {
					t.Errorf("pinned replicas %d", r)
				}
			}},
		{name: "scale the control plane", path: "demo/scale", body: `{"pool":"control-plane","replicas":3}`, status: 200,
			check: func(t *testing.T, c *capnv1.Cluster) {
				if r := c.GetSpec().GetControlPlane().GetReplicas(); r != 3 {
					t.Errorf("control plane replicas %d", r)
				}
			}},
		{name: "control plane to an even count", path: "demo/scale", body: `{"pool":"control-plane","replicas":2}`,
			status: 422, paths: []string{"spec.controlPlane.replicas"}, detail: "cannot scale control-plane"},
		{name: "negative replicas", path: "demo/scale", body: `{"pool":"md-0","replicas":-1}`,
			status: 422, paths: []string{"spec.workerPools[0].replicas"}},
		{name: "unknown pool", path: "demo/scale", body: `{"pool":"gpu","replicas":1}`,
			status: 422, paths: []string{"pool"}, detail: "no worker pool gpu"},
		{name: "scale without replicas", path: "demo/scale", body: `{"pool":"md-0"}`, status: 400, paths: []string{"replicas"}},
		{name: "scale with an unknown field", path: "demo/scale", body: `{"pool":"md-0","replica":1}`, status: 400, paths: []string{"replica"}},
		{name: "scale with a wrong type", path: "demo/scale", body: `{"pool":"md-0","replicas":"many"}`, status: 400, paths: []string{"replicas"}},
		{name: "scale with no body", path: "demo/scale", status: 400},
		{name: "scale with malformed JSON", path: "demo/scale", body: `{"pool":`, status: 400},
		{name: "scale with a stale resourceVersion", path: "demo/scale", body: `{"pool":"md-0","replicas":1,"resourceVersion":"` + rv + `"}`,
			status: 409, detail: "stale"},
		{name: "scale an unknown cluster", path: "nope/scale", body: `{"pool":"md-0","replicas":1}`, status: 404},
		{name: "scale as a reader", path: "demo/scale", token: tokRead, body: `{"pool":"md-0","replicas":1}`, status: 403},
		{name: "upgrade one minor", path: "demo/upgrade", body: `{"version":"v1.35.0"}`, status: 200,
			check: func(t *testing.T, c *capnv1.Cluster) {
				s := c.GetSpec()
				if s.GetKubernetesVersion() != "v1.35.0" || s.GetWorkerPools()[0].GetVersion() != "v1.35.0" || s.GetWorkerPools()[1].GetVersion() != "v1.33.1" {
					t.Errorf("versions: cp %s, md-0 %s, pinned %s (md-0 follows, pinned stays)", s.GetKubernetesVersion(), s.GetWorkerPools()[0].GetVersion(), s.GetWorkerPools()[1].GetVersion())
				}
				if a := c.GetMetadata().GetAnnotations()[annotations.UpgradeAtOnce]; a != "v1.35.0" {
					t.Errorf("%s = %q, want v1.35.0: an explicit upgrade is not confined to windows", annotations.UpgradeAtOnce, a)
				}
			}},
		{name: "upgrade skipping a minor", path: "demo/upgrade", body: `{"version":"v1.37.1"}`,
			status: 422, paths: []string{"spec.kubernetesVersion"}, detail: "cannot upgrade cluster demo from v1.35.0 to v1.37.1"},
		{name: "downgrade", path: "demo/upgrade", body: `{"version":"v1.34.0"}`, status: 422, paths: []string{"spec.kubernetesVersion"}},
		{name: "upgrade to a bad version", path: "demo/upgrade", body: `{"version":"latest"}`, status: 400, paths: []string{"version"}, only: true},
		{name: "upgrade without a version", path: "demo/upgrade", body: `{}`, status: 400, paths: []string{"version"}},
		{name: "upgrade the control plane only", path: "demo/upgrade", body: `{"version":"v1.36.0","controlPlaneOnly":true}`, status: 200,
			check: func(t *testing.T, c *capnv1.Cluster) {
				if v := c.GetSpec().GetWorkerPools()[0].GetVersion(); v != "v1.35.0" {
					t.Errorf("md-0 version %s, want v1.35.0 kept", v)
				}
			}},
		{name: "upgrade past the pools' skew", path: "demo/upgrade", body: `{"version":"v1.37.0","controlPlaneOnly":true}`, status: 422,
			paths: []string{"spec.workerPools[1].version"}, detail: "cannot upgrade"}, // pinned v1.33.1 would lag 4 minors
		{name: "upgrade in the maintenance window", path: "demo/upgrade", body: `{"version":"v1.37.0","respectWindow":true}`, status: 200,
			check: func(t *testing.T, c *capnv1.Cluster) {
				s := c.GetSpec()
				if s.GetKubernetesVersion() != "v1.36.0" || s.GetMaintenance().GetPendingVersion() != "v1.37.0" {
					t.Errorf("version %s, pending %q: want v1.36.0 kept and v1.37.0 recorded for the window", s.GetKubernetesVersion(), s.GetMaintenance().GetPendingVersion())
				}
				if a := c.GetMetadata().GetAnnotations()[annotations.UpgradeAtOnce]; a != "v1.36.0" {
					t.Errorf("%s = %q, want v1.36.0 (the last explicit upgrade's): one for the window is not marked", annotations.UpgradeAtOnce, a)
				}
			}},
		{name: "upgrade in the window skipping a minor", path: "demo/upgrade", body: `{"version":"v1.38.0","respectWindow":true}`, status: 422,
			paths: []string{"spec.maintenance.pendingVersion"}, only: true, detail: "for its maintenance window"},
		{name: "upgrade in the window, control plane only", path: "demo/upgrade", body: `{"version":"v1.37.0","respectWindow":true,"controlPlaneOnly":true}`,
			status: 400, paths: []string{"controlPlaneOnly"}},
		{name: "pause", path: "demo/pause", status: 200,
			check: func(t *testing.T, c *capnv1.Cluster) {
				if !c.GetSpec().GetPaused() {
					t.Error("not paused")
				}
			}},
		{name: "pause with a body", path: "demo/pause", body: `{"resourceVersion":""}`, status: 200},
		{name: "resume", path: "demo/resume", body: `{}`, status: 200,
			check: func(t *testing.T, c *capnv1.Cluster) {
				if c.GetSpec().GetPaused() {
					t.Error("still paused")
				}
			}},
		{name: "resume with an unknown field", path: "demo/resume", body: `{"now":true}`, status: 400, paths: []string{"now"}},
		{name: "hibernate", path: "demo/hibernate", status: 200,
			check: func(t *testing.T, c *capnv1.Cluster) {
				if !c.GetSpec().GetHibernated() {
					t.Error("not hibernated")
				}
			}},
		{name: "wake", path: "demo/wake", body: `{}`, status: 200,
			check: func(t *testing.T, c *capnv1.Cluster) {
				if c.GetSpec().GetHibernated() {
					t.Error("still hibernated")
				}
			}},
		{name: "GET on an action", path: "demo/pause?x", status: 405},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			token := tt.token
			if token == "" {
				token = tokWrite
			}
			method := http.MethodPost
			if tt.status == http.StatusMethodNotAllowed {
				method = http.MethodGet
			}
			var body any
			if tt.body != "" {
				body = tt.body
			}
			before := e.lastSeq(e.desired)
			beforeGen := e.do(http.MethodGet, "/v1/clusters/demo", tokRead, nil).cluster(t).GetMetadata().GetGeneration()
			r := e.do(method, "/v1/clusters/"+tt.path, token, body, "Content-Type", api.MediaJSON)
			if tt.status != http.StatusOK {
				p := r.wantProblem(t, tt.status, tt.paths...)
				if tt.only && len(p.Errors) != len(tt.paths) {
					t.Errorf("%d errors, want only %q: %s", len(p.Errors), tt.paths, r.body)
				}
				if !strings.Contains(p.Detail, tt.detail) {
					t.Errorf("detail %q does not contain %q", p.Detail, tt.detail)
				}
				if e.lastSeq(e.desired) != before {
					t.Error("a refused change was written")
				}
				return
			}
			if r.status != http.StatusOK {
				t.Fatalf("%d %s", r.status, r.body)
			}
			c := r.cluster(t)
			if c.GetMetadata().GetGeneration() != beforeGen+1 && e.lastSeq(e.desired) != before {
				t.Errorf("generation %d after %d: a spec change bumps it", c.GetMetadata().GetGeneration(), beforeGen)
			}
			if tt.check != nil {
				tt.check(t, c)
			}
		})
	}
}

// TestUpgradeMarkOutlivesApply: capn upgrade's mark (annotations.
// UpgradeAtOnce, which exempts the upgrade from confineSpecRollouts) is
// kept by an apply of a manifest that does not carry it, so a re-apply
// in the middle of the upgrade does not hold the rest of it for the
// window.
func TestUpgradeMarkOutlivesApply(t *testing.T) {
	e := newEnv(t)
	e.apply(demoYAML)
	r := e.do(http.MethodPost, "/v1/clusters/demo/upgrade", tokWrite, `{"version":"v1.35.0"}`, "Content-Type", api.MediaJSON)
	if r.status != http.StatusOK {
		t.Fatalf("upgrade: %d %s", r.status, r.body)
	}
	m := strings.Replace(demoYAML, "kubernetesVersion: v1.34.2", "kubernetesVersion: v1.35.0", 1)
	m = strings.Replace(m, "{name: md-0, provider: sim, replicas: 2}", "{name: md-0, provider: sim, replicas: 3, version: v1.35.0}", 1)
	c := e.apply(m)
	if a := c.GetMetadata().GetAnnotations()[annotations.UpgradeAtOnce]; a != "v1.35.0" {
		t.Errorf("after an apply %s = %q, want v1.35.0 kept", annotations.UpgradeAtOnce, a)
	}
	if c.GetSpec().GetWorkerPools()[0].GetReplicas() != 3 {
		t.Errorf("the apply was not stored: %v", c.GetSpec())
	}
}
