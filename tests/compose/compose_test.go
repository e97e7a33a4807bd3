// Package compose tests docker-compose.yaml: a static check that it runs
// every component as its own rendered user (no Docker needed), and the
// end-to-end test that builds the images, brings the whole deployment up
// (3 NATS nodes, two replicas of each core service), applies a cluster
// through the gateway, stops one NATS node and one replica of each service
// in the middle of a rollout, and still reaches Ready with no duplicate
// machine. The end-to-end test needs Docker and docker-compose; without
// them it is skipped with a message, unless CAPN_REQUIRE_DOCKER=1.
package compose

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"sigs.k8s.io/yaml"

	"github.com/capn-dev/capn/deploy/natsconfig"
	"github.com/capn-dev/capn/gateway/client"
	"github.com/capn-dev/capn/internal/testkit"
	capnv1 "github.com/capn-dev/capn/schemas/capn/v1alpha1"
)

// root is the repository.
var root = func() string {
	d, err := filepath.Abs(filepath.Join("..", ".."))
	if err != nil {
		panic(err)
	}
	return d
}()

// composeFile is docker-compose.yaml as data.
type composeFile struct {
	Version  string                    `json:"version"`
	Services map[string]composeService `json:"services"`
	Volumes  map[string]any            `json:"volumes"`
}

type composeService struct {
	Image       string            `json:"image"`
	Command     []string          `json:"command"`
	User        string            `json:"user"`
	Scale       int               `json:"scale"`
	EnvFile     string            `json:"env_file"`
	Environment map[string]string `json:"environment"`
	Volumes     []string          `json:"volumes"`
	Ports       []string          `json:"ports"`
	ReadOnly    bool              `json:"read_only"`
	DependsOn   any               `json:"depends_on"`
}

func loadCompose(t *testing.T) composeFile {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(root, "docker-compose.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	var f composeFile
	if err := yaml.Unmarshal(b, &f); err != nil {
		t.Fatalf("docker-compose.yaml: %v", err)
	}
	return f
}

const deployDir = "${CAPN_DEPLOY_DIR:-./deploy/local}"

// The docker provider's service mounts the render's machines directory
// too, at machinesDir: its machines' TLS transport comes from there (no
// NATS credential: each machine logs in as itself).
var (
	dockerProvider = natsconfig.ProviderUser("docker")
	machinesDir    = "/etc/capn-node"
	machinesMount  = deployDir + "/machines:" + machinesDir + ":ro"
)

// serviceOf is the compose service of a user: the same name.
func serviceOf(user string) string { return user }

// TestComposeMatchesTheRender checks docker-compose.yaml against the
// deployment capn-nats-config renders: every user runs as a service that
// mounts its own directory only and reads its own env file (the
// bootstrapper's names the auth callout's issuer seed in it); each node
// mounts its own directory; core services run two replicas; the gateway
// publishes on 127.0.0.1 only; images are local; the docker provider
// hands its machines the machines' transport and no credential.
func TestComposeMatchesTheRender(t *testing.T) {
	f := loadCompose(t)
	if f.Version != "2.4" {
		t.Errorf("version %q: want 2.4 (docker-compose v1)", f.Version)
	}
	d := natsconfig.Compose()
	for _, u := range d.Users() {
		name := serviceOf(u.Name)
		s, ok := f.Services[name]
		if !ok {
			t.Errorf("user %s has no service %s", u.Name, name)
			continue
		}
		want := deployDir + "/users/" + u.Name + ":/etc/capn:ro"
		if !slices.Contains(s.Volumes, want) {
			t.Errorf("service %s does not mount %s: %v", name, want, s.Volumes)
		}
		for _, v := range s.Volumes {
			if strings.Contains(v, "/users/") && v != want {
				t.Errorf("service %s mounts another user's directory: %s", name, v)
			}
		}
		if s.EnvFile != deployDir+"/users/"+u.Name+"/env" {
			t.Errorf("service %s reads env file %q, not its user's", name, s.EnvFile)
		}
		if !strings.HasPrefix(s.Image, "capn-") {
			t.Errorf("service %s: image %q is not a local capn image", name, s.Image)
		}
	}
	for _, name := range []string{natsconfig.ClusterPlanner, natsconfig.MachineManager, natsconfig.Bootstrapper, natsconfig.HealthWatcher, natsconfig.Remediator, natsconfig.AddonManager} {
		if f.Services[name].Scale != 2 {
			t.Errorf("service %s runs %d replicas, want 2", name, f.Services[name].Scale)
		}
	}
	for _, s := range d.Servers {
		svc, ok := f.Services[s.Name]
		if !ok {
			t.Errorf("node %s has no service", s.Name)
			continue
		}
		if want := deployDir + "/nats/" + s.Name + ":" + s.ConfigDir + ":ro"; !slices.Contains(svc.Volumes, want) {
			t.Errorf("node %s does not mount %s: %v", s.Name, want, svc.Volumes)
		}
		if want := s.Name + ":" + s.StoreDir; !slices.Contains(svc.Volumes, want) {
			t.Errorf("node %s does not keep JetStream in volume %s", s.Name, want)
		}
	}
	for name, s := range f.Services {
		for _, p := range s.Ports {
			if !strings.HasPrefix(p, "127.0.0.1:") {
				t.Errorf("service %s publishes %s beyond 127.0.0.1", name, p)
			}
		}
		if !s.ReadOnly {
			t.Errorf("service %s has a writable root file system", name)
		}
	}
	// The docker provider hands its machines the rendered transport: TLS
	// files, no credential and no inbox prefix (capn-node logs in as its
	// machine and uses the machine's own).
	dp := f.Services[dockerProvider]
	if !slices.Contains(dp.Volumes, machinesMount) {
		t.Errorf("service %s does not mount the machines' directory %s: %v", dockerProvider, machinesMount, dp.Volumes)
	}
	for k, v := range map[string]string{
		"CAPN_DOCKER_NODE_NATS_TLS_CA":   machinesDir + "/" + natsconfig.UserCAFile,
		"CAPN_DOCKER_NODE_NATS_TLS_CERT": machinesDir + "/" + natsconfig.UserCertFile,
		"CAPN_DOCKER_NODE_NATS_TLS_KEY":  machinesDir + "/" + natsconfig.UserKeyFile,
	} {
		if got := dp.Environment[k]; got != v {
			t.Errorf("service %s: %s=%q, want %q", dockerProvider, k, got, v)
		}
	}
	for _, k := range []string{"CAPN_DOCKER_NODE_NATS_NKEY", "CAPN_DOCKER_NODE_NATS_CREDS", "CAPN_DOCKER_NODE_NATS_INBOX_PREFIX"} {
		if v, ok := dp.Environment[k]; ok {
			t.Errorf("service %s: %s=%q: machines log in as themselves", dockerProvider, k, v)
		}
	}
	// The bootstrapper answers the auth callout with the issuer seed of
	// its own directory (its env file names it; nothing overrides it).
	bs := f.Services[natsconfig.Bootstrapper]
	for k := range bs.Environment {
		if strings.HasPrefix(k, "CAPN_AUTH_CALLOUT_") || strings.HasPrefix(k, "CAPN_NATS_") {
			t.Errorf("service %s overrides %s of its rendered env file", natsconfig.Bootstrapper, k)
		}
	}
	env := d.Env(natsconfig.Bootstrapper, natsconfig.Layout{})
	if !strings.Contains(env, "CAPN_AUTH_CALLOUT_ISSUER_SEED_FILE=/etc/capn/"+natsconfig.CalloutIssuerSeedFile+"\n") {
		t.Errorf("the bootstrapper's env file does not name the issuer seed in its mount /etc/capn:\n%s", env)
	}
	if ports := f.Services[natsconfig.Gateway].Ports; len(ports) != 1 || !strings.HasSuffix(ports[0], ":8080") {
		t.Errorf("gateway ports %v: want 127.0.0.1:<port>:8080", ports)
	}
}

// e2e is one compose project under test.
type e2e struct {
	t       *testing.T
	project string
	env     string // the --env-file
	dir     string // the render
	port    int
}

func (e *e2e) compose(ctx context.Context, args ...string) (string, error) {
	args = append([]string{"-p", e.project, "--env-file", e.env, "-f", filepath.Join(root, "docker-compose.yaml")}, args...)
	cmd := exec.CommandContext(ctx, "docker-compose", args...)
	cmd.Dir = root
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	err := cmd.Run()
	return out.String(), err
}

func (e *e2e) must(ctx context.Context, args ...string) string {
	e.t.Helper()
	out, err := e.compose(ctx, args...)
	if err != nil {
		e.t.Fatalf("docker-compose %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	return out
}

// container is the name docker-compose v1 gives replica n of service.
func (e *e2e) container(service string, n int) string {
	return fmt.Sprintf("%s_%s_%d", e.project, service, n)
}

func requireDocker(t *testing.T) {
	t.Helper()
	why := ""
	if _, err := exec.LookPath("docker-compose"); err != nil {
		why = "docker-compose is not installed"
	} else if err := exec.Command("docker", "info").Run(); err != nil {
		why = "the Docker daemon is not reachable (docker info: " + err.Error() + ")"
	}
	if why == "" {
		return
	}
	if os.Getenv("CAPN_REQUIRE_DOCKER") == "1" {
		t.Fatalf("CAPN_REQUIRE_DOCKER=1 but %s", why)
	}
	t.Skipf("docker-compose end-to-end test skipped: %s (set CAPN_REQUIRE_DOCKER=1 to fail instead)", why)
}

const manifest = `apiVersion: capn.dev/v1alpha1
kind: Cluster
metadata:
  name: e2e
spec:
  kubernetesVersion: v1.33.4
  controlPlane:
    provider: sim
    replicas: 3
  workerPools:
  - name: md-0
    provider: sim
    replicas: 3
    strategy: {type: RollingUpdate, maxSurge: "1", maxUnavailable: "0"}
`

const newVersion = "v1.34.2"

// TestComposeSurvivesNodeAndReplicaLoss is the end-to-end test of
// docker-compose.yaml. It runs with CAPN_E2E_COMPOSE=1 (make e2e-compose
// sets it), so that `go test ./...` does not build images and start a
// deployment on every run.
func TestComposeSurvivesNodeAndReplicaLoss(t *testing.T) {
	if os.Getenv("CAPN_E2E_COMPOSE") != "1" {
		t.Skip("docker-compose end-to-end test: run it with make e2e-compose (CAPN_E2E_COMPOSE=1)")
	}
	requireDocker(t)
	start := time.Now()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Minute)
	defer cancel()

	// Images: built (or found up to date) by the make target's script.
	tag := os.Getenv("CAPN_IMAGE_TAG")
	if tag == "" {
		tag = "latest"
	}
	if os.Getenv("CAPN_E2E_SKIP_BUILD") != "1" {
		cmd := exec.CommandContext(ctx, filepath.Join(root, "hack", "images.sh"))
		cmd.Dir = root
		cmd.Env = append(os.Environ(), "CAPN_IMAGE_TAG="+tag)
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("hack/images.sh: %v\n%s", err, out)
		}
		t.Logf("images built or up to date in %s", time.Since(start).Round(time.Second))
	}

	// A render of its own, a project of its own, a free port.
	dir := t.TempDir()
	e := &e2e{t: t, project: fmt.Sprintf("capne2e%d", os.Getpid()), dir: filepath.Join(dir, "deploy"), env: filepath.Join(dir, "compose.env")}
	render := exec.CommandContext(ctx, "go", "run", "./cmd/capn-nats-config", "render", "--out", e.dir)
	render.Dir = root
	if out, err := render.CombinedOutput(); err != nil {
		t.Fatalf("render: %v\n%s", err, out)
	}
	e.port = freePort(t)
	env := fmt.Sprintf("CAPN_DEPLOY_DIR=%s\nCAPN_IMAGE_TAG=%s\nCAPN_GATEWAY_PORT=%d\nCAPN_DOCKER_STATE_DIR=%s\nCAPN_DOCKER_DEPLOYMENT=%s\n",
		e.dir, tag, e.port, filepath.Join(dir, "docker-state"), e.project)
	if err := os.WriteFile(e.env, []byte(env), 0o644); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		// After compose down (cleanups run last first): whatever the docker
		// provider left of a failed run, by its deployment label.
		for _, what := range [][]string{{"ps", "-aq"}, {"network", "ls", "-q"}} {
			out, _ := exec.Command("docker", append(what, "--filter", "label=capn.dev/deployment="+e.project)...).Output()
			if ids := strings.Fields(string(out)); len(ids) > 0 {
				rm := []string{"rm", "-f"}
				if what[0] == "network" {
					rm = []string{"network", "rm"}
				}
				_ = exec.Command("docker", append(rm, ids...)...).Run()
			}
		}
	})
	t.Cleanup(func() {
		if t.Failed() {
			out, _ := e.compose(context.Background(), "logs", "--no-color", "--tail", "40")
			t.Logf("docker-compose logs (last 40 lines of each):\n%s", out)
		}
		out, err := e.compose(context.Background(), "down", "-v", "--remove-orphans", "--timeout", "5")
		if err != nil {
			t.Errorf("docker-compose down -v: %v\n%s", err, out)
		}
	})

	step := time.Now()
	e.must(ctx, "up", "-d")
	t.Logf("docker-compose up -d (3 NATS nodes, init job, 2 replicas of 5 services, gateway, 2 providers) in %s", time.Since(step).Round(time.Second))

	token, err := os.ReadFile(filepath.Join(e.dir, "gateway-admin.token"))
	if err != nil {
		t.Fatal(err)
	}
	cl, err := client.New(fmt.Sprintf("http://127.0.0.1:%d", e.port), client.WithToken(strings.TrimSpace(string(token))))
	if err != nil {
		t.Fatal(err)
	}
	step = time.Now()
	e.retry(ctx, 2*time.Minute, "apply through the gateway", func() error {
		_, _, err := cl.Apply(ctx, []byte(manifest))
		if err != nil && time.Since(step) > 20*time.Second {
			e.checkInboxes(ctx)
		}
		return err
	})
	rec := e.waitReady(ctx, cl, "", 3*time.Minute, nil)
	t.Logf("create: 6 machines Ready in %s", time.Since(step).Round(time.Second))

	step = time.Now()
	if _, err := cl.Upgrade(ctx, "e2e", newVersion); err != nil {
		t.Fatal(err)
	}
	testkit.WaitFor(t, 2*time.Minute, "the upgrade under way", func() bool {
		ms, err := cl.Machines(ctx, "e2e", client.ListOptions{})
		return err == nil && slices.ContainsFunc(ms, func(m *capnv1.Machine) bool { return m.GetSpec().GetVersion() == newVersion })
	})
	stopped := []string{e.container("nats-1", 1)}
	for _, s := range []string{"cluster-planner", "machine-manager", "bootstrapper", "health-watcher", "remediator"} {
		stopped = append(stopped, e.container(s, 1))
	}
	out, err := exec.CommandContext(ctx, "docker", append([]string{"stop", "--time", "2"}, stopped...)...).CombinedOutput()
	if err != nil {
		t.Fatalf("docker stop: %v\n%s", err, out)
	}
	t.Logf("stopped %s mid-rollout, %s after the upgrade began", strings.Join(stopped, ", "), time.Since(step).Round(time.Millisecond))

	rec = e.waitReady(ctx, cl, newVersion, 5*time.Minute, rec)
	t.Logf("upgrade with a NATS node and a replica of each service lost: Ready in %s", time.Since(step).Round(time.Second))
	e.checkMachines(ctx, cl, rec)

	step = time.Now()
	e.dockerCluster(ctx, cl)
	t.Logf("docker provider: %s (1 control plane, 1 worker: capn-node containers, each logged in as its machine, TLS) Ready, deleted, nothing left, in %s",
		dockerCluster, time.Since(step).Round(time.Second))
	e.checkNoViolations(ctx)
	t.Logf("total %s", time.Since(start).Round(time.Second))
}

// dockerCluster is the second cluster: on the docker provider, which
// runs in its container.
const dockerCluster = "e2e-docker"

const dockerManifest = `apiVersion: capn.dev/v1alpha1
kind: Cluster
metadata:
  name: ` + dockerCluster + `
spec:
  kubernetesVersion: v1.33.4
  controlPlane:
    provider: docker
    replicas: 1
  workerPools:
  - name: md-0
    provider: docker
    replicas: 1
`

// dockerCluster applies a cluster on the docker provider and waits until
// it is Ready: the provider checked its endpoint container from its own
// container, and both machines' capn-node connected through the relay to
// the TLS cluster, each logged in as its machine by the bootstrapper's
// auth callout (they fetch their bootstrap data and heartbeat; nothing
// else makes a machine Running). Its endpoint answers
// on 127.0.0.1 of the host. Then it deletes the cluster and waits until
// no container or network of it is left on the daemon.
func (e *e2e) dockerCluster(ctx context.Context, cl *client.Client) {
	t := e.t
	t.Helper()
	e.retry(ctx, time.Minute, "apply "+dockerCluster, func() error {
		_, _, err := cl.Apply(ctx, []byte(dockerManifest))
		return err
	})
	ok := false
	defer func() {
		if !ok {
			e.logDockerMachines(ctx)
		}
	}()
	e.waitClusterReady(ctx, cl, dockerCluster, "", 4*time.Minute, nil)
	ms, err := cl.Machines(ctx, dockerCluster, client.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if len(ms) != 2 {
		t.Errorf("%s has %d machines, want 2", dockerCluster, len(ms))
	}
	for _, m := range ms {
		if p, id := m.GetStatus().GetPhase(), m.GetStatus().GetProviderId(); p != "Running" || !strings.HasPrefix(id, "docker://") {
			t.Errorf("machine %s: %s, provider id %q; want Running on a docker:// container", m.GetMetadata().GetName(), p, id)
		}
	}
	c, err := cl.Get(ctx, dockerCluster)
	if err != nil {
		t.Fatal(err)
	}
	ep := c.GetStatus().GetControlPlaneEndpoint()
	if ep.GetHost() != "127.0.0.1" || ep.GetPort() == 0 {
		t.Fatalf("%s endpoint %v: want 127.0.0.1:<port>", dockerCluster, ep)
	}
	hc := &http.Client{Timeout: 5 * time.Second}
	if resp, err := hc.Get(fmt.Sprintf("http://127.0.0.1:%d/healthz", ep.GetPort())); err != nil || resp.StatusCode != http.StatusOK {
		t.Errorf("the endpoint on 127.0.0.1:%d of the host: %v %v", ep.GetPort(), err, resp)
	} else {
		resp.Body.Close()
	}
	for _, id := range e.dockerObjects(ctx, "ps", "-aq", "--filter", "label=capn.dev/role=machine") {
		logs, _ := exec.CommandContext(ctx, "docker", "logs", id).CombinedOutput()
		if strings.Contains(string(logs), "permission_violation") || strings.Contains(string(logs), "Permissions Violation") {
			t.Errorf("machine container %s was denied:\n%s", id, logs)
		}
	}
	if t.Failed() {
		return
	}

	step := time.Now()
	if _, err := cl.Delete(ctx, dockerCluster); err != nil {
		t.Fatal(err)
	}
	e.retry(ctx, 3*time.Minute, "delete "+dockerCluster, func() error {
		_, err := cl.Get(ctx, dockerCluster)
		if client.IsNotFound(err) {
			return nil
		}
		if err == nil {
			return fmt.Errorf("still there")
		}
		return err
	})
	t.Logf("%s deleted in %s", dockerCluster, time.Since(step).Round(time.Second))
	// The cluster record goes last, after the provider answered the infra
	// delete: nothing may be left by now.
	var left []string
	for _, what := range [][]string{{"ps", "-a", "--format", "container {{.Names}} ({{.Status}})"}, {"network", "ls", "--format", "network {{.Name}}"}} {
		left = append(left, e.dockerObjects(ctx, what...)...)
	}
	if len(left) > 0 {
		t.Errorf("deleting %s left behind: %v", dockerCluster, left)
		return
	}
	ok = true
}

// dockerObjects runs docker <args> filtered to the docker cluster's
// objects (the provider's labels) and returns its output lines.
func (e *e2e) dockerObjects(ctx context.Context, args ...string) []string {
	e.t.Helper()
	args = append(args, "--filter", "label=capn.dev/deployment="+e.project, "--filter", "label=capn.dev/cluster="+dockerCluster)
	out, err := exec.CommandContext(ctx, "docker", args...).Output()
	if err != nil {
		e.t.Fatalf("docker %s: %v", strings.Join(args, " "), err)
	}
	var lines []string
	for _, l := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		if l != "" {
			lines = append(lines, l)
		}
	}
	return lines
}

// logDockerMachines logs the docker provider's and its containers' logs.
func (e *e2e) logDockerMachines(ctx context.Context) {
	out, _ := e.compose(context.Background(), "logs", "--no-color", "--tail", "60", dockerProvider)
	e.t.Logf("provider-docker logs:\n%s", out)
	for _, id := range e.dockerObjects(ctx, "ps", "-a", "--format", "{{.Names}}") {
		logs, _ := exec.Command("docker", "logs", "--tail", "30", id).CombinedOutput()
		e.t.Logf("container %s:\n%s", id, logs)
	}
}

func (e *e2e) retry(ctx context.Context, timeout time.Duration, what string, f func() error) {
	e.t.Helper()
	if err := testkit.Poll(timeout, 500*time.Millisecond, func() error {
		err := f()
		if err != nil && ctx.Err() != nil {
			e.t.Fatalf("%s: %v", what, err)
		}
		return err
	}); err != nil {
		e.t.Fatalf("%s: %v", what, err)
	}
}

// seen records, from the gateway's listings, every machine and the most
// each pool had at once.
type seen struct {
	names    map[string]bool
	maxTotal map[string]int
}

// waitReady polls the cluster until it is Ready for its generation (on
// version when not empty), recording the machines it lists meanwhile.
func (e *e2e) waitReady(ctx context.Context, cl *client.Client, version string, timeout time.Duration, rec *seen) *seen {
	e.t.Helper()
	return e.waitClusterReady(ctx, cl, "e2e", version, timeout, rec)
}

// waitClusterReady is waitReady for the cluster called name.
func (e *e2e) waitClusterReady(ctx context.Context, cl *client.Client, name, version string, timeout time.Duration, rec *seen) *seen {
	e.t.Helper()
	if rec == nil {
		rec = &seen{names: map[string]bool{}, maxTotal: map[string]int{}}
	}
	last := testkit.Poll(timeout, 250*time.Millisecond, func() error {
		if ms, err := cl.Machines(ctx, name, client.ListOptions{}); err == nil {
			count := map[string]int{}
			for _, m := range ms {
				rec.names[m.GetMetadata().GetName()] = true
				if m.GetSpec() != nil { // not a status left while its infrastructure goes
					count[m.GetSpec().GetPool()]++
				}
			}
			for p, n := range count {
				rec.maxTotal[p] = max(rec.maxTotal[p], n)
			}
		}
		c, err := cl.Get(ctx, name)
		if err != nil {
			return err
		}
		st := c.GetStatus()
		if st.GetPhase() == "Ready" && st.GetObservedGeneration() == c.GetMetadata().GetGeneration() &&
			(version == "" || c.GetSpec().GetKubernetesVersion() == version) {
			return nil
		}
		return errors.New(st.GetPhase())
	})
	if last == nil {
		return rec
	}
	if ms, err := cl.Machines(ctx, name, client.ListOptions{}); err == nil {
		for _, m := range ms {
			e.t.Logf("machine %s: %s %s %s", m.GetMetadata().GetName(), m.GetSpec().GetVersion(), m.GetStatus().GetPhase(), m.GetStatus().GetFailureMessage())
		}
	}
	e.t.Fatalf("cluster %s not Ready within %s (last: %v)", name, timeout, last)
	return nil
}

// checkMachines: per pool exactly its replicas, on the new version,
// Running, each with its own infrastructure (provider id); no pool above
// replicas + maxSurge in any listing.
func (e *e2e) checkMachines(ctx context.Context, cl *client.Client, rec *seen) {
	e.t.Helper()
	ms, err := cl.Machines(ctx, "e2e", client.ListOptions{})
	if err != nil {
		e.t.Fatal(err)
	}
	pools := map[string]int{}
	names, ids := map[string]bool{}, map[string]string{}
	for _, m := range ms {
		n := m.GetMetadata().GetName()
		if names[n] {
			e.t.Errorf("machine %s listed twice", n)
		}
		names[n] = true
		pools[m.GetSpec().GetPool()]++
		if v := m.GetSpec().GetVersion(); v != newVersion {
			e.t.Errorf("machine %s on %s after the upgrade", n, v)
		}
		if p := m.GetStatus().GetPhase(); p != "Running" {
			e.t.Errorf("machine %s is %s", n, p)
		}
		id := m.GetStatus().GetProviderId()
		if id == "" {
			e.t.Errorf("machine %s has no provider id", n)
		} else if other, dup := ids[id]; dup {
			e.t.Errorf("machines %s and %s share infrastructure %s", other, n, id)
		}
		ids[id] = n
	}
	want := map[string]int{"control-plane": 3, "md-0": 3}
	for p, n := range want {
		if pools[p] != n {
			e.t.Errorf("pool %s has %d machines, want %d", p, pools[p], n)
		}
		if rec.maxTotal[p] > n+1 {
			e.t.Errorf("pool %s listed %d machines at once, more than replicas %d + maxSurge 1", p, rec.maxTotal[p], n)
		}
	}
	e.t.Logf("end state: %d machines, %d distinct provider ids; %d machine names over the test; at most %v per pool at once",
		len(names), len(ids), len(rec.names), rec.maxTotal)
}

// checkInboxes fails at once, with the reason, when the services are
// denied their replies: a runtime without CAPN_NATS_INBOX_PREFIX support
// subscribes to _INBOX.>, which no user may.
func (e *e2e) checkInboxes(ctx context.Context) {
	e.t.Helper()
	out, _ := e.compose(ctx, "logs", "--no-color", "--tail", "20")
	if strings.Contains(out, `Subscription to \"_INBOX.`) || strings.Contains(out, `Subscription to "_INBOX.`) {
		e.t.Fatalf("the services are denied _INBOX.>: their runtime does not apply CAPN_NATS_INBOX_PREFIX (the rendered users may subscribe to _INBOX_<user>.> only)")
	}
}

// checkNoViolations fails on any permission violation a service logged
// (the runtime logs each with reason permission_violation).
func (e *e2e) checkNoViolations(ctx context.Context) {
	e.t.Helper()
	out, err := e.compose(ctx, "logs", "--no-color")
	if err != nil {
		e.t.Fatalf("docker-compose logs: %v", err)
	}
	n := 0
	for _, line := range strings.Split(out, "\n") {
		if strings.Contains(line, "permission_violation") || strings.Contains(line, "Permissions Violation") {
			n++
			if n <= 10 {
				e.t.Errorf("denied: %s", line)
			}
		}
	}
	if n > 0 {
		e.t.Errorf("%d permission violations in the logs (a runtime without --nats-inbox-prefix is denied its _INBOX replies)", n)
	}
}

// freePort is a free 127.0.0.1 port below the ephemeral range.
func freePort(t *testing.T) int {
	t.Helper()
	for p := 21000 + os.Getpid()%5000; p < 32000; p++ {
		ln, err := net.Listen("tcp", "127.0.0.1:"+strconv.Itoa(p))
		if err == nil {
			ln.Close()
			return p
		}
	}
	t.Fatal("no free port")
	return 0
}
