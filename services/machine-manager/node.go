package machinemanager

import (
	"strings"
	"time"

	capnv1 "github.com/capn-dev/capn/schemas/capn/v1alpha1"
	"github.com/capn-dev/capn/schemas/health/policy"
)

// CondNodeHealthy says whether the health-watcher judged the machine's node
// healthy (the planner counts a machine with NodeHealthy=False unavailable).
const CondNodeHealthy = "NodeHealthy"

// reflectNode shows the health-watcher's record of a running machine's
// node in its status: NodeReady from the node's Ready condition, and
// NodeHealthy False with the reasons that made it unhealthy, True
// otherwise (its message listing the conditions gateway tokens reported,
// which are never the node's Ready). A record written before the machine was created belongs to
// an earlier machine of the same name and is ignored.
func reflectNode(st *capnv1.MachineStatus, node *capnv1.NodeHealth, created, now time.Time) {
	if node == nil || node.GetUpdated() == nil || node.GetUpdated().AsTime().Before(created) {
		return
	}
	var ingested []string
	for _, c := range node.GetConditions() {
		switch {
		case policy.Ingested(c.GetSource()):
			// A gateway token's report: shown, never taken as the node's own.
			ingested = append(ingested, c.GetType()+"="+c.GetStatus()+" from "+c.GetSource())
		case c.GetType() == "Ready":
			setCondition(st, CondNodeReady, c.GetStatusValue(), c.GetReason(), c.GetMessage(), now)
		}
	}
	reasons := node.GetUnhealthyReasons()
	if node.GetHealthy() || len(reasons) == 0 {
		msg := ""
		if len(ingested) > 0 {
			msg = "reported through the gateway, judged only if the health policy trusts the token: " + strings.Join(ingested, ", ")
		}
		setCondition(st, CondNodeHealthy, capnv1.ConditionTrue, "NodeHealthy", msg, now)
		return
	}
	msgs := make([]string, 0, len(reasons))
	for _, r := range reasons {
		msgs = append(msgs, r.GetType()+": "+r.GetMessage())
	}
	setCondition(st, CondNodeHealthy, capnv1.ConditionFalse, reasons[0].GetType(), strings.Join(msgs, "; "), now)
}

// takeNode copies what the node reported — its name, kubelet version and
// the first time it was ready — from the health-watcher's record of this
// incarnation (one updated before the machine was created is a previous
// machine's of the same name, and is ignored). The health-watcher is the
// one reader of node reports; the machine-manager follows its record.
func takeNode(st *capnv1.MachineStatus, node *capnv1.NodeHealth, created time.Time) {
	if node == nil || node.GetUpdated() == nil || node.GetUpdated().AsTime().Before(created) {
		return
	}
	if n := node.GetNodeName(); n != "" {
		st.NodeName = n
	}
	if v := node.GetKubeletVersion(); v != "" {
		st.KubeletVersion = v
	}
	if node.GetReady() && st.GetNodeReadyTime() == nil {
		st.NodeReadyTime = node.GetLastHeartbeat()
		if st.NodeReadyTime == nil {
			st.NodeReadyTime = node.GetUpdated()
		}
	}
}

// takeCommands shows the agent's report of the machine's bootstrap
// commands (condition BootstrapCommands of this incarnation's node
// record) on the machine, and fails the machine when it is False: a
// command that failed or timed out is a failed bootstrap, and the planner
// replaces the machine (Cluster API's bootstrap failure). It reports
// whether it failed the machine.
func takeCommands(st *capnv1.MachineStatus, node *capnv1.NodeHealth, created, now time.Time) bool {
	if node == nil || node.GetUpdated() == nil || node.GetUpdated().AsTime().Before(created) {
		return false
	}
	for _, c := range node.GetConditions() {
		if c.GetType() != CondBootstrapCommands || policy.Ingested(c.GetSource()) {
			continue
		}
		setCondition(st, CondBootstrapCommands, c.GetStatusValue(), c.GetReason(), c.GetMessage(), now)
		if c.GetStatusValue() == capnv1.ConditionFalse {
			fail(st, ReasonBootstrapCommandFailed, c.GetMessage(), now)
			return true
		}
	}
	return false
}
