package maintenance

import (
	"testing"
	"time"

	"google.golang.org/protobuf/types/known/timestamppb"

	capnv1 "github.com/capn-dev/capn/schemas/capn/v1alpha1"
)

func TestDecide(t *testing.T) {
	cat := &capnv1.KubernetesVersions{Spec: &capnv1.KubernetesVersionsSpec{Versions: []*capnv1.KubernetesVersion{
		{Version: "v1.34.5"}, {Version: "v1.34.7", Classification: "deprecated"}}}}
	sat := mustUTC("2026-10-24T10:00:00Z") // no window open
	sun := mustUTC("2026-10-25T01:00:00Z") // the Sunday window open
	win := []*capnv1.MaintenanceWindow{{Days: []string{"Sun"}, Start: "02:30", End: "04:00", TimeZone: "Europe/Berlin"}}
	tests := []struct {
		name         string
		spec         *capnv1.ClusterSpec
		deleting     bool
		cat          *capnv1.KubernetesVersions
		now          time.Time
		version      string
		clearPending bool
		waiting      int
		noRecord     bool
	}{
		{"no windows: always open, patched at once", &capnv1.ClusterSpec{KubernetesVersion: "v1.34.2", Maintenance: &capnv1.MaintenanceSpec{AutoPatch: true}}, false, cat, sat, "v1.34.5", false, 0, false},
		{"closed: waits", &capnv1.ClusterSpec{KubernetesVersion: "v1.34.2", Maintenance: &capnv1.MaintenanceSpec{AutoPatch: true, Windows: win}}, false, cat, sat, "", false, 1, false},
		{"open: patched", &capnv1.ClusterSpec{KubernetesVersion: "v1.34.2", Maintenance: &capnv1.MaintenanceSpec{AutoPatch: true, Windows: win}}, false, cat, sun, "v1.34.5", false, 0, false},
		{"paused: waits even in the window", &capnv1.ClusterSpec{Paused: true, KubernetesVersion: "v1.34.2", Maintenance: &capnv1.MaintenanceSpec{AutoPatch: true, Windows: win}}, false, cat, sun, "", false, 1, false},
		{"deleting: waits", &capnv1.ClusterSpec{KubernetesVersion: "v1.34.2", Maintenance: &capnv1.MaintenanceSpec{AutoPatch: true}}, true, cat, sun, "", false, 1, false},
		{"no opt-in: nothing", &capnv1.ClusterSpec{KubernetesVersion: "v1.34.2", Maintenance: &capnv1.MaintenanceSpec{Windows: win}}, false, cat, sun, "", false, 0, false},
		{"no catalogue: nothing", &capnv1.ClusterSpec{KubernetesVersion: "v1.34.2", Maintenance: &capnv1.MaintenanceSpec{AutoPatch: true}}, false, nil, sun, "", false, 0, false},
		{"newest already (deprecated newer skipped)", &capnv1.ClusterSpec{KubernetesVersion: "v1.34.5", Maintenance: &capnv1.MaintenanceSpec{AutoPatch: true}}, false, cat, sun, "", false, 0, false},
		{"a pending upgrade reached by hand is cleared at once", &capnv1.ClusterSpec{KubernetesVersion: "v1.35.0", Maintenance: &capnv1.MaintenanceSpec{PendingVersion: "v1.35.0", Windows: win}}, false, cat, sat, "", true, 0, false},
		{"a pending upgrade newer than the patch wins", &capnv1.ClusterSpec{KubernetesVersion: "v1.34.2", Maintenance: &capnv1.MaintenanceSpec{AutoPatch: true, PendingVersion: "v1.35.0", Windows: win}}, false, cat, sun, "v1.35.0", true, 0, false},
		{"no maintenance, no schedules: no record", &capnv1.ClusterSpec{KubernetesVersion: "v1.34.2"}, false, cat, sun, "", false, 0, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := &capnv1.Cluster{Metadata: &capnv1.ObjectMeta{Name: "demo"}, Spec: tt.spec}
			if tt.deleting {
				c.Metadata.DeletionTimestamp = timestamppb.New(tt.now)
			}
			out := Decide(Input{Cluster: c, Catalogue: tt.cat, Now: tt.now})
			if out.Version != tt.version || out.ClearPending != tt.clearPending || len(out.Record.GetMaintenance().GetWaiting()) != tt.waiting || (out.Record == nil) != tt.noRecord {
				t.Errorf("Decide = version %q clear %v waiting %v record %v; want %q %v %d record %v",
					out.Version, out.ClearPending, out.Record.GetMaintenance().GetWaiting(), out.Record != nil, tt.version, tt.clearPending, tt.waiting, !tt.noRecord)
			}
			if out.Version != "" && !out.Apply(c) {
				t.Error("Apply changed nothing")
			}
		})
	}
}

// A paused cluster's passed transition is not marked seen: it is applied
// once the cluster is unpaused.
func TestDecidePausedScheduleCatchesUp(t *testing.T) {
	spec := &capnv1.ClusterSpec{Paused: true, KubernetesVersion: "v1.34.2", Hibernation: &capnv1.HibernationSpec{Schedules: []*capnv1.HibernationSchedule{{Start: "0 19 * * *", End: "0 7 * * *"}}}}
	c := &capnv1.Cluster{Metadata: &capnv1.ObjectMeta{Name: "demo"}, Spec: spec}
	seen := mustUTC("2026-10-24T07:00:00Z")
	rec := &capnv1.MaintenanceRecord{SeenTransition: timestamppb.New(seen)}
	out := Decide(Input{Cluster: c, Record: rec, Now: mustUTC("2026-10-24T19:30:00Z")})
	if out.SetHibernated != nil || !out.Record.GetSeenTransition().AsTime().Equal(seen) {
		t.Fatalf("paused: set %v, seen %v", out.SetHibernated, out.Record.GetSeenTransition().AsTime())
	}
	spec.Paused = false
	out = Decide(Input{Cluster: c, Record: rec, Now: mustUTC("2026-10-24T19:30:00Z")})
	if out.SetHibernated == nil || !*out.SetHibernated || !out.Record.GetSeenTransition().AsTime().Equal(mustUTC("2026-10-24T19:00:00Z")) {
		t.Fatalf("unpaused: set %v, seen %v", out.SetHibernated, out.Record.GetSeenTransition().AsTime())
	}
}
