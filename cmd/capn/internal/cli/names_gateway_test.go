package cli

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/capn-dev/capn/cmd/capn/internal/dev"
	"github.com/capn-dev/capn/events/natstest"
)

// TestNamesRoundTripAgainstTheGateway runs the commands in this process
// against a real capn dev (gateway, NATS, planner, sim provider): what
// capn get -o name prints feeds back into get, describe and delete; a
// machine is found without --cluster; delete checks every name before it
// deletes any, takes several names and -l, and with --wait waits for all.
func TestNamesRoundTripAgainstTheGateway(t *testing.T) {
	if testing.Short() {
		t.Skip("starts capn dev: skipped with -short")
	}
	dataDir, home := t.TempDir(), t.TempDir()
	startDevWith(t, dataDir, map[string]string{"XDG_CONFIG_HOME": filepath.Join(home, "dev-xdg")})
	vars := map[string]string{"CAPN_CONFIG": filepath.Join(dataDir, dev.ClientConfigFile), "HOME": home, "XDG_CONFIG_HOME": filepath.Join(home, "xdg")}
	capn := func(args ...string) cliResult {
		t.Helper()
		e, stdout, stderr := testEnv(vars)
		code := run(t.Context(), e, args)
		return cliResult{code, stdout.String(), stderr.String()}
	}
	must := func(r cliResult, code int, stdout, what string) {
		t.Helper()
		if r.code != code || r.stdout != stdout {
			t.Fatalf("%s: exit %d (want %d)\nstdout:\n%s\nstderr:\n%s\nwant stdout:\n%s", what, r.code, code, r.stdout, r.stderr, stdout)
		}
	}

	var m strings.Builder
	for _, c := range []struct{ name, env string }{{"a", "dev"}, {"b", "dev"}, {"c", "prod"}} {
		m.WriteString("---\napiVersion: capn.dev/v1alpha1\nkind: Cluster\nmetadata: {name: " + c.name + ", labels: {env: " + c.env + "}}\n" +
			"spec:\n  kubernetesVersion: v1.34.0\n  controlPlane: {provider: sim, replicas: 1}\n  workerPools: [{name: md-0, provider: sim, replicas: 1}]\n")
	}
	file := filepath.Join(t.TempDir(), "clusters.yaml")
	if err := os.WriteFile(file, []byte(m.String()), 0o644); err != nil {
		t.Fatal(err)
	}
	must(capn("apply", "-f", file), 0, "cluster/a created\ncluster/b created\ncluster/c created\n", "apply")

	// -o name feeds back in, as several TYPE/NAME arguments or one.
	dev := capn("get", "clusters", "-l", "env=dev", "-o", "name")
	must(dev, 0, "cluster/a\ncluster/b\n", "get -o name")
	names := strings.Fields(dev.stdout)
	tmpl := "-o=go-template={{range .items}}{{.metadata.name}} {{.metadata.labels.env}};{{end}}"
	must(capn(append([]string{"get", tmpl}, names...)...), 0, "a dev;b dev;", "get cluster/a cluster/b")
	must(capn("get", "clusters/a", "-o", "go-template={{.metadata.name}}"), 0, "a", "get clusters/a")
	must(capn("get", "cl", "c", "-A", "-o", "name"), 0, "cluster/c\n", "get cl c -A")
	if r := capn("describe", names[0]); r.code != 0 || !strings.Contains(r.stdout, "Cluster/a ") {
		t.Fatalf("describe %s: exit %d\n%s%s", names[0], r.code, r.stdout, r.stderr)
	}
	if r := capn("upgrade", "cluster/a", "--version", "v1.34.1"); r.code != 0 || !strings.HasPrefix(r.stdout, "cluster/a upgrading to v1.34.1") {
		t.Fatalf("upgrade cluster/a: exit %d\n%s%s", r.code, r.stdout, r.stderr)
	}
	// The auto-patch catalogue: set, then shown.
	vfile := filepath.Join(t.TempDir(), "versions.yaml")
	if err := os.WriteFile(vfile, []byte("apiVersion: capn.dev/v1alpha1\nkind: KubernetesVersions\nmetadata: {name: default}\nspec:\n  versions:\n  - {version: v1.34.0, classification: deprecated}\n  - {version: v1.34.1}\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	must(capn("versions", "-f", vfile), 0, "kubernetesversions/default created\n", "versions -f")
	must(capn("versions"), 0, "VERSION   CLASSIFICATION   EXPIRES\nv1.34.0   deprecated       <none>\nv1.34.1   supported        <none>\n", "versions")
	// --respect-window records the wish; b has no windows (always open),
	// so capn dev's maintenance service applies it and clears it.
	must(capn("upgrade", "b", "--version", "v1.35.0", "--respect-window"), 0,
		"cluster/b will upgrade from v1.34.0 to v1.35.0 in its next maintenance window (capn describe cluster b shows when)\n", "upgrade --respect-window")
	natstest.WaitFor(t, 30*time.Second, "the maintenance service to apply b's upgrade", func() bool {
		r := capn("get", "cluster/b", "-o", "go-template={{.spec.kubernetesVersion}} {{.spec.maintenance.pendingVersion}}")
		return r.stdout == "v1.35.0 <no value>" || r.stdout == "v1.35.0 "
	})
	if r := capn("upgrade", "b", "--version", "v1.35.0", "--respect-window", "--wait"); r.code != 2 || !strings.Contains(r.stderr, "--wait and --respect-window do not go together") {
		t.Fatalf("--wait --respect-window: exit %d\n%s", r.code, r.stderr)
	}

	// A machine by the name -o name printed, without --cluster.
	var machine string
	natstest.WaitFor(t, 30*time.Second, "a machine of cluster b", func() bool {
		r := capn("get", "machines", "--cluster", "b", "-o", "name")
		machine, _, _ = strings.Cut(r.stdout, "\n")
		return strings.HasPrefix(machine, "machine/b-")
	})
	must(capn("get", machine, "-o", "go-template={{.spec.cluster}}/{{.metadata.name}}"), 0, "b/"+strings.TrimPrefix(machine, "machine/"), "get "+machine)
	if r := capn("get", "machine/b-nope-0"); r.code != 1 || !strings.Contains(r.stderr, "machine b-nope-0 not found in any of the 3 clusters") {
		t.Fatalf("get a machine that is not there: exit %d\n%s", r.code, r.stderr)
	}

	// All or nothing: one name that is not there, and nothing is deleted.
	r := capn("delete", "cluster/a", "cluster/nope", "cluster/nope2")
	if r.code != 1 || r.stderr != "capn delete: no cluster nope, no cluster nope2: nothing deleted\n" || r.stdout != "" {
		t.Fatalf("delete with a missing name: exit %d\nstdout:\n%s\nstderr:\n%s", r.code, r.stdout, r.stderr)
	}
	must(capn("get", "cluster/a", "-o", "go-template={{.metadata.deletionTimestamp}}"), 0, "<no value>", "cluster a after a refused delete")

	// Several names from -o name, waiting for all; then -l.
	must(capn(append([]string{"delete", "--wait", "--timeout", "60s"}, names...)...), 0, "cluster/a deleted\ncluster/b deleted\n", "delete cluster/a cluster/b --wait")
	if r := capn("delete", "clusters", "-l", "env=dev"); r.code != 0 || r.stderr != "No resources found.\n" {
		t.Fatalf("delete -l that selects nothing: exit %d\n%s%s", r.code, r.stdout, r.stderr)
	}
	must(capn("delete", "clusters", "-l", "env=prod"), 0, "cluster/c deleting\n", "delete -l env=prod")
}
