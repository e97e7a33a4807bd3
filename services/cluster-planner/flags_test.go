package clusterplanner

import (
	"flag"
	"strings"
	"testing"

	"github.com/capn-dev/capn/services/daemon"
)

func TestFlags(t *testing.T) {
	s := New(Config{})
	fs := flag.NewFlagSet(Name, flag.ContinueOnError)
	daemon.BindFlags(fs, s.Flags()...)
	if err := fs.Parse([]string{"--max-pool-replicas=20000", "--max-cluster-replicas=-1"}); err != nil {
		t.Fatal(err)
	}
	if err := daemon.ApplyFlagEnv(fs, func(k string) (string, bool) {
		return map[string]string{"CAPN_PLANNER_MAX_ACTIONS_PER_PLAN": "7", "CAPN_MAX_POOL_REPLICAS": "5"}[k], k == "CAPN_PLANNER_MAX_ACTIONS_PER_PLAN" || k == "CAPN_MAX_POOL_REPLICAS"
	}, s.Flags()...); err != nil {
		t.Fatal(err)
	}
	if s.cfg.MaxPoolReplicas != 20000 || s.maxActions() != 7 {
		t.Errorf("max pool replicas %d (the flag wins over the environment), max actions %d", s.cfg.MaxPoolReplicas, s.maxActions())
	}
	err := s.Validate()
	if err == nil || !strings.Contains(err.Error(), "--max-cluster-replicas") || !strings.Contains(err.Error(), "must not be negative") {
		t.Errorf("Validate: %v, want --max-cluster-replicas refused", err)
	}
	if New(Config{}).maxActions() != DefaultMaxActionsPerPlan {
		t.Error("the default bound of a plan is not DefaultMaxActionsPerPlan")
	}
}
