package cli

import (
	"strings"
	"testing"
	"time"

	"google.golang.org/protobuf/types/known/timestamppb"

	capnv1 "github.com/capn-dev/capn/schemas/capn/v1alpha1"
	"github.com/capn-dev/capn/schemas/manifest"
	"github.com/capn-dev/capn/services/cluster-planner/plan"
)

// TestDescribeShowsProviderRefusal: the status the planner writes for a
// cluster whose provider does not run shows in capn describe — phase
// Pending, the reason on the cluster's row, and ProvidersReady with how to
// fix it.
func TestDescribeShowsProviderRefusal(t *testing.T) {
	c := &capnv1.Cluster{
		ApiVersion: manifest.APIVersion, Kind: manifest.KindCluster,
		Metadata: &capnv1.ObjectMeta{Name: "demo", Generation: 1, CreationTimestamp: timestamppb.New(fixedNow.Add(-time.Minute))},
		Spec: &capnv1.ClusterSpec{
			KubernetesVersion: "v1.33.4",
			ControlPlane:      &capnv1.ControlPlaneSpec{Provider: "sim", Replicas: 1},
			WorkerPools:       []*capnv1.WorkerPool{{Name: "md-0", Provider: "docker", Replicas: 2}},
		},
	}
	manifest.Default(c)
	r := plan.Plan(plan.Input{Cluster: c, Now: fixedNow, Providers: map[string]*capnv1.ProviderAnnouncement{
		"sim": {Name: "sim", Time: timestamppb.New(fixedNow)},
	}})
	c.Status = r.Status
	var b strings.Builder
	describeCluster(&b, c, nil, nil, describeOpts{now: fixedNow, loc: time.UTC})
	out := b.String()
	var root, cond string
	for _, l := range strings.Split(out, "\n") {
		switch {
		case strings.HasPrefix(l, "Cluster/demo"):
			root = l
		case strings.HasPrefix(strings.TrimSpace(l), plan.ConditionProvidersReady):
			cond = l
		}
	}
	if !strings.Contains(root, "Pending") || !strings.Contains(root, plan.ReasonProviderNotRunning) {
		t.Errorf("cluster row %q: want phase Pending and reason %s\n%s", root, plan.ReasonProviderNotRunning, out)
	}
	for _, want := range []string{"False", plan.ReasonProviderNotRunning, "provider docker (pool md-0) is not running", "start the docker provider service"} {
		if !strings.Contains(cond, want) {
			t.Errorf("ProvidersReady row %q lacks %q\n%s", cond, want, out)
		}
	}
}
