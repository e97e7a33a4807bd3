package healthwatcher

import (
	"strings"
	"time"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/capn-dev/capn/events/store"
	capnv1 "github.com/capn-dev/capn/schemas/capn/v1alpha1"
	"github.com/capn-dev/capn/schemas/keys"
)

// changed maps watch changes to the cluster and machine they concern,
// marking the machine pending, and returns the cluster to evaluate; from
// the observed cluster status (observed) only a change to the control
// plane's initialisation counts (see pending). A resync marks every
// cluster whole.
func (s *Service) changed(observed bool) func(store.Change) []string {
	return func(ch store.Change) []string {
		if ch.Resync {
			all := s.desired.KeysUnder(keys.ClusterPrefix)
			for _, c := range all {
				s.pending.mark(c, "")
			}
			return all
		}
		c, m := keyOf(ch.Key)
		if c == "" {
			return nil
		}
		if observed && m == "" && ch.Op == store.OpPut {
			st, err := store.Decode(ch.Value, newClusterStatus)
			if err == nil && !s.pending.controlPlaneChanged(c, controlPlaneOf(st)) {
				return nil
			}
		}
		if observed && strings.HasPrefix(ch.Key, keys.InfraPrefix) && !s.pending.infraDeletedChanged(ch.Key, infraDeleted(ch)) {
			return nil
		}
		s.pending.mark(c, m)
		return []string{c}
	}
}

// infraDeleted reports whether ch leaves an infrastructure record marked
// Deleted: the only state of it the evaluation reads (infraGone). A
// record that does not decode counts as not Deleted, as infraGone sees it.
func infraDeleted(ch store.Change) bool {
	if ch.Op != store.OpPut {
		return false
	}
	im, err := store.Decode(ch.Value, newInfraMachine)
	return err == nil && im.GetStateValue() == capnv1.InfraDeleted
}

// keyOf returns the cluster and machine a key belongs to: cluster.<c>
// (machine ""), machine.<c>.<m>, node.<c>.<m>, infra.<p>.<c>.<m> (cluster
// "" for others).
func keyOf(key string) (cluster, machine string) {
	k, err := keys.Parse(key)
	switch {
	case err != nil:
	case k.Kind == keys.KindCluster:
		return k.Cluster, ""
	case k.Kind == keys.KindMachine, k.Kind == keys.KindNode, k.Kind == keys.KindInfra && k.Machine():
		return k.Cluster, k.Name
	}
	return "", ""
}

// clusterOf returns the cluster a key belongs to (see keyOf).
func clusterOf(key string) string {
	c, _ := keyOf(key)
	return c
}

// controlPlaneOf is what the evaluation reads of a cluster's status.
func controlPlaneOf(st *capnv1.ClusterStatus) controlPlaneInit {
	c := controlPlaneInit{initialized: st.GetControlPlaneInitialized()}
	for _, cond := range st.GetConditions() {
		if cond.GetType() == conditionControlPlaneInitialized && cond.GetStatusValue() == capnv1.ConditionTrue {
			c.at = cond.GetLastTransitionTime().AsTime()
		}
	}
	return c
}

// decodeCached decodes the cached value of key (a fresh copy: the caller
// may modify it).
func decodeCached[T proto.Message](c *store.Cache, key string, newT func() T) (T, bool) {
	var zero T
	e, ok := c.Get(key)
	if !ok {
		return zero, false
	}
	v, err := store.Decode(e.Value, newT)
	if err != nil {
		return zero, false
	}
	return v, true
}

var newCluster = store.New[capnv1.Cluster]()
var newClusterStatus = store.New[capnv1.ClusterStatus]()
var newMachine = store.New[capnv1.Machine]()
var newMachineStatus = store.New[capnv1.MachineStatus]()
var newNodeHealth = store.New[capnv1.NodeHealth]()
var newInfraMachine = store.New[capnv1.InfraMachine]()

func tsNow(now time.Time) *timestamppb.Timestamp { return timestamppb.New(now) }
