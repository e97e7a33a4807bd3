package cli

import (
	"encoding/json"
	"flag"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/capn-dev/capn/gateway/api"
	capnv1 "github.com/capn-dev/capn/schemas/capn/v1alpha1"
)

var update = flag.Bool("update", false, "rewrite the golden files under testdata")

// golden compares got with testdata/name (rewritten with -update).
func golden(t *testing.T, name, got string) {
	t.Helper()
	path := filepath.Join("testdata", name)
	if *update {
		if err := os.MkdirAll("testdata", 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, []byte(got), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%v (go test -update writes it)", err)
	}
	if got != string(want) {
		t.Errorf("output differs from %s (go test -update rewrites it); got:\n%s", path, got)
	}
}

func TestHumanDuration(t *testing.T) {
	tests := []struct {
		d    time.Duration
		want string
	}{
		{-2 * time.Second, "<invalid>"}, {-time.Millisecond, "0s"}, {0, "0s"}, {59 * time.Second, "59s"}, {119 * time.Second, "119s"},
		{2 * time.Minute, "2m"}, {3*time.Minute + 12*time.Second, "3m12s"}, {45 * time.Minute, "45m"},
		{5*time.Hour + 30*time.Minute, "5h30m"}, {5 * time.Hour, "5h"}, {30 * time.Hour, "30h"},
		{50 * time.Hour, "2d2h"}, {72 * time.Hour, "3d"}, {40 * 24 * time.Hour, "40d"}, {3 * 365 * 24 * time.Hour, "3y"},
	}
	for _, tt := range tests {
		if got := humanDuration(tt.d); got != tt.want {
			t.Errorf("humanDuration(%s) = %q, want %q", tt.d, got, tt.want)
		}
	}
}

func TestTable(t *testing.T) {
	tbl := newTable([]string{"NAME", "PHASE"}, []string{"├─Machine/a", "Running"})
	got := tbl.line([]string{"NAME", "PHASE"}) + tbl.line([]string{"├─Machine/a", "Running"}) +
		tbl.line([]string{"a-much-longer-name-than-before", "X"}) + tbl.line([]string{"b", ""})
	want := "NAME          PHASE\n" +
		"├─Machine/a   Running\n" +
		"a-much-longer-name-than-before   X\n" +
		"b\n"
	if got != want {
		t.Errorf("got:\n%s\nwant:\n%s", got, want)
	}
}

// fixture is a cluster half-way through provisioning, and its machines.
func fixture(now time.Time) (*capnv1.Cluster, []*capnv1.Machine) {
	ago := func(d time.Duration) *timestamppb.Timestamp { return timestamppb.New(now.Add(-d)) }
	cond := func(typ, status, reason, msg string, since time.Duration) *capnv1.Condition {
		return &capnv1.Condition{Type: typ, Status: status, Reason: reason, Message: msg, LastTransitionTime: ago(since)}
	}
	c := &capnv1.Cluster{
		ApiVersion: api.APIVersion, Kind: api.KindCluster,
		Metadata: &capnv1.ObjectMeta{Name: "demo", Labels: map[string]string{"env": "dev", "team": "a"}, Generation: 2,
			ResourceVersion: "17", CreationTimestamp: ago(3*time.Minute + 12*time.Second), Uid: "0f0e"},
		Spec: &capnv1.ClusterSpec{KubernetesVersion: "v1.34.2",
			ControlPlane: &capnv1.ControlPlaneSpec{Provider: "sim", Replicas: 3},
			WorkerPools: []*capnv1.WorkerPool{
				{Name: "md-0", Provider: "sim", Replicas: 2, Version: "v1.34.2"},
				{Name: "md-1", Provider: "sim", Replicas: 1, Version: "v1.33.4"},
			}},
		Status: &capnv1.ClusterStatus{Phase: "Upgrading", ObservedGeneration: 2,
			ControlPlaneEndpoint: &capnv1.Endpoint{Host: "10.0.0.1", Port: 6443},
			ControlPlane:         &capnv1.PoolStatus{Name: "control-plane", Desired: 3, Replicas: 3, Ready: 2, Updated: 2, Available: 2, Version: "v1.33.4"},
			WorkerPools: []*capnv1.PoolStatus{
				{Name: "md-0", Desired: 2, Replicas: 2, Ready: 2, Updated: 0, Available: 2, Version: "v1.33.4"},
				{Name: "md-1", Desired: 1, Replicas: 1, Ready: 1, Updated: 1, Available: 1, Version: "v1.33.4"},
			},
			Conditions: []*capnv1.Condition{
				cond("ControlPlaneReady", "False", "RollingOut", "2 of 3 control-plane machines available, 2 up to date; not available: demo-control-plane-b2-1 (Provisioning)", 20*time.Second),
				cond("WorkersReady", "False", "WaitingForControlPlane", "pool md-0: 2 of 2 machines available, 0 up to date (the control plane upgrades first)", 20*time.Second),
				cond("Ready", "False", "ControlPlaneNotReady", "2 of 3 control-plane machines available, 2 up to date; not available: demo-control-plane-b2-1 (Provisioning)", 20*time.Second),
			}},
	}
	m := func(name, pool, version, phase string, since time.Duration, conds ...*capnv1.Condition) *capnv1.Machine {
		return &capnv1.Machine{
			Metadata: &capnv1.ObjectMeta{Name: name, CreationTimestamp: ago(since)},
			Spec:     &capnv1.MachineSpec{Cluster: "demo", Pool: pool, Role: "worker", Provider: "sim", Version: version},
			Status: &capnv1.MachineStatus{Phase: phase, NodeName: name, PhaseSince: ago(since), Conditions: conds, ProviderId: "sim://demo/" + name,
				Addresses: []*capnv1.Address{{Type: "InternalIP", Address: "10.0.0.9"}}},
		}
	}
	ms := []*capnv1.Machine{
		m("demo-control-plane-b2-0", "control-plane", "v1.34.2", "Running", 50*time.Second, cond("NodeHealthy", "True", "NodeReady", "", 40*time.Second)),
		m("demo-control-plane-b2-1", "control-plane", "v1.34.2", "Provisioning", 5*time.Second, cond("BootstrapReady", "True", "Ready", "", 6*time.Second), cond("InfrastructureReady", "False", "Creating", "the provider is creating the machine", 5*time.Second)),
		m("demo-control-plane-a1-1", "control-plane", "v1.33.4", "Running", 3*time.Minute),
		m("demo-md-0-a1-0", "md-0", "v1.33.4", "Running", 2*time.Minute),
		m("demo-md-0-a1-1", "md-0", "v1.33.4", "Failed", time.Minute),
		m("demo-md-1-a1-0", "md-1", "v1.33.4", "Running", 2*time.Minute),
		{Metadata: &capnv1.ObjectMeta{Name: "demo-md-9-a1-0"}, Status: &capnv1.MachineStatus{Phase: "Deleting", Provider: "sim"}},
	}
	ms[4].Status.FailureReason, ms[4].Status.FailureMessage = "BootstrapFailed", "cloud-init exited with 1"
	ms[5].Spec.Os = "windows"
	ms[4].Status.NodeName = ""
	return c, ms
}

var fixedNow = time.Date(2026, 12, 2, 17, 51, 13, 0, time.UTC)

func TestGetOutput(t *testing.T) {
	c, ms := fixture(fixedNow)
	other := proto.Clone(c).(*capnv1.Cluster)
	other.Metadata.Name, other.Status = "fresh", nil
	other.Metadata.DeletionTimestamp = timestamppb.New(fixedNow)
	clusters := []*capnv1.Cluster{c, other, officeHours(c)}
	var b strings.Builder
	for _, wide := range []bool{false, true} {
		rows := [][]string{clusterHeader(wide, false)}
		for _, cl := range clusters {
			rows = append(rows, clusterRow(cl, fixedNow, wide, false))
		}
		writeTable(&b, rows)
		b.WriteString("\n")
		for _, all := range []bool{false, true} {
			rows := [][]string{machineHeader(wide, all)}
			for _, m := range ms {
				rows = append(rows, machineRow(m, fixedNow, wide, all))
			}
			writeTable(&b, rows)
			b.WriteString("\n")
		}
	}
	golden(t, "get-tables.golden", b.String())
}

// TestListJSON: -o json prints a Kubernetes-style list whose items have
// apiVersion, kind, metadata.name, spec and status.phase; -o yaml the
// same as YAML.
func TestListJSON(t *testing.T) {
	c, ms := fixture(fixedNow)
	for _, tt := range []struct {
		kind string
		objs []proto.Message
	}{
		{api.KindClusterList, []proto.Message{c}},
		{api.KindMachineList, []proto.Message{ms[0], ms[6]}},
	} {
		var b strings.Builder
		if err := printObjects(&b, outJSON, tt.kind, false, tt.objs); err != nil {
			t.Fatal(err)
		}
		var list struct {
			APIVersion string `json:"apiVersion"`
			Kind       string `json:"kind"`
			Items      []struct {
				APIVersion string `json:"apiVersion"`
				Kind       string `json:"kind"`
				Metadata   struct{ Name string }
				Spec       map[string]any `json:"spec"`
				Status     struct{ Phase string }
			} `json:"items"`
		}
		if err := json.Unmarshal([]byte(b.String()), &list); err != nil {
			t.Fatalf("%v:\n%s", err, b.String())
		}
		if list.APIVersion != api.APIVersion || list.Kind != tt.kind || len(list.Items) != len(tt.objs) {
			t.Fatalf("list %s %s with %d items:\n%s", list.APIVersion, list.Kind, len(list.Items), b.String())
		}
		for i, it := range list.Items {
			if it.APIVersion != api.APIVersion || it.Kind+"List" != tt.kind || it.Metadata.Name == "" || it.Status.Phase == "" {
				t.Errorf("item %d: %+v", i, it)
			}
		}
		if !strings.HasPrefix(b.String(), "{\n    \"apiVersion\": \"capn.dev/v1alpha1\",\n    \"kind\": \""+tt.kind) {
			t.Errorf("not indented like kubectl:\n%s", b.String())
		}
		var y strings.Builder
		if err := printObjects(&y, outYAML, tt.kind, false, tt.objs); err != nil {
			t.Fatal(err)
		}
		if !strings.HasPrefix(y.String(), "apiVersion: capn.dev/v1alpha1\nkind: "+tt.kind+"\nitems:\n- apiVersion: capn.dev/v1alpha1\n") {
			t.Errorf("YAML:\n%s", y.String())
		}
	}
	var b strings.Builder
	if err := printObjects(&b, outName, api.KindMachineList, false, []proto.Message{ms[0], c}); err != nil {
		t.Fatal(err)
	}
	if b.String() != "machine/demo-control-plane-b2-0\ncluster/demo\n" {
		t.Errorf("-o name: %q", b.String())
	}
	b.Reset()
	if err := printObjects(&b, outJSON, api.KindClusterList, true, []proto.Message{c}); err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(b.String(), "{\n    \"apiVersion\": \"capn.dev/v1alpha1\",\n    \"kind\": \"Cluster\",") {
		t.Errorf("one object:\n%s", b.String())
	}
}

// officeHours is c with a maintenance window, auto-patch and an office
// hours schedule, as the maintenance service records them: a patch waits
// for the window, and a manual wake holds against the schedule.
func officeHours(c *capnv1.Cluster) *capnv1.Cluster {
	o := proto.Clone(c).(*capnv1.Cluster)
	o.Metadata.Name = "office"
	o.Spec.Maintenance = &capnv1.MaintenanceSpec{AutoPatch: true, ConfineSpecRollouts: true, Windows: []*capnv1.MaintenanceWindow{
		{Days: []string{"Sat", "Sun"}, Start: "02:00", End: "04:00", TimeZone: "Europe/Berlin"}}}
	o.Spec.Hibernation = &capnv1.HibernationSpec{Schedules: []*capnv1.HibernationSchedule{
		{Start: "0 19 * * MON-FRI", End: "0 7 * * MON-FRI", Location: "Europe/Berlin"}}}
	o.Status.Maintenance = &capnv1.MaintenanceStatus{NextWindowOpen: timestamppb.New(fixedNow.Add(5 * time.Hour)),
		Waiting: []*capnv1.MaintenanceWait{{Change: "AutoPatch", From: "v1.34.2", To: "v1.34.5", Message: "waits for the maintenance window opening at " + fixedNow.Add(5*time.Hour).UTC().Format(time.RFC3339)},
			{Change: "SpecRollout", Message: "rolling out pool md-0 (2 machines outdated) waits for the maintenance window opening at " + fixedNow.Add(5*time.Hour).UTC().Format(time.RFC3339) + " (spec.maintenance.confineSpecRollouts)"}},
		LastApplied: "AutoPatch v1.34.1 → v1.34.2", LastAppliedTime: timestamppb.New(fixedNow.Add(-7 * 24 * time.Hour))}
	o.Status.Hibernation = &capnv1.HibernationStatus{NextTransition: timestamppb.New(fixedNow.Add(2 * time.Hour)), NextHibernates: true,
		Override: true, Message: "woken by hand against the schedule, until it hibernates at " + fixedNow.Add(2*time.Hour).UTC().Format(time.RFC3339)}
	return o
}

func TestDescribe(t *testing.T) {
	c, ms := fixture(fixedNow)
	evs := []api.TimelineEvent{
		{Time: fixedNow.Add(-time.Minute), Entity: "machine", What: "failed", Cluster: "demo", Object: "demo-md-0-a1-1", Reason: "BootstrapFailed", Message: "cloud-init exited with 1"},
		{Time: fixedNow.Add(-20 * time.Second), Entity: "cluster", What: "upgrading", Cluster: "demo", Object: "_", Reason: "Upgrading", Message: "rolling the control plane to v1.34.2"},
	}
	var b strings.Builder
	describeCluster(&b, c, ms, evs, describeOpts{now: fixedNow, loc: time.UTC})
	b.WriteString("\n--- with --show-conditions\n")
	describeCluster(&b, c, ms[:2], nil, describeOpts{now: fixedNow, loc: time.UTC, showConditions: true})
	b.WriteString("\n--- with maintenance windows and a hibernation schedule\n")
	describeCluster(&b, officeHours(c), nil, nil, describeOpts{now: fixedNow, loc: time.UTC})
	golden(t, "describe.golden", b.String())
}

// TestGoTemplate: -o go-template=... runs on the JSON of the one object
// named, or of the list; numbers print as written; a bad template is a
// usage error saying where.
func TestGoTemplate(t *testing.T) {
	c, ms := fixture(fixedNow)
	var b strings.Builder
	if err := printObjects(&b, outGoTemplate+`{{.metadata.name}} {{.spec.controlPlane.replicas}} {{.status.phase}}`, "", true, []proto.Message{c}); err != nil {
		t.Fatal(err)
	}
	if want := "demo 3 " + c.GetStatus().GetPhase(); b.String() != want {
		t.Errorf("one object: %q, want %q", b.String(), want)
	}
	b.Reset()
	list := []proto.Message{ms[0], ms[1]}
	if err := printObjects(&b, outGoTemplate+`{{.kind}}:{{range .items}} {{.metadata.name}}{{end}}`, "MachineList", false, list); err != nil {
		t.Fatal(err)
	}
	if want := "MachineList: " + ms[0].GetMetadata().GetName() + " " + ms[1].GetMetadata().GetName(); b.String() != want {
		t.Errorf("a list: %q, want %q", b.String(), want)
	}
	for _, tt := range []struct{ output, want string }{
		{"go-template", "-o go-template needs its template after =, e.g. -o go-template='{{.metadata.name}}'"},
		{"go-template=", "-o go-template= is empty: give a template, e.g. -o go-template='{{.metadata.name}}'"},
		{"go-template={{.metadata.name", `template: -o go-template:1: unclosed action`},
		{"go-template={{range .items}}", `template: -o go-template:1: unexpected EOF`},
		{"jsonpath={.metadata.name}", `-o "jsonpath={.metadata.name}": must be wide, yaml, json, name or go-template=TEMPLATE`},
	} {
		if err := checkOutput(tt.output); err == nil || err.Error() != tt.want {
			t.Errorf("-o %s: %v, want %q", tt.output, err, tt.want)
		}
	}
	err := printObjects(&b, outGoTemplate+`{{.metadata.name.first}}`, "", true, []proto.Message{c})
	if err == nil || !strings.HasPrefix(err.Error(), "-o go-template on cluster/demo: template: -o go-template:1:11: executing") {
		t.Errorf("a failing template: %v", err)
	}
}

// TestDescribeDrainingMachine: a deleting machine's row says the step its
// deletion is at and, while it drains, the pods a budget holds.
func TestDescribeDrainingMachine(t *testing.T) {
	c, ms := fixture(fixedNow)
	m := ms[len(ms)-1]
	m.Metadata.DeletionTimestamp = timestamppb.New(fixedNow.Add(-time.Minute))
	m.Status.Phase = capnv1.MachineDeleting.Wire()
	m.Status.FailureReason, m.Status.FailureMessage = "", ""
	m.Status.Conditions = []*capnv1.Condition{
		{Type: "Ready", Status: "False", Reason: "Deleting"},
		{Type: "Deleting", Status: "True", Reason: "DrainingNode", Message: "draining node w-1: 2 pods blocked by PodDisruptionBudget web-pdb (default/web-a, default/web-b)"},
		{Type: "DrainingSucceeded", Status: "False", Reason: "Draining", Message: "draining node w-1: 2 pods blocked by PodDisruptionBudget web-pdb (default/web-a, default/web-b)"},
	}
	var b strings.Builder
	describeCluster(&b, c, ms, nil, describeOpts{now: fixedNow, loc: time.UTC})
	var row string
	for l := range strings.SplitSeq(b.String(), "\n") {
		if strings.Contains(l, "Machine/"+m.Metadata.Name) {
			row = l
		}
	}
	if !strings.Contains(row, "DrainingNode") || !strings.Contains(row, "2 pods blocked by PodDisruptionBudget web-pdb (default/web-a, default/web-b)") {
		t.Errorf("deleting machine's row %q: want the step and the pods the budget holds\n%s", row, b.String())
	}
	m.Status.Conditions[1] = &capnv1.Condition{Type: "Deleting", Status: "True", Reason: "WaitingForPreTerminateHook", Message: "waiting for pre-terminate hooks: storage"}
	m.Status.Conditions[2].Status, m.Status.Conditions[2].Reason = "True", "Drained"
	if reason, msg := machineTrouble(m); reason != "WaitingForPreTerminateHook" || msg != "waiting for pre-terminate hooks: storage" {
		t.Errorf("after the drain: %s %q", reason, msg)
	}
}
