package healthwatcher

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/rs/zerolog"

	"github.com/capn-dev/capn/events"
	"github.com/capn-dev/capn/schemas/annotations"
	capnv1 "github.com/capn-dev/capn/schemas/capn/v1alpha1"
	"github.com/capn-dev/capn/schemas/health/policy"
	"github.com/capn-dev/capn/schemas/keys"
)

// onHealth dispatches a report from capn.health.<cluster>.<machine>.<kind>
// by its event type. Every handler follows one contract: the report must
// match its subject (a reporter may speak only for the machine its subject
// names — NATS permissions scope subjects), it is ignored (acked) when the
// machine is unknown, being deleted, or younger than the report (a late
// report of an earlier machine of the same name), and a material change is
// written with compare-and-set before the message is acked. A deleting
// machine's heartbeats and conditions are recorded (not judged).
func (s *Service) onHealth(ctx context.Context, m *events.Message) error {
	switch m.Event.Type() {
	case events.TypeNodeHeartbeat:
		return events.Typed(s.onHeartbeat)(ctx, m)
	case events.TypeNodeConditions:
		return events.Typed(s.onConditions)(ctx, m)
	case events.TypeProblemEvent:
		return events.Typed(s.onProblem)(ctx, m)
	}
	s.metrics.report("unknown", outcomeIgnored)
	return events.Permanent(fmt.Errorf("unexpected event type %q on %s", m.Event.Type(), m.Subject))
}

// report is one report's identity after the checks every handler makes.
type report struct {
	cluster, machine, key string
	at                    time.Time // when the stream stored it
	created               time.Time // the machine incarnation's creation
}

// errIgnore means the report is about nothing the watcher keeps.
var errIgnore = errors.New("ignored")

// errDeleting is errIgnore for a machine whose deletion was requested.
var errDeleting = fmt.Errorf("machine deleting: %w", errIgnore)

// accept checks a report of kind from cluster/machine (as its data says)
// against its subject and the desired machine.
func (s *Service) accept(ctx context.Context, m *events.Message, kind, cluster, machine string) (report, error) {
	var subjCluster, subjMachine string
	switch sub, err := keys.ParseSubject(m.Subject); {
	case err == nil && (sub.Root == keys.HealthRoot || sub.Root == keys.EventsRoot && sub.Entity == keys.EntityDrift):
		subjCluster, subjMachine = sub.Cluster, sub.Object
	default:
		return report{}, events.Permanent(fmt.Errorf("%s report on unexpected subject %s", kind, m.Subject))
	}
	if cluster == "" {
		cluster = subjCluster
	}
	if machine == "" {
		machine = subjMachine
	}
	if cluster != subjCluster || machine != subjMachine {
		return report{}, events.Permanent(fmt.Errorf("%s report for %s/%s on the subject of %s/%s", kind, cluster, machine, subjCluster, subjMachine))
	}
	r := report{cluster: cluster, machine: machine, key: cluster + "." + machine, at: s.cfg.Now()}
	if m.Metadata != nil && !m.Metadata.Timestamp.IsZero() {
		r.at = m.Metadata.Timestamp
	}
	dm, _, ok := s.facts.machines.Get(keys.MachinePrefix + r.key)
	log := zerolog.Ctx(ctx)
	switch {
	case !ok:
		log.Debug().Str("cluster", cluster).Str("machine", machine).Msg("report for an unknown machine ignored")
		return r, errIgnore
	case dm.deleting && kind != keys.HealthHeartbeat:
		// A deleting machine's heartbeats still count (the machine-manager
		// waits for a leaving control plane's etcd member only while its
		// agent heartbeats), and of its conditions EtcdMemberRemoved
		// (onConditions).
		r.created = dm.created
		return r, errDeleting
	}
	r.created = dm.created
	if r.at.Before(r.created) {
		log.Debug().Str("cluster", cluster).Str("machine", machine).Msg("report older than the machine ignored")
		return r, errIgnore
	}
	return r, nil
}

// handle runs the common path of a report: accept, then applyReport — the
// report merged and the merged record judged, in one write if the merge
// changed something.
func (s *Service) handle(ctx context.Context, m *events.Message, kind, cluster, machine string, merge func(*capnv1.NodeHealth) bool) error {
	r, err := s.accept(ctx, m, kind, cluster, machine)
	if errors.Is(err, errIgnore) {
		s.metrics.report(kind, outcomeIgnored)
		return nil
	}
	if err != nil {
		s.metrics.report(kind, outcomeIgnored)
		return err
	}
	wrote, err := s.applyReport(ctx, r, merge)
	if err != nil {
		return err
	}
	s.metrics.report(kind, outcome(wrote))
	return nil
}

// outcome is a report's outcome label: applied if it changed the record.
func outcome(wrote bool) string {
	if wrote {
		return outcomeApplied
	}
	return outcomeUnchanged
}

func (s *Service) onHeartbeat(ctx context.Context, m *events.Message, hb *capnv1.NodeHeartbeat) error {
	r, err := s.accept(ctx, m, keys.HealthHeartbeat, hb.GetCluster(), hb.GetMachine())
	if errors.Is(err, errIgnore) {
		s.metrics.report(keys.HealthHeartbeat, outcomeIgnored)
		return nil
	}
	if err != nil {
		s.metrics.report(keys.HealthHeartbeat, outcomeIgnored)
		return err
	}
	if token, ok := reporter(m); ok && !s.trusts(r, policy.IngestSource(token)) {
		// A heartbeat is the machine's own voice: from a gateway token
		// the policy does not trust it would make a machine not ready (or
		// keep a dead one alive). Counted and dropped.
		zerolog.Ctx(ctx).Warn().Str("cluster", r.cluster).Str("machine", r.machine).Str("token", token).
			Msg("heartbeat from an untrusted gateway token ignored")
		s.metrics.report(keys.HealthHeartbeat, outcomeUntrusted)
		return nil
	}
	if n, ok := s.work.identity(r.key); ok {
		// The machine's Node was read: its name and kubelet version win
		// over what the node agent says (no flip-flop between the two).
		if n.name != "" {
			hb.NodeName = n.name
		}
		if n.version != "" {
			hb.KubeletVersion = n.version
		}
	}
	if !s.beats.beat(r.key, beat{at: r.at, ready: hb.GetReady(), kubeletVersion: hb.GetKubeletVersion(), nodeName: hb.GetNodeName()}) {
		s.metrics.report(keys.HealthHeartbeat, outcomeUnchanged) // late or repeated: a newer one was seen
		return nil
	}
	persist := s.cfg.PersistEvery
	if st, _, ok := s.facts.statuses.Get(keys.MachinePrefix + r.key); ok &&
		(st.phase == capnv1.MachineStopped || st.phase == capnv1.MachineDeleting) {
		// Waking from hibernation: the machine-manager makes the machine
		// Running on a ready heartbeat from after its start, so each one
		// is written until then (a stopped machine sends none). Deleting:
		// the machine-manager judges whether the agent still answers
		// from the recorded heartbeat.
		persist = 0
	}
	// The common case, a steady node's heartbeat, changes nothing: told
	// from the remembered facts of its record, it decodes nothing.
	node, _ := s.facts.node(r.key, r.created)
	wrote := false
	if heartbeatMaterial(node.rec, hb, r.at, persist) {
		if wrote, err = s.applyReport(ctx, r, func(h *capnv1.NodeHealth) bool { return mergeHeartbeat(h, hb, r.at, persist) }); err != nil {
			return err
		}
	}
	s.metrics.report(keys.HealthHeartbeat, outcome(wrote))
	if wrote {
		return nil
	}
	// A node that was silent is back: its Ready condition must turn True
	// again now, not at the next resync.
	if st := node.readyStatus; st == capnv1.ConditionUnknown || (st == capnv1.ConditionFalse && hb.GetReady()) {
		s.touch(r.cluster, r.machine)
	}
	return nil
}

func (s *Service) onConditions(ctx context.Context, m *events.Message, nc *capnv1.NodeConditions) error {
	token, ingested := reporter(m)
	if ingested {
		nc.Source = policy.IngestSource(token)
	}
	merge := func(h *capnv1.NodeHealth) bool { return mergeConditions(h, nc, streamTime(m, s.cfg.Now())) }
	r, err := s.accept(ctx, m, keys.HealthConditions, nc.GetCluster(), nc.GetMachine())
	if errors.Is(err, errDeleting) && !ingested && !r.at.Before(r.created) {
		// A deleting machine's reports are ignored, but for the one the
		// machine-manager waits for: a leaving control plane's agent says
		// its etcd member is removed (annotations.CondEtcdMemberRemoved).
		nc.Conditions = slices.DeleteFunc(nc.Conditions, func(c *capnv1.NodeCondition) bool {
			return c.GetType() != annotations.CondEtcdMemberRemoved
		})
		if len(nc.Conditions) > 0 {
			err = nil
		}
	}
	if errors.Is(err, errIgnore) {
		s.metrics.report(keys.HealthConditions, outcomeIgnored)
		return nil
	}
	if err != nil {
		s.metrics.report(keys.HealthConditions, outcomeIgnored)
		return err
	}
	wrote, err := s.applyReport(ctx, r, merge)
	if err != nil {
		return err
	}
	s.metrics.report(keys.HealthConditions, outcome(wrote))
	return nil
}

func (s *Service) onProblem(ctx context.Context, m *events.Message, p *capnv1.ProblemEvent) error {
	if token, ok := reporter(m); ok {
		p.Source = policy.IngestSource(token)
	}
	return s.handle(ctx, m, keys.HealthProblem, p.GetCluster(), p.GetMachine(), func(h *capnv1.NodeHealth) bool {
		return mergeProblem(h, p, streamTime(m, s.cfg.Now()), s.cfg.KeepProblems)
	})
}

// onDrift records a provider's drift report, if it comes from the
// machine's provider: the one on its subject (capn.evt.drift.<provider>.…,
// which NATS permissions reserve to that provider), named in the report,
// and the machine's spec.provider. Any other is logged, counted
// (capn_health_reports_total{kind="drift",outcome="wrong_provider"}) and
// dropped: one provider must not get another's machines replaced.
func (s *Service) onDrift(ctx context.Context, m *events.Message, d *capnv1.DriftReport) error {
	if !s.driftFromOwner(ctx, m, d) {
		s.metrics.report("drift", outcomeWrongProvider)
		return nil
	}
	return s.handle(ctx, m, "drift", d.GetCluster(), d.GetMachine(), func(h *capnv1.NodeHealth) bool {
		return mergeDrift(h, d, streamTime(m, s.cfg.Now()))
	})
}

// driftFromOwner reports whether d, received on m's subject, comes from
// the provider of the machine it is about. A machine capn does not know is
// left to handle (which ignores it).
func (s *Service) driftFromOwner(ctx context.Context, m *events.Message, d *capnv1.DriftReport) bool {
	sub, _ := keys.ParseSubject(m.Subject)
	subjProvider := sub.Provider
	cluster, machine := d.GetCluster(), d.GetMachine()
	if cluster == "" || machine == "" {
		cluster, machine = sub.Cluster, sub.Object
	}
	dm, ok := decodeCached(s.desired, keys.Machine(cluster, machine), newMachine)
	owner := dm.GetSpec().GetProvider()
	if !ok || (owner == subjProvider && owner == d.GetProvider()) {
		return true
	}
	zerolog.Ctx(ctx).Warn().Str("cluster", cluster).Str("machine", machine).Str("provider", owner).
		Str("subject_provider", subjProvider).Str("report_provider", d.GetProvider()).Str("subject", m.Subject).
		Msg("drift report not from the machine's provider ignored")
	return false
}

// reporter is the gateway token that ingested m (policy.ExtensionReporter),
// if the gateway did.
func reporter(m *events.Message) (string, bool) {
	if m.Event == nil {
		return "", false
	}
	v, ok := m.Event.Extensions()[policy.ExtensionReporter]
	if !ok {
		return "", false
	}
	token, _ := v.(string)
	return token, true
}

// trusts reports whether the policy of r's machine trusts source.
func (s *Service) trusts(r report, source string) bool {
	cl, _ := decodeCached(s.desired, keys.Cluster(r.cluster), newCluster)
	dm, _ := decodeCached(s.desired, keys.MachinePrefix+r.key, newMachine)
	p, _ := policy.Resolve(cl, dm.GetSpec().GetPool(), s.cfg.Policy)
	return p.Trusts(source)
}

// readyStatus is the status of the recorded Ready condition the heartbeats
// decide ("" if none).
func readyStatus(h *capnv1.NodeHealth) capnv1.ConditionStatus {
	for _, c := range h.GetConditions() {
		if heartbeatReady(c) {
			return c.GetStatusValue()
		}
	}
	return capnv1.ConditionStatus_CONDITION_STATUS_UNSPECIFIED
}

func streamTime(m *events.Message, now time.Time) time.Time {
	if m.Metadata != nil && !m.Metadata.Timestamp.IsZero() {
		return m.Metadata.Timestamp
	}
	return now
}
