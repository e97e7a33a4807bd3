package healthwatcher

import (
	"testing"
	"time"

	"google.golang.org/protobuf/types/known/timestamppb"

	capnv1 "github.com/capn-dev/capn/schemas/capn/v1alpha1"
)

func TestView(t *testing.T) {
	p := testPolicy()
	rec := &capnv1.NodeHealth{Cluster: "c1", Machine: "m1", Ready: true, LastHeartbeat: timestamppb.New(at(0)), Healthy: true, Updated: timestamppb.New(at(0)),
		Conditions: []*capnv1.NodeCondition{{Type: ConditionReady, Status: "True", Reason: "KubeletReady", LastTransitionTime: timestamppb.New(at(0))}}}
	tg := func(beatAt time.Duration) (Target, beat) {
		b := beat{at: at(beatAt), ready: true, kubeletVersion: "v1.34.2"}
		return Target{Machine: "m1", LastHeartbeat: b.at, Ready: true}, b
	}
	unhealthy := &Unhealthy{Machine: "m1", Reasons: []*capnv1.Condition{{Type: "KernelDeadlock"}}, Since: at(time.Minute)}
	tests := []struct {
		name        string
		cur         *capnv1.NodeHealth
		beatAt      time.Duration
		v           *Unhealthy
		now         time.Duration
		wantChanged bool
		wantBeat    time.Duration // recorded heartbeat after, if changed
	}{
		{"healthy machine without a record: none made", nil, 0, nil, time.Second, false, 0},
		{"unhealthy machine without a record: made", nil, 0, unhealthy, time.Minute, true, 0},
		{"steady heartbeats: no write", rec, 30 * time.Second, nil, 31 * time.Second, false, 0},
		{"heartbeat persisted every 5m", rec, 5 * time.Minute, nil, 5*time.Minute + time.Second, true, 5 * time.Minute},
		{"silent past the grace: Ready Unknown written", rec, 0, nil, 3 * time.Minute, true, 0},
		{"new verdict written with the latest heartbeat", rec, 50 * time.Second, unhealthy, time.Minute, true, 50 * time.Second},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			target, b := tg(tt.beatAt)
			next, changed := view(tt.cur, "c1", target, b, tt.v, p, 5*time.Minute, at(tt.now))
			if changed != tt.wantChanged {
				t.Fatalf("changed=%v, want %v: %v", changed, tt.wantChanged, next)
			}
			if changed && tt.cur != nil && !next.GetLastHeartbeat().AsTime().Equal(at(tt.wantBeat)) {
				t.Fatalf("recorded heartbeat %s, want %s", next.GetLastHeartbeat().AsTime().Sub(t0), tt.wantBeat)
			}
			if changed && next.GetLastHeartbeat() != nil && !next.GetReady() {
				t.Fatal("a heartbeat was recorded without what it said")
			}
			if changed && (tt.v != nil) == next.GetHealthy() {
				t.Fatalf("verdict not written: %v", next)
			}
		})
	}
}
