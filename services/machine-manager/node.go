package machinemanager

import (
	"strings"
	"time"

	capnv1 "github.com/capn-dev/capn/schemas/capn/v1alpha1"
)

// CondNodeHealthy says whether the health-watcher judged the machine's node
// healthy (the planner counts a machine with NodeHealthy=False unavailable).
const CondNodeHealthy = "NodeHealthy"

// reflectNode shows the health-watcher's record of a running machine's
// node in its status: NodeReady from the node's Ready condition, and
// NodeHealthy False with the reasons that made it unhealthy, True
// otherwise. A record written before the machine was created belongs to
// an earlier machine of the same name and is ignored.
func reflectNode(st *capnv1.MachineStatus, node *capnv1.NodeHealth, created, now time.Time) {
	if node == nil || node.GetUpdated() == nil || node.GetUpdated().AsTime().Before(created) {
		return
	}
	for _, c := range node.GetConditions() {
		if c.GetType() == "Ready" {
			setCondition(st, CondNodeReady, c.GetStatus(), c.GetReason(), c.GetMessage(), now)
		}
	}
	reasons := node.GetUnhealthyReasons()
	if node.GetHealthy() || len(reasons) == 0 {
		setCondition(st, CondNodeHealthy, "True", "NodeHealthy", "", now)
		return
	}
	msgs := make([]string, 0, len(reasons))
	for _, r := range reasons {
		msgs = append(msgs, r.GetType()+": "+r.GetMessage())
	}
	setCondition(st, CondNodeHealthy, "False", reasons[0].GetType(), strings.Join(msgs, "; "), now)
}
