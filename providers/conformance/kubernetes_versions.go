package conformance

import (
	"fmt"
	"os"
	"slices"
	"strings"
	"testing"
	"time"
)

// kubeVersionsManifest is a kube-local cluster of one control plane and
// one worker at a given version.
const kubeVersionsManifest = `apiVersion: capn.dev/v1alpha1
kind: Cluster
metadata:
  name: %s
spec:
  kubernetesVersion: %s
  bootstrap:
    provider: kube-local
  controlPlane:
    provider: %s
    replicas: 1
  workerPools:
  - name: workers
    provider: %s
    replicas: 1
`

// kubernetesVersions is the check that a provider given binaries of
// several Kubernetes versions (Env.KubeBin, every directory of
// Kubernetes.Bin) runs each machine on those of its own version, the
// ground an upgrade across minors stands on:
//   - the provider announces the versions it has, if it announces any;
//   - with two versions or more (CI builds two; fails under
//     CAPN_REQUIRE_KUBE=1 with one), a cluster of one control plane and
//     one worker at the OLDEST version runs: its API server reports that
//     version through capn's kubeconfig, and both Nodes are Ready at it,
//     while the newest stays what the Kubernetes check runs.
func (s *suite) kubernetesVersions(t *testing.T, e *Env) {
	if s.f.Leftovers == nil {
		t.Fatal("the KubernetesVersions check needs Features.Leftovers")
	}
	begin := time.Now()
	bins := KubeBins(t, s.f.Kubernetes.Bin)
	e.KubeBin = JoinKubeBins(bins)
	versions := make([]string, len(bins))
	for i, b := range bins {
		versions[i] = b.Version
	}
	c := StartCapn(t, e.NATSURL)
	e.StartProvider()
	if a, _ := e.Announcement(e.Provider); len(a.GetKubernetesVersions()) > 0 && !slices.Equal(a.GetKubernetesVersions(), versions) {
		t.Errorf("%s announces Kubernetes versions %v, but Env.KubeBin=%s holds %v", e.Provider, a.GetKubernetesVersions(), e.KubeBin, versions)
	}
	t.Logf("provider %s with Kubernetes %v (%s)", e.Provider, versions, e.KubeBin)

	// --- the oldest version runs beside the newest --------------------------
	if len(bins) < 2 {
		if os.Getenv("CAPN_REQUIRE_KUBE") == "1" {
			t.Fatalf("CAPN_REQUIRE_KUBE=1 but only Kubernetes %v is built: make kube builds every KUBE_VERSIONS", versions)
		}
		t.Logf("only Kubernetes %v is built: skipping the older-version cluster (make kube builds every KUBE_VERSIONS)", versions)
		return
	}
	old := NewKubeCluster(t, c, e.JS, bins[0].Dir, e.Cluster)
	applied := time.Now()
	old.Apply(fmt.Sprintf(kubeVersionsManifest, e.Cluster, old.Version, e.Provider, e.Provider))
	old.Clusters.WaitReady(e.Cluster, 5*time.Minute)
	ready := time.Since(applied)
	machines := old.Running()
	old.FetchKubeconfig()
	old.CheckServerVersion()
	nodes := old.WaitNodes(machines, 3*time.Minute)
	t.Logf("cluster %s at %s (newest built: %s): capn Ready %.1fs after apply, kube-apiserver reports %s, %d Nodes Ready at %s %.1fs after apply",
		e.Cluster, old.Version, bins[len(bins)-1].Version, ready.Seconds(), old.Version, len(machines), old.Version, nodes.Sub(applied).Seconds())
	old.Capn.CLI("delete", "cluster", e.Cluster, "--wait", "--timeout", "4m")
	old.Clusters.WaitGone(e.Cluster, []string{e.Provider}, 2*time.Minute)
	Poll(t, "nothing of the cluster left on the host", 2*time.Minute, func() error {
		if left := s.f.Leftovers(t, e, e.Cluster); len(left) > 0 {
			return fmt.Errorf("left:\n%s", strings.Join(left, "\n"))
		}
		return nil
	})
	t.Logf("whole check %.1fs", time.Since(begin).Seconds())
}
