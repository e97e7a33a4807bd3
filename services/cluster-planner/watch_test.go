package clusterplanner

import (
	"testing"

	"github.com/capn-dev/capn/schemas/keys"
)

// The planner's watches map a key to its cluster with keys.ClusterOf: every
// record it subscribes to names its cluster, and a provider's announcement
// names none (providerWatch wakes its clusters instead).
func TestClusterOfWatchedKeys(t *testing.T) {
	tests := []struct{ key, want string }{
		{"cluster.c1", "c1"},
		{"secrets.c1", "c1"},
		{"machine.c1.m1", "c1"},
		{"infra.sim.c1.m1", "c1"},
		{"infra.sim.c1._", "c1"},
		{"provider.sim", ""},
		{"cluster.c1.x", ""},
		{"machine.c1", ""},
		{"infra.sim.c1", ""},
		{"secrets.c1.x", ""},
	}
	for _, tt := range tests {
		if got := keys.ClusterOf(tt.key); got != tt.want {
			t.Errorf("ClusterOf(%q) = %q, want %q", tt.key, got, tt.want)
		}
	}
}
