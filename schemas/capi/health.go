package capi

import (
	"slices"
	"strings"
	"time"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/durationpb"

	capnv1 "github.com/capn-dev/capn/schemas/capn/v1alpha1"
)

// healthCheck maps a MachineHealthCheck (v1beta1 or v1beta2) to the health
// policy of the pools its selector picks, or of the cluster when it picks
// the control plane or every machine (capn's control plane takes the
// cluster's policy).
func (c *converter) healthCheck(mhc *object) {
	spec := mhc.at().field("spec")
	spec.field("clusterName").use()
	pools, cluster, ok := c.healthTargets(mhc, spec.field("selector"))
	if !ok {
		return
	}
	hp := c.healthPolicy(mhc, spec)
	if hp == nil {
		return
	}
	if cluster {
		c.setHealth(mhc, "", &c.out.Spec.Health, hp)
	}
	for _, name := range pools {
		c.setHealth(mhc, name, &c.pools[name].spec.Health, hp)
	}
}

// setHealth gives *dst the policy hp, keeping a maxInFlight already there
// (from the MachineDeployment); a second MachineHealthCheck for the same
// target is reported.
func (c *converter) setHealth(mhc *object, target string, dst **capnv1.HealthPolicy, hp *capnv1.HealthPolicy) {
	what := "the cluster"
	if target != "" {
		what = "pool " + target
	}
	if prev, ok := c.healthFrom[target]; ok {
		c.noteObject(mhc, reasonHealthTaken(what, prev))
		return
	}
	c.healthFrom[target] = mhc.ref()
	hp = proto.Clone(hp).(*capnv1.HealthPolicy)
	if *dst != nil {
		hp.MaxInFlight = (*dst).MaxInFlight
	}
	*dst = hp
}

// healthTargets resolves a selector to pools or to the cluster.
func (c *converter) healthTargets(mhc *object, sel node) (pools []string, cluster, ok bool) {
	labels := sel.field("matchLabels").stringMap()
	if labels == nil {
		labels = map[string]string{}
	}
	for _, e := range sel.field("matchExpressions").items() {
		key, _ := e.field("key").v.(string)
		op, _ := e.field("operator").v.(string)
		if key == capiLabelDomain+"control-plane" && op == "Exists" {
			labels[key] = ""
			e.use()
			continue
		}
		c.note(mhc, e, reasonSelector)
	}
	delete(labels, capiLabelDomain+"cluster-name")
	if _, cp := labels[capiLabelDomain+"control-plane"]; cp {
		c.notes = append(c.notes, Note{Object: mhc.ref(), Path: sel.path,
			Reason: reasonCPHealth})
		return nil, true, true
	}
	if md, ok := labels[capiLabelDomain+"deployment-name"]; ok {
		for _, name := range c.poolOrder {
			if p := c.pools[name]; p.md != nil && p.md.name == md {
				return []string{name}, false, true
			}
		}
		c.noteObject(mhc, c.reasonSelectsNothing("MachineDeployment "+md+" is not part of it"))
		return nil, false, false
	}
	if len(labels) == 0 {
		return nil, true, true // every machine of the cluster
	}
	for _, name := range c.poolOrder {
		p := c.pools[name]
		match := true
		for k, v := range labels {
			if got, ok := p.labels[k]; !ok || got != v {
				match = false
			}
		}
		if match {
			pools = append(pools, name)
		}
	}
	if len(pools) == 0 {
		keys := make([]string, 0, len(labels))
		for _, k := range sortedKeys(labels) {
			keys = append(keys, k+"="+labels[k])
		}
		c.noteObject(mhc, c.reasonSelectsNothing("its selector "+strings.Join(keys, ",")+" matches no pool's machine labels"))
		return nil, false, false
	}
	return pools, false, true
}

// healthPolicy reads the checks and the remediation guard of either
// version; nil when the MachineHealthCheck sets nothing capn has.
func (c *converter) healthPolicy(mhc *object, spec node) *capnv1.HealthPolicy {
	hp := &capnv1.HealthPolicy{}
	// v1beta2: spec.checks, spec.remediation.triggerIf.
	checks := spec.field("checks")
	if s, ok := checks.field("nodeStartupTimeoutSeconds").integer(); ok {
		hp.NodeStartupTimeout = durationpb.New(time.Duration(s) * time.Second)
	}
	for _, uc := range checks.field("unhealthyNodeConditions").items() {
		if cond := c.unhealthyCondition(mhc, uc, "timeoutSeconds"); cond != nil {
			hp.UnhealthyConditions = append(hp.UnhealthyConditions, cond)
		}
	}
	if m := checks.field("unhealthyMachineConditions"); !m.empty() {
		c.note(mhc, m, reasonMachineConditions)
	}
	trigger := spec.get("remediation.triggerIf")
	// v1beta1: flat fields.
	if d, ok := c.duration(mhc, spec.field("nodeStartupTimeout")); ok {
		hp.NodeStartupTimeout = d
	}
	for _, uc := range spec.field("unhealthyConditions").items() {
		if cond := c.unhealthyCondition(mhc, uc, "timeout"); cond != nil {
			hp.UnhealthyConditions = append(hp.UnhealthyConditions, cond)
		}
	}
	maxU, rng := trigger.field("unhealthyLessThanOrEqualTo"), trigger.field("unhealthyInRange")
	if !maxU.exists() {
		maxU = spec.field("maxUnhealthy")
	}
	if !rng.exists() {
		rng = spec.field("unhealthyRange")
	}
	if r, ok := rng.v.(string); ok && r != "" {
		hp.MaxUnhealthy = r // capn's maxUnhealthy takes "[a-b]" too
		rng.use()
		if maxU.exists() {
			c.note(mhc, maxU, reasonRangeWins)
		}
	} else if maxU.exists() {
		if v, ok := intOrPercent(maxU); ok {
			hp.MaxUnhealthy = v
			maxU.use()
		} else {
			c.note(mhc, maxU, reasonCountOrPercent)
		}
	}
	if proto.Equal(hp, &capnv1.HealthPolicy{}) {
		return nil
	}
	return hp
}

// unhealthyCondition maps {type, status, timeout|timeoutSeconds}.
func (c *converter) unhealthyCondition(mhc *object, n node, timeoutField string) *capnv1.UnhealthyCondition {
	typ, _ := n.field("type").v.(string)
	status, _ := n.field("status").v.(string)
	if typ == "" || !slices.Contains([]string{"True", "False", "Unknown"}, status) {
		c.note(mhc, n, reasonCondition)
		return nil
	}
	n.field("type").use()
	n.field("status").use()
	uc := &capnv1.UnhealthyCondition{Type: typ, Status: status}
	t := n.field(timeoutField)
	if timeoutField == "timeoutSeconds" {
		if s, ok := t.integer(); ok {
			uc.Timeout = durationpb.New(time.Duration(s) * time.Second)
		}
	} else if d, ok := c.duration(mhc, t); ok {
		uc.Timeout = d
	}
	return uc
}

// duration reads a metav1.Duration ("5m0s", "300s").
func (c *converter) duration(o *object, n node) (*durationpb.Duration, bool) {
	s, ok := n.v.(string)
	if !ok {
		if n.exists() {
			c.note(o, n, reasonDuration)
		}
		return nil, false
	}
	d, err := time.ParseDuration(s)
	if err != nil || d < 0 {
		c.note(o, n, reasonDuration)
		return nil, false
	}
	n.use()
	return durationpb.New(d), true
}
