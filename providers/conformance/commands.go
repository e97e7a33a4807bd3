package conformance

import (
	"fmt"
	"strings"
	"testing"
	"time"

	capnv1 "github.com/capn-dev/capn/schemas/capn/v1alpha1"
)

// commandsManifest is a cluster on one provider with two pools of one
// worker: md-ok's bootstrap writes a file and runs a preCommand and a
// postCommand that leave their marks in the machine's root; md-bad's
// preCommand fails.
func commandsManifest(cluster, provider string) string {
	return fmt.Sprintf(`apiVersion: capn.dev/v1alpha1
kind: Cluster
metadata:
  name: %s
spec:
  kubernetesVersion: %s
  controlPlane:
    provider: %s
    replicas: 1
  workerPools:
  - name: md-ok
    provider: %s
    replicas: 1
    bootstrap:
      commandTimeout: 20s
      files:
      - path: /etc/conformance/hello
        content: "hello from the bootstrap\n"
        permissions: "0640"
      preCommands:
      - |-
        grep -q hello "$CAPN_ROOT/etc/conformance/hello" && echo pre > "$CAPN_ROOT/pre-ran"
      postCommands:
      - |-
        test -e "$CAPN_ROOT/pre-ran" && echo post > "$CAPN_ROOT/post-ran"
  - name: md-bad
    provider: %s
    replicas: 1
    bootstrap:
      preCommands:
      - |-
        echo 'no such disk: /dev/sdz' >&2; exit 7
`, cluster, Version, provider, provider, provider)
}

// bootstrapCommands: through capn's core services, a worker's files are
// written and its preCommands and postCommands run on the machine; a
// worker whose preCommand fails is Failed as BootstrapCommandFailed with
// the command, its exit code and its stderr (and replaced, as any failed
// machine is), while the other pool's worker runs.
func (s *suite) bootstrapCommands(t *testing.T, e *Env) {
	s.f.Capn(t, e.NATSURL)
	e.StartProvider()
	clusters := NewClusters(t, e.JS)
	start := time.Now()
	clusters.Apply(commandsManifest(e.Cluster, e.Provider))
	var ok, bad string
	clusters.waitFor(ClusterTimeout, "md-ok Running and md-bad Failed on a command", func() (bool, string) {
		ok, bad = "", ""
		for name, m := range clusters.Machines(e.Cluster) {
			switch {
			case strings.Contains(name, "-md-ok-") && m.GetPhaseValue() == capnv1.MachineRunning:
				ok = name
			case strings.Contains(name, "-md-bad-") && m.GetPhaseValue() == capnv1.MachineFailed && m.GetFailureReason() == "BootstrapCommandFailed":
				bad = name
				msg := m.GetFailureMessage()
				if !strings.Contains(msg, "preCommands[0] `echo 'no such disk: /dev/sdz' >&2; exit 7` exited with code 7") ||
					!strings.Contains(msg, "stderr (last 1 lines): no such disk: /dev/sdz") {
					t.Errorf("%s: failure message %q", name, msg)
				}
			}
		}
		return ok != "" && bad != "", clusters.machineSummary(e.Cluster)
	})
	t.Logf("worker with commands Running, worker with a failing command Failed, in %s", time.Since(start).Round(time.Millisecond))
	for path, want := range map[string]string{"/etc/conformance/hello": "hello from the bootstrap\n", "/pre-ran": "pre\n", "/post-ran": "post\n"} {
		if got, found := s.f.Disk.Read(t, e, e.Cluster, ok, path); !found || string(got) != want {
			t.Errorf("%s on %s: %q (found %v), want %q", path, ok, got, found, want)
		}
	}
	if _, found := s.f.Disk.Read(t, e, e.Cluster, bad, "/pre-ran"); found {
		t.Errorf("%s: a file of the other pool's commands", bad)
	}
	clusters.Delete(e.Cluster)
	clusters.WaitGone(e.Cluster, []string{e.Provider}, ClusterTimeout)
	e.waitNoLeftovers(e.Cluster)
}
