package healthwatcher

import (
	"slices"
	"strings"
	"time"

	"google.golang.org/protobuf/types/known/timestamppb"

	capnv1 "github.com/capn-dev/capn/schemas/capn/v1alpha1"
	"github.com/capn-dev/capn/schemas/health/policy"
)

// The merges below fold one report into a machine's NodeHealth. They are
// pure and idempotent: a duplicate changes nothing, and a report older than
// what the record already holds (late, redelivered or out of order) never
// moves it backwards. Each reports whether the record changed in a way
// worth a KV write; a change that is not (a repeated condition with only a
// newer heartbeat) is left out so that steady reports cost no write.

// Heartbeat drift kinds.
const (
	DriftGone    = "Gone"
	DriftStopped = "Stopped"
	DriftChanged = "Changed"
	DriftOrphan  = "Orphan"
)

// forIncarnation returns h if it describes the machine incarnation created
// at created, or a new empty record if h is missing or older: machine names
// are reused when a slot is refilled, and the new machine must not inherit
// the old one's conditions. h is older when it was last written before the
// machine was created (the watcher stops writing a machine's record once
// its deletion is requested).
func forIncarnation(h *capnv1.NodeHealth, cluster, machine string, created time.Time) *capnv1.NodeHealth {
	if h = ofIncarnation(h, created); h == nil {
		return &capnv1.NodeHealth{Cluster: cluster, Machine: machine}
	}
	return h
}

// ofIncarnation is h if it describes the machine incarnation created at
// created (see forIncarnation), else nil.
func ofIncarnation(h *capnv1.NodeHealth, created time.Time) *capnv1.NodeHealth {
	if h == nil || h.GetUpdated() == nil || h.GetUpdated().AsTime().Before(created) {
		return nil
	}
	return h
}

// heartbeatMaterial reports whether a heartbeat stored at at changes a
// record whose recorded heartbeat is rec (see mergeHeartbeat).
func heartbeatMaterial(rec recordedBeat, hb *capnv1.NodeHeartbeat, at time.Time, persistEvery time.Duration) bool {
	if rec.has && !at.After(rec.at) {
		return false
	}
	return !rec.has || hb.GetReady() != rec.ready ||
		(hb.GetKubeletVersion() != "" && hb.GetKubeletVersion() != rec.kubeletVersion) ||
		(hb.GetNodeName() != "" && hb.GetNodeName() != rec.nodeName) ||
		at.Sub(rec.at) >= persistEvery
}

// mergeHeartbeat records a heartbeat stored at at (the stream's time, so a
// node's clock does not matter). A heartbeat not newer than the recorded one
// is ignored. It is material — and the record changes — when it is the
// first, when it changes what the node says (ready, kubelet version, node
// name), or when the recorded heartbeat is persistEvery old; otherwise the
// caller only remembers it in memory.
func mergeHeartbeat(h *capnv1.NodeHealth, hb *capnv1.NodeHeartbeat, at time.Time, persistEvery time.Duration) bool {
	if !heartbeatMaterial(recordedBeatOf(h), hb, at, persistEvery) {
		return false
	}
	h.Ready = hb.GetReady()
	if v := hb.GetKubeletVersion(); v != "" {
		h.KubeletVersion = v
	}
	if n := hb.GetNodeName(); n != "" {
		h.NodeName = n
	}
	h.LastHeartbeat = timestamppb.New(at)
	return true
}

// mergeConditions folds a NodeConditions report into h, condition by
// condition (the latest per type wins):
//
//   - a condition's heartbeat is its last_heartbeat_time (missing: the
//     report's time, then at); its transition is its last_transition_time
//     (missing: its heartbeat);
//   - one whose transition or heartbeat is older than the recorded one's
//     is stale and ignored: in a source's history a status change always
//     carries a transition later than every earlier report, so the latest
//     state wins whatever order reports arrive in;
//   - the same status as recorded keeps the recorded transition time (a
//     restarted reporter that re-sends a condition does not restart its
//     timeout); a changed reason or message, or such a re-send, is
//     written; a mere newer heartbeat is not;
//   - another status replaces the recorded condition.
//
// Conditions with an empty type or a status other than True, False or
// Unknown are ignored. Each recorded condition keeps the source of the
// report that set it (NodeCondition.source).
//
// Ready is special. The Node's Ready (a report of source kubernetes: the
// workload cluster's Node, read by the health-watcher) is kept in a slot of
// its own beside the Ready derived from capn-node's heartbeats, and both
// are judged: the kubelet can hang while capn-node heartbeats, and the API
// server can be unreachable while the machine is dead. A Ready from any
// other source is left to heartbeats when the node sends them. A Node's
// Ready merged into a record without heartbeats drops a Ready without a
// source: a record written before conditions had one kept the Node's Ready
// there. The list is kept sorted by type, then source.
func mergeConditions(h *capnv1.NodeHealth, r *capnv1.NodeConditions, at time.Time) bool {
	changed := false
	reportTime := at
	if t := r.GetTime(); t != nil {
		reportTime = t.AsTime()
	}
	for _, c := range r.GetConditions() {
		if c.GetType() == "" || !validStatus(c.GetStatus()) {
			continue
		}
		in := &capnv1.NodeCondition{Type: c.GetType(), Status: c.GetStatus(), Reason: c.GetReason(), Message: c.GetMessage(),
			LastTransitionTime: c.GetLastTransitionTime(), LastHeartbeatTime: c.GetLastHeartbeatTime(), Source: r.GetSource()}
		if c.GetType() == ConditionReady && !fromNode(in) && !ingested(in) && h.GetLastHeartbeat() != nil {
			continue
		}
		if c.GetType() == ConditionReady && fromNode(in) && h.GetLastHeartbeat() == nil {
			n := len(h.Conditions)
			h.Conditions = slices.DeleteFunc(h.Conditions, func(x *capnv1.NodeCondition) bool {
				return x.GetType() == ConditionReady && x.GetSource() == ""
			})
			changed = changed || len(h.Conditions) != n
		}
		if in.LastHeartbeatTime == nil {
			in.LastHeartbeatTime = timestamppb.New(reportTime)
		}
		i := slices.IndexFunc(h.Conditions, func(x *capnv1.NodeCondition) bool { return sameSlot(x, in) })
		if i < 0 {
			if in.LastTransitionTime == nil {
				in.LastTransitionTime = in.LastHeartbeatTime
			}
			h.Conditions = append(h.Conditions, in)
			changed = true
			continue
		}
		if mergeCondition(h.Conditions[i], in, fromNode(in), at) {
			changed = true
		}
	}
	if changed {
		slices.SortFunc(h.Conditions, compareConditions)
	}
	return changed
}

// fromNode: the condition was read from the machine's Node in the workload
// cluster.
func fromNode(c *capnv1.NodeCondition) bool { return c.GetSource() == SourceKubernetes }

// heartbeatReady: c is the Ready condition heartbeats decide (every Ready
// but the Node's and a gateway token's).
func heartbeatReady(c *capnv1.NodeCondition) bool {
	return c.GetType() == ConditionReady && !fromNode(c) && !ingested(c)
}

// sameSlot: a and b are the same condition of a record — the same type,
// and for Ready both or neither the Node's. A gateway token's condition
// (source ingest:<token>) has a slot of its own per token: a report the
// policy may not trust must never overwrite (or hide) another source's.
func sameSlot(a, b *capnv1.NodeCondition) bool {
	if a.GetType() != b.GetType() {
		return false
	}
	if ingested(a) || ingested(b) {
		return a.GetSource() == b.GetSource()
	}
	return a.GetType() != ConditionReady || fromNode(a) == fromNode(b)
}

// ingested: the condition came through the gateway's ingest.
func ingested(c *capnv1.NodeCondition) bool {
	return policy.Ingested(c.GetSource())
}

// compareConditions orders a record's conditions: by type, then source.
func compareConditions(a, b *capnv1.NodeCondition) int {
	if c := strings.Compare(a.GetType(), b.GetType()); c != 0 {
		return c
	}
	return strings.Compare(a.GetSource(), b.GetSource())
}

// mergeCondition applies in to cur (same type) by the rules of
// mergeConditions and reports a material change.
//
// A condition read from a Node (node) is the Node's current state, read at
// at, not one report in a source's history: only an older heartbeat makes
// it stale (a read that a later one overtook), and a changed status whose
// transition is not later than the recorded one's gets the later of its
// heartbeat and at instead. Several writers share a Node's conditions and
// not all keep the transition right: the controller-manager sets
// Ready=Unknown with a new transition, and kwok, restarted, sets
// Ready=True again with the transition it had before — which the history
// rule would take for a late report and ignore, leaving the record
// Unknown for good.
func mergeCondition(cur, in *capnv1.NodeCondition, node bool, at time.Time) bool {
	curT, curHB := cur.GetLastTransitionTime().AsTime(), cur.GetLastHeartbeatTime().AsTime()
	inHB := in.GetLastHeartbeatTime().AsTime()
	inT := inHB
	if in.LastTransitionTime != nil {
		inT = in.GetLastTransitionTime().AsTime()
	}
	if inHB.Before(curHB) || (!node && inT.Before(curT)) {
		return false // stale: the record already holds a later state
	}
	if node && in.GetStatus() != cur.GetStatus() && !inT.After(curT) {
		inT = latest(inHB, at, curT)
	}
	if in.GetStatus() == cur.GetStatus() {
		switch {
		case in.GetReason() != cur.GetReason() || in.GetMessage() != cur.GetMessage():
			cur.Reason, cur.Message, cur.Source = in.GetReason(), in.GetMessage(), in.GetSource()
		case inT.After(curT) && inHB.After(curHB):
			// A reporter that restarted re-sends the status with a later
			// transition: keep the first one (the timeout runs on), but
			// record the heartbeat so that an older report of another
			// status, delivered late, cannot win over it.
		default:
			return false
		}
		cur.LastHeartbeatTime = in.GetLastHeartbeatTime()
		return true
	}
	cur.Status, cur.Reason, cur.Message, cur.Source = in.GetStatus(), in.GetReason(), in.GetMessage(), in.GetSource()
	cur.LastTransitionTime, cur.LastHeartbeatTime = timestamppb.New(inT), in.GetLastHeartbeatTime()
	return true
}

// mergeProblem adds a problem event to the keep most recent ones, oldest
// first. A problem already held (same time, source, reason and message) or
// older than every one held when the list is full is ignored. A problem
// without a time gets at.
func mergeProblem(h *capnv1.NodeHealth, p *capnv1.ProblemEvent, at time.Time, keep int) bool {
	in := &capnv1.ProblemEvent{Source: p.GetSource(), Severity: p.GetSeverity(), Reason: p.GetReason(), Message: p.GetMessage(), Time: p.GetTime()}
	if in.Time == nil {
		in.Time = timestamppb.New(at)
	}
	t := in.GetTime().AsTime()
	for _, x := range h.Problems {
		if x.GetTime().AsTime().Equal(t) && x.GetSource() == in.GetSource() && x.GetReason() == in.GetReason() && x.GetMessage() == in.GetMessage() {
			return false
		}
	}
	i, _ := slices.BinarySearchFunc(h.Problems, t, func(x *capnv1.ProblemEvent, t time.Time) int {
		if x.GetTime().AsTime().After(t) {
			return 1
		}
		return -1
	})
	if keep > 0 && len(h.Problems) >= keep && i == 0 {
		return false
	}
	h.Problems = slices.Insert(h.Problems, i, in)
	if keep > 0 && len(h.Problems) > keep {
		h.Problems = slices.Delete(h.Problems, 0, len(h.Problems)-keep)
	}
	return true
}

// mergeDrift records the provider's latest drift report of the machine.
// An orphan is not about a machine capn has, and a report not newer than
// the recorded one is ignored. A report without a time gets at.
func mergeDrift(h *capnv1.NodeHealth, d *capnv1.DriftReport, at time.Time) bool {
	if d.GetKind() == DriftOrphan || d.GetKind() == "" {
		return false
	}
	t := at
	if d.GetTime() != nil {
		t = d.GetTime().AsTime()
	}
	if cur := h.GetDrift(); cur != nil && !t.After(cur.GetTime().AsTime()) {
		return false
	}
	h.Drift = &capnv1.DriftReport{Provider: d.GetProvider(), Cluster: d.GetCluster(), Machine: d.GetMachine(),
		Kind: d.GetKind(), Message: d.GetMessage(), Time: timestamppb.New(t)}
	return true
}

func validStatus(s string) bool {
	return capnv1.ConditionStatusOf(s) != capnv1.ConditionStatus_CONDITION_STATUS_UNSPECIFIED
}
