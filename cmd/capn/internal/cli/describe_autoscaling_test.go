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

// TestDescribeShowsAutoscaling: the status the planner writes for an
// autoscaled pool shows in capn describe — its min and max, its replicas
// and the autoscaler's last action, when, and what it did.
func TestDescribeShowsAutoscaling(t *testing.T) {
	c := &capnv1.Cluster{
		ApiVersion: manifest.APIVersion, Kind: manifest.KindCluster,
		Metadata: &capnv1.ObjectMeta{Name: "demo", Generation: 1, CreationTimestamp: timestamppb.New(fixedNow.Add(-time.Hour))},
		Spec: &capnv1.ClusterSpec{
			KubernetesVersion: "v1.33.4",
			ControlPlane:      &capnv1.ControlPlaneSpec{Provider: "sim", Replicas: 1},
			WorkerPools: []*capnv1.WorkerPool{
				{Name: "md-0", Provider: "sim", Replicas: 4, Autoscaling: &capnv1.Autoscaling{Min: 1, Max: 5}},
				{Name: "zero", Provider: "sim", Autoscaling: &capnv1.Autoscaling{Min: 0, Max: 2}},
				{Name: "fixed", Provider: "sim", Replicas: 1},
			},
		},
	}
	manifest.Default(c)
	r := plan.Plan(plan.Input{Cluster: c, Now: fixedNow, Autoscaler: map[string]*capnv1.AutoscalerAction{
		"md-0": {Reason: "ScaledUp", From: 1, To: 4, Message: "autoscaler scaled md-0 1 → 4", Time: timestamppb.New(fixedNow.Add(-3 * time.Minute))},
	}})
	c.Status = r.Status
	var b strings.Builder
	describeCluster(&b, c, nil, nil, describeOpts{now: fixedNow, loc: time.UTC})
	out := b.String()
	_, section, ok := strings.Cut(out, "Autoscaling (the cluster autoscaler sizes these pools):\n")
	if !ok {
		t.Fatalf("no Autoscaling section:\n%s", out)
	}
	lines := strings.Split(section, "\n")
	want := [][]string{
		{"POOL", "MIN", "MAX", "REPLICAS", "LAST", "ACTION", "SINCE", "MESSAGE"},
		{"md-0", "1", "5", "4", "ScaledUp", "3m", "ago", "autoscaler", "scaled", "md-0", "1", "→", "4"},
		{"zero", "0", "2", "0", "none", "yet"},
	}
	for i, w := range want {
		if got := strings.Fields(lines[i]); strings.Join(got, " ") != strings.Join(w, " ") {
			t.Errorf("line %d: %q, want %q", i, lines[i], strings.Join(w, " "))
		}
	}
	section, _, _ = strings.Cut(section, "\n\n")
	if strings.Contains(section, "fixed") {
		t.Errorf("a pool without autoscaling is listed:\n%s", section)
	}
}
