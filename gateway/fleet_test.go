package gateway

import (
	"net/http"
	"strings"
	"testing"

	"google.golang.org/protobuf/encoding/protojson"

	"github.com/capn-dev/capn/gateway/api"
	capnv1 "github.com/capn-dev/capn/schemas/capn/v1alpha1"
	"github.com/capn-dev/capn/schemas/keys"
)

const classYAML = `apiVersion: capn.dev/v1alpha1
kind: ClusterClass
metadata: {name: standard}
spec:
  template:
    kubernetesVersion: v1.34.2
    controlPlane: {provider: sim, replicas: 1}
  poolClasses:
  - name: general
    template: {provider: sim, replicas: 2}
  variables:
  - {name: workers, type: integer, default: 2, minimum: 0, maximum: 20, paths: [/workerPools/*/replicas]}
  - {name: tier, type: string, required: true, enum: [dev, prod], paths: [/workerPools/*/labels/tier]}
`

const classClusterYAML = `apiVersion: capn.dev/v1alpha1
kind: Cluster
metadata: {name: fleet-1, labels: {group: a}}
spec:
  topology:
    class: standard
    variables: {tier: dev, workers: 3}
    pools: [{name: md-0, class: general}]
`

func (r resp) class(t *testing.T) *capnv1.ClusterClass {
	t.Helper()
	c := new(capnv1.ClusterClass)
	if err := protojson.Unmarshal(r.body, c); err != nil {
		t.Fatalf("class body %s: %v", r.body, err)
	}
	return c
}

func (r resp) rollout(t *testing.T) *capnv1.Rollout {
	t.Helper()
	ro := new(capnv1.Rollout)
	if err := protojson.Unmarshal(r.body, ro); err != nil {
		t.Fatalf("rollout body %s: %v", r.body, err)
	}
	return ro
}

// Classes through the API: a class is created at revision 1 with its
// immutable record; an unchanged apply makes no revision; a change makes
// revision 2 while a cluster stays pinned to 1 (status.topology says it is
// not up to date); every bad variable is a 422 with its path and nothing
// is written.
func TestClusterClassesAPI(t *testing.T) {
	e := newEnv(t)
	yaml := []string{"Content-Type", api.MediaYAML}
	r := e.do(http.MethodPost, "/v1/clusterclasses", tokWrite, classYAML, yaml...)
	if r.status != http.StatusCreated {
		t.Fatalf("create class: %d %s", r.status, r.body)
	}
	if c := r.class(t); c.GetStatus().GetRevision() != 1 || len(c.GetStatus().GetHash()) != 64 {
		t.Fatalf("class status %v", c.GetStatus())
	}
	seq := e.lastSeq(e.desired)
	if r := e.do(http.MethodPost, "/v1/clusterclasses", tokWrite, classYAML, yaml...); r.status != http.StatusOK || r.class(t).GetStatus().GetRevision() != 1 {
		t.Fatalf("unchanged apply: %d %s", r.status, r.body)
	}
	if e.lastSeq(e.desired) != seq {
		t.Fatal("an unchanged class was written")
	}
	if r := e.do(http.MethodPost, "/v1/clusterclasses", tokRead, classYAML, yaml...); r.status != http.StatusForbidden {
		t.Fatalf("read token applied a class: %d", r.status)
	}

	c := e.apply(classClusterYAML)
	if got := c.GetSpec().GetTopology().GetRevision(); got != 1 {
		t.Fatalf("cluster pinned to revision %d, want 1", got)
	}
	if p := c.GetSpec().GetWorkerPools(); len(p) != 1 || p[0].GetReplicas() != 3 || p[0].GetLabels()["tier"] != "dev" || p[0].GetPoolClass() != "general" {
		t.Fatalf("rendered pools %v", p)
	}
	if ts := c.GetStatus().GetTopology(); !ts.GetUpToDate() || ts.GetLatestRevision() != 1 {
		t.Fatalf("topology status %v", ts)
	}

	// Revision 2: the cluster keeps revision 1, also when reapplied.
	v2 := strings.Replace(classYAML, "kubernetesVersion: v1.34.2", "kubernetesVersion: v1.34.3", 1)
	if r := e.do(http.MethodPost, "/v1/clusterclasses", tokWrite, v2, yaml...); r.status != http.StatusOK || r.class(t).GetStatus().GetRevision() != 2 {
		t.Fatalf("changed class: %d %s", r.status, r.body)
	}
	c = e.apply(classClusterYAML)
	if c.GetSpec().GetTopology().GetRevision() != 1 || c.GetSpec().GetKubernetesVersion() != "v1.34.2" {
		t.Fatalf("reapplied cluster moved to %d (%s)", c.GetSpec().GetTopology().GetRevision(), c.GetSpec().GetKubernetesVersion())
	}
	if ts := c.GetStatus().GetTopology(); ts.GetUpToDate() || ts.GetLatestRevision() != 2 {
		t.Fatalf("topology status %v, want not up to date (latest 2)", ts)
	}
	if r := e.do(http.MethodGet, "/v1/clusterclasses/standard?revision=1", tokRead, nil); r.status != http.StatusOK || r.class(t).GetSpec().GetTemplate().GetKubernetesVersion() != "v1.34.2" {
		t.Fatalf("revision 1: %d %s", r.status, r.body)
	}

	// Bad variables: every one with its path, nothing written.
	seq = e.lastSeq(e.desired)
	bad := strings.Replace(classClusterYAML, "variables: {tier: dev, workers: 3}", "variables: {tier: qa, workers: 99, size: big}\n    kubernetesVersion: v1.30.0", 1)
	bad = strings.Replace(bad, "name: fleet-1", "name: fleet-2", 1)
	bad = strings.Replace(bad, "    kubernetesVersion: v1.30.0", "", 1) + "  kubernetesVersion: v1.30.0\n"
	e.do(http.MethodPost, "/v1/clusters", tokWrite, bad, yaml...).wantProblem(t, http.StatusUnprocessableEntity, "spec.kubernetesVersion")
	bad = strings.Replace(bad, "  kubernetesVersion: v1.30.0\n", "", 1)
	e.do(http.MethodPost, "/v1/clusters", tokWrite, bad, yaml...).wantProblem(t, http.StatusUnprocessableEntity,
		"spec.topology.variables[tier]", "spec.topology.variables[workers]", "spec.topology.variables[size]")
	missing := strings.Replace(classClusterYAML, "class: standard", "class: nope", 1)
	e.do(http.MethodPost, "/v1/clusters", tokWrite, missing, yaml...).wantProblem(t, http.StatusUnprocessableEntity, "spec.topology.class")
	badClass := strings.Replace(classYAML, "type: integer", "type: float", 1)
	e.do(http.MethodPost, "/v1/clusterclasses", tokWrite, badClass, yaml...).wantProblem(t, http.StatusUnprocessableEntity, "spec.variables[0].type")
	if e.lastSeq(e.desired) != seq {
		t.Fatal("refused input was written")
	}
}

// Rollouts through the API: created with the class revision pinned,
// listed, paused, resumed (resume bumped), aborted (final); bad input 422.
func TestRolloutsAPI(t *testing.T) {
	e := newEnv(t)
	yaml := []string{"Content-Type", api.MediaYAML}
	if r := e.do(http.MethodPost, "/v1/clusterclasses", tokWrite, classYAML, yaml...); r.status != http.StatusCreated {
		t.Fatalf("class: %d %s", r.status, r.body)
	}
	ro := `apiVersion: capn.dev/v1alpha1
kind: Rollout
metadata: {name: r1}
spec:
  clusterSelector: {matchLabels: {group: a}}
  change: {class: standard}
  waves: ["2", "10%", "50%", "100%"]
  soak: 1m
`
	r := e.do(http.MethodPost, "/v1/rollouts", tokWrite, ro, yaml...)
	if r.status != http.StatusCreated || r.rollout(t).GetSpec().GetChange().GetClassRevision() != 1 {
		t.Fatalf("create: %d %s", r.status, r.body)
	}
	if r := e.do(http.MethodPost, "/v1/rollouts", tokWrite, ro, yaml...); r.status != http.StatusConflict {
		t.Fatalf("second create: %d", r.status)
	}
	if r := e.do(http.MethodPost, "/v1/rollouts/r1/pause", tokRead, nil); r.status != http.StatusForbidden {
		t.Fatalf("read token paused: %d", r.status)
	}
	if r := e.do(http.MethodPost, "/v1/rollouts/r1/pause", tokWrite, nil); r.status != http.StatusOK || !r.rollout(t).GetSpec().GetPaused() {
		t.Fatalf("pause: %d %s", r.status, r.body)
	}
	r = e.do(http.MethodPost, "/v1/rollouts/r1/resume", tokWrite, nil)
	if got := r.rollout(t).GetSpec(); r.status != http.StatusOK || got.GetPaused() || got.GetResume() != 1 {
		t.Fatalf("resume: %d %s", r.status, r.body)
	}
	e.put(e.observed, keys.Rollout("r1"), &capnv1.RolloutStatus{Phase: "Halted", HaltReason: "cluster x: 1 of 3 machines unhealthy"})
	r = e.do(http.MethodGet, "/v1/rollouts/r1", tokRead, nil)
	if r.rollout(t).GetStatus().GetHaltReason() == "" {
		t.Fatalf("status not served: %s", r.body)
	}
	if r := e.do(http.MethodPost, "/v1/rollouts/r1/abort", tokWrite, nil); r.status != http.StatusOK || !r.rollout(t).GetSpec().GetAborted() {
		t.Fatalf("abort: %d %s", r.status, r.body)
	}
	if r := e.do(http.MethodPost, "/v1/rollouts/r1/resume", tokWrite, nil); r.status != http.StatusConflict {
		t.Fatalf("resume after abort: %d", r.status)
	}
	seq := e.lastSeq(e.desired)
	bad := strings.Replace(ro, "name: r1", "name: r2", 1)
	bad = strings.Replace(bad, `waves: ["2", "10%", "50%", "100%"]`, `waves: ["0", "200%"]`, 1)
	bad = strings.Replace(bad, "change: {class: standard}", "change: {class: standard, classRevision: 9}", 1)
	e.do(http.MethodPost, "/v1/rollouts", tokWrite, bad, yaml...).wantProblem(t, http.StatusUnprocessableEntity, "spec.waves[0]", "spec.waves[1]")
	fixed := strings.Replace(bad, `waves: ["0", "200%"]`, `waves: ["1"]`, 1)
	e.do(http.MethodPost, "/v1/rollouts", tokWrite, fixed, yaml...).wantProblem(t, http.StatusUnprocessableEntity, "spec.change.classRevision")
	if e.lastSeq(e.desired) != seq {
		t.Fatal("refused rollout was written")
	}
	list := e.do(http.MethodGet, "/v1/rollouts", tokRead, nil)
	if list.status != http.StatusOK || !strings.Contains(string(list.body), `"RolloutList"`) {
		t.Fatalf("list: %d %s", list.status, list.body)
	}
}

// A class cluster owns its maintenance windows and hibernation schedules:
// accepted beside its topology and kept by the render; auto-patch, a
// pending version and `capn upgrade` are refused with the field, since its
// version is its class revision's (a re-render would undo them).
func TestClassClusterOwnsWindowsNotVersions(t *testing.T) {
	e := newEnv(t)
	yaml := []string{"Content-Type", api.MediaYAML}
	if r := e.do(http.MethodPost, "/v1/clusterclasses", tokWrite, classYAML, yaml...); r.status != http.StatusCreated {
		t.Fatalf("create class: %d %s", r.status, r.body)
	}
	windowed := classClusterYAML + `  maintenance:
    windows: [{days: [Mon], start: "03:00", end: "04:00", timeZone: Europe/Berlin}]
  hibernation:
    schedules: [{start: "0 19 * * 1-5", end: "0 7 * * 1-5", location: Europe/Berlin}]
`
	c := e.apply(windowed)
	if w := c.GetSpec().GetMaintenance().GetWindows(); len(w) != 1 || w[0].GetStart() != "03:00" {
		t.Fatalf("windows not kept by the render: %v", c.GetSpec().GetMaintenance())
	}
	if s := c.GetSpec().GetHibernation().GetSchedules(); len(s) != 1 {
		t.Fatalf("schedules not kept by the render: %v", c.GetSpec().GetHibernation())
	}
	seq := e.lastSeq(e.desired)
	autoPatch := strings.Replace(windowed, "  maintenance:\n", "  maintenance:\n    autoPatch: true\n", 1)
	e.do(http.MethodPost, "/v1/clusters", tokWrite, autoPatch, yaml...).wantProblem(t, http.StatusUnprocessableEntity, "spec.maintenance.autoPatch")
	e.do(http.MethodPost, "/v1/clusters/fleet-1/upgrade", tokWrite, `{"version": "v1.34.3"}`, "Content-Type", "application/json").
		wantProblem(t, http.StatusUnprocessableEntity, "version")
	if e.lastSeq(e.desired) != seq {
		t.Fatal("refused input was written")
	}
}
