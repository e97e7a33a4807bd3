package gateway

import (
	"context"
	"errors"
	"net/http"
	"strings"
	"testing"
	"time"

	capnv1 "github.com/capn-dev/capn/schemas/capn/v1alpha1"
	"github.com/capn-dev/capn/schemas/keys"
)

// TestApplyRetryAfterLostRace: apply checks its manifest once and hands
// the checked cluster itself to every write attempt. When another writer
// wins the race, the retry stores it with server-owned fields set afresh
// from the new stored cluster, and the update rules checked against it.
func TestApplyRetryAfterLostRace(t *testing.T) {
	e := newEnv(t)
	first := e.apply(demoYAML)
	s := &server{clusters: e.clusters, now: time.Now}

	mine := strings.Replace(demoYAML, "{name: md-0, provider: sim, replicas: 2}", "{name: md-0, provider: sim, replicas: 4}", 1)
	in, err := decodeApply([]byte(mine))
	if err != nil {
		t.Fatal(err)
	}
	checked := s.validator.Check(in)
	mutate := applyChecked(s.validator, checked, "demo", "")
	calls := 0
	res, err := s.writeCluster(context.Background(), writeOp{
		name: "demo", create: true, replace: true,
		mutate: func(cur, next *capnv1.Cluster) (*capnv1.Cluster, error) {
			calls++
			if next != nil {
				t.Error("apply replaces the cluster, yet got a copy of the stored one")
			}
			if calls == 1 { // another writer changes the spec first
				e.apply(strings.Replace(demoYAML, "replicas: 1, version", "replicas: 3, version", 1))
			}
			return mutate(cur, next)
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	if calls != 2 {
		t.Fatalf("mutate ran %d times, want 2 (one lost race)", calls)
	}
	got, rev, err := e.clusters.Get(context.Background(), keys.Cluster("demo"))
	if err != nil {
		t.Fatal(err)
	}
	md := got.GetMetadata()
	switch {
	case res.created || res.rev != rev:
		t.Errorf("result created=%v rev=%d, want an update at %d", res.created, res.rev, rev)
	case md.GetUid() != first.GetMetadata().GetUid():
		t.Errorf("uid %s, want the first apply's %s", md.GetUid(), first.GetMetadata().GetUid())
	case md.GetGeneration() != 3:
		t.Errorf("generation %d, want 3 (create, the racing scale, this apply)", md.GetGeneration())
	case got.GetSpec().GetWorkerPools()[0].GetReplicas() != 4 || got.GetSpec().GetWorkerPools()[1].GetReplicas() != 1:
		t.Errorf("stored spec %v, want this manifest's", got.GetSpec())
	case md.GetCreationTimestamp().AsTime() != first.GetMetadata().GetCreationTimestamp().AsTime():
		t.Errorf("creationTimestamp %v, want the first apply's", md.GetCreationTimestamp())
	}
}

// TestApplyRetryChecksUpdateRulesAgain: the retry after a lost race checks
// the update rules against the cluster that won, not the one first read.
func TestApplyRetryChecksUpdateRulesAgain(t *testing.T) {
	e := newEnv(t)
	e.apply(demoYAML)
	s := &server{clusters: e.clusters, now: time.Now}
	scaled := strings.Replace(demoYAML, "{name: md-0, provider: sim, replicas: 2}", "{name: md-0, provider: sim, replicas: 4}", 1)
	in, err := decodeApply([]byte(scaled))
	if err != nil {
		t.Fatal(err)
	}
	mutate := applyChecked(s.validator, s.validator.Check(in), "demo", "")
	calls := 0
	_, err = s.writeCluster(context.Background(), writeOp{
		name: "demo", create: true, replace: true,
		mutate: func(cur, next *capnv1.Cluster) (*capnv1.Cluster, error) {
			calls++
			if calls == 1 { // another writer upgrades first: this apply becomes a downgrade
				e.apply(strings.Replace(demoYAML, "v1.34.2", "v1.35.0", 1))
			}
			return mutate(cur, next)
		},
	})
	var p *problemError
	if !errors.As(err, &p) || p.Status != http.StatusUnprocessableEntity || !strings.Contains(p.Error(), "downgrade from v1.35.0") {
		t.Fatalf("err = %v, want a 422 naming the downgrade from the racing upgrade", err)
	}
}
