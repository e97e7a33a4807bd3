package process_test

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/capn-dev/capn/events/natstest"
	"github.com/capn-dev/capn/providers/conformance"
	"github.com/capn-dev/capn/providers/process"
	"github.com/capn-dev/capn/providers/sdk/sdktest"
	capnv1 "github.com/capn-dev/capn/schemas/capn/v1alpha1"
)

// builtKubeBins are the directories of $CAPN_KUBE_BIN that exist (make
// names them before they are built), or one empty directory: nothing
// built.
func builtKubeBins(t *testing.T) string {
	var dirs []string
	for _, d := range filepath.SplitList(os.Getenv("CAPN_KUBE_BIN")) {
		if fi, err := os.Stat(d); err == nil && fi.IsDir() {
			dirs = append(dirs, d)
		}
	}
	if len(dirs) == 0 {
		return t.TempDir()
	}
	return strings.Join(dirs, string(filepath.ListSeparator))
}

// A kube-local machine of a Kubernetes version whose binaries are not
// built is refused by the process provider before anything runs, and the
// user sees why — the version, what is built, and the make kube that
// builds it — in the machine's conditions and in `capn describe`. A real
// capn deployment on a real NATS server, the process provider with
// --kube-bin ($CAPN_KUBE_BIN, or an empty directory).
func TestUnbuiltKubernetesVersionFailsTheMachine(t *testing.T) {
	env := sdktest.New(t)
	capn := conformance.StartCapn(t, env.Server.URL())
	opts := options(t, t.TempDir())
	opts.KubeBin = builtKubeBins(t)
	p, err := process.New(opts)
	if err != nil {
		t.Fatal(err)
	}
	have := "none"
	if vs := p.KubernetesVersions(); len(vs) > 0 {
		have = strings.Join(vs, ", ")
	}
	env.Run(process.NewService(opts, conformance.SDKOptions()))
	natstest.WaitFor(t, 30*time.Second, "the provider's announcement", func() bool {
		_, ok := env.Announcement(process.Name)
		return ok
	})
	if a, _ := env.Announcement(process.Name); !slices.Equal(a.GetKubernetesVersions(), p.KubernetesVersions()) {
		t.Errorf("the announcement lists Kubernetes versions %v; %s are built", a.GetKubernetesVersions(), have)
	}

	const cluster, version = "old", "v1.35.0"
	manifest := filepath.Join(capn.Home, "old.yaml")
	if err := os.WriteFile(manifest, fmt.Appendf(nil, `apiVersion: capn.dev/v1alpha1
kind: Cluster
metadata:
  name: %s
spec:
  kubernetesVersion: %s
  bootstrap:
    provider: kube-local
  controlPlane:
    provider: process
    replicas: 1
`, cluster, version), 0o644); err != nil {
		t.Fatal(err)
	}
	capn.CLI("apply", "-f", manifest)
	want := fmt.Sprintf("Kubernetes %s binaries are not built here (have %s): run make kube KUBE_VERSIONS=", version, have)
	clusters := conformance.NewClusters(t, env.JS)
	var got *capnv1.Condition
	conformance.Poll(t, "the machine failed with a condition naming "+version, time.Minute, func() error {
		for name, st := range clusters.Machines(cluster) {
			for _, c := range st.GetConditions() {
				if c.GetType() == "InfrastructureReady" && strings.HasPrefix(c.GetMessage(), want) {
					got = c
					return nil
				}
			}
			return fmt.Errorf("machine %s: phase %s, conditions %v", name, st.GetPhase(), st.GetConditions())
		}
		return fmt.Errorf("no machine of %s yet", cluster)
	})
	if got.GetStatus() != "False" || got.GetReason() != "InfrastructureFailed" {
		t.Errorf("condition %s=%s %s, want InfrastructureReady=False InfrastructureFailed", got.GetType(), got.GetStatus(), got.GetReason())
	}
	t.Logf("%s=%s %s: %s", got.GetType(), got.GetStatus(), got.GetReason(), got.GetMessage())
	if out := capn.CLI("describe", "cluster", cluster); !strings.Contains(out, want) {
		t.Errorf("capn describe cluster %s does not say %q:\n%s", cluster, want, out)
	}
	for _, proc := range nodeProcesses(opts.StateDir, cluster) {
		if !strings.Contains(proc, " endpoint ") { // the cluster's endpoint runs: the cluster's infrastructure is fine
			t.Errorf("a refused machine runs: %s", proc)
		}
	}
	capn.CLI("delete", "cluster", cluster, "--wait", "--timeout", "1m")
}
