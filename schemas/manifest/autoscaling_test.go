package manifest

import (
	"errors"
	"strings"
	"testing"

	"google.golang.org/protobuf/proto"

	capnv1 "github.com/capn-dev/capn/schemas/capn/v1alpha1"
)

func autoscaled(replicas, lo, hi int32) *capnv1.Cluster {
	c := valid()
	c.Spec.WorkerPools[0].Replicas = replicas
	c.Spec.WorkerPools[0].Autoscaling = &capnv1.Autoscaling{Min: lo, Max: hi}
	return c
}

// fieldErrorTexts is every FieldError of err as text, checking each is one.
func fieldErrorTexts(t *testing.T, err error) []string {
	t.Helper()
	if err == nil {
		return nil
	}
	var out []string
	for _, e := range flatten(err) {
		var fe *FieldError
		if !errors.As(e, &fe) {
			t.Errorf("%v is not a *FieldError", e)
		}
		out = append(out, e.Error())
	}
	return out
}

func TestValidateAutoscaling(t *testing.T) {
	tests := []struct {
		name string
		c    *capnv1.Cluster
		v    Validator
		want []string // exact error texts
	}{
		{"within bounds", autoscaled(2, 1, 5), Validator{}, nil},
		{"replicas left out", autoscaled(0, 1, 5), Validator{}, nil},
		{"min 0 max 0", autoscaled(0, 0, 0), Validator{}, nil},
		{"negative min", autoscaled(0, -1, 5), Validator{}, []string{
			"spec.workerPools[0].autoscaling.min: -1: must be 0 or more"}},
		{"max below min", autoscaled(0, 3, 2), Validator{}, []string{
			"spec.workerPools[0].autoscaling.max: 2: must be at least autoscaling.min (3)"}},
		{"max over the pool bound", autoscaled(0, 1, 11), Validator{MaxPoolReplicas: 10}, []string{
			"spec.workerPools[0].autoscaling.max: 11: must be at most 10 per pool (the gateway's and cluster-planner's --max-pool-replicas)"}},
		{"replicas above max", autoscaled(6, 1, 5), Validator{}, []string{
			"spec.workerPools[0].replicas: 6: must be within autoscaling.min..max (1..5), or left out: the cluster autoscaler sizes the pool"}},
		{"replicas below min", autoscaled(1, 2, 5), Validator{}, []string{
			"spec.workerPools[0].replicas: 1: must be within autoscaling.min..max (2..5), or left out: the cluster autoscaler sizes the pool"}},
		{"bad bounds: replicas not judged against them", autoscaled(9, 5, 2), Validator{}, []string{
			"spec.workerPools[0].autoscaling.max: 2: must be at least autoscaling.min (5)"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := fieldErrorTexts(t, tt.v.Validate(tt.c))
			if strings.Join(got, "\n") != strings.Join(tt.want, "\n") {
				t.Errorf("errors:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(tt.want, "\n"))
			}
		})
	}
}

func TestKeepAutoscaledReplicas(t *testing.T) {
	tests := []struct {
		name    string
		old     *capnv1.Cluster // nil: a create
		c       *capnv1.Cluster
		want    int32
		changed bool
	}{
		{"create, left out: min", nil, autoscaled(0, 2, 5), 2, true},
		{"create, given: kept", nil, autoscaled(3, 2, 5), 3, false},
		{"update, left out: the stored value", autoscaled(4, 1, 5), autoscaled(0, 1, 5), 4, true},
		{"update, the stored value: kept", autoscaled(4, 1, 5), autoscaled(4, 1, 5), 4, false},
		{"update, max lowered under it: the new max", autoscaled(4, 1, 5), autoscaled(0, 1, 3), 3, true},
		{"update, the stored value given, max lowered: the new max", autoscaled(4, 1, 5), autoscaled(4, 1, 3), 3, true},
		{"update, min raised over it: the new min", autoscaled(1, 1, 5), autoscaled(0, 2, 5), 2, true},
		{"autoscaling turned on, left out: the user's replicas", valid(), autoscaled(0, 1, 5), 3, true},
		{"autoscaling turned on, user's replicas over max: max", valid(), autoscaled(0, 1, 2), 2, true},
		{"autoscaling turned on with replicas: the user's", valid(), autoscaled(4, 1, 5), 4, false},
		{"a changed value: left for ValidateUpdate", autoscaled(4, 1, 5), autoscaled(2, 1, 5), 2, false},
		{"invalid bounds: untouched", nil, autoscaled(0, 3, 2), 0, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := proto.CloneOf(tt.c)
			changed := KeepAutoscaledReplicas(tt.old, c)
			if got := c.Spec.WorkerPools[0].Replicas; got != tt.want || changed != tt.changed {
				t.Errorf("replicas %d (changed %v), want %d (changed %v)", got, changed, tt.want, tt.changed)
			}
			if got := c.Spec.WorkerPools[1].Replicas; got != tt.c.Spec.WorkerPools[1].Replicas {
				t.Errorf("a pool without autoscaling changed: %d", got)
			}
		})
	}
}

func TestValidateUpdateAutoscaledReplicas(t *testing.T) {
	refused := "spec.workerPools[0].replicas: 2: pool md-0 is autoscaled (autoscaling.min..max 1..5): its replicas (4) belong to the cluster autoscaler; leave replicas out, change min or max, or remove autoscaling to size the pool yourself"
	tests := []struct {
		name   string
		old, c *capnv1.Cluster
		want   []string
	}{
		{"unchanged", autoscaled(4, 1, 5), autoscaled(4, 1, 5), nil},
		{"changed (apply, capn scale)", autoscaled(4, 1, 5), autoscaled(2, 1, 5), []string{refused}},
		{"moved into new bounds", autoscaled(4, 1, 5), autoscaled(3, 1, 3), nil},
		{"not into the new bounds", autoscaled(4, 1, 5), autoscaled(2, 1, 3), []string{
			"spec.workerPools[0].replicas: 2: pool md-0 is autoscaled (autoscaling.min..max 1..3): its replicas (3) belong to the cluster autoscaler; leave replicas out, change min or max, or remove autoscaling to size the pool yourself"}},
		{"autoscaling turned on", valid(), autoscaled(2, 1, 5), nil},
		{"autoscaling turned off: replicas the user's again", autoscaled(4, 1, 5), valid(), nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := fieldErrorTexts(t, ValidateUpdate(tt.old, tt.c))
			if strings.Join(got, "\n") != strings.Join(tt.want, "\n") {
				t.Errorf("errors:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(tt.want, "\n"))
			}
		})
	}
}

// An apply of a manifest read back from capn get (replicas as stored) that
// only changes the bounds is accepted after KeepAutoscaledReplicas.
func TestApplyOfAReadBackManifestAfterBoundsChange(t *testing.T) {
	old := autoscaled(4, 1, 5)
	c := autoscaled(4, 1, 3)
	if err := Validate(c); err == nil {
		t.Fatal("replicas 4 with max 3 validates before KeepAutoscaledReplicas")
	}
	KeepAutoscaledReplicas(old, c)
	if err := ValidateUpdate(old, c); err != nil {
		t.Fatal(err)
	}
}
