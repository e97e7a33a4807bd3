package process_test

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/capn-dev/capn/providers/conformance"
	"github.com/capn-dev/capn/providers/process"
	"github.com/capn-dev/capn/services/daemon"
)

// nodeBinary is capn-node, built once for the package.
var nodeBinary string

func TestMain(m *testing.M) {
	dir, err := conformance.BuildTemp(process.NodeBinaryName)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	nodeBinary = filepath.Join(dir, process.NodeBinaryName)
	conformance.Main(m)
}

// options are quick ones over dir. Every test purges the processes of
// its state dir when it ends, whatever happened.
func options(t *testing.T, dir string) process.Options {
	opts := process.Options{
		NodeBinary: nodeBinary, StateDir: dir,
		HeartbeatEvery: 100 * time.Millisecond, WatchEvery: 100 * time.Millisecond, StopTimeout: 5 * time.Second,
		HealthPort: -1,
	}
	t.Cleanup(func() {
		if err := process.Purge(opts); err != nil {
			t.Errorf("purge %s: %v", dir, err)
		}
	})
	return opts
}

func machineDir(stateDir, cluster, machine string) string {
	return filepath.Join(stateDir, "clusters", cluster, "machines", machine)
}

// killNode kill -9s a machine's capn-node.
func killNode(t *testing.T, stateDir, cluster, machine string) {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(machineDir(stateDir, cluster, machine), "pid"))
	if err != nil {
		t.Fatalf("pid file: %v", err)
	}
	pid, _ := strconv.Atoi(strings.Fields(string(b))[0])
	if err := syscall.Kill(pid, syscall.SIGKILL); err != nil {
		t.Fatalf("kill -9 %d: %v", pid, err)
	}
}

// nodeProcesses lists the live processes of a cluster run from stateDir:
// each machine's capn-node (agents and the endpoint) runs in its own
// directory there, and the Kubernetes components a machine runs (with
// --kube-bin) inherit it. Read from /proc: not another test's, nor a
// container's.
func nodeProcesses(stateDir, cluster string) []string {
	ents, _ := os.ReadDir("/proc")
	var out []string
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		cwd, err := os.Readlink(filepath.Join("/proc", e.Name(), "cwd"))
		if err != nil || !strings.HasPrefix(cwd+"/", filepath.Join(stateDir, "clusters", cluster)+"/") {
			continue
		}
		b, err := os.ReadFile(filepath.Join("/proc", e.Name(), "cmdline"))
		if err != nil || len(b) == 0 {
			continue // gone, or a zombie
		}
		args := strings.Split(strings.TrimRight(string(b), "\x00"), "\x00")
		out = append(out, fmt.Sprintf("process %d %s: %s", pid, filepath.Base(args[0]), strings.Join(args[1:], " ")))
	}
	return out
}

// stopKubelet SIGSTOPs a machine's kwok — its kubelet in a kube-local
// cluster, a child of its capn-node running in the machine's directory —
// so that its Node goes NotReady while capn-node heartbeats on; SIGCONT
// when the test ends, unless a reboot or replacement killed it.
func stopKubelet(t *testing.T, stateDir, cluster, machine string) {
	t.Helper()
	dir := machineDir(stateDir, cluster, machine) + "/"
	isKwok := func(pid int) bool {
		cwd, err := os.Readlink(filepath.Join("/proc", strconv.Itoa(pid), "cwd"))
		if err != nil || !strings.HasPrefix(cwd+"/", dir) {
			return false
		}
		b, err := os.ReadFile(filepath.Join("/proc", strconv.Itoa(pid), "cmdline"))
		return err == nil && filepath.Base(strings.SplitN(string(b), "\x00", 2)[0]) == "kwok"
	}
	ents, _ := os.ReadDir("/proc")
	var pids []int
	for _, e := range ents {
		if pid, err := strconv.Atoi(e.Name()); err == nil && isKwok(pid) {
			pids = append(pids, pid)
		}
	}
	if len(pids) != 1 {
		t.Fatalf("want one kwok process of %s under %s, found %v:\n%s", machine, dir, pids, strings.Join(nodeProcesses(stateDir, cluster), "\n"))
	}
	pid := pids[0]
	if err := syscall.Kill(pid, syscall.SIGSTOP); err != nil {
		t.Fatalf("kill -STOP %d: %v", pid, err)
	}
	t.Logf("kwok of %s (pid %d) stopped with SIGSTOP", machine, pid)
	t.Cleanup(func() {
		if isKwok(pid) {
			_ = syscall.Kill(pid, syscall.SIGCONT)
		}
	})
}

// leftovers are the cluster's directory and processes.
func leftovers(stateDir, cluster string) []string {
	out := nodeProcesses(stateDir, cluster)
	if _, err := os.Stat(filepath.Join(stateDir, "clusters", cluster)); err == nil {
		out = append(out, "directory "+filepath.Join(stateDir, "clusters", cluster))
	}
	return out
}

func TestConformance(t *testing.T) {
	conformance.Run(t, conformance.Provider{
		Name: process.Name,
		New: func(t *testing.T, env *conformance.Env) daemon.Service {
			opts := options(t, env.Dir)
			opts.KubeBin = env.KubeBin
			return process.NewService(opts, env.SDK)
		},
	}, conformance.Features{
		StopStart: true, Reboot: true, RestartSafe: true, NodeAgent: true, Heartbeats: true, EndpointListens: true, Commands: true,
		OutOfBandDelete: func(t *testing.T, env *conformance.Env, cluster, machine string) {
			killNode(t, env.Dir, cluster, machine)
		},
		Disk: &conformance.Disk{
			Write: func(t *testing.T, env *conformance.Env, cluster, machine, path string, data []byte) {
				p := filepath.Join(machineDir(env.Dir, cluster, machine), "node", "rootfs", path)
				if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
					t.Fatal(err)
				}
				if err := os.WriteFile(p, data, 0o644); err != nil {
					t.Fatal(err)
				}
			},
			Read: func(_ *testing.T, env *conformance.Env, cluster, machine, path string) ([]byte, bool) {
				b, err := os.ReadFile(filepath.Join(machineDir(env.Dir, cluster, machine), "node", "rootfs", path))
				return b, err == nil
			},
		},
		Leftovers: func(_ *testing.T, env *conformance.Env, cluster string) []string { return leftovers(env.Dir, cluster) },
		Capn:      conformance.CorePrograms(),
		Kubernetes: &conformance.Kubernetes{
			StopKubelet: func(t *testing.T, env *conformance.Env, cluster, machine string) {
				stopKubelet(t, env.Dir, cluster, machine)
			},
		},
	})
}
