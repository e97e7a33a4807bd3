package remediator

import "testing"

func TestClusterOf(t *testing.T) {
	tests := []struct{ key, want string }{
		{"cluster.c1", "c1"},
		{"machine.c1.m1", "c1"},
		{"node.c1.m1", "c1"},
		{"cluster.c1.extra", ""},
		{"machine.c1", ""},
		{"remediation.c1.workers", ""},
		{"provider.sim", ""},
	}
	for _, tt := range tests {
		if got := clusterOf(tt.key); got != tt.want {
			t.Errorf("clusterOf(%q) = %q, want %q", tt.key, got, tt.want)
		}
	}
}
