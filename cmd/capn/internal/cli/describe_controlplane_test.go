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

// TestDescribeShowsControlPlaneImplementation: capn describe names a
// cluster's control-plane implementation with its record's endpoint,
// version and API servers ready, and lists the record's conditions with
// their reasons and messages; a hosted cluster whose implementation has
// not reported says so, and a machines cluster without a record shows no
// such line (its tree has the machines).
func TestDescribeShowsControlPlaneImplementation(t *testing.T) {
	c := &capnv1.Cluster{
		ApiVersion: manifest.APIVersion, Kind: manifest.KindCluster,
		Metadata: &capnv1.ObjectMeta{Name: "demo", Generation: 1, CreationTimestamp: timestamppb.New(fixedNow.Add(-time.Minute))},
		Spec: &capnv1.ClusterSpec{
			KubernetesVersion: "v1.34.2",
			ControlPlane:      &capnv1.ControlPlaneSpec{Type: capnv1.ControlPlaneHosted, Replicas: 2},
			WorkerPools:       []*capnv1.WorkerPool{{Name: "md-0", Provider: "sim", Replicas: 2}},
		},
	}
	manifest.Default(c)
	rec := &capnv1.ControlPlaneRecord{Cluster: "demo", Implementation: capnv1.ControlPlaneHosted, ObservedGeneration: 1, Initialized: true,
		Endpoint: &capnv1.Endpoint{Host: "10.0.0.7", Port: 16443}, Version: "v1.34.2", Replicas: 2, ReadyReplicas: 1,
		Conditions: []*capnv1.Condition{
			{Type: "Ready", Status: "False", Reason: "APIServersNotReady", Message: "1 of 2 API servers answer", LastTransitionTime: timestamppb.New(fixedNow.Add(-30 * time.Second))},
			{Type: "EtcdReady", Status: "True", Reason: "QuorumHealthy", Message: "3 of 3 members", LastTransitionTime: timestamppb.New(fixedNow.Add(-time.Minute))},
		}}
	c.Status = plan.Plan(plan.Input{Cluster: c, Now: fixedNow, ControlPlane: rec}).Status

	var b strings.Builder
	describeCluster(&b, c, nil, nil, describeOpts{now: fixedNow, loc: time.UTC, controlPlane: rec})
	out := b.String()
	lineOf := func(prefix string) string {
		for _, l := range strings.Split(out, "\n") {
			if strings.HasPrefix(strings.TrimSpace(l), prefix) {
				return l
			}
		}
		return ""
	}
	if l := lineOf("Control plane:"); !strings.Contains(l, "hosted (endpoint 10.0.0.7:16443, v1.34.2, 1/2 ready)") {
		t.Errorf("Control plane line %q\n%s", l, out)
	}
	if !strings.Contains(out, "Control plane (hosted):") {
		t.Errorf("no section of the record's conditions\n%s", out)
	}
	_, section, _ := strings.Cut(out, "Control plane (hosted):")
	for prefix, want := range map[string][]string{
		"Ready ":     {"False", "APIServersNotReady", "30s", "1 of 2 API servers answer"},
		"EtcdReady ": {"True", "QuorumHealthy", "3 of 3 members"},
		// The planner's own condition carries the record's Ready.
		plan.ConditionControlPlaneReady: {"False", "APIServersNotReady", "1 of 2 API servers answer"},
	} {
		l := lineOf(prefix)
		if prefix != plan.ConditionControlPlaneReady {
			for _, sl := range strings.Split(section, "\n") {
				if strings.HasPrefix(strings.TrimSpace(sl), prefix) {
					l = sl
				}
			}
		}
		for _, w := range want {
			if !strings.Contains(l, w) {
				t.Errorf("row %q lacks %q\n%s", l, w, out)
			}
		}
	}
	if l := lineOf("Endpoint:"); !strings.Contains(l, "10.0.0.7:16443") {
		t.Errorf("Endpoint line %q: want the record's", l)
	}

	b.Reset()
	describeCluster(&b, c, nil, nil, describeOpts{now: fixedNow, loc: time.UTC})
	if out = b.String(); !strings.Contains(lineOf("Control plane:"), "hosted (no record yet: its implementation has not reported)") {
		t.Errorf("without a record:\n%s", out)
	}
	b.Reset()
	m := &capnv1.Cluster{Metadata: &capnv1.ObjectMeta{Name: "m"}, Spec: &capnv1.ClusterSpec{ControlPlane: &capnv1.ControlPlaneSpec{Provider: "sim", Replicas: 1}}}
	describeCluster(&b, m, nil, nil, describeOpts{now: fixedNow, loc: time.UTC})
	if out = b.String(); lineOf("Control plane:") != "" {
		t.Errorf("a machines cluster without a record:\n%s", out)
	}
}
