package gateway

import (
	"context"
	"encoding/json"
	"net/http"
	"os"
	"strings"
	"testing"

	"google.golang.org/protobuf/encoding/protojson"

	"github.com/capn-dev/capn/events/store"
	"github.com/capn-dev/capn/gateway/api"
	capnv1 "github.com/capn-dev/capn/schemas/capn/v1alpha1"
)

func TestMachines(t *testing.T) {
	e := newEnv(t)
	e.do(http.MethodGet, "/v1/clusters/demo/machines", tokRead, nil).wantProblem(t, http.StatusNotFound)
	e.apply(demoYAML)
	if r := e.do(http.MethodGet, "/v1/clusters/demo/machines", tokRead, nil); r.status != 200 || !strings.Contains(string(r.body), `"items":[]`) {
		t.Fatalf("no machines yet: %d %s", r.status, r.body)
	}
	machine := func(name, pool string) *capnv1.Machine {
		return &capnv1.Machine{
			Metadata: &capnv1.ObjectMeta{Name: name, Labels: map[string]string{"pool": pool}},
			Spec:     &capnv1.MachineSpec{Cluster: "demo", Pool: pool, Provider: "sim", Version: "v1.34.2"},
		}
	}
	e.put(e.desired, "machine.demo.demo-cp-0", machine("demo-cp-0", "control-plane"))
	e.put(e.desired, "machine.demo.demo-md-0", machine("demo-md-0", "md-0"))
	e.put(e.observed, "machine.demo.demo-cp-0", &capnv1.MachineStatus{Phase: "Running", NodeName: "cp-0",
		Conditions: []*capnv1.Condition{{Type: "NodeHealthy", Status: "True"}}})
	// A machine whose spec is gone while its infrastructure is deleted.
	e.put(e.observed, "machine.demo.demo-old-9", &capnv1.MachineStatus{Phase: "Deleting", Provider: "sim"})
	// Another cluster's machine is not listed.
	e.put(e.desired, "machine.other.other-md-0", machine("other-md-0", "md-0"))

	r := e.do(http.MethodGet, "/v1/clusters/demo/machines", tokRead, nil)
	if r.status != http.StatusOK {
		t.Fatalf("%d %s", r.status, r.body)
	}
	var l api.List
	if err := json.Unmarshal(r.body, &l); err != nil {
		t.Fatal(err)
	}
	if l.Kind != api.KindMachineList || len(l.Items) != 3 {
		t.Fatalf("list %s with %d items: %s", l.Kind, len(l.Items), r.body)
	}
	var got []string
	for _, raw := range l.Items {
		m := new(capnv1.Machine)
		if err := protojson.Unmarshal(raw, m); err != nil {
			t.Fatal(err)
		}
		got = append(got, m.GetMetadata().GetName()+"/"+m.GetSpec().GetPool()+"/"+m.GetStatus().GetPhase())
	}
	// demo-md-0 has no status yet (the machine-manager writes none while a
	// machine waits for its bootstrap data): it shows Pending.
	if want := "demo-cp-0/control-plane/Running,demo-md-0/md-0/Pending,demo-old-9//Deleting"; strings.Join(got, ",") != want {
		t.Errorf("machines %q, want %q", strings.Join(got, ","), want)
	}
	if r := e.do(http.MethodGet, "/v1/clusters/demo/machines?labelSelector=pool%3Dmd-0", tokRead, nil); strings.Count(string(r.body), `"name":"demo-`) != 1 {
		t.Errorf("selector: %s", r.body)
	}

	r = e.do(http.MethodGet, "/v1/clusters/demo/machines/demo-cp-0", tokRead, nil)
	m := new(capnv1.Machine)
	if err := protojson.Unmarshal(r.body, m); err != nil || m.GetStatus().GetNodeName() != "cp-0" || m.GetMetadata().GetResourceVersion() == "" {
		t.Errorf("machine: %d %s (%v)", r.status, r.body, err)
	}
	e.do(http.MethodGet, "/v1/clusters/demo/machines/nope", tokRead, nil).wantProblem(t, http.StatusNotFound)
	e.do(http.MethodGet, "/v1/clusters/demo/machines/Bad.Name", tokRead, nil).wantProblem(t, http.StatusBadRequest, "machine")
	e.do(http.MethodGet, "/v1/clusters/demo/machines", tokIngest, nil).wantProblem(t, http.StatusForbidden)
}

func TestKubeconfig(t *testing.T) {
	e := newEnv(t)
	e.apply(demoYAML)
	const path = "/v1/clusters/demo/kubeconfig"
	// Not yet made: 404 saying what it waits for.
	p := e.do(http.MethodGet, path, tokSecrets, nil).wantProblem(t, http.StatusNotFound)
	if p.Type != api.ProblemNotYetAvailable || !strings.Contains(p.Detail, "not yet available: waiting for the control-plane endpoint") {
		t.Errorf("problem %+v", p)
	}
	e.put(e.observed, "secrets.demo", &capnv1.ClusterSecretsStatus{Cluster: "demo", PkiReady: true, Message: "no control-plane endpoint yet"})
	if p := e.do(http.MethodGet, path, tokSecrets, nil).wantProblem(t, http.StatusNotFound); !strings.Contains(p.Detail, "no control-plane endpoint yet") {
		t.Errorf("detail %q lacks the bootstrapper's message", p.Detail)
	}

	// The bootstrapper seals it under kubeconfig.demo.
	const kc = "apiVersion: v1\nkind: Config\nclusters: [{name: demo}]\n"
	sealed := store.NewBucket(e.secrets, store.New[capnv1.AdminKubeconfig](), store.WithSealer(e.ring))
	if _, err := sealed.Create(context.Background(), "kubeconfig.demo", &capnv1.AdminKubeconfig{Kubeconfig: []byte(kc), Server: "https://10.0.0.1:6443"}); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		token  string
		status int
	}{
		{tokSecrets, 200},
		{tokAdmin, 200},
		{tokRead, 403},
		{tokWrite, 403},
		{"", 401},
	}
	for _, tt := range tests {
		r := e.do(http.MethodGet, path, tt.token, nil)
		if r.status != tt.status {
			t.Errorf("token %q: %d, want %d", tt.token, r.status, tt.status)
			continue
		}
		if tt.status != 200 {
			r.problem(t)
			continue
		}
		if string(r.body) != kc || r.header.Get("Content-Type") != api.MediaYAML || r.header.Get("Cache-Control") != "no-store" {
			t.Errorf("kubeconfig %q (%s)", r.body, r.header)
		}
	}
	e.do(http.MethodGet, "/v1/clusters/nope/kubeconfig", tokSecrets, nil).wantProblem(t, http.StatusNotFound)
}

func TestKubeconfigWithoutKey(t *testing.T) {
	t.Setenv("CAPN_SECRETS_KEY", "") // restored after the test
	os.Unsetenv("CAPN_SECRETS_KEY")
	e := newEnv(t, func(o *Options) { o.Keyring = nil })
	e.apply(demoYAML)
	e.do(http.MethodGet, "/v1/clusters/demo/kubeconfig", tokSecrets, nil).wantProblem(t, http.StatusServiceUnavailable)
}
