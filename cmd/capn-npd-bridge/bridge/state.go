package bridge

import (
	"fmt"
	"maps"
	"slices"
	"time"

	"google.golang.org/protobuf/types/known/timestamppb"

	capnv1 "github.com/capn-dev/capn/schemas/capn/v1alpha1"
)

// Condition is the bridge's view of one NPD condition type.
type Condition struct {
	Status, Reason string
	// Since is when the bridge saw the status begin: NPD's metrics carry
	// no transition time, so the bridge's clock stands in for it.
	Since time.Time
}

// State is what the bridge has reported so far.
type State struct {
	Conditions map[string]Condition
	Counters   map[string]float64
	// Scraped: the first sample was taken.
	Scraped bool
}

// Step is what one sample changes, from a pure comparison with the state.
type Step struct {
	// Next is the state once the reports are delivered.
	Next State
	// ConditionsChanged: a condition appeared or changed status or reason.
	ConditionsChanged bool
	// Problems: reasons whose counter grew, with by how much.
	Problems map[string]float64
}

// Advance compares a sample with the state at now. A condition type is
// True with the reason whose gauge is non-zero (NPD keeps at most one per
// type), else False. A counter that grew (or, on the first sample, that is
// not zero) is a problem; one that went down (NPD restarted) is a new
// baseline.
func Advance(prev State, s Sample, now time.Time) Step {
	next := State{Conditions: map[string]Condition{}, Counters: maps.Clone(s.Counters), Scraped: true}
	if next.Counters == nil {
		next.Counters = map[string]float64{}
	}
	st := Step{Problems: map[string]float64{}}
	for typ, reasons := range s.Gauges {
		c := Condition{Status: "False", Reason: typ + "NotDetected"}
		for _, reason := range slices.Sorted(maps.Keys(reasons)) {
			if reasons[reason] != 0 {
				c = Condition{Status: "True", Reason: reason}
				break
			}
		}
		old, ok := prev.Conditions[typ]
		switch {
		case !ok || old.Status != c.Status:
			c.Since = now
			st.ConditionsChanged = true
		case old.Reason != c.Reason:
			c.Since = old.Since
			st.ConditionsChanged = true
		default:
			c.Since = old.Since
		}
		next.Conditions[typ] = c
	}
	for typ := range prev.Conditions {
		if _, ok := next.Conditions[typ]; !ok {
			st.ConditionsChanged = true // a type NPD no longer reports
		}
	}
	for reason, v := range s.Counters {
		old, ok := prev.Counters[reason]
		switch {
		case !prev.Scraped || !ok:
			if v > 0 {
				st.Problems[reason] = v
			}
		case v > old:
			st.Problems[reason] = v - old
		}
	}
	st.Next = next
	return st
}

// NodeConditions is the report of every condition in the state, with
// heartbeat now.
func (s State) NodeConditions(cluster, machine, source string, now time.Time) *capnv1.NodeConditions {
	nc := &capnv1.NodeConditions{Cluster: cluster, Machine: machine, Source: source, Time: timestamppb.New(now)}
	for _, typ := range slices.Sorted(maps.Keys(s.Conditions)) {
		c := s.Conditions[typ]
		msg := fmt.Sprintf("node-problem-detector reports %s: %s", typ, c.Reason)
		if c.Status != "True" {
			msg = fmt.Sprintf("node-problem-detector reports no %s problem", typ)
		}
		nc.Conditions = append(nc.Conditions, &capnv1.NodeCondition{
			Type: typ, Status: c.Status, Reason: c.Reason, Message: msg,
			LastTransitionTime: timestamppb.New(c.Since), LastHeartbeatTime: timestamppb.New(now),
		})
	}
	return nc
}
