package gateway

import (
	"context"
	"encoding/json"
	"net/http"
	"strings"
	"testing"

	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/capn-dev/capn/events/store"
	"github.com/capn-dev/capn/gateway/api"
	"github.com/capn-dev/capn/schemas/annotations"
	capnv1 "github.com/capn-dev/capn/schemas/capn/v1alpha1"
)

// hookWorld is a gateway with cluster demo and its machines as the
// cluster-planner would have written them: one control-plane machine and
// two workers.
func hookWorld(t *testing.T) *env {
	t.Helper()
	e := newEnv(t)
	e.apply(demoYAML)
	for _, m := range []struct{ name, pool, role string }{
		{"demo-cp-0", "control-plane", "control-plane"},
		{"demo-md-0", "md-0", "worker"},
		{"demo-md-1", "md-0", "worker"},
	} {
		e.put(e.desired, "machine.demo."+m.name, &capnv1.Machine{
			Metadata: &capnv1.ObjectMeta{Name: m.name, Uid: "uid-" + m.name, Annotations: map[string]string{"capn.dev/other": "kept"},
				CreationTimestamp: timestamppb.Now()},
			Spec: &capnv1.MachineSpec{Cluster: "demo", Pool: m.pool, Role: m.role, Provider: "sim", Version: "v1.34.2"},
		})
		e.put(e.observed, "machine.demo."+m.name, &capnv1.MachineStatus{Phase: "Running"})
	}
	return e
}

func (e *env) machine(name string) *capnv1.Machine {
	e.t.Helper()
	m, _, err := store.NewBucket(e.desired, store.New[capnv1.Machine]()).Get(context.Background(), "machine.demo."+name)
	if err != nil {
		e.t.Fatal(err)
	}
	return m
}

func (r resp) hook(t *testing.T) api.Hook {
	t.Helper()
	var h api.Hook
	if err := json.Unmarshal(r.body, &h); err != nil {
		t.Fatalf("hook body %s: %v", r.body, err)
	}
	return h
}

func (e *env) hooks(t *testing.T) []api.Hook {
	t.Helper()
	r := e.do(http.MethodGet, "/v1/clusters/demo/hooks", tokRead, nil)
	if r.status != http.StatusOK {
		t.Fatalf("list hooks: %d %s", r.status, r.body)
	}
	var l api.HookList
	if err := json.Unmarshal(r.body, &l); err != nil {
		t.Fatal(err)
	}
	return l.Items
}

const hooksPath = "/v1/clusters/demo/machines/demo-md-0/hooks"

func TestAddAndReleaseHook(t *testing.T) {
	e := hookWorld(t)
	post := func(token, body string) resp {
		return e.do(http.MethodPost, hooksPath, token, body, "Content-Type", api.MediaJSON)
	}
	key := annotations.PreTerminateHookPrefix + "backup"

	// Added: the holder defaults to the token's name.
	r := post(tokWrite, `{"phase":"pre-terminate","name":"backup"}`)
	if r.status != http.StatusCreated {
		t.Fatalf("add: %d %s", r.status, r.body)
	}
	if h := r.hook(t); h.Holder != "writer" || h.Annotation != key || h.Holding || h.MachinePhase != "Running" {
		t.Errorf("added hook %+v", h)
	}
	ann := e.machine("demo-md-0").GetMetadata().GetAnnotations()
	if ann[key] != "writer" || ann["capn.dev/other"] != "kept" {
		t.Errorf("annotations after add: %v", ann)
	}

	// Idempotent: the same holder again writes nothing.
	seq := e.lastSeq(e.desired)
	if r := post(tokWrite, `{"phase":"pre-terminate","name":"backup","holder":"writer"}`); r.status != http.StatusOK {
		t.Errorf("add again: %d %s", r.status, r.body)
	}
	// Another holder of the same hook: 409 naming the holder.
	if p := post(tokAdmin, `{"phase":"pre-terminate","name":"backup","holder":"velero"}`).wantProblem(t, http.StatusConflict, "name"); !strings.Contains(p.Detail, "held by writer") {
		t.Errorf("conflict detail %q does not name the holder", p.Detail)
	}
	// Bad input: every field at once, nothing written.
	p := post(tokWrite, `{"phase":"pre-delete","name":"-bad/name","holder":"two words"}`).wantProblem(t, http.StatusBadRequest, "phase", "name", "holder")
	if len(p.Errors) != 3 {
		t.Errorf("want 3 field errors: %+v", p.Errors)
	}
	post(tokWrite, `{"phase":"pre-drain","name":"`+strings.Repeat("a", 64)+`"}`).wantProblem(t, http.StatusBadRequest, "name")
	post(tokWrite, `{"phase":"pre-drain"}`).wantProblem(t, http.StatusBadRequest, "name")
	post(tokWrite, `{"phase":"pre-drain","name":"x","extra":1}`).wantProblem(t, http.StatusBadRequest, "extra")
	e.do(http.MethodPost, "/v1/clusters/demo/machines/nope/hooks", tokWrite, `{"phase":"pre-drain","name":"x"}`, "Content-Type", api.MediaJSON).
		wantProblem(t, http.StatusNotFound)
	e.do(http.MethodPost, "/v1/clusters/demo/machines/Bad_Name/hooks", tokWrite, `{"phase":"pre-drain","name":"x"}`, "Content-Type", api.MediaJSON).
		wantProblem(t, http.StatusBadRequest, "machine")
	if got := e.lastSeq(e.desired); got != seq {
		t.Errorf("refused or repeated adds wrote the desired bucket: revision %d → %d", seq, got)
	}

	// A second hook, in the other phase.
	if r := post(tokAdmin, `{"phase":"pre-drain","name":"audit.v1","holder":"ci/job-7"}`); r.status != http.StatusCreated {
		t.Fatalf("add pre-drain: %d %s", r.status, r.body)
	}
	hs := e.hooks(t)
	if len(hs) != 2 || hs[0].Phase != api.HookPreDrain || hs[0].Holder != "ci/job-7" || hs[1].Name != "backup" || hs[0].Holding || hs[1].Holding {
		t.Fatalf("hooks %+v", hs)
	}

	// The machine is being deleted and waits at pre-terminate: that hook
	// holds it, the pre-drain one no longer does.
	e.put(e.observed, "machine.demo.demo-md-0", &capnv1.MachineStatus{Phase: "Deleting", Conditions: []*capnv1.Condition{
		{Type: "PreDrainDeleteHookSucceeded", Status: "True"},
		{Type: "PreTerminateDeleteHookSucceeded", Status: "False", Reason: "WaitingExternalHook", Message: "waiting for hook backup (writer)"},
	}})
	hs = e.hooks(t)
	if hs[0].Holding || !hs[1].Holding || hs[1].MachinePhase != "Deleting" {
		t.Errorf("holding: %+v", hs)
	}

	// Release: only the holder, or with force.
	const rel = hooksPath + "/pre-terminate/backup"
	seq = e.lastSeq(e.desired)
	if p := e.do(http.MethodDelete, rel, tokAdmin, nil).wantProblem(t, http.StatusConflict, "holder"); !strings.Contains(p.Detail, "held by writer") {
		t.Errorf("release by another: %q", p.Detail)
	}
	e.do(http.MethodDelete, rel+"?force=maybe", tokAdmin, nil).wantProblem(t, http.StatusBadRequest, "force")
	e.do(http.MethodDelete, hooksPath+"/pre-terminate/nope", tokWrite, nil).wantProblem(t, http.StatusNotFound)
	e.do(http.MethodDelete, hooksPath+"/during/backup", tokWrite, nil).wantProblem(t, http.StatusBadRequest, "phase")
	if got := e.lastSeq(e.desired); got != seq {
		t.Errorf("refused releases wrote: revision %d → %d", seq, got)
	}
	if r := e.do(http.MethodDelete, rel, tokWrite, nil); r.status != http.StatusOK || r.hook(t).Holder != "writer" {
		t.Fatalf("release by its holder: %d %s", r.status, r.body)
	}
	e.do(http.MethodDelete, rel, tokWrite, nil).wantProblem(t, http.StatusNotFound)
	if r := e.do(http.MethodDelete, hooksPath+"/pre-drain/audit.v1?force=true", tokWrite, nil); r.status != http.StatusOK || r.hook(t).Holder != "ci/job-7" {
		t.Fatalf("forced release: %d %s", r.status, r.body)
	}
	ann = e.machine("demo-md-0").GetMetadata().GetAnnotations()
	if len(annotations.Hooks(ann, annotations.PreDrainHookPrefix))+len(annotations.Hooks(ann, annotations.PreTerminateHookPrefix)) != 0 || ann["capn.dev/other"] != "kept" {
		t.Errorf("annotations after release: %v", ann)
	}
	if hs := e.hooks(t); len(hs) != 0 {
		t.Errorf("hooks after release: %+v", hs)
	}

	// Each change is on the cluster's timeline, once.
	var got []string
	for _, it := range e.timeline(t, "").Items {
		if it.What == "hook" {
			got = append(got, it.Reason+" "+it.Object+": "+it.Message)
		}
	}
	want := []string{
		"HookAdded demo-md-0: pre-terminate hook backup added by writer: the machine's deletion waits before its infrastructure is deleted until it is released",
		"HookAdded demo-md-0: pre-drain hook audit.v1 added by ci/job-7: the machine's deletion waits before its Node is drained until it is released",
		"HookReleased demo-md-0: pre-terminate hook backup released by writer",
		"HookReleased demo-md-0: pre-drain hook audit.v1 released by writer (held by ci/job-7, forced)",
	}
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Errorf("timeline:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}

	e.do(http.MethodGet, "/v1/clusters/nope/hooks", tokRead, nil).wantProblem(t, http.StatusNotFound)
}

// TestHooksRefuseTokensWithoutWrite is the attack: a token that may only
// read (or only ingest health reports) tries to hold a machine's deletion
// forever, or to release another system's hook so that a machine is
// deleted before the backup that hook waits for. Both are refused and
// nothing is written.
func TestHooksRefuseTokensWithoutWrite(t *testing.T) {
	e := hookWorld(t)
	if r := e.do(http.MethodPost, hooksPath, tokWrite, `{"phase":"pre-drain","name":"backup","holder":"velero"}`, "Content-Type", api.MediaJSON); r.status != http.StatusCreated {
		t.Fatalf("add: %d %s", r.status, r.body)
	}
	seq := e.lastSeq(e.desired)
	for _, tok := range []string{tokRead, tokIngest, tokSecrets} {
		e.do(http.MethodPost, hooksPath, tok, `{"phase":"pre-terminate","name":"forever"}`, "Content-Type", api.MediaJSON).wantProblem(t, http.StatusForbidden)
		e.do(http.MethodDelete, hooksPath+"/pre-drain/backup?holder=velero", tok, nil).wantProblem(t, http.StatusForbidden)
		e.do(http.MethodDelete, hooksPath+"/pre-drain/backup?force=true", tok, nil).wantProblem(t, http.StatusForbidden)
		e.do(http.MethodDelete, "/v1/clusters/demo/machines/demo-md-0", tok, nil).wantProblem(t, http.StatusForbidden)
	}
	for _, tok := range []string{"", "not-a-token"} {
		e.do(http.MethodPost, hooksPath, tok, `{"phase":"pre-terminate","name":"forever"}`, "Content-Type", api.MediaJSON).wantProblem(t, http.StatusUnauthorized)
		e.do(http.MethodDelete, hooksPath+"/pre-drain/backup?force=true", tok, nil).wantProblem(t, http.StatusUnauthorized)
	}
	if got := e.lastSeq(e.desired); got != seq {
		t.Errorf("refused requests wrote the desired bucket: revision %d → %d", seq, got)
	}
	if ann := e.machine("demo-md-0").GetMetadata().GetAnnotations(); ann[annotations.PreDrainHookPrefix+"backup"] != "velero" || len(ann) != 2 {
		t.Errorf("annotations %v", ann)
	}
	// Reading them is a read.
	if hs := e.hooks(t); len(hs) != 1 || hs[0].Holder != "velero" {
		t.Errorf("hooks %+v", hs)
	}
}

func TestDeleteMachine(t *testing.T) {
	e := hookWorld(t)
	const path = "/v1/clusters/demo/machines/"
	seq := e.lastSeq(e.desired)

	// A dry run checks and writes nothing.
	r := e.do(http.MethodDelete, path+"demo-md-0?dryRun=All", tokWrite, nil)
	if r.status != http.StatusAccepted {
		t.Fatalf("dry run: %d %s", r.status, r.body)
	}
	if e.lastSeq(e.desired) != seq || e.machine("demo-md-0").GetMetadata().GetDeletionTimestamp() != nil {
		t.Error("the dry run wrote")
	}

	r = e.do(http.MethodDelete, path+"demo-md-0", tokWrite, nil)
	if r.status != http.StatusAccepted {
		t.Fatalf("delete: %d %s", r.status, r.body)
	}
	m := new(capnv1.Machine)
	if err := protojson.Unmarshal(r.body, m); err != nil || m.GetMetadata().GetDeletionTimestamp() == nil || m.GetStatus().GetPhase() != "Running" {
		t.Fatalf("answer %s (%v)", r.body, err)
	}
	stored := e.machine("demo-md-0")
	if stored.GetMetadata().GetDeletionTimestamp() == nil || stored.GetMetadata().GetAnnotations()["capn.dev/other"] != "kept" || stored.GetMetadata().GetUid() != "uid-demo-md-0" {
		t.Errorf("stored %v", stored)
	}

	seq = e.lastSeq(e.desired)
	if p := e.do(http.MethodDelete, path+"demo-md-0", tokWrite, nil).wantProblem(t, http.StatusConflict); !strings.Contains(p.Detail, "already being deleted") {
		t.Errorf("again: %q", p.Detail)
	}
	p := e.do(http.MethodDelete, path+"demo-cp-0", tokWrite, nil).wantProblem(t, http.StatusConflict)
	if !strings.Contains(p.Detail, "last control-plane machine") || !strings.Contains(p.Detail, "capn scale demo --pool control-plane") || !strings.Contains(p.Detail, "capn delete cluster demo") {
		t.Errorf("last control plane: %q", p.Detail)
	}
	e.do(http.MethodDelete, path+"nope", tokWrite, nil).wantProblem(t, http.StatusNotFound)
	e.do(http.MethodDelete, path+"demo-md-1?dryRun=yes", tokWrite, nil).wantProblem(t, http.StatusBadRequest, api.ParamDryRun)
	if got := e.lastSeq(e.desired); got != seq {
		t.Errorf("refused deletes wrote: revision %d → %d", seq, got)
	}

	// With a second control-plane machine, either may go.
	e.put(e.desired, "machine.demo.demo-cp-1", &capnv1.Machine{Metadata: &capnv1.ObjectMeta{Name: "demo-cp-1"},
		Spec: &capnv1.MachineSpec{Cluster: "demo", Pool: "control-plane", Role: "control-plane", Provider: "sim"}})
	if r := e.do(http.MethodDelete, path+"demo-cp-0", tokWrite, nil); r.status != http.StatusAccepted {
		t.Errorf("delete one of two control-plane machines: %d %s", r.status, r.body)
	}
	// …but not the other too.
	e.do(http.MethodDelete, path+"demo-cp-1", tokWrite, nil).wantProblem(t, http.StatusConflict)

	// A cluster being deleted: its machines go with it.
	if r := e.do(http.MethodDelete, "/v1/clusters/demo", tokWrite, nil); r.status != http.StatusAccepted {
		t.Fatal(r.status)
	}
	if p := e.do(http.MethodDelete, path+"demo-md-1", tokWrite, nil).wantProblem(t, http.StatusConflict); !strings.Contains(p.Detail, "cluster demo is being deleted") {
		t.Errorf("cluster deleting: %q", p.Detail)
	}
}
