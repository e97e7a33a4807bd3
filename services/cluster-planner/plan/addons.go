package plan

import (
	"cmp"
	"fmt"
	"slices"
	"strings"

	capnv1 "github.com/capn-dev/capn/schemas/capn/v1alpha1"
	"github.com/capn-dev/capn/schemas/conditions"
	"github.com/capn-dev/capn/schemas/manifest"
)

// Addon is one add-on set that selects the cluster, with the
// addon-manager's record of it on this cluster (nil before it has one).
type Addon struct {
	Set    *capnv1.AddonSet
	Record *capnv1.ClusterAddonStatus
}

// The AddonsApplied condition and its reasons. Ready is False with
// ReasonAddonsNotApplied while a blocking set is not applied.
const (
	ConditionAddonsApplied = "AddonsApplied"
	ReasonAddonsApplied    = "AddonsApplied"
	ReasonAddonsPending    = "AddonsPending"
	ReasonAddonsFailed     = "AddonsFailed"
	ReasonAddonsNotApplied = "AddonsNotApplied"
	// reasonNoKubernetesAPI is the addon-manager's reason for a set on a
	// cluster without an API server (sim): nothing to apply, nothing to
	// wait for.
	reasonNoKubernetesAPI = "NoKubernetesAPI"
	reasonApplyFailed     = "ApplyFailed"
)

// addonsStatus judges the sets selecting the cluster (level-driven, from
// the records alone): ok when every set is applied (or cannot be: the
// cluster has no Kubernetes API), blockOK when every blocking one is. The
// reason and message say which sets are not applied and why, in order.
func addonsStatus(addons []Addon) (ok, blockOK bool, reason, msg, blockMsg string) {
	sorted := slices.Clone(addons)
	slices.SortFunc(sorted, func(a, b Addon) int {
		return cmp.Or(cmp.Compare(a.Set.GetSpec().GetOrder(), b.Set.GetSpec().GetOrder()),
			strings.Compare(a.Set.GetMetadata().GetName(), b.Set.GetMetadata().GetName()))
	})
	applied, na := 0, 0
	failed := false
	var pending, blocking []string
	for _, a := range sorted {
		name := a.Set.GetMetadata().GetName()
		cond := conditions.Get(a.Record.GetConditions(), manifest.AddonConditionApplied)
		current := a.Record.GetSetUid() == a.Set.GetMetadata().GetUid()
		switch {
		case manifest.AddonApplied(a.Set, a.Record):
			applied++
			continue
		case current && cond.GetReason() == reasonNoKubernetesAPI:
			na++
			continue
		}
		why := "not applied yet"
		if current && cond != nil {
			why = cond.GetReason()
			if cond.GetMessage() != "" {
				why += ": " + cond.GetMessage()
			}
			failed = failed || cond.GetReason() == reasonApplyFailed
		}
		what := name
		if a.Set.GetSpec().GetBlocking() {
			what += " (blocking)"
			blocking = append(blocking, name+" ("+why+")")
		}
		pending = append(pending, what+": "+why)
	}
	blockOK = len(blocking) == 0
	if len(pending) == 0 {
		msg = fmt.Sprintf("%d of %d add-on sets applied", applied, len(sorted))
		if na > 0 {
			msg += fmt.Sprintf("; %d not applied: the cluster's provider runs no Kubernetes API", na)
		}
		return true, true, ReasonAddonsApplied, msg, ""
	}
	reason = ReasonAddonsPending
	if failed {
		reason = ReasonAddonsFailed
	}
	msg = fmt.Sprintf("%d of %d add-on sets applied; %s", applied, len(sorted), strings.Join(pending, "; "))
	if !blockOK {
		blockMsg = "blocking add-on sets not applied: " + strings.Join(blocking, "; ")
	}
	return false, blockOK, reason, msg, blockMsg
}
