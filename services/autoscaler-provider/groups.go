package autoscalerprovider

import (
	"fmt"
	"slices"
	"strings"

	capnv1 "github.com/capn-dev/capn/schemas/capn/v1alpha1"
	"github.com/capn-dev/capn/schemas/externalgrpc"
)

// Node groups are a cluster's autoscaled worker pools, named by the pool
// (the cluster is the caller's: its client certificate names it). A
// cluster being deleted, paused or hibernated has none: the autoscaler then
// leaves its nodes alone, as it leaves nodes of no group.

// groupsOf are c's node groups, in the spec's order.
func groupsOf(c *capnv1.Cluster) []*externalgrpc.NodeGroup {
	if !scalable(c) {
		return nil
	}
	var out []*externalgrpc.NodeGroup
	for _, p := range c.GetSpec().GetWorkerPools() {
		if g := groupOf(c, p); g != nil {
			out = append(out, g)
		}
	}
	return out
}

// scalable: the autoscaler may act on c.
func scalable(c *capnv1.Cluster) bool {
	return c != nil && c.GetMetadata().GetDeletionTimestamp() == nil && !c.GetSpec().GetPaused() && !c.GetSpec().GetHibernated()
}

// groupOf is pool p's node group, nil when p is not autoscaled.
func groupOf(c *capnv1.Cluster, p *capnv1.WorkerPool) *externalgrpc.NodeGroup {
	a := p.GetAutoscaling()
	if a == nil {
		return nil
	}
	return &externalgrpc.NodeGroup{
		Id: p.GetName(), MinSize: a.GetMin(), MaxSize: a.GetMax(),
		Debug: fmt.Sprintf("capn cluster %s pool %s (provider %s): %d replicas, autoscaling %d..%d",
			c.GetMetadata().GetName(), p.GetName(), p.GetProvider(), p.GetReplicas(), a.GetMin(), a.GetMax()),
	}
}

// autoscaledPool is the pool named id of c when it is a node group now.
func autoscaledPool(c *capnv1.Cluster, id string) (*capnv1.WorkerPool, bool) {
	if !scalable(c) {
		return nil, false
	}
	for _, p := range c.GetSpec().GetWorkerPools() {
		if p.GetName() == id && p.GetAutoscaling() != nil {
			return p, true
		}
	}
	return nil, false
}

// member is one machine of a pool, as the autoscaler sees it.
type member struct {
	name string
	// desired is the machine record and rev its revision.
	desired *capnv1.Machine
	rev     uint64
	status  *capnv1.MachineStatus
	infra   *capnv1.InfraMachine
}

func (m member) deleting() bool { return m.desired.GetMetadata().GetDeletionTimestamp() != nil }

func (m member) marked() (string, bool) {
	v, ok := m.desired.GetMetadata().GetAnnotations()[markAnnotation]
	return v, ok
}

// placeholderScheme names a machine the autoscaler must see before its
// infrastructure has a provider id: capn://<cluster>/<machine>.
const placeholderScheme = "capn://"

// instanceID is the machine's id for the autoscaler: its infrastructure's
// provider id (the Node's spec.providerID), or a placeholder until it has
// one.
func instanceID(cluster string, m member) string {
	if id := m.infra.GetProviderId(); id != "" {
		return id
	}
	if id := m.status.GetProviderId(); id != "" {
		return id
	}
	return placeholderScheme + cluster + "/" + m.name
}

// instance is m as an autoscaler instance: running once its machine runs,
// deleting once deleting, creating before; a failed machine is creating
// with an error, which the autoscaler counts as a failed scale-up (and
// backs the group off).
func instance(cluster string, m member) *externalgrpc.Instance {
	st := &externalgrpc.InstanceStatus{}
	switch phase := m.status.GetPhaseValue(); {
	case m.deleting():
		st.InstanceState = externalgrpc.InstanceStatus_instanceDeleting
	case phase == capnv1.MachineRunning:
		st.InstanceState = externalgrpc.InstanceStatus_instanceRunning
	case phase == capnv1.MachineFailed:
		st.InstanceState = externalgrpc.InstanceStatus_instanceCreating
		st.ErrorInfo = &externalgrpc.InstanceErrorInfo{ErrorCode: "MachineFailed",
			ErrorMessage: strings.TrimSpace(m.status.GetFailureReason() + " " + m.status.GetFailureMessage()), InstanceErrorClass: otherErrorClass}
	default:
		st.InstanceState = externalgrpc.InstanceStatus_instanceCreating
	}
	return &externalgrpc.Instance{Id: instanceID(cluster, m), Status: st}
}

// otherErrorClass is the autoscaler's cloudprovider.OtherErrorClass.
const otherErrorClass = 99

// findMember is the machine of node among ms: by provider id (the
// infrastructure's, or capn's placeholder), else by name (a capn Node is
// named after its machine).
func findMember(cluster string, ms []member, providerID, name string) (member, bool) {
	if providerID != "" {
		if i := slices.IndexFunc(ms, func(m member) bool { return instanceID(cluster, m) == providerID }); i >= 0 {
			return ms[i], true
		}
	}
	if name != "" {
		if i := slices.IndexFunc(ms, func(m member) bool { return m.name == name }); i >= 0 {
			return ms[i], true
		}
	}
	return member{}, false
}
