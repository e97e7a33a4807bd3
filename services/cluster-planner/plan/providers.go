package plan

import (
	"fmt"
	"slices"
	"strings"
	"time"

	capnv1 "github.com/capn-dev/capn/schemas/capn/v1alpha1"
)

// The provider contract the planner checks (docs/providers.md,
// "Announcement and capabilities"). The values are the contract's, not
// imported from providers/sdk: the core imports no provider (tests/arch).
const (
	// ProviderStale is how old a provider's announcement may be before the
	// provider counts as not running (it refreshes it every 15s at most).
	ProviderStale = 30 * time.Second
	// CapabilityStopStart is the capability spec.hibernated needs.
	CapabilityStopStart = "stop-start"
	// OSLinux is what a provider that announces no operating_systems runs.
	OSLinux = "linux"
)

// Reasons of the ProvidersReady condition, also used for the Ready
// condition and a held pool's condition.
const (
	ReasonProvidersRunning        = "ProvidersRunning"
	ReasonProviderNotRunning      = "ProviderNotRunning"
	ReasonProviderLacksCapability = "ProviderLacksCapability"
	// ReasonProviderLacksOS: a pool's os is not among the operating
	// systems its provider announces; the pool creates nothing.
	ReasonProviderLacksOS = "ProviderLacksOperatingSystem"
)

// ProviderRuns reports whether announcement a lists os among its
// operating systems (none listed: linux only).
func ProviderRuns(a *capnv1.ProviderAnnouncement, os string) bool {
	systems := a.GetOperatingSystems()
	if len(systems) == 0 {
		systems = []string{OSLinux}
	}
	return slices.Contains(systems, os)
}

// ProviderAlive reports whether announcement a, read at now, says its
// provider runs: present, with a time at most ProviderStale old. A provider
// that stopped cleanly has withdrawn its announcement; one that crashed
// left a stale one.
func ProviderAlive(a *capnv1.ProviderAnnouncement, now time.Time) bool {
	return a != nil && a.GetTime() != nil && now.Sub(a.GetTime().AsTime()) <= ProviderStale
}

// providerProblem is one provider that cannot serve the pools naming it.
type providerProblem struct {
	provider string
	reason   string   // ReasonProviderNotRunning, ReasonProviderLacksCapability or ReasonProviderLacksOS
	pools    []string // the pools that name it, control plane first
	detail   string   // why, for the message
}

// checkProviders compares the providers the cluster's pools name with
// their announcements (Input.Providers; nil: not checked). A pool whose
// provider does not run is blocked: it creates and deletes nothing until
// the provider announces itself again (its machines stay). A hibernated
// pool whose provider does not announce stop-start cannot stop: its
// machines are not marked stopped. A pool of an os its provider does not
// announce (operating_systems; none: linux) is blocked the same way: it
// creates nothing, and its machines stay. A pool that needs no provider —
// no replicas and no machines — is not checked.
func (p *planner) checkProviders() {
	if p.in.Providers == nil {
		return
	}
	byProvider := map[string]*providerProblem{}
	var order []string
	problem := func(provider, reason, detail, pool string) {
		pr := byProvider[provider+"/"+reason]
		if pr == nil {
			pr = &providerProblem{provider: provider, reason: reason, detail: detail}
			byProvider[provider+"/"+reason] = pr
			order = append(order, provider+"/"+reason)
		}
		pr.pools = append(pr.pools, pool)
	}
	hibernated := p.c.GetSpec().GetHibernated()
	for _, pl := range append([]*pool{p.cp}, p.pools...) {
		if pl.provider == "" || (pl.replicas == 0 && len(pl.machines) == 0) {
			continue
		}
		p.usedProviders[pl.provider] = append(p.usedProviders[pl.provider], pl.name)
		a := p.in.Providers[pl.provider]
		switch {
		case !ProviderAlive(a, p.in.Now):
			detail := "it has no announcement (provider." + pl.provider + " in the observed bucket)"
			if a.GetTime() != nil {
				detail = fmt.Sprintf("its last announcement, at %s, is more than %s old", a.GetTime().AsTime().UTC().Format(time.RFC3339), ProviderStale)
			}
			pl.blocked, pl.blockedMsg = ReasonProviderNotRunning, "waiting for provider "+pl.provider+" to run"
			problem(pl.provider, ReasonProviderNotRunning, detail, pl.name)
		case !ProviderRuns(a, pl.os):
			systems := a.GetOperatingSystems()
			if len(systems) == 0 {
				systems = []string{OSLinux}
			}
			pl.blocked, pl.blockedMsg = ReasonProviderLacksOS, "provider "+pl.provider+" does not run "+pl.os+" machines"
			problem(pl.provider, ReasonProviderLacksOS, pl.os+" machines (it announces "+strings.Join(systems, ", ")+")", pl.name)
		case hibernated && !slices.Contains(a.GetCapabilities(), CapabilityStopStart):
			pl.cannotStop = true
			problem(pl.provider, ReasonProviderLacksCapability, "spec.hibernated needs", pl.name)
		}
	}
	for _, k := range order {
		p.providerProblems = append(p.providerProblems, byProvider[k])
	}
	// A cluster nothing was made for yet is refused as a whole: no
	// infrastructure, no machine, until every provider it names can serve
	// it — except for a pool of an os its provider does not run, which
	// alone is held.
	refuse := slices.ContainsFunc(p.providerProblems, func(pr *providerProblem) bool { return pr.reason != ReasonProviderLacksOS })
	p.refused = refuse && !p.initialized && len(p.list) == 0
}

// providersCondition is the ProvidersReady condition's reason and message;
// ok is false when any provider cannot serve the cluster.
func (p *planner) providersCondition() (ok bool, reason, msg string) {
	if len(p.providerProblems) == 0 {
		names := make([]string, 0, len(p.usedProviders))
		for n := range p.usedProviders {
			names = append(names, n)
		}
		slices.Sort(names)
		parts := make([]string, 0, len(names))
		for _, n := range names {
			parts = append(parts, n+" ("+strings.Join(p.usedProviders[n], ", ")+")")
		}
		if len(parts) == 0 {
			return true, ReasonProvidersRunning, "no pool needs a provider"
		}
		return true, ReasonProvidersRunning, "every provider the cluster uses is running: " + strings.Join(parts, ", ")
	}
	reason = ReasonProviderLacksCapability
	var parts []string
	for _, pr := range p.providerProblems {
		used := "pool"
		if len(pr.pools) > 1 {
			used = "pools"
		}
		switch pr.reason {
		case ReasonProviderNotRunning:
			reason = ReasonProviderNotRunning
			parts = append(parts, fmt.Sprintf("provider %s (%s %s) is not running: %s; start the %s provider service (capn dev runs it when it can: see --providers)",
				pr.provider, used, strings.Join(pr.pools, ", "), pr.detail, pr.provider))
		case ReasonProviderLacksCapability:
			parts = append(parts, fmt.Sprintf("provider %s (%s %s) does not announce %s, which %s: its machines are not stopped; clear spec.hibernated or move the %s to a provider that can stop",
				pr.provider, used, strings.Join(pr.pools, ", "), CapabilityStopStart, pr.detail, used))
		case ReasonProviderLacksOS:
			if reason != ReasonProviderNotRunning {
				reason = ReasonProviderLacksOS
			}
			parts = append(parts, fmt.Sprintf("provider %s (%s %s) does not run %s: no machine of the %s is created; set the %s's os to one the provider runs or move it to a provider that announces it",
				pr.provider, used, strings.Join(pr.pools, ", "), pr.detail, used, used))
		}
	}
	switch {
	case p.refused:
		parts = append(parts, "nothing is created for the cluster until then")
	case reason == ReasonProviderNotRunning:
		parts = append(parts, "the machines these pools have stay; none is created or deleted in them until then")
	}
	return false, reason, strings.Join(parts, "; ")
}
