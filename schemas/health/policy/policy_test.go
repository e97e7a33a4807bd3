package policy

import (
	"testing"
	"time"

	"google.golang.org/protobuf/types/known/durationpb"

	capnv1 "github.com/capn-dev/capn/schemas/capn/v1alpha1"
)

func TestThreshold(t *testing.T) {
	tests := []struct {
		s                string
		unhealthy, total int
		want             bool
	}{
		{"40%", 1, 3, true}, {"40%", 2, 3, false}, {"40%", 2, 5, true}, {"40%", 3, 5, false},
		{"40%", 1, 2, false}, // 40% of 2 rounds down to 0: small pools need a count or a range
		{"2", 2, 10, true}, {"2", 3, 10, false},
		{"[1-3]", 0, 10, false}, {"[1-3]", 3, 10, true}, {"[1-3]", 4, 10, false},
		{"100%", 7, 7, true},
	}
	for _, tt := range tests {
		th := MustThreshold(tt.s)
		if got := th.Allows(tt.unhealthy, tt.total); got != tt.want {
			t.Errorf("%s allows %d of %d = %v, want %v", tt.s, tt.unhealthy, tt.total, got, tt.want)
		}
	}
	for _, bad := range []string{"", "-1", "x%", "[3-1]", "[1-]", "1.5"} {
		if _, err := ParseThreshold(bad); err == nil {
			t.Errorf("%q parsed", bad)
		}
	}
	if got := MustThreshold("40%").Describe(5); got != "40% of 5 = 2" {
		t.Errorf("describe %q", got)
	}
}

func TestResolve(t *testing.T) {
	d := Default()
	c := &capnv1.Cluster{Spec: &capnv1.ClusterSpec{
		Health: &capnv1.HealthPolicy{MaxUnhealthy: "2", HeartbeatGrace: durationpb.New(time.Minute)},
		WorkerPools: []*capnv1.WorkerPool{
			{Name: "md-0", Replicas: 3},
			{Name: "md-1", Replicas: 5, Health: &capnv1.HealthPolicy{
				UnhealthyConditions: []*capnv1.UnhealthyCondition{{Type: "KernelDeadlock", Status: "True"}},
				NodeStartupTimeout:  durationpb.New(0), MaxInFlight: 2, MaxUnhealthy: "[0-1]"}},
			{Name: "md-2", Health: &capnv1.HealthPolicy{NodeStartupTimeout: durationpb.New(time.Second), MaxUnhealthy: "bad"}},
		},
	}}
	cp, err := Resolve(c, ControlPlanePool, d)
	if err != nil || cp.MaxUnhealthy.String() != "2" || cp.HeartbeatGrace != time.Minute || cp.NodeStartupTimeout != 10*time.Minute ||
		cp.MaxInFlight != 1 || len(cp.UnhealthyConditions) != 2 {
		t.Fatalf("control plane takes the cluster's policy over the defaults: %+v %v", cp, err)
	}
	md1, err := Resolve(c, "md-1", d)
	if err != nil || md1.NodeStartupTimeout != 0 || md1.MaxInFlight != 2 || md1.MaxUnhealthy.String() != "[0-1]" ||
		len(md1.UnhealthyConditions) != 1 || md1.HeartbeatGrace != time.Minute {
		t.Fatalf("pool overrides field by field, 0 disables the startup check: %+v %v", md1, err)
	}
	md2, err := Resolve(c, "md-2", d)
	if err == nil || md2.MaxUnhealthy.String() != "2" || md2.NodeStartupTimeout != 30*time.Second {
		t.Fatalf("bad max unhealthy keeps the inherited one and is reported; short startup timeout raised to the floor: %+v %v", md2, err)
	}
	if Replicas(c, "md-1") != 5 || Replicas(c, "gone") != 0 || len(Pools(c)) != 4 {
		t.Fatal("pools and replicas")
	}
}

func TestTrustedSources(t *testing.T) {
	c := &capnv1.Cluster{Spec: &capnv1.ClusterSpec{
		Health: &capnv1.HealthPolicy{TrustedSources: []string{"monitoring"}},
		WorkerPools: []*capnv1.WorkerPool{
			{Name: "md-0"},
			{Name: "md-1", Health: &capnv1.HealthPolicy{TrustedSources: []string{"npd-bridge"}}},
		},
	}}
	tests := []struct {
		pool, source string
		want         bool
	}{
		{ControlPlanePool, "capn-node", true}, // over NATS: the machine itself
		{ControlPlanePool, "kubernetes", true},
		{ControlPlanePool, "", true},
		{ControlPlanePool, IngestSource("monitoring"), true},
		{ControlPlanePool, IngestSource("attacker"), false},
		{"md-0", IngestSource("monitoring"), true},  // inherited
		{"md-1", IngestSource("monitoring"), false}, // a pool's list replaces the cluster's
		{"md-1", IngestSource("npd-bridge"), true},
	}
	for _, tt := range tests {
		p, err := Resolve(c, tt.pool, Default())
		if err != nil {
			t.Fatal(err)
		}
		if got := p.Trusts(tt.source); got != tt.want {
			t.Errorf("pool %s trusts %q: %v, want %v", tt.pool, tt.source, got, tt.want)
		}
	}
}
