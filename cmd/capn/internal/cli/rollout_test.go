package cli

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/capn-dev/capn/internal/testkit"
)

const cliClassYAML = `apiVersion: capn.dev/v1alpha1
kind: ClusterClass
metadata: {name: small}
spec:
  template:
    kubernetesVersion: v1.34.2
    controlPlane: {provider: sim, replicas: 1}
  variables:
  - {name: size, type: string, default: s, enum: [s, m], paths: [/controlPlane/template/parameters/size]}
`

// Classes and rollouts on a real capn dev (the fleet-manager among its
// services): capn apply takes a class and class clusters; a new class
// revision leaves the clusters where they are (capn get clusters: not up
// to date); capn rollout moves them in waves and capn rollout status says
// so; bad flags and a bad variable are refused with their paths.
func TestRolloutOnCapnDev(t *testing.T) {
	a := newApplyTest(t)
	code, stdout, stderr := a.run("", "apply", "-f", a.file("class.yaml", cliClassYAML))
	a.want("apply class", code, stdout, stderr, 0, "clusterclass/small created\n", "")
	var clusters strings.Builder
	for i := range 3 {
		fmt.Fprintf(&clusters, "---\napiVersion: capn.dev/v1alpha1\nkind: Cluster\nmetadata: {name: c%d, labels: {fleet: cli}}\nspec:\n  topology: {class: small}\n", i)
	}
	code, stdout, stderr = a.run("", "apply", "-f", a.file("clusters.yaml", clusters.String()), "--wait", "--timeout", "2m")
	if code != 0 || !strings.Contains(stdout, "cluster/c2 created") {
		t.Fatalf("apply clusters: %d\n%s\n%s", code, stdout, stderr)
	}
	bad := "apiVersion: capn.dev/v1alpha1\nkind: Cluster\nmetadata: {name: c9}\nspec:\n  topology: {class: small, variables: {size: xl}}\n"
	code, _, stderr = a.run("", "apply", "-f", a.file("bad.yaml", bad))
	if code == 0 || !strings.Contains(stderr, "spec.topology.variables[size]") {
		t.Fatalf("bad variable: %d %s", code, stderr)
	}

	code, stdout, stderr = a.run("", "apply", "-f", a.file("class2.yaml", strings.Replace(cliClassYAML, "default: s,", "default: m,", 1)))
	a.want("apply class 2", code, stdout, stderr, 0, "clusterclass/small configured\n", "")
	code, stdout, _ = a.run("", "get", "clusters", "-l", "fleet=cli")
	if code != 0 || !strings.Contains(stdout, "CLASS") || strings.Count(stdout, "1 (latest 2)") != 3 {
		t.Fatalf("get clusters after revision 2:\n%s", stdout)
	}

	code, _, stderr = a.run("", "rollout", "bad", "--class", "small", "--waves", "0,200%")
	if code == 0 || !strings.Contains(stderr, "spec.waves[0]") || !strings.Contains(stderr, "spec.waves[1]") {
		t.Fatalf("bad waves: %d %s", code, stderr)
	}
	code, stdout, stderr = a.run("", "rollout", "to-2", "--class", "small", "-l", "fleet=cli", "--waves", "1,100%")
	a.want("rollout", code, stdout, stderr, 0, "rollout/to-2 created (class small revision 2)\n", "")
	// Polled slowly: the gateway rate-limits each token.
	if err := testkit.Poll(60*time.Second, 250*time.Millisecond, func() error {
		_, stdout, _ := a.run("", "rollout", "status", "to-2")
		if !strings.Contains(stdout, "Phase:    Completed") {
			return fmt.Errorf("not completed:\n%s", stdout)
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	_, stdout, _ = a.run("", "rollout", "status", "to-2")
	if !strings.Contains(stdout, "Moved:    3/3 clusters") || !strings.Contains(stdout, "WAVE") {
		t.Fatalf("rollout status:\n%s", stdout)
	}
	code, stdout, _ = a.run("", "get", "clusters", "-l", "fleet=cli")
	if code != 0 || strings.Count(stdout, "true") != 3 {
		t.Fatalf("get clusters after the rollout:\n%s", stdout)
	}
	code, _, stderr = a.run("", "rollout", "abort", "to-2")
	if code != 0 {
		t.Fatalf("abort: %s", stderr)
	}
	code, _, stderr = a.run("", "rollout", "resume", "to-2")
	if code == 0 || !strings.Contains(stderr, "aborted") {
		t.Fatalf("resume after abort: %d %s", code, stderr)
	}
}
