package healthwatcher

import (
	"time"

	"github.com/capn-dev/capn/events/store"
	capnv1 "github.com/capn-dev/capn/schemas/capn/v1alpha1"
	"github.com/capn-dev/capn/schemas/keys"
)

// The few fields of a machine's records that every report reads (a
// heartbeat reads nothing else when it changes nothing), remembered per
// record revision (store.Facts): a steady heartbeat decodes no record.

// machineFacts is what a report reads of the desired machine.
type machineFacts struct {
	created  time.Time // the incarnation's creation
	deleting bool      // its deletion was requested
}

// statusFacts is what a heartbeat reads of the observed machine.
type statusFacts struct {
	phase capnv1.MachinePhase
}

// nodeFacts is what a heartbeat reads of the machine's node record.
type nodeFacts struct {
	updated     time.Time
	hasUpdated  bool
	rec         recordedBeat
	readyStatus capnv1.ConditionStatus
}

// recordedBeat is the heartbeat a record holds (has false: none).
type recordedBeat struct {
	has                      bool
	at                       time.Time
	ready                    bool
	kubeletVersion, nodeName string
}

// recordedBeatOf is the heartbeat h records.
func recordedBeatOf(h *capnv1.NodeHealth) recordedBeat {
	last := h.GetLastHeartbeat()
	if last == nil {
		return recordedBeat{}
	}
	return recordedBeat{has: true, at: last.AsTime(), ready: h.GetReady(), kubeletVersion: h.GetKubeletVersion(), nodeName: h.GetNodeName()}
}

// facts holds the service's remembered facts, one store.Facts per kind.
type facts struct {
	machines *store.Facts[machineFacts]
	statuses *store.Facts[statusFacts]
	nodes    *store.Facts[nodeFacts]
}

func newFacts(desired, observed *store.Cache) facts {
	return facts{
		machines: store.DecodedFacts(desired, newMachine, func(m *capnv1.Machine) machineFacts {
			return machineFacts{created: m.GetMetadata().GetCreationTimestamp().AsTime(), deleting: m.GetMetadata().GetDeletionTimestamp() != nil}
		}),
		statuses: store.DecodedFacts(observed, newMachineStatus, func(st *capnv1.MachineStatus) statusFacts {
			return statusFacts{phase: st.GetPhaseValue()}
		}),
		nodes: store.DecodedFacts(observed, newNodeHealth, func(h *capnv1.NodeHealth) nodeFacts {
			return nodeFacts{updated: h.GetUpdated().AsTime(), hasUpdated: h.GetUpdated() != nil, rec: recordedBeatOf(h), readyStatus: readyStatus(h)}
		}),
	}
}

// node is the node record of machine key ("<cluster>.<machine>") as seen
// by the incarnation created at created: ok false when there is none of
// it (ofIncarnation's nil).
func (f facts) node(key string, created time.Time) (nodeFacts, bool) {
	n, _, ok := f.nodes.Get(keys.NodePrefix + key)
	if !ok || !n.hasUpdated || n.updated.Before(created) {
		return nodeFacts{}, false
	}
	return n, true
}

// forget drops what is remembered of machine key.
func (f facts) forget(key string) {
	f.machines.Forget(keys.MachinePrefix + key)
	f.statuses.Forget(keys.MachinePrefix + key)
	f.nodes.Forget(keys.NodePrefix + key)
}
