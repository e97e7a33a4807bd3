// Package providers runs one cluster across the docker, process and sim
// providers from one capn deployment: capn's core programs and the three
// providers, each its own daemon.Run on one embedded nats-server.
package providers

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/capn-dev/capn/internal/testkit"
	"github.com/capn-dev/capn/providers/conformance"
	"github.com/capn-dev/capn/providers/docker"
	"github.com/capn-dev/capn/providers/docker/dockertest"
	"github.com/capn-dev/capn/providers/docker/engine"
	"github.com/capn-dev/capn/providers/process"
	"github.com/capn-dev/capn/providers/sdk"
	"github.com/capn-dev/capn/providers/sdk/sdktest"
	"github.com/capn-dev/capn/providers/sim"
)

func TestMain(m *testing.M) { dockertest.Main(m) }

const manifest = `apiVersion: capn.dev/v1alpha1
kind: Cluster
metadata:
  name: %s
spec:
  kubernetesVersion: v1.33.4
  controlPlane:
    provider: docker
    replicas: 1
  workerPools:
  - name: on-process
    provider: process
    replicas: 2
  - name: on-sim
    provider: sim
    replicas: 2
`

// pools are the wanted Running machines per provider.
var pools = map[string]int{docker.Name: 1, process.Name: 2, sim.Name: 2}

type world struct {
	t          *testing.T
	env        *sdktest.Env
	api        *engine.Client
	clusters   *conformance.Clusters
	cluster    string
	deployment string
	stateDir   string
}

func TestOneClusterAcrossProviders(t *testing.T) {
	if testing.Short() {
		t.Skip("end-to-end: skipped with -short")
	}
	api := dockertest.Client(t)
	image := dockertest.Image(t)
	nodeDir, err := conformance.BuildTemp("capn-node")
	if err != nil {
		t.Fatal(err)
	}
	env := sdktest.New(t)
	w := &world{t: t, env: env, api: api, clusters: conformance.NewClusters(t, env.JS),
		cluster: fmt.Sprintf("x%d", time.Now().UnixNano()%1e6), deployment: fmt.Sprintf("e2e%d", os.Getpid()), stateDir: t.TempDir()}

	// One capn deployment: the core programs and three providers.
	conformance.CorePrograms()(t, env.Server.URL())
	fast := sdk.Options{ReconcileEvery: 500 * time.Millisecond, AnnounceEvery: 500 * time.Millisecond}
	procOpts := process.Options{NodeBinary: filepath.Join(nodeDir, "capn-node"), StateDir: filepath.Join(w.stateDir, "process"),
		HeartbeatEvery: 500 * time.Millisecond, WatchEvery: 200 * time.Millisecond, StopTimeout: 5 * time.Second, HealthPort: -1}
	dockOpts := docker.Options{Image: image, Deployment: w.deployment, StateDir: filepath.Join(w.stateDir, "docker"),
		HeartbeatEvery: 500 * time.Millisecond, StopTimeout: 2 * time.Second}
	t.Cleanup(func() { // whatever happened: no process, container or network left
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		if err := docker.Purge(ctx, dockOpts); err != nil {
			t.Errorf("purge docker: %v", err)
		}
		if err := process.Purge(procOpts); err != nil {
			t.Errorf("purge process: %v", err)
		}
	})
	env.Run(sim.NewService(sim.Options{BootLatency: 50 * time.Millisecond, HeartbeatEvery: time.Second}, fast))
	env.Run(process.NewService(procOpts, fast))
	env.Run(docker.NewService(dockOpts, fast))

	start := time.Now()
	w.clusters.Apply(fmt.Sprintf(manifest, w.cluster))
	w.clusters.WaitReady(w.cluster, 2*time.Minute)
	before, uids := w.waitPools(nil, time.Minute)
	t.Logf("Ready in %s: %v", time.Since(start).Round(time.Millisecond), before)
	if ic, ok := env.Cluster(docker.Name, w.cluster); !ok || ic.GetControlPlaneEndpoint().GetHost() != "127.0.0.1" {
		t.Errorf("control-plane endpoint: %v", ic)
	}

	// docker rm -f of the control plane's container and kill -9 of a
	// process machine: both are replaced (by new incarnations; the
	// planner may reuse a name).
	cp := before[docker.Name][0]
	victim := before[process.Name][0]
	start = time.Now()
	if err := api.ContainerRemove(context.Background(), w.deployment+"."+w.cluster+"."+cp, true); err != nil {
		t.Fatalf("docker rm -f: %v", err)
	}
	w.kill9(procOpts.StateDir, victim)
	after, _ := w.waitPools([]string{uids[cp], uids[victim]}, 2*time.Minute)
	w.clusters.WaitReady(w.cluster, time.Minute)
	t.Logf("docker rm -f %s and kill -9 %s replaced in %s: %v", cp, victim, time.Since(start).Round(time.Millisecond), after)
	for _, d := range []struct{ machine, kind string }{{cp, sdk.DriftGone}, {victim, sdk.DriftGone}} {
		if r, ok := env.LastDrift(w.cluster, d.machine); !ok || r.GetKind() != d.kind {
			t.Errorf("drift of %s: %v", d.machine, r)
		}
	}

	// Delete: nothing left in KV, no container, network, process or
	// data directory.
	start = time.Now()
	w.clusters.Delete(w.cluster)
	w.clusters.WaitGone(w.cluster, []string{docker.Name, process.Name, sim.Name}, 2*time.Minute)
	w.waitNothingLeft(procOpts.StateDir, time.Minute)
	t.Logf("deleted in %s", time.Since(start).Round(time.Millisecond))
}

// waitPools waits until each provider runs its wanted number of machines
// of the cluster, none of them an incarnation (uid) in gone, and returns
// their names and the uids of all machines.
func (w *world) waitPools(gone []string, timeout time.Duration) (map[string][]string, map[string]string) {
	w.t.Helper()
	var got map[string][]string
	var uids map[string]string
	if testkit.Poll(timeout, 100*time.Millisecond, func() error {
		got, uids = map[string][]string{}, w.clusters.UIDs(w.cluster)
		ok := true
		for name, st := range w.clusters.Machines(w.cluster) {
			if slices.Contains(gone, uids[name]) || uids[name] == "" {
				ok = false
			}
			if st.GetPhase() != "Running" {
				ok = false
				continue
			}
			got[st.GetProvider()] = append(got[st.GetProvider()], name)
		}
		for p, n := range pools {
			ok = ok && len(got[p]) == n
			sort.Strings(got[p])
		}
		if !ok {
			return errors.New("not yet")
		}
		return nil
	}) != nil {
		w.t.Fatalf("after %s: running machines %v, want %v, none of the incarnations %v", timeout, got, pools, gone)
	}
	return got, uids
}

func (w *world) kill9(stateDir, machine string) {
	w.t.Helper()
	b, err := os.ReadFile(filepath.Join(stateDir, "clusters", w.cluster, "machines", machine, "pid"))
	if err != nil {
		w.t.Fatal(err)
	}
	pid, _ := strconv.Atoi(strings.Fields(string(b))[0])
	if err := syscall.Kill(pid, syscall.SIGKILL); err != nil {
		w.t.Fatalf("kill -9 %d: %v", pid, err)
	}
}

// waitNothingLeft waits until the host holds nothing of the cluster.
func (w *world) waitNothingLeft(processState string, timeout time.Duration) {
	w.t.Helper()
	if err := testkit.Poll(timeout, 100*time.Millisecond, func() error {
		if left := w.leftovers(processState); len(left) > 0 {
			return fmt.Errorf("after the delete these are left: %v", left)
		}
		return nil
	}); err != nil {
		w.t.Fatal(err)
	}
}

func (w *world) leftovers(processState string) []string {
	var out []string
	labels := map[string]string{docker.LabelDeployment: w.deployment, docker.LabelCluster: w.cluster}
	ctrs, err := w.api.ContainerList(context.Background(), labels)
	if err != nil {
		w.t.Fatal(err)
	}
	for _, c := range ctrs {
		out = append(out, "container "+c.Names[0])
	}
	nets, err := w.api.NetworkList(context.Background(), labels)
	if err != nil {
		w.t.Fatal(err)
	}
	for _, n := range nets {
		out = append(out, "network "+n.Name)
	}
	if _, err := os.Stat(filepath.Join(processState, "clusters", w.cluster)); err == nil {
		out = append(out, "process data directory of "+w.cluster)
	}
	out = append(out, nodeProcesses(processState, w.cluster)...)
	return out
}

// nodeProcesses lists live capn-node processes of cluster run from the
// process provider's state dir (each runs in its own directory there).
func nodeProcesses(stateDir, cluster string) []string {
	ents, _ := os.ReadDir("/proc")
	var out []string
	for _, e := range ents {
		cwd, err := os.Readlink(filepath.Join("/proc", e.Name(), "cwd"))
		if err != nil || !strings.HasPrefix(cwd+"/", filepath.Join(stateDir, "clusters", cluster)+"/") {
			continue
		}
		b, err := os.ReadFile(filepath.Join("/proc", e.Name(), "cmdline"))
		if err != nil || len(b) == 0 {
			continue
		}
		if args := strings.Split(strings.TrimRight(string(b), "\x00"), "\x00"); filepath.Base(args[0]) == "capn-node" {
			out = append(out, "process "+e.Name()+": "+strings.Join(args[1:], " "))
		}
	}
	return out
}
