package capi

import (
	"fmt"
	"strconv"
	"strings"

	capnv1 "github.com/capn-dev/capn/schemas/capn/v1alpha1"
)

// capiLabelDomain is the domain of the labels Cluster API sets on its own
// objects; they have no meaning in capn.
const capiLabelDomain = "cluster.x-k8s.io/"

// addPool maps a MachineDeployment (v1beta1 or v1beta2) to a worker pool
// named after it, without the "<cluster>-" prefix quick-start templates
// give it.
func (c *converter) addPool(md *object) error {
	name := strings.TrimPrefix(md.name, c.name+"-")
	if _, dup := c.pools[name]; dup || name == "" {
		name = md.name
	}
	spec := md.at().field("spec")
	p := &capnv1.WorkerPool{Name: name, Replicas: 1}
	if r, ok := spec.field("replicas").integer(); ok {
		p.Replicas = int32(r)
	}
	spec.field("selector").use() // Cluster API's bookkeeping: capn selects by pool
	spec.field("clusterName").use()

	tmpl := spec.field("template")
	labels := map[string]string{}
	c.poolLabels(tmpl.get("metadata.labels"), p, labels)
	ms := tmpl.field("spec")
	ms.field("clusterName").use()
	if v, ok := ms.field("version").str(); ok {
		if v = normalizeVersion(v); v != c.out.Spec.KubernetesVersion {
			p.Version = v // a pool that follows the control plane leaves it empty
		}
	}
	t, err := c.machineTemplate(md, ms.field("infrastructureRef"))
	if err != nil {
		return err
	}
	p.Provider, p.Template = t.provider, t.template
	c.failureDomain(md, ms.field("failureDomain"), p)
	c.bootstrapTemplate(md, ms.get("bootstrap.configRef"), p)

	c.rollout(md, spec, p)
	if mif := c.maxInFlight(md, spec); mif > 0 {
		p.Health = &capnv1.HealthPolicy{MaxInFlight: mif}
	}
	c.pools[name] = &pool{md: md, spec: p, labels: labels}
	c.poolOrder = append(c.poolOrder, name)
	return nil
}

// poolLabels maps the labels of a pool's machines: all of them go to
// labels (what MachineHealthCheck selectors match), those outside
// cluster.x-k8s.io to the pool's labels.
func (c *converter) poolLabels(n node, p *capnv1.WorkerPool, labels map[string]string) {
	for _, e := range n.entries(true) {
		v, ok := e.val.str()
		if !ok {
			continue
		}
		labels[e.key] = v
		if !strings.Contains(e.key, capiLabelDomain) {
			if p.Labels == nil {
				p.Labels = map[string]string{}
			}
			p.Labels[e.key] = v
		}
	}
}

// bootstrapTemplate maps a pool's KubeadmConfigTemplate (a
// MachineDeployment's bootstrap.configRef, a class's bootstrap template)
// to its bootstrap settings and taints.
func (c *converter) bootstrapTemplate(owner *object, ref node, p *capnv1.WorkerPool) {
	if !ref.exists() {
		return
	}
	kind, name, kct := c.resolve(ref)
	switch {
	case kind != "KubeadmConfigTemplate":
		c.note(owner, ref, reasonBootstrapKind(kind))
	case kct == nil:
		c.noteRef(owner, ref, kind, name, reasonMissing(missingPoolBootstrap))
	default:
		boot, taints := c.kubeadmSpec(kct, kct.at().get("spec.template.spec"), false)
		p.Bootstrap = boot
		p.Taints = c.taintsOf(kct, taints)
	}
}

// rollout maps the strategy (v1beta1 spec.strategy, v1beta2
// spec.rollout.strategy) and the deletion order (v1beta1
// spec.strategy.rollingUpdate.deletePolicy, v1beta2 spec.deletion.order).
func (c *converter) rollout(md *object, spec node, p *capnv1.WorkerPool) {
	strategy := spec.get("rollout.strategy")
	if !strategy.exists() {
		strategy = spec.field("strategy")
	}
	rs := &capnv1.RolloutStrategy{}
	if t := strategy.field("type"); t.exists() {
		switch s, _ := t.v.(string); s {
		case "RollingUpdate", "OnDelete":
			rs.Type = s
			t.use()
		default:
			c.note(md, t, reasonPoolStrategy)
		}
	}
	ru := strategy.field("rollingUpdate")
	for _, f := range []struct {
		name string
		dst  *string
	}{{"maxSurge", &rs.MaxSurge}, {"maxUnavailable", &rs.MaxUnavailable}} {
		n := ru.field(f.name)
		if !n.exists() {
			continue
		}
		if v, ok := intOrPercent(n); ok {
			*f.dst = v
			n.use()
		} else {
			c.note(md, n, reasonCountOrPercent)
		}
	}
	if rs.Type != "" || rs.MaxSurge != "" || rs.MaxUnavailable != "" {
		p.Strategy = rs
	}
	order := spec.get("deletion.order")
	if !order.exists() {
		order = ru.field("deletePolicy")
	}
	if order.exists() {
		switch s, _ := order.v.(string); s {
		case "Random", "Newest", "Oldest":
			p.DeletionOrder = s
			order.use()
		default:
			c.note(md, order, reasonDeletionOrder)
		}
	}
}

// maxInFlight reads the remediation limit (v1beta1
// spec.strategy.remediation.maxInFlight, v1beta2
// spec.remediation.maxInFlight); capn takes a count.
func (c *converter) maxInFlight(md *object, spec node) int32 {
	n := spec.get("remediation.maxInFlight")
	if !n.exists() {
		n = spec.get("strategy.remediation.maxInFlight")
	}
	if !n.exists() {
		return 0
	}
	if i, ok := n.integer(); ok && i > 0 && i <= 1<<30 {
		return int32(i)
	}
	c.note(md, n, reasonMaxInFlight)
	return 0
}

// intOrPercent reads a Kubernetes IntOrString as capn writes it: "2" or
// "25%".
func intOrPercent(n node) (string, bool) {
	switch v := n.v.(type) {
	case int, int64, uint64:
		s := fmt.Sprint(v)
		if _, err := strconv.ParseUint(s, 10, 31); err != nil {
			return "", false
		}
		return s, true
	case string:
		num := strings.TrimSuffix(v, "%")
		if _, err := strconv.ParseUint(num, 10, 31); err != nil {
			return "", false
		}
		return v, true
	}
	return "", false
}
