package keys_test

import (
	"testing"

	"github.com/capn-dev/capn/schemas/keys"
)

func TestFleetKeys(t *testing.T) {
	for _, tt := range []struct {
		key  string
		kind keys.Kind
		name string
	}{
		{keys.Class("standard"), keys.KindClass, "standard"},
		{keys.ClassRev("standard", 7), keys.KindClassRev, "standard.7"},
		{keys.Rollout("r1"), keys.KindRollout, "r1"},
	} {
		k, err := keys.Parse(tt.key)
		if err != nil || k.Kind != tt.kind || k.Name != tt.name || k.Cluster != "" || k.String() != tt.key {
			t.Errorf("Parse(%q) = %+v, %v", tt.key, k, err)
		}
		if keys.ClusterOf(tt.key) != "" {
			t.Errorf("ClusterOf(%q) names a cluster", tt.key)
		}
	}
	if got := keys.ClassRevsOf("standard"); got != "classrev.standard." {
		t.Errorf("ClassRevsOf = %q", got)
	}
}
