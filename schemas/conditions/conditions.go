// Package conditions holds the one rule for setting a status condition
// (Cluster API's util/conditions): a condition is found by its type, and
// its LastTransitionTime moves only when its status changes.
package conditions

import (
	"slices"
	"time"

	"google.golang.org/protobuf/types/known/timestamppb"

	capnv1 "github.com/capn-dev/capn/schemas/capn/v1alpha1"
)

// New is a condition of type typ with status, a CamelCase reason and a
// message; Set or Stamp gives it its transition time.
func New(typ string, status capnv1.ConditionStatus, reason, message string) *capnv1.Condition {
	return &capnv1.Condition{Type: typ, Status: status.Wire(), Reason: reason, Message: message}
}

// Get is the condition of type typ in list, or nil.
func Get(list []*capnv1.Condition, typ string) *capnv1.Condition {
	if i := index(list, typ); i >= 0 {
		return list[i]
	}
	return nil
}

// Has reports whether list holds a condition of type typ with status.
func Has(list []*capnv1.Condition, typ string, status capnv1.ConditionStatus) bool {
	return Get(list, typ).GetStatusValue() == status
}

// IsTrue reports whether the condition of type typ is True; an absent
// condition is not.
func IsTrue(list []*capnv1.Condition, typ string) bool {
	return Has(list, typ, capnv1.ConditionTrue)
}

// Stamp gives c its LastTransitionTime: the one of the condition of its
// type in prev when that has the same status and a time, else now (none
// when now is zero: a caller without a clock). It returns c.
func Stamp(c *capnv1.Condition, prev []*capnv1.Condition, now time.Time) *capnv1.Condition {
	switch p := Get(prev, c.GetType()); {
	case p.GetStatus() == c.GetStatus() && p.GetLastTransitionTime() != nil:
		c.LastTransitionTime = p.GetLastTransitionTime()
	case now.IsZero():
		c.LastTransitionTime = nil
	default:
		c.LastTransitionTime = timestamppb.New(now)
	}
	return c
}

// Set puts c in *list in place of the condition of its type (appended when
// there is none), stamped as Stamp does.
func Set(list *[]*capnv1.Condition, c *capnv1.Condition, now time.Time) {
	Stamp(c, *list, now)
	if i := index(*list, c.GetType()); i >= 0 {
		(*list)[i] = c
		return
	}
	*list = append(*list, c)
}

// Delete removes the condition of type typ from *list and reports whether
// there was one.
func Delete(list *[]*capnv1.Condition, typ string) bool {
	i := index(*list, typ)
	if i >= 0 {
		*list = slices.Delete(*list, i, i+1)
	}
	return i >= 0
}

func index(list []*capnv1.Condition, typ string) int {
	return slices.IndexFunc(list, func(c *capnv1.Condition) bool { return c.GetType() == typ })
}
