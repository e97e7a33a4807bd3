package addonmanager

import (
	"errors"
	"strings"
	"testing"
	"time"

	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/timestamppb"

	capnv1 "github.com/capn-dev/capn/schemas/capn/v1alpha1"
	"github.com/capn-dev/capn/schemas/conditions"
	"github.com/capn-dev/capn/schemas/manifest"
)

var t0 = time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)

func set(name string, order int32, mode string, sel map[string]string) *capnv1.AddonSet {
	s := &capnv1.AddonSet{Metadata: &capnv1.ObjectMeta{Name: name, Uid: name + "-uid", Generation: 1},
		Spec: &capnv1.AddonSetSpec{Mode: mode, Order: order, ClusterSelector: &capnv1.LabelSelector{MatchLabels: sel},
			Manifests: []*capnv1.AddonManifest{{Name: "m", Yaml: "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: " + name + "\n"}}}}
	manifest.DefaultAddonSet(s)
	return s
}

func cluster(labels map[string]string) *capnv1.Cluster {
	return &capnv1.Cluster{Metadata: &capnv1.ObjectMeta{Name: "c1", Labels: labels}, Spec: &capnv1.ClusterSpec{}}
}

// applied is the record of s applied at its generation with hash h at t.
func applied(s *capnv1.AddonSet, h string, at time.Time) *capnv1.ClusterAddonStatus {
	return Applied("c1", s, nil, h, []*capnv1.AddonObject{{ApiVersion: "v1", Kind: "ConfigMap", Name: s.GetMetadata().GetName()}}, at)
}

func input(c *capnv1.Cluster, sets []*capnv1.AddonSet, recs ...*capnv1.ClusterAddonStatus) Input {
	in := Input{Name: "c1", Cluster: c, Initialized: true, API: true, Sets: sets, Now: t0, Hashes: map[string]string{},
		Records: map[string]*capnv1.ClusterAddonStatus{}, Backoff: func(n int32) time.Duration { return time.Duration(n) * 10 * time.Second }}
	for _, s := range sets {
		in.Hashes[s.GetMetadata().GetName()] = "h1"
	}
	for _, r := range recs {
		in.Records[r.GetAddonSet()] = r
	}
	return in
}

// kinds renders the steps as "apply:a record:b".
func kinds(r Result) string {
	var out []string
	for _, s := range r.Steps {
		out = append(out, s.Kind.String()+":"+s.Set)
	}
	return strings.Join(out, " ")
}

func reasonOf(r *capnv1.ClusterAddonStatus) string {
	return conditions.Get(r.GetConditions(), manifest.AddonConditionApplied).GetReason()
}

func TestPlan(t *testing.T) {
	web := map[string]string{"tier": "web"}
	a, b := set("a", 0, manifest.AddonApplyOnce, nil), set("b", 1, manifest.AddonReconcile, web)
	b.Spec.ReconcileInterval = durationpb.New(time.Minute)
	bDel := set("b", 1, manifest.AddonReconcile, web)
	bDel.Spec.OnRemove = manifest.AddonRemoveDelete
	changed := set("a", 0, manifest.AddonApplyOnce, nil)
	changed.Metadata.Generation = 2
	failed := Failed("c1", a, nil, ReasonApplyFailed, errors.New("boom"), t0.Add(-5*time.Second))
	oldIncarnation := applied(a, "h1", t0)
	oldIncarnation.SetUid = "earlier"
	deleting := cluster(web)
	deleting.Metadata.DeletionTimestamp = timestamppb.New(t0)
	optOut := cluster(web)
	optOut.Spec.Addons = &capnv1.AddonsSpec{DisableDefaults: true}

	tests := []struct {
		name    string
		in      Input
		want    string
		reasons map[string]string // set → the reason of the record a StepRecord writes
		requeue time.Duration
	}{
		{"first apply, lowest order first", input(cluster(web), []*capnv1.AddonSet{b, a}), "apply:a record:b", map[string]string{"b": ReasonWaitingForOrder}, 0},
		{"next order once the first is applied", input(cluster(web), []*capnv1.AddonSet{a, b}, applied(a, "h1", t0)), "apply:b", nil, 0},
		{"selector: b is not for this cluster", input(cluster(nil), []*capnv1.AddonSet{a, b}), "apply:a", nil, 0},
		{"all applied; Reconcile comes back after its interval", input(cluster(web), []*capnv1.AddonSet{a, b}, applied(a, "h1", t0), applied(b, "h1", t0.Add(-20*time.Second))),
			"", nil, 40 * time.Second},
		{"Reconcile: interval passed", input(cluster(web), []*capnv1.AddonSet{a, b}, applied(a, "h1", t0), applied(b, "h1", t0.Add(-time.Minute))), "apply:b", nil, 0},
		{"Reconcile: content changed", func() Input {
			in := input(cluster(web), []*capnv1.AddonSet{b}, applied(b, "h0", t0))
			return in
		}(), "apply:b", nil, 0},
		{"ApplyOnce: a changed set is not applied again", input(cluster(nil), []*capnv1.AddonSet{changed}, applied(a, "h0", t0)), "record:a", map[string]string{"a": ReasonApplied}, 0},
		{"no API server", func() Input { in := input(cluster(nil), []*capnv1.AddonSet{a}); in.API = false; return in }(), "record:a", map[string]string{"a": ReasonNoKubernetesAPI}, 0},
		{"control plane not initialised", func() Input { in := input(cluster(nil), []*capnv1.AddonSet{a}); in.Initialized = false; return in }(),
			"record:a", map[string]string{"a": ReasonWaitingForControlPlane}, 0},
		{"a secret missing", func() Input {
			in := input(cluster(nil), []*capnv1.AddonSet{a})
			in.Unreadable = map[string]string{"a": "add-on secret x does not exist"}
			return in
		}(), "record:a", map[string]string{"a": ReasonApplyFailed}, 0},
		{"failed: backoff holds the next attempt", input(cluster(nil), []*capnv1.AddonSet{a}, failed), "", nil, 5 * time.Second},
		{"failed: backoff passed", func() Input {
			in := input(cluster(nil), []*capnv1.AddonSet{a}, failed)
			in.Now = t0.Add(10 * time.Second)
			return in
		}(), "apply:a", nil, 0},
		{"a record of an earlier incarnation: applied anew", input(cluster(nil), []*capnv1.AddonSet{a}, oldIncarnation), "apply:a", nil, 0},
		{"set gone, Leave", input(cluster(web), nil, applied(b, "h1", t0)), "forget:b", nil, 0},
		{"set gone, Delete", input(cluster(web), nil, applied(bDel, "h1", t0)), "remove:b", nil, 0},
		{"unselected, Delete, no API: forgotten", func() Input {
			in := input(cluster(nil), []*capnv1.AddonSet{bDel}, applied(bDel, "h1", t0))
			in.API = false
			return in
		}(), "forget:b", nil, 0},
		{"cluster opted out of the defaults", input(optOut, []*capnv1.AddonSet{a, b}, applied(a, "h1", t0), applied(b, "h1", t0)), "forget:a", nil, time.Minute},
		{"cluster deleting: every record forgotten", input(deleting, []*capnv1.AddonSet{a, bDel}, applied(a, "h1", t0), applied(bDel, "h1", t0)), "forget:a forget:b", nil, 0},
		{"cluster gone", input(nil, []*capnv1.AddonSet{a}, applied(a, "h1", t0)), "forget:a", nil, 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			res := Plan(tt.in)
			if got := kinds(res); got != tt.want {
				t.Fatalf("steps %q, want %q", got, tt.want)
			}
			for _, st := range res.Steps {
				if st.Kind == StepRecord && reasonOf(st.Record) != tt.reasons[st.Set] {
					t.Errorf("record of %s: reason %s, want %s (%v)", st.Set, reasonOf(st.Record), tt.reasons[st.Set], st.Record.GetConditions())
				}
			}
			if res.RequeueAfter != tt.requeue {
				t.Errorf("requeue after %s, want %s", res.RequeueAfter, tt.requeue)
			}
		})
	}
}

// A plan is idempotent: the record a StepRecord writes is what the next
// plan wants, so it writes nothing more.
func TestPlanRecordsConverge(t *testing.T) {
	a, b := set("a", 0, manifest.AddonApplyOnce, nil), set("b", 1, manifest.AddonApplyOnce, nil)
	in := input(cluster(nil), []*capnv1.AddonSet{a, b})
	in.Initialized = false
	for range 2 {
		res := Plan(in)
		for _, st := range res.Steps {
			if st.Kind != StepRecord {
				t.Fatalf("step %v", st.Kind)
			}
			in.Records[st.Set] = st.Record
		}
		in.Now = in.Now.Add(time.Minute)
	}
	if res := Plan(in); len(res.Steps) != 0 {
		t.Errorf("a plan after its records were written: %q", kinds(res))
	}
	// The transition time stays while the status holds.
	if got := conditions.Get(in.Records["a"].GetConditions(), manifest.AddonConditionApplied).GetLastTransitionTime().AsTime(); !got.Equal(t0) {
		t.Errorf("transition time moved: %s", got)
	}
}

func TestFailedKeepsAReconcileSetApplied(t *testing.T) {
	b := set("b", 0, manifest.AddonReconcile, nil)
	rec := Failed("c1", b, applied(b, "h1", t0), ReasonApplyFailed, errors.New("etcd timeout"), t0.Add(time.Minute))
	if !manifest.AddonApplied(b, rec) || rec.GetAttempts() != 1 || rec.GetLastError() != "etcd timeout" || len(rec.GetObjects()) != 1 {
		t.Errorf("a failed re-apply of an applied Reconcile set: %v", rec)
	}
	a := set("a", 0, manifest.AddonApplyOnce, nil)
	if rec := Failed("c1", a, nil, ReasonApplyFailed, errors.New("x"), t0); manifest.AddonApplied(a, rec) || reasonOf(rec) != ReasonApplyFailed {
		t.Errorf("a failed first apply: %v", rec)
	}
}
