package bootstrapper

import (
	"testing"

	"github.com/capn-dev/capn/schemas/keys"
)

// The cluster reconcile wakes for its cluster's infrastructure and
// control-plane record, not for a machine's infrastructure (two or more
// writes per machine, none of which it reads).
func TestClusterOfClusterLevel(t *testing.T) {
	for key, want := range map[string]string{
		keys.InfraCluster("sim", "c1"): "c1",
		keys.ControlPlane("c1"):        "c1",
		keys.Infra("sim", "c1", "m1"):  "",
		"infra.garbage":                "",
	} {
		if got := clusterOfClusterLevel(key); got != want {
			t.Errorf("clusterOfClusterLevel(%q) = %q, want %q", key, got, want)
		}
	}
}
