package docker_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/capn-dev/capn/providers/conformance"
	"github.com/capn-dev/capn/providers/docker"
	"github.com/capn-dev/capn/providers/docker/dockertest"
	"github.com/capn-dev/capn/providers/docker/engine"
	"github.com/capn-dev/capn/services/daemon"
)

func TestMain(m *testing.M) { dockertest.Main(m) }

// options are quick ones for deployment (unique per test); every test
// purges its deployment's containers and networks when it ends.
func options(t *testing.T, image, deployment, stateDir string) docker.Options {
	opts := docker.Options{Image: image, Deployment: deployment, StateDir: stateDir,
		HeartbeatEvery: 200 * time.Millisecond, StopTimeout: 2 * time.Second}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		if err := docker.Purge(ctx, opts); err != nil {
			t.Errorf("purge %s: %v", deployment, err)
		}
	})
	return opts
}

func containerName(env *conformance.Env, cluster, machine string) string {
	return env.Deployment + "." + cluster + "." + machine
}

// leftovers are the containers and networks of a cluster.
func leftovers(t *testing.T, api *engine.Client, deployment, cluster string) []string {
	labels := map[string]string{docker.LabelProvider: docker.Name, docker.LabelDeployment: deployment, docker.LabelCluster: cluster}
	ctrs, err := api.ContainerList(context.Background(), labels)
	if err != nil {
		t.Fatal(err)
	}
	nets, err := api.NetworkList(context.Background(), labels)
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, c := range ctrs {
		out = append(out, "container "+c.Names[0]+" ("+c.State+")")
	}
	for _, n := range nets {
		out = append(out, "network "+n.Name)
	}
	return out
}

// machineRoot is the machine's disk as its agent sees it: capn-node
// writes the bootstrap's files and runs its commands there.
const machineRoot = docker.NodeDataDir + "/rootfs"

func TestConformance(t *testing.T) {
	api := dockertest.Client(t)
	image := dockertest.Image(t)
	conformance.Run(t, conformance.Provider{
		Name: docker.Name,
		New: func(t *testing.T, env *conformance.Env) daemon.Service {
			return docker.NewService(options(t, image, env.Deployment, env.Dir), env.SDK)
		},
	}, conformance.Features{
		// Commands: the image's shell is busybox (capn-node.Dockerfile).
		StopStart: true, Reboot: true, RestartSafe: true, NodeAgent: true, Heartbeats: true, EndpointListens: true, Commands: true,
		OutOfBandDelete: func(t *testing.T, env *conformance.Env, cluster, machine string) {
			// docker rm -f
			if err := api.ContainerRemove(context.Background(), containerName(env, cluster, machine), true); err != nil {
				t.Fatalf("docker rm -f: %v", err)
			}
		},
		Disk: &conformance.Disk{
			Write: func(t *testing.T, env *conformance.Env, cluster, machine, path string, data []byte) {
				if err := api.WriteFile(context.Background(), containerName(env, cluster, machine), machineRoot+path, data, 0o644); err != nil {
					t.Fatal(err)
				}
			},
			Read: func(t *testing.T, env *conformance.Env, cluster, machine, path string) ([]byte, bool) {
				name := containerName(env, cluster, machine)
				b, err := api.ReadFile(context.Background(), name, machineRoot+path)
				if errors.Is(err, engine.ErrNotFound) {
					return nil, false
				}
				if err != nil {
					// A container capn is removing (a failed machine
					// being replaced) fails the read with the engine's
					// 500 ("mount …/resolv.conf: no such file or
					// directory"): its files are going, as a removed
					// one's are gone.
					c, ierr := api.ContainerInspect(context.Background(), name)
					if errors.Is(ierr, engine.ErrNotFound) || (ierr == nil && (c.State.Status == "removing" || c.State.Status == "dead")) {
						return nil, false
					}
					t.Fatal(err)
				}
				return b, true
			},
		},
		Leftovers: func(t *testing.T, env *conformance.Env, cluster string) []string {
			return leftovers(t, api, env.Deployment, cluster)
		},
		Capn:     conformance.CorePrograms(),
		Timeout:  time.Minute,
		Parallel: true, // the checks mostly wait on the daemon
	})
}
