package conformance

import (
	"encoding/json"
	"fmt"
	"maps"
	"strings"
	"testing"
	"time"
)

// Pool labels and taints change in place and reach the workers' Nodes
// (issue 18's proof, step 6): `capn apply` of the cluster with a label and
// a PreferNoSchedule taint on the workers pool puts them on every worker
// Node (the health-watcher's Node sync) without replacing a machine; the
// manifest as it was removes them again. PreferNoSchedule moves no pod.
const (
	poolLabelKey, poolLabelValue = "example.com/tier", "web"
	poolTaintKey, poolTaintValue = "example.com/dedicated", "web"
	poolTaintEffect              = "PreferNoSchedule"
)

// withPoolLabels is manifest (kubeManifest formatted) with the workers
// pool's labels and taints.
func withPoolLabels(manifest string) string {
	const at = "    replicas: 2\n"
	if !strings.Contains(manifest, at) {
		panic("kubeManifest changed: no workers pool replicas line to add labels after")
	}
	return strings.Replace(manifest, at, at+fmt.Sprintf("    labels: {%s: %s}\n    taints:\n    - {key: %s, value: %s, effect: %s}\n",
		poolLabelKey, poolLabelValue, poolTaintKey, poolTaintValue, poolTaintEffect), 1)
}

// poolLabels runs the step on the Running machines and returns them (the
// same: no machine is replaced): it applies labeled, the cluster's
// manifest with the pool's label and taint, then manifest again.
func (s *suite) poolLabels(t *testing.T, k *KubeCluster, manifest, labeled string, machines map[string]KubeMachine) map[string]KubeMachine {
	t.Helper()
	type node struct {
		Metadata struct {
			Name   string            `json:"name"`
			Labels map[string]string `json:"labels"`
		} `json:"metadata"`
		Spec struct {
			ProviderID string `json:"providerID"`
			Taints     []struct {
				Key, Value, Effect string
			} `json:"taints"`
		} `json:"spec"`
	}
	// onWorkers checks every worker machine's Node carries (want) or not the
	// pool's label and taint, and that the machines are the same.
	onWorkers := func(want bool) error {
		if now := k.Running(); !maps.Equal(now, machines) {
			return fmt.Errorf("the Running machines %v, want the same %v: a label change must replace none", kubeNames(now), kubeNames(machines))
		}
		out, err := k.Kubectl("get", "nodes", "-o", "json")
		if err != nil {
			return err
		}
		var list struct{ Items []node }
		if err := json.Unmarshal([]byte(out), &list); err != nil {
			return err
		}
		byID := map[string]node{}
		for _, n := range list.Items {
			byID[n.Spec.ProviderID] = n
		}
		for name, m := range machines {
			if m.Pool != "workers" {
				continue
			}
			n, ok := byID[m.ProviderID]
			if !ok {
				return fmt.Errorf("no Node of %s (%s)", name, m.ProviderID)
			}
			label := n.Metadata.Labels[poolLabelKey] == poolLabelValue
			taint := false
			for _, tt := range n.Spec.Taints {
				taint = taint || (tt.Key == poolTaintKey && tt.Value == poolTaintValue && tt.Effect == poolTaintEffect)
			}
			if label != want || taint != want {
				return fmt.Errorf("the Node %s of %s: label %s=%s %v, taint %s=%s:%s %v; want both %v",
					n.Metadata.Name, name, poolLabelKey, poolLabelValue, label, poolTaintKey, poolTaintValue, poolTaintEffect, taint, want)
			}
		}
		return nil
	}
	s0 := time.Now()
	k.Apply(labeled)
	Poll(t, "the workers pool's label and taint on its Nodes, no machine replaced", 2*time.Minute, func() error { return onWorkers(true) })
	set := time.Since(s0)
	s0 = time.Now()
	k.Apply(manifest)
	Poll(t, "the workers pool's label and taint gone from its Nodes, no machine replaced", 2*time.Minute, func() error { return onWorkers(false) })
	t.Logf("pool label and taint on every worker Node %.1fs after capn apply, gone %.1fs after they were removed; the same %d machines throughout",
		set.Seconds(), time.Since(s0).Seconds(), len(machines))
	return machines
}
