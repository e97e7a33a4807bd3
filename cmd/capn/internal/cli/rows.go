package cli

import (
	"fmt"
	"strings"
	"time"

	"github.com/capn-dev/capn/gateway/api"
	capnv1 "github.com/capn-dev/capn/schemas/capn/v1alpha1"
	"github.com/capn-dev/capn/schemas/conditions"
)

// Condition types the planner and machine-manager write
// (services/cluster-planner/plan), repeated here: the CLI speaks only the
// API. Phases and statuses are the API's own (capnv1's enums).
const (
	condReady             = "Ready"
	condControlPlaneReady = "ControlPlaneReady"
	condWorkersReady      = "WorkersReady"
	condDeleting          = "Deleting"
	condHibernated        = "Hibernated"
)

// clusterPhase is the status phase, or what it must be before the planner
// wrote one.
func clusterPhase(c *capnv1.Cluster) string {
	if p := c.GetStatus().GetPhase(); p != "" {
		return p
	}
	if c.GetMetadata().GetDeletionTimestamp() != nil {
		return capnv1.ClusterDeleting.Wire()
	}
	return capnv1.ClusterPending.Wire()
}

// counts are machine numbers of a pool, or of several summed, as
// kubectl rollout status shows them: ready, updated and available never
// above desired (each pool's capped at its desired replicas); the
// machines beyond it during a rollout are its surge.
type counts struct {
	desired, ready, updated, available int32
	// surge: machines beyond desired while some are outdated.
	surge int32
	// rolling: some machine is outdated.
	rolling bool
}

// poolCounts are one pool's counts from its status, else (before the
// planner wrote one) its desired replicas from the spec.
func poolCounts(ps *capnv1.PoolStatus, specDesired int32) counts {
	if ps == nil {
		return counts{desired: specDesired}
	}
	d := ps.GetDesired()
	k := counts{desired: d, ready: min(ps.GetReady(), d), updated: min(ps.GetUpdated(), d), available: min(ps.GetAvailable(), d),
		rolling: ps.GetUpdated() < ps.GetReplicas()}
	if beyond := ps.GetReplicas() - d; beyond > 0 && k.rolling {
		k.surge = beyond
	}
	return k
}

func (k counts) plus(o counts) counts {
	return counts{desired: k.desired + o.desired, ready: k.ready + o.ready, updated: k.updated + o.updated, available: k.available + o.available,
		surge: k.surge + o.surge, rolling: k.rolling || o.rolling}
}

// clusterCounts are the control plane's counts and the worker pools'
// summed.
func clusterCounts(c *capnv1.Cluster) (cp, workers counts) {
	st, spec := c.GetStatus(), c.GetSpec()
	cp = poolCounts(st.GetControlPlane(), spec.GetControlPlane().GetReplicas())
	if len(st.GetWorkerPools()) > 0 {
		for _, p := range st.GetWorkerPools() {
			workers = workers.plus(poolCounts(p, 0))
		}
	} else {
		for _, p := range spec.GetWorkerPools() {
			workers = workers.plus(poolCounts(nil, p.GetReplicas()))
		}
	}
	return cp, workers
}

// machineCounts are the cluster's machines: the worker pools', and the
// control plane's when it runs on machines (a hosted or external control
// plane's replicas are API servers, not machines of the cluster).
func machineCounts(c *capnv1.Cluster) counts {
	cp, workers := clusterCounts(c)
	if c.GetSpec().GetControlPlane().Implementation() != capnv1.ControlPlaneMachines {
		return workers
	}
	return cp.plus(workers)
}

// progress is a cluster's machines in a few words: "8 of 10 machines
// available", then, during a rollout, how many are updated and how many
// surge machines there are ("…, 7 updated, 1 surge").
func (k counts) progress() string {
	s := fmt.Sprintf("%d of %d machines available", k.available, k.desired)
	if k.rolling {
		s += fmt.Sprintf(", %d updated", k.updated)
	}
	if k.surge > 0 {
		s += fmt.Sprintf(", %d surge", k.surge)
	}
	return s
}

// clusterHeader: classes adds CLASS, REVISION and UP-TO-DATE (a listed
// cluster belongs to a ClusterClass).
func clusterHeader(wide, classes bool) []string {
	h := []string{"NAME", "PHASE", "VERSION", "CONTROL PLANE", "WORKERS", "AGE"}
	if classes {
		h = append(h, "CLASS", "REVISION", "UP-TO-DATE")
	}
	if wide {
		h = append(h, "PROVIDER", "ENDPOINT", "REASON", "NEXT WINDOW", "NEXT TRANSITION")
	}
	return h
}

func clusterRow(c *capnv1.Cluster, now time.Time, wide, classes bool) []string {
	cp, w := clusterCounts(c)
	r := []string{c.GetMetadata().GetName(), clusterPhase(c), c.GetSpec().GetKubernetesVersion(),
		fmt.Sprintf("%d/%d", cp.ready, cp.desired), fmt.Sprintf("%d/%d", w.ready, w.desired), age(c.GetMetadata().GetCreationTimestamp(), now)}
	if classes {
		r = append(r, classColumns(c)...)
	}
	if wide {
		ep := "<none>"
		if e := c.GetStatus().GetControlPlaneEndpoint(); e.GetHost() != "" {
			ep = fmt.Sprintf("%s:%d", e.GetHost(), e.GetPort())
		}
		reason := ""
		if rc := conditions.Get(c.GetStatus().GetConditions(), condReady); rc != nil && rc.GetStatusValue() != capnv1.ConditionTrue {
			reason = rc.GetReason()
		}
		r = append(r, controlPlaneProvider(c.GetSpec().GetControlPlane()), ep, orNone(reason), nextWindow(c, now), nextTransition(c))
	}
	return r
}

// controlPlaneProvider is the wide PROVIDER column: the control plane's
// provider, or its implementation for a hosted or external one (which has
// no provider: "<none>" would hide what runs it).
func controlPlaneProvider(cp *capnv1.ControlPlaneSpec) string {
	if impl := cp.Implementation(); impl != capnv1.ControlPlaneMachines {
		return impl
	}
	return orNone(cp.GetProvider())
}

func machineHeader(wide, withCluster bool) []string {
	h := []string{"NAME"}
	if withCluster {
		h = append(h, "CLUSTER")
	}
	h = append(h, "POOL", "PHASE", "VERSION", "NODE", "AGE")
	if wide {
		h = append(h, "PROVIDER", "OS", "PROVIDER ID", "ADDRESS", "REASON")
	}
	return h
}

// machineOS is the machine's operating system: its spec's, linux when the
// spec says none (machines made before the field), <none> without a spec.
func machineOS(m *capnv1.Machine) string {
	switch {
	case m.GetSpec() == nil:
		return orNone("")
	case m.GetSpec().GetOs() == "":
		return "linux"
	}
	return m.GetSpec().GetOs()
}

func machinePhase(m *capnv1.Machine) string {
	if p := m.GetStatus().GetPhase(); p != "" {
		return p
	}
	return capnv1.MachinePending.Wire()
}

func machineRow(m *capnv1.Machine, now time.Time, wide, withCluster bool) []string {
	r := []string{m.GetMetadata().GetName()}
	if withCluster {
		r = append(r, orNone(m.GetSpec().GetCluster()))
	}
	r = append(r, orNone(m.GetSpec().GetPool()), machinePhase(m), orNone(m.GetSpec().GetVersion()),
		orNone(m.GetStatus().GetNodeName()), age(m.GetMetadata().GetCreationTimestamp(), now))
	if wide {
		provider := m.GetSpec().GetProvider()
		if provider == "" {
			provider = m.GetStatus().GetProvider()
		}
		var addrs []string
		for _, a := range m.GetStatus().GetAddresses() {
			if a.GetType() == "InternalIP" || a.GetType() == "ExternalIP" {
				addrs = append(addrs, a.GetAddress())
			}
		}
		reason, _ := machineTrouble(m)
		r = append(r, orNone(provider), machineOS(m), orNone(m.GetStatus().GetProviderId()), orNone(strings.Join(addrs, ",")), orNone(reason))
	}
	return r
}

// machineTrouble says why a machine is not ready, or "" when it is: its
// failure, else its first condition that is not True, else its phase. A
// deleting machine says the step its deletion is at (the Deleting
// condition), and while it drains, what holds the drain.
func machineTrouble(m *capnv1.Machine) (reason, message string) {
	st := m.GetStatus()
	if st.GetPhaseValue() == capnv1.MachineDeleting {
		// The step the deletion is at, and while it drains, what holds
		// the drain (the pods a PodDisruptionBudget keeps).
		if d := conditions.Get(st.GetConditions(), condDeleting); d != nil && d.GetReason() != "" {
			reason, message = d.GetReason(), d.GetMessage()
			if dr := conditions.Get(st.GetConditions(), "DrainingSucceeded"); dr != nil && dr.GetStatusValue() == capnv1.ConditionFalse && dr.GetReason() == "Draining" {
				message = dr.GetMessage()
			}
			return reason, message
		}
	}
	if st.GetFailureReason() != "" || st.GetFailureMessage() != "" {
		return orNone(st.GetFailureReason()), st.GetFailureMessage()
	}
	for _, c := range st.GetConditions() {
		if c.GetStatusValue() != capnv1.ConditionTrue {
			return c.GetReason(), c.GetMessage()
		}
	}
	if p := machinePhase(m); capnv1.MachinePhaseOf(p) != capnv1.MachineRunning {
		return p, ""
	}
	return "", ""
}

// listKind is the Kubernetes-style list kind of a resource.
func listKind(machines bool) string {
	if machines {
		return api.KindMachineList
	}
	return api.KindClusterList
}

// classColumns are a cluster's CLASS, REVISION and UP-TO-DATE: "<none>"
// for a cluster of no class; up to date is the gateway's verdict
// (status.topology), "2 (latest 3)" says what a rollout would bring.
func classColumns(c *capnv1.Cluster) []string {
	t := c.GetSpec().GetTopology()
	if t == nil {
		return []string{"<none>", "", ""}
	}
	ts := c.GetStatus().GetTopology()
	rev := fmt.Sprint(t.GetRevision())
	upToDate := "true"
	if ts != nil && !ts.GetUpToDate() {
		upToDate = "false"
		rev = fmt.Sprintf("%d (latest %d)", t.GetRevision(), ts.GetLatestRevision())
	}
	return []string{t.GetClass(), rev, upToDate}
}
