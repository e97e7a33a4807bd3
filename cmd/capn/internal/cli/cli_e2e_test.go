package cli

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/capn-dev/capn/cmd/capn/internal/dev"
	"github.com/capn-dev/capn/events/natstest"
)

// buildCapn builds the real capn binary into a temporary directory.
func buildCapn(t *testing.T) string {
	t.Helper()
	bin := filepath.Join(t.TempDir(), "capn")
	args := []string{"build", "-o", bin}
	if raceEnabled {
		args = append(args, "-race")
	}
	cmd := exec.Command("go", append(args, "../..")...) // cmd/capn
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	return bin
}

// cliResult is one run of the binary.
type cliResult struct {
	code           int
	stdout, stderr string
}

// TestCLIEndToEnd runs the real capn binary against an in-process capn dev
// (gateway, planner, machine-manager, bootstrapper, sim provider) through a
// cluster's life: apply --wait, get, describe, scale, upgrade --wait,
// events, kubeconfig, pause/resume, a --wait that times out, and delete
// --wait. The binary finds the gateway through CAPN_CONFIG, the client
// config capn dev wrote.
func TestCLIEndToEnd(t *testing.T) {
	if testing.Short() {
		t.Skip("end-to-end test: skipped with -short")
	}
	start := time.Now()
	bin := buildCapn(t)
	t.Logf("built the binary in %s", time.Since(start).Round(time.Millisecond))
	defer func() { t.Logf("the whole test took %s", time.Since(start).Round(time.Millisecond)) }()
	dataDir, home := t.TempDir(), t.TempDir()
	startDevWith(t, dataDir, map[string]string{"XDG_CONFIG_HOME": filepath.Join(home, "dev-xdg")})
	env := []string{"PATH=" + os.Getenv("PATH"), "HOME=" + home, "XDG_CONFIG_HOME=" + filepath.Join(home, "xdg"),
		"CAPN_CONFIG=" + filepath.Join(dataDir, dev.ClientConfigFile), "TZ=UTC",
		"GORACE=atexit_sleep_ms=0"} // a -race binary otherwise sleeps 1s at every exit

	capn := func(args ...string) cliResult {
		t.Helper()
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		defer cancel()
		cmd := exec.CommandContext(ctx, bin, args...)
		cmd.Env = env
		var stdout, stderr bytes.Buffer
		cmd.Stdout, cmd.Stderr = &stdout, &stderr
		began := time.Now()
		err := cmd.Run()
		t.Logf("capn %s: %s", strings.Join(args, " "), time.Since(began).Round(time.Millisecond))
		var ee *exec.ExitError
		code := 0
		switch {
		case errors.As(err, &ee):
			code = ee.ExitCode()
		case err != nil:
			t.Fatalf("capn %s: %v", strings.Join(args, " "), err)
		}
		return cliResult{code, stdout.String(), stderr.String()}
	}
	expect := func(r cliResult, code int, stdout, stderr []string, what string) {
		t.Helper()
		ok := r.code == code
		for _, s := range stdout {
			ok = ok && strings.Contains(r.stdout, s)
		}
		for _, s := range stderr {
			ok = ok && strings.Contains(r.stderr, s)
		}
		if !ok {
			t.Fatalf("%s: exit %d (want %d)\nstdout:\n%s\nstderr:\n%s\nwant stdout with %q, stderr with %q", what, r.code, code, r.stdout, r.stderr, stdout, stderr)
		}
	}
	type item struct {
		APIVersion, Kind string
		Metadata         struct{ Name string }
		Spec             struct {
			Paused   bool
			Version  string
			Pool     string
			Replicas int
		}
		Status struct{ Phase string }
	}
	type list struct {
		APIVersion, Kind string
		Items            []item
	}
	getList := func(args ...string) list {
		t.Helper()
		r := capn(append([]string{"get"}, append(args, "-o", "json")...)...)
		expect(r, 0, nil, nil, "get -o json")
		var l list
		if err := json.Unmarshal([]byte(r.stdout), &l); err != nil {
			t.Fatalf("get %s -o json: %v\n%s", strings.Join(args, " "), err, r.stdout)
		}
		return l
	}

	// Create and wait: progress on stderr, the outcome on stdout.
	r := capn("apply", "-f", "../../../../examples/demo-cluster.yaml", "--wait", "--timeout", "75s")
	expect(r, 0, []string{"cluster/demo created\n"}, []string{"] demo: Provisioning, 0 of 8 machines available: control plane: ", "cluster/demo is ready after"}, "apply --wait")
	expect(capn("apply", "-f", "../../../../examples/demo-cluster.yaml"), 0, []string{"cluster/demo unchanged\n"}, nil, "apply again")

	l := getList("clusters")
	if l.APIVersion != "capn.dev/v1alpha1" || l.Kind != "ClusterList" || len(l.Items) != 1 ||
		l.Items[0].Kind != "Cluster" || l.Items[0].Metadata.Name != "demo" || l.Items[0].Status.Phase != "Ready" {
		t.Fatalf("get clusters -o json: %+v", l)
	}
	ml := getList("machines", "--cluster", "demo")
	if ml.Kind != "MachineList" || len(ml.Items) != 8 {
		t.Fatalf("get machines -o json: %d items in a %s", len(ml.Items), ml.Kind)
	}
	for _, m := range ml.Items {
		if m.Kind != "Machine" || m.Status.Phase != "Running" {
			t.Errorf("machine %s: %s %s", m.Metadata.Name, m.Kind, m.Status.Phase)
		}
	}
	expect(capn("get", "clusters"), 0, []string{"NAME   PHASE   VERSION   CONTROL PLANE   WORKERS   AGE\ndemo   Ready   v1.33.4   3/3             5/5"}, nil, "get clusters")
	expect(capn("describe", "cluster", "demo"), 0, []string{"Cluster/demo ", "├─ControlPlane ", "│ ├─Machine/demo-control-plane-", "└─Workers", "  ├─Pool/md-0 ", "    └─Machine/demo-md-1-", "Conditions:\n"}, nil, "describe")

	// Scale, a refused scale, then upgrade (which waits for the scale too).
	expect(capn("scale", "demo", "--pool", "md-1", "--replicas", "3"), 0, []string{"cluster/demo scaled: pool md-1 to 3 replicas\n"}, nil, "scale")
	expect(capn("scale", "demo", "--pool", "nope", "--replicas", "1"), 1, nil, []string{"capn scale: ", "(422)", "\n  pool: \"nope\": "}, "scale a pool that is not there")
	r = capn("upgrade", "demo", "--version", "v1.34.0", "--wait", "--timeout", "80s")
	expect(r, 0, []string{"cluster/demo upgrading to v1.34.0: the control plane, then pools md-0, md-1\n"}, []string{"] demo: ", "cluster/demo is ready after"}, "upgrade --wait")
	ml = getList("machines", "--cluster", "demo")
	if len(ml.Items) != 9 {
		t.Errorf("%d machines after scaling md-1 to 3, want 9", len(ml.Items))
	}
	for _, m := range ml.Items {
		if m.Spec.Version != "v1.34.0" || m.Status.Phase != "Running" {
			t.Errorf("after the upgrade, machine %s is %s %s", m.Metadata.Name, m.Spec.Version, m.Status.Phase)
		}
	}

	expect(capn("events", "demo"), 0, []string{"TIME       OBJECT", "cluster/demo"}, nil, "events")
	expect(capn("kubeconfig", "demo"), 0, []string{"apiVersion: v1", "clusters:"}, nil, "kubeconfig")
	expect(capn("pause", "demo"), 0, []string{"cluster/demo paused\n"}, nil, "pause")
	if l := getList("clusters"); !l.Items[0].Spec.Paused {
		t.Error("spec.paused is not set after capn pause")
	}
	expect(capn("resume", "demo"), 0, []string{"cluster/demo resumed\n"}, nil, "resume")
	expect(capn("hibernate", "demo", "--wait"), 0, []string{"cluster/demo hibernating\n"}, []string{"cluster/demo is hibernated after "}, "hibernate --wait")
	for _, m := range getList("machines", "--cluster", "demo").Items {
		if m.Status.Phase != "Stopped" {
			t.Errorf("after capn hibernate --wait, machine %s is %s, want Stopped", m.Metadata.Name, m.Status.Phase)
		}
	}
	expect(capn("wake", "demo", "--wait"), 0, []string{"cluster/demo waking\n"}, []string{"] demo: Waking, ", "cluster/demo is ready after "}, "wake --wait")
	for _, m := range getList("machines", "--cluster", "demo").Items {
		if m.Status.Phase != "Running" {
			t.Errorf("after capn wake --wait, machine %s is %s, want Running", m.Metadata.Name, m.Status.Phase)
		}
	}
	// The timeline says what happened: the hibernation and the wake, and
	// each machine's transitions with a reason and a message.
	expect(capn("events", "demo"), 0, []string{
		" Hibernated ", "hibernated: 9 machines stopped, their disks kept; capn wake demo starts them\n",
		" Waking ", "waking: starting 9 stopped machines\n",
		" Provisioning ", " bootstrapped: its bootstrap data is ready, provider sim is creating it\n", " Running ", " running: node ",
		" Stopped ", " stopped for hibernation, its disk kept\n", " Started ", " started again after hibernation: node ",
	}, nil, "events after hibernate and wake")

	// A wait that runs out of time says what blocks.
	slow := filepath.Join(t.TempDir(), "slow.yaml")
	if err := os.WriteFile(slow, []byte("apiVersion: capn.dev/v1alpha1\nkind: Cluster\nmetadata: {name: slow}\nspec:\n  kubernetesVersion: v1.34.0\n  controlPlane: {provider: sim, replicas: 1}\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	expect(capn("apply", "-f", slow, "--wait", "--timeout", "500ms"), 1, []string{"cluster/slow created\n"},
		[]string{"capn apply: timed out after 500ms waiting for cluster slow to be ready\n  state:    ", "\n  blocking: "}, "apply --wait that times out")

	// A windows pool (sim runs any os): each machine records its os, which
	// -o wide shows; a windows control plane is refused at the edge.
	win := filepath.Join(t.TempDir(), "win.yaml")
	winCluster := "apiVersion: capn.dev/v1alpha1\nkind: Cluster\nmetadata: {name: win}\nspec:\n  kubernetesVersion: v1.34.0\n" +
		"  controlPlane: {provider: sim, replicas: 1}\n  workerPools:\n  - {name: win, provider: sim, replicas: 1, os: windows}\n"
	if err := os.WriteFile(win, []byte(winCluster), 0o644); err != nil {
		t.Fatal(err)
	}
	expect(capn("apply", "-f", win, "--wait", "--timeout", "60s"), 0, []string{"cluster/win created\n"}, []string{"cluster/win is ready after"}, "apply a windows pool")
	r = capn("get", "machines", "--cluster", "win", "-o", "wide")
	expect(r, 0, []string{"   OS        PROVIDER ID"}, nil, "get machines -o wide")
	for _, line := range strings.Split(strings.TrimSpace(r.stdout), "\n")[1:] {
		want := " linux "
		if strings.HasPrefix(line, "win-win-") {
			want = " windows "
		}
		if !strings.Contains(line, want) {
			t.Errorf("get machines -o wide: %q lacks %q", line, want)
		}
	}
	if err := os.WriteFile(win, []byte(strings.Replace(winCluster, "replicas: 1}\n  workerPools", "replicas: 1, os: windows}\n  workerPools", 1)), 0o644); err != nil {
		t.Fatal(err)
	}
	expect(capn("apply", "-f", win), 1, nil, []string{`spec.controlPlane.os: "windows": the control plane runs on linux only`}, "a windows control plane")
	expect(capn("delete", "cluster", "win", "--wait", "--timeout", "60s"), 0, []string{"cluster/win deleted\n"}, nil, "delete the windows cluster")

	// Delete both; the CLI waits until they are gone, and its last
	// progress line is the deletion's last step.
	r = capn("delete", "cluster", "demo", "--wait", "--timeout", "60s")
	expect(r, 0, []string{"cluster/demo deleted\n"}, []string{"] demo: Deleting, ", "cluster/demo is gone after"}, "delete --wait")
	if lines := strings.Split(strings.TrimSpace(r.stderr), "\n"); len(lines) < 2 || strings.Contains(lines[len(lines)-2], "waiting for capn to start deleting") {
		t.Errorf("delete --wait ended on %q, want the deletion's last step", lines[len(lines)-2])
	}
	// A paused cluster's deletion waits for a resume, and the wait says so.
	expect(capn("pause", "slow"), 0, []string{"cluster/slow paused\n"}, nil, "pause slow")
	expect(capn("delete", "cluster", "slow", "--wait", "--timeout", "1s"), 1, nil, []string{"capn delete: cluster slow is paused: nothing happens until capn resume slow\n",
		"] slow: Paused, ", ": the cluster is paused: its deletion waits for capn resume slow\n", "timed out after 1s waiting for cluster slow to be deleted"}, "delete --wait of a paused cluster")
	expect(capn("resume", "slow"), 0, []string{"cluster/slow resumed\n"}, nil, "resume slow")
	natstest.WaitFor(t, 60*time.Second, "cluster slow deleted once resumed", func() bool {
		return strings.Contains(capn("get", "cluster", "slow").stderr, "Not found (404)")
	})
	expect(capn("get", "cluster", "demo"), 1, nil, []string{"capn get: Not found (404): "}, "get a deleted cluster")
	expect(capn("get", "clusters"), 0, nil, []string{"No resources found."}, "get clusters when there are none")

	// Usage mistakes exit 2; a token the gateway does not know, 1.
	expect(capn("get", "clusters", "--bogus"), 2, nil, []string{"capn get: unknown flag --bogus\nSee 'capn get -h' for help.\n"}, "a bad flag")
	expect(capn("delete", "demo"), 2, nil, []string{`capn delete: cannot delete "demo": capn deletes clusters (capn delete cluster demo)`}, "delete without the kind")
	expect(capn("get", "clusters", "--token", "wrong"), 1, nil, []string{"(401)", "the token (from --token) is not one the gateway at http://127.0.0.1:"}, "a wrong token")
}
