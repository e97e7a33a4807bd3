package cli

import (
	"context"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/capn-dev/capn/gateway/client"
)

// clusterYAML is a small valid capn Cluster; replicas are md-0's.
func clusterYAML(name string, replicas int) string {
	return "apiVersion: capn.dev/v1alpha1\nkind: Cluster\nmetadata: {name: " + name + "}\nspec:\n" +
		"  kubernetesVersion: v1.34.0\n  controlPlane: {provider: sim, replicas: 1}\n" +
		"  workerPools:\n  - {name: md-0, provider: sim, replicas: " + strconv.Itoa(replicas) + "}\n"
}

// applyTest runs capn commands in-process against a real capn dev
// (gateway, NATS with JetStream, every service, the sim provider).
type applyTest struct {
	t   *testing.T
	dev *devRun
	dir string
}

func newApplyTest(t *testing.T) *applyTest {
	t.Helper()
	if testing.Short() {
		t.Skip("runs capn dev: skipped with -short")
	}
	dev := startDevWith(t, t.TempDir(), map[string]string{"XDG_CONFIG_HOME": t.TempDir()})
	return &applyTest{t: t, dev: dev, dir: t.TempDir()}
}

// run runs capn with args (stdin for -f -) and returns its exit code,
// stdout and stderr.
func (a *applyTest) run(stdin string, args ...string) (int, string, string) {
	a.t.Helper()
	e, stdout, stderr := testEnv(map[string]string{envServer: a.dev.gatewayURL, envToken: a.dev.token})
	e.stdin = strings.NewReader(stdin)
	code := run(a.t.Context(), e, args)
	return code, stdout.String(), stderr.String()
}

// file writes a file under the test's directory and returns its path.
func (a *applyTest) file(name, content string) string {
	a.t.Helper()
	p := filepath.Join(a.dir, name)
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		a.t.Fatal(err)
	}
	if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
		a.t.Fatal(err)
	}
	return p
}

// clusters lists the stored clusters' names.
func (a *applyTest) clusters() []string {
	a.t.Helper()
	c, err := client.New(a.dev.gatewayURL, client.WithToken(a.dev.token))
	if err != nil {
		a.t.Fatal(err)
	}
	cs, err := c.List(context.Background(), client.ListOptions{})
	if err != nil {
		a.t.Fatal(err)
	}
	var names []string
	for _, cl := range cs {
		names = append(names, cl.GetMetadata().GetName())
	}
	return names
}

func (a *applyTest) want(what string, code int, stdout, stderr string, wantCode int, wantStdout, wantStderr string) {
	a.t.Helper()
	if code != wantCode || stdout != wantStdout || stderr != wantStderr {
		a.t.Errorf("%s: exit %d (want %d)\nstdout:\n%s\nwant:\n%s\nstderr:\n%s\nwant:\n%s", what, code, wantCode, stdout, wantStdout, stderr, wantStderr)
	}
}

// TestApplyAllOrNothing: capn apply checks every document by server-side
// dry run before it applies any, names every refusal with its document
// and cluster, and writes nothing when one is refused; Cluster API
// manifests are refused with the capn import to run; -f takes
// directories, repeats and stdin; --dry-run=server writes nothing; an
// apply that fails after its dry run passed says what was applied.
func TestApplyAllOrNothing(t *testing.T) {
	a := newApplyTest(t)

	// good1, bad, good2, bad: nothing is created, both refusals named.
	mixed := a.file("mixed.yaml", clusterYAML("good1", 1)+"---\n"+clusterYAML("bad4", -5)+"---\n"+clusterYAML("good2", 1)+"---\n"+
		strings.Replace(clusterYAML("bad5", 1), "controlPlane: {provider: sim, replicas: 1}", "controlPlane: {provider: sim, replicas: 2}", 1))
	code, stdout, stderr := a.run("", "apply", "-f", mixed)
	a.want("good1, bad4, good2, bad5", code, stdout, stderr, 1, "",
		`capn apply: document 2 (cluster bad4): spec.workerPools[0].replicas: "-5": must be 0 or more`+"\n"+
			`capn apply: document 4 (cluster bad5): spec.controlPlane.replicas: "2": must be odd and between 1 and 7 (1, 3, 5 or 7): etcd needs an odd number of members for quorum`+"\n"+
			"capn apply: nothing was applied: 2 of 4 documents refused\n")
	if got := a.clusters(); len(got) != 0 {
		t.Fatalf("a refused file created %v", got)
	}

	// A Cluster API manifest: every such document is refused, before
	// anything is applied.
	capiFile := a.file("capi.yaml", "apiVersion: cluster.x-k8s.io/v1beta1\nkind: Cluster\nmetadata: {name: demo}\nspec: {}\n---\n"+
		"apiVersion: controlplane.cluster.x-k8s.io/v1beta1\nkind: KubeadmControlPlane\nmetadata: {name: demo-cp}\nspec: {replicas: 1}\n---\n"+
		clusterYAML("fine", 1))
	code, stdout, stderr = a.run("", "apply", "-f", capiFile)
	a.want("a Cluster API file", code, stdout, stderr, 1, "",
		"capn apply: document 1 (Cluster demo): this is a Cluster API manifest: run capn import -f "+capiFile+"\n"+
			"capn apply: document 2 (KubeadmControlPlane demo-cp): this is a Cluster API manifest: run capn import -f "+capiFile+"\n"+
			"capn apply: nothing was applied: 2 of 3 documents refused\n")
	onlyCAPI := a.file("capi-only.yaml", "apiVersion: infrastructure.cluster.x-k8s.io/v1beta1\nkind: DockerCluster\nmetadata: {name: demo}\n")
	code, stdout, stderr = a.run("", "apply", "-f", onlyCAPI)
	a.want("one Cluster API document", code, stdout, stderr, 1, "", "capn apply: this is a Cluster API manifest: run capn import -f "+onlyCAPI+"\n")
	code, stdout, stderr = a.run(strings.SplitAfter(string(must(os.ReadFile(capiFile))), "---\n")[0], "apply", "-f", "-")
	a.want("a Cluster API document on stdin", code, stdout, stderr, 1, "", "capn apply: this is a Cluster API manifest: run capn import -f -\n")

	// A directory (sorted, *.yaml, *.yml and *.json only, not its
	// subdirectories without -R), repeated -f and stdin, numbered across
	// the whole input; with several files a refusal names the file.
	dir := filepath.Join(a.dir, "clusters")
	a.file("clusters/b.yaml", clusterYAML("b", 1))
	a.file("clusters/a.yml", clusterYAML("a", 1))
	a.file("clusters/c.json", `{"apiVersion":"capn.dev/v1alpha1","kind":"Cluster","metadata":{"name":"c"},"spec":{"kubernetesVersion":"v1.34.0","controlPlane":{"provider":"sim","replicas":1}}}`)
	a.file("clusters/README.md", "not a manifest\n")
	a.file("clusters/sub/d.yaml", clusterYAML("d", 1))
	extra := a.file("extra.yaml", clusterYAML("e", 1)+"---\n"+clusterYAML("e2", -1))
	code, stdout, stderr = a.run(clusterYAML("f", 0)+"---\n"+clusterYAML("f2", -2), "apply", "-f", dir, "-f", extra, "-f", "-")
	a.want("a directory, a file and stdin with bad documents", code, stdout, stderr, 1, "",
		`capn apply: document 5 (cluster e2, `+extra+`): spec.workerPools[0].replicas: "-1": must be 0 or more`+"\n"+
			`capn apply: document 7 (cluster f2, standard input): spec.workerPools[0].replicas: "-2": must be 0 or more`+"\n"+
			"capn apply: nothing was applied: 2 of 7 documents refused\n")
	code, stdout, stderr = a.run("", "apply", "-f", dir, "--dry-run=server")
	a.want("--dry-run=server", code, stdout, stderr, 0,
		"cluster/a created (server dry run)\ncluster/b created (server dry run)\ncluster/c created (server dry run)\n", "")
	if got := a.clusters(); len(got) != 0 {
		t.Fatalf("--dry-run=server created %v", got)
	}
	code, stdout, stderr = a.run(clusterYAML("f", 1), "apply", "-R", "-f", dir, "--filename", a.file("extra2.yaml", clusterYAML("e", 1)), "-f", "-")
	a.want("-R, --filename and stdin", code, stdout, stderr, 0,
		"cluster/a created\ncluster/b created\ncluster/c created\ncluster/d created\ncluster/e created\ncluster/f created\n", "")
	code, stdout, stderr = a.run("", "apply", "-f", a.file("b2.yaml", clusterYAML("a", 1)+"---\n"+clusterYAML("b", 4)), "--dry-run=server")
	a.want("--dry-run=server of stored clusters", code, stdout, stderr, 0,
		"cluster/a unchanged (server dry run)\ncluster/b configured (server dry run)\n", "")

	// Declaring a cluster twice is refused: the dry runs could not vouch
	// for the second.
	code, stdout, stderr = a.run("", "apply", "-f", a.file("twice.yaml", clusterYAML("a", 2)+"---\n"+clusterYAML("a", 3)))
	a.want("a cluster declared twice", code, stdout, stderr, 1, "",
		"capn apply: document 2 (cluster a): cluster a is also in document 1 (cluster a): declare each cluster once\n"+
			"capn apply: nothing was applied: 1 of 2 documents refused\n")

	// The dry runs pass, then cluster b changes before it is applied: the
	// apply stops there and says what was and was not applied.
	c, err := client.New(a.dev.gatewayURL, client.WithToken(a.dev.token))
	if err != nil {
		t.Fatal(err)
	}
	b, err := c.Get(t.Context(), "b")
	if err != nil {
		t.Fatal(err)
	}
	withRV := strings.Replace(clusterYAML("b", 3), "metadata: {name: b}", "metadata: {name: b, resourceVersion: \""+b.GetMetadata().GetResourceVersion()+"\"}", 1)
	afterDryRun = func() {
		if _, err := c.Scale(context.Background(), "b", "md-0", 2); err != nil {
			t.Errorf("scale b in between: %v", err)
		}
	}
	t.Cleanup(func() { afterDryRun = func() {} })
	code, stdout, stderr = a.run("", "apply", "-f", a.file("race.yaml", clusterYAML("a", 2)+"---\n"+withRV+"---\n"+clusterYAML("c", 2)))
	afterDryRun = func() {}
	if code != 1 || stdout != "cluster/a configured\n" ||
		!strings.Contains(stderr, "capn apply: document 2 (cluster b): Conflict (409): resourceVersion ") ||
		!strings.HasSuffix(stderr, "capn apply: document 2 failed although every document passed the server-side dry run (a dry run is not a transaction: the cluster changed in between)\n"+
			"  applied:     document 1 (cluster a)\n  not applied: document 2 (cluster b), document 3 (cluster c)\n") {
		t.Errorf("an apply that fails after its dry run: exit %d\nstdout:\n%s\nstderr:\n%s", code, stdout, stderr)
	}

	// --dry-run's other values are usage errors.
	code, _, stderr = a.run("", "apply", "-f", dir, "--dry-run=client")
	if code != 2 || !strings.Contains(stderr, "capn apply: --dry-run=client is not supported: ") {
		t.Errorf("--dry-run=client: exit %d, stderr %q", code, stderr)
	}
	code, _, stderr = a.run("", "apply", "-f", dir, "--dry-run=maybe")
	if code != 2 || !strings.Contains(stderr, `capn apply: --dry-run: must be none, server or client, got "maybe"`) {
		t.Errorf("--dry-run=maybe: exit %d, stderr %q", code, stderr)
	}
	code, _, stderr = a.run("", "apply", "-f", a.file("empty/notes.txt", "# nothing here\n"))
	if code != 1 || !strings.Contains(stderr, "no manifest in it") {
		t.Errorf("a file with no manifest: exit %d, stderr %q", code, stderr)
	}
	code, _, stderr = a.run("", "apply", "-f", filepath.Join(a.dir, "empty"))
	if code != 1 || !strings.Contains(stderr, "empty: a directory with no *.yaml, *.yml or *.json file in it (-R reads its subdirectories too)") {
		t.Errorf("an empty directory: exit %d, stderr %q", code, stderr)
	}
}

func must[T any](v T, err error) T {
	if err != nil {
		panic(err)
	}
	return v
}
