package capi

import (
	"fmt"
	"strconv"
	"strings"

	capnv1alpha1 "github.com/capn-dev/capn/schemas/capn/v1alpha1"
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
	p := &capnv1alpha1.WorkerPool{Name: name, Replicas: 1}
	if r, ok := spec.field("replicas").integer(); ok {
		p.Replicas = int32(r)
	}
	spec.field("selector").use() // Cluster API's bookkeeping: capn selects by pool
	spec.field("clusterName").use()

	tmpl := spec.field("template")
	labels := map[string]string{}
	for _, e := range tmpl.get("metadata.labels").entries(true) {
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
	if fd, ok := ms.field("failureDomain").str(); ok && fd != "" {
		if p.Template == nil {
			p.Template = &capnv1alpha1.MachineTemplate{}
		}
		p.Template.FailureDomain = fd
	}
	if ref := ms.get("bootstrap.configRef"); ref.exists() {
		kind, name, kct := c.resolve(ref)
		switch {
		case kind != "KubeadmConfigTemplate":
			c.note(md, ref, "capn's bootstrap is kubeadm or script: bootstrap kind "+kind+" is not imported")
		case kct == nil:
			c.notes = append(c.notes, Note{Object: md.ref(), Path: ref.path, Value: strconv.Quote(kind + "/" + name),
				Reason: "not in the input: the pool gets capn's default kubeadm bootstrap"})
		default:
			boot, taints := c.kubeadmSpec(kct, kct.at().get("spec.template.spec"), false)
			p.Bootstrap = boot
			p.Taints = c.taintsOf(kct, taints)
		}
	}

	c.rollout(md, spec, p)
	if mif := c.maxInFlight(md, spec); mif > 0 {
		p.Health = &capnv1alpha1.HealthPolicy{MaxInFlight: mif}
	}
	c.pools[name] = &pool{md: md, spec: p, labels: labels}
	c.poolOrder = append(c.poolOrder, name)
	return nil
}

// rollout maps the strategy (v1beta1 spec.strategy, v1beta2
// spec.rollout.strategy) and the deletion order (v1beta1
// spec.strategy.rollingUpdate.deletePolicy, v1beta2 spec.deletion.order).
func (c *converter) rollout(md *object, spec node, p *capnv1alpha1.WorkerPool) {
	strategy := spec.get("rollout.strategy")
	if !strategy.exists() {
		strategy = spec.field("strategy")
	}
	rs := &capnv1alpha1.RolloutStrategy{}
	if t := strategy.field("type"); t.exists() {
		switch s, _ := t.v.(string); s {
		case "RollingUpdate", "OnDelete":
			rs.Type = s
			t.use()
		default:
			c.note(md, t, "capn's pools roll out with RollingUpdate or OnDelete")
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
			c.note(md, n, "must be a count or a percentage")
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
			c.note(md, order, "capn's deletion orders are Random, Newest and Oldest")
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
	c.note(md, n, "capn's health policy limits remediations in flight by a count, not a percentage")
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
