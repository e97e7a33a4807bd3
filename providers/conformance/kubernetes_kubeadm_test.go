package conformance

import (
	"strings"
	"testing"

	"github.com/capn-dev/capn/schemas/manifest"
)

// kubeadmTestManifest is a manifest of the shape the kubeadm check wants.
const kubeadmTestManifest = `apiVersion: capn.dev/v1alpha1
kind: Cluster
metadata:
  name: c1
spec:
  kubernetesVersion: v1.37.2
  controlPlane:
    provider: process
    replicas: 1
  workerPools:
  - name: workers
    provider: process
    replicas: 2
  network:
    podCidrs: [10.252.0.0/22]
  bootstrap:
    provider: kubeadm
    kubeletExtraArgs:
      fail-cgroupv1: "false"
      enforce-node-allocatable: ""
      eviction-hard: "memory.available<1Mi,nodefs.available<1%"
`

// TestKubeadmManifests: the provider's manifest comes back with the
// check's health policy on the workers pool (and the pool's label and
// taint in the labeled one), everything else as it was; one of another
// shape is refused, naming each field that is wrong.
func TestKubeadmManifests(t *testing.T) {
	plain, labeled, err := kubeadmManifests(kubeadmTestManifest, "c1", "process", "v1.37.2")
	if err != nil {
		t.Fatal(err)
	}
	for _, tt := range []struct {
		name, yaml string
		labels     bool
	}{{"plain", plain, false}, {"labeled", labeled, true}} {
		t.Run(tt.name, func(t *testing.T) {
			c, err := manifest.Decode([]byte(tt.yaml))
			if err != nil {
				t.Fatalf("%v:\n%s", err, tt.yaml)
			}
			p := c.GetSpec().GetWorkerPools()[0]
			h := p.GetHealth()
			if len(h.GetUnhealthyConditions()) != 2 || h.GetUnhealthyConditions()[0].GetStatus() != "Unknown" ||
				h.GetUnhealthyConditions()[0].GetTimeout().AsDuration().Seconds() != 30 || h.GetMaxUnhealthy() != "1" {
				t.Errorf("workers health %v", h)
			}
			if got := p.GetLabels()[poolLabelKey] == poolLabelValue && len(p.GetTaints()) == 1 && p.GetTaints()[0].GetEffect() == poolTaintEffect; got != tt.labels {
				t.Errorf("labels %v, taints %v; want them %v", p.GetLabels(), p.GetTaints(), tt.labels)
			}
			args := c.GetSpec().GetBootstrap().GetKubeletExtraArgs()
			if v, ok := args["enforce-node-allocatable"]; !ok || v != "" || args["eviction-hard"] != "memory.available<1Mi,nodefs.available<1%" ||
				c.GetSpec().GetNetwork().GetPodCidrs()[0] != "10.252.0.0/22" {
				t.Errorf("the provider's settings changed:\n%s", tt.yaml)
			}
		})
	}

	bad := strings.NewReplacer("replicas: 1", "replicas: 3", "name: workers", "name: md-0", "provider: kubeadm", "provider: kube-local").Replace(kubeadmTestManifest)
	_, _, err = kubeadmManifests(bad, "c2", "process", "v1.37.2")
	if err == nil {
		t.Fatal("a manifest of another shape was taken")
	}
	for _, want := range []string{"metadata.name", "spec.bootstrap.provider", "spec.controlPlane", "spec.workerPools[0]"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("the refusal does not name %s:\n%v", want, err)
		}
	}
}
