package plan_test

import (
	"testing"

	capnv1 "github.com/capn-dev/capn/schemas/capn/v1alpha1"
	"github.com/capn-dev/capn/services/cluster-planner/plan"
	"github.com/capn-dev/capn/services/cluster-planner/plan/plantest"
)

func TestFields(t *testing.T) {
	h := plantest.New(cluster(1))
	r := h.Plan()
	f := r.Fields()
	if f["create"] != 1 || f["infra_ensure"] != 1 || f["delete"] != 0 || f["phase"] != capnv1.ClusterProvisioning.Wire() || f["requeue_after"] != "30s" {
		t.Errorf("fields %v", f)
	}
}

func TestEnsureInfraOnlyWhenMissing(t *testing.T) {
	h := plantest.New(cluster(1))
	if r := h.Plan(); len(of[plan.EnsureClusterInfra](r)) != 1 || of[plan.EnsureClusterInfra](r)[0].Provider != "sim" {
		t.Fatalf("actions %v", r.Actions)
	}
	h.Infra.Exists = true
	if r := h.Plan(); len(of[plan.EnsureClusterInfra](r)) != 0 {
		t.Fatalf("actions %v", r.Actions)
	}
}

func TestCreatedMachineSpec(t *testing.T) {
	c := cluster(1, 1)
	c.Spec.WorkerPools[0].Labels = map[string]string{"tier": "web"}
	c.Spec.Bootstrap.PreCommands = []string{"cluster"}
	c.Spec.WorkerPools[0].Bootstrap = nil
	h := started(t, c)
	name := h.Names("md-0")[0]
	m := h.Machines[name]
	s := m.Spec
	if s.Cluster != "demo" || s.Pool != "md-0" || s.Role != plan.RoleWorker || s.Provider != "sim" || s.Version != "v1.33.4" ||
		s.Labels["tier"] != "web" || s.TemplateHash != h.DesiredHash("md-0") || s.Bootstrap.GetProvider() != "kubeadm" || s.Bootstrap.PreCommands[0] != "cluster" {
		t.Errorf("spec %v", s)
	}
	if m.Metadata.Labels[plan.LabelCluster] != "demo" || m.Metadata.Labels[plan.LabelPool] != "md-0" || m.Metadata.CreationTimestamp == nil {
		t.Errorf("metadata %v", m.Metadata)
	}
}

func TestMachinesOfOtherClustersIgnored(t *testing.T) {
	h := started(t, cluster(1))
	other := plantest.New(cluster(1))
	other.Cluster.Metadata.Name = "other"
	converge(t, other, nil)
	for name, m := range other.Machines {
		h.Machines[name+"-x"] = m
	}
	if r := h.Plan(); len(r.Actions) != 0 {
		t.Errorf("planned for another cluster's machines: %v", r.Actions)
	}
}
