package main

import (
	"fmt"
	"strings"
	"time"

	"github.com/capn-dev/capn/gateway/api"
	capnv1 "github.com/capn-dev/capn/schemas/capn/v1alpha1"
)

// Names the planner and machine-manager use for phases and conditions
// (services/cluster-planner/plan), repeated here: the CLI speaks only the
// API.
const (
	condReady             = "Ready"
	condControlPlaneReady = "ControlPlaneReady"
	condWorkersReady      = "WorkersReady"
	condDeleting          = "Deleting"
	condHibernated        = "Hibernated"

	phasePending  = "Pending"
	phaseReady    = "Ready"
	phaseDeleting = "Deleting"
	phaseRunning  = "Running"
	phaseFailed   = "Failed"
	phaseDeleted  = "Deleted"
)

// condition finds a condition by type.
func condition(conds []*capnv1.Condition, typ string) *capnv1.Condition {
	for _, c := range conds {
		if c.GetType() == typ {
			return c
		}
	}
	return nil
}

// clusterPhase is the status phase, or what it must be before the planner
// wrote one.
func clusterPhase(c *capnv1.Cluster) string {
	if p := c.GetStatus().GetPhase(); p != "" {
		return p
	}
	if c.GetMetadata().GetDeletionTimestamp() != nil {
		return phaseDeleting
	}
	return phasePending
}

// machineCounts are a cluster's ready and desired machines: the control
// plane's and the workers' (from the status, else from the spec).
func machineCounts(c *capnv1.Cluster) (cpReady, cpDesired, wReady, wDesired int32) {
	st := c.GetStatus()
	if st.GetControlPlane() != nil {
		cpReady, cpDesired = st.GetControlPlane().GetReady(), st.GetControlPlane().GetDesired()
	} else {
		cpDesired = c.GetSpec().GetControlPlane().GetReplicas()
	}
	if len(st.GetWorkerPools()) > 0 {
		for _, p := range st.GetWorkerPools() {
			wReady += p.GetReady()
			wDesired += p.GetDesired()
		}
	} else {
		for _, p := range c.GetSpec().GetWorkerPools() {
			wDesired += p.GetReplicas()
		}
	}
	return cpReady, cpDesired, wReady, wDesired
}

func clusterHeader(wide bool) []string {
	h := []string{"NAME", "PHASE", "VERSION", "CONTROL PLANE", "WORKERS", "AGE"}
	if wide {
		h = append(h, "PROVIDER", "ENDPOINT", "REASON")
	}
	return h
}

func clusterRow(c *capnv1.Cluster, now time.Time, wide bool) []string {
	cpR, cpD, wR, wD := machineCounts(c)
	r := []string{c.GetMetadata().GetName(), clusterPhase(c), c.GetSpec().GetKubernetesVersion(),
		fmt.Sprintf("%d/%d", cpR, cpD), fmt.Sprintf("%d/%d", wR, wD), age(c.GetMetadata().GetCreationTimestamp(), now)}
	if wide {
		ep := "<none>"
		if e := c.GetStatus().GetControlPlaneEndpoint(); e.GetHost() != "" {
			ep = fmt.Sprintf("%s:%d", e.GetHost(), e.GetPort())
		}
		reason := ""
		if rc := condition(c.GetStatus().GetConditions(), condReady); rc != nil && rc.GetStatus() != "True" {
			reason = rc.GetReason()
		}
		r = append(r, orNone(c.GetSpec().GetControlPlane().GetProvider()), ep, orNone(reason))
	}
	return r
}

func machineHeader(wide, withCluster bool) []string {
	h := []string{"NAME"}
	if withCluster {
		h = append(h, "CLUSTER")
	}
	h = append(h, "POOL", "PHASE", "VERSION", "NODE", "AGE")
	if wide {
		h = append(h, "PROVIDER", "PROVIDER ID", "ADDRESS", "REASON")
	}
	return h
}

func machinePhase(m *capnv1.Machine) string {
	if p := m.GetStatus().GetPhase(); p != "" {
		return p
	}
	return phasePending
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
		r = append(r, orNone(provider), orNone(m.GetStatus().GetProviderId()), orNone(strings.Join(addrs, ",")), orNone(reason))
	}
	return r
}

// machineTrouble says why a machine is not ready, or "" when it is: its
// failure, else its first condition that is not True, else its phase.
func machineTrouble(m *capnv1.Machine) (reason, message string) {
	st := m.GetStatus()
	if st.GetFailureReason() != "" || st.GetFailureMessage() != "" {
		return orNone(st.GetFailureReason()), st.GetFailureMessage()
	}
	for _, c := range st.GetConditions() {
		if c.GetStatus() != "True" {
			return c.GetReason(), c.GetMessage()
		}
	}
	switch p := machinePhase(m); p {
	case phaseRunning:
		return "", ""
	default:
		return p, ""
	}
}

// listKind is the Kubernetes-style list kind of a resource.
func listKind(machines bool) string {
	if machines {
		return api.KindMachineList
	}
	return api.KindClusterList
}
