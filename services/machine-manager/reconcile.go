package machinemanager

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/rs/zerolog"
	"google.golang.org/protobuf/proto"

	"github.com/capn-dev/capn/events"
	"github.com/capn-dev/capn/events/reconcile"
	"github.com/capn-dev/capn/events/store"
	capnv1 "github.com/capn-dev/capn/schemas/capn/v1alpha1"
	"github.com/capn-dev/capn/schemas/keys"
)

// reconcile runs one Step for machine key "<cluster>.<machine>": it sends
// the step's commands (deterministic ids: a repeat is dropped by
// JetStream), then compare-and-sets the status; a lost race is retried from
// a fresh read by the loop.
func (s *Service) reconcile(ctx context.Context, key string) (reconcile.Result, error) {
	return s.step(ctx, key, nil)
}

// step is reconcile with answer, when set, applied first to the status it
// read (the bootstrapper's answer, onBootstrap): the answer and the step it
// allows are one compare-and-set, not two writes. With answer set, a
// missing status is errNoStatus.
func (s *Service) step(ctx context.Context, key string, answer func(*capnv1.MachineStatus)) (reconcile.Result, error) {
	cluster, name, ok := strings.Cut(key, ".")
	if !ok {
		return reconcile.Result{}, nil
	}
	// A missing desired machine deletes the machine (or forgets its
	// status): confirmed from the bucket, never taken from the cache alone.
	desired, _, _, err := store.LookupConfirmed(ctx, s.desiredView, s.machines, keys.MachinePrefix+key)
	if err != nil {
		return reconcile.Result{}, err
	}
	status, rev, err := s.statuses.Get(ctx, keys.MachinePrefix+key)
	if err != nil && !errors.Is(err, store.ErrNotFound) {
		return reconcile.Result{}, err
	}
	read := status // what the compare-and-set compares with
	if answer != nil {
		switch {
		case status != nil:
			status = proto.Clone(status).(*capnv1.MachineStatus)
		case desired == nil || desired.GetMetadata().GetDeletionTimestamp() != nil:
			return reconcile.Result{}, errNoStatus
		default:
			// A machine waiting for its data has no status yet
			// (Input.PendingSince): the answer makes its first.
			status = &capnv1.MachineStatus{}
			setPhase(status, capnv1.MachinePending, s.cfg.Now())
		}
		answer(status)
	}
	var infra *capnv1.InfraMachine
	if p := provider(desired, status); p != "" {
		infraKey := keys.InfraPrefix + p + "." + key
		infra, _, _ = store.Lookup(s.observedView, infraKey, newInfra)
		if infra == nil && restsOnInfraAbsence(desired, status) {
			// Running → InfrastructureGone, Deleting → Deleted: only on
			// the bucket's word.
			if infra, _, _, err = store.LookupConfirmed(ctx, s.observedView, s.infras, infraKey); err != nil {
				return reconcile.Result{}, err
			}
		}
	}
	node, _, _ := store.Lookup(s.observedView, keys.NodePrefix+key, store.New[capnv1.NodeHealth]())
	now := s.cfg.Now()
	out := Step(Input{Cluster: cluster, Name: name, Desired: desired, Status: status, Infra: infra, Node: node, Now: now,
		HoldProvisioned: s.holdProvisioned(key, status, infra, now), PendingSince: s.pendingSince(key, desired, status, now)}, s.cfg.Timeouts)
	log := zerolog.Ctx(ctx).With().Str("cluster", cluster).Str("machine", name).Logger()
	for _, c := range out.Commands {
		if err := s.send(ctx, c, cluster, name, desired, status); err != nil {
			return reconcile.Result{}, err
		}
	}
	switch {
	case out.Status == nil && read != nil:
		if err := s.statuses.Delete(ctx, keys.MachinePrefix+key, rev); err != nil {
			return reconcile.Result{}, err
		}
		log.Info().Msg("machine forgotten")
	case out.Status != nil && (read == nil || !proto.Equal(out.Status, read)):
		if read == nil {
			_, err = s.statuses.Create(ctx, keys.MachinePrefix+key, out.Status)
		} else {
			_, err = s.statuses.Update(ctx, keys.MachinePrefix+key, out.Status, rev)
		}
		if err != nil {
			return reconcile.Result{}, err // a conflict is retried from a fresh read
		}
		for _, ev := range out.Events {
			log.Info().Str("phase", ev.Phase).Str("reason", ev.Reason).Str("message", ev.Message).Msg("machine event")
			s.publishPhase(ctx, cluster, name, desired, out.Status, ev)
		}
	}
	return reconcile.Result{RequeueAfter: out.RequeueAfter}, nil
}

// holdProvisioned is how much longer the machine's Provisioned write waits
// for its node (Input.HoldProvisioned): Config.HoldProvisioned from when
// this process first saw its infrastructure running while it was
// Provisioning. A restart starts the wait anew: it is bounded all the same.
func (s *Service) holdProvisioned(key string, st *capnv1.MachineStatus, infra *capnv1.InfraMachine, now time.Time) time.Duration {
	hold := s.cfg.HoldProvisioned
	if hold == 0 {
		hold = DefaultHoldProvisioned
	}
	if hold < 0 || st.GetPhaseValue() != capnv1.MachineProvisioning || infra.GetStateValue() != capnv1.InfraRunning {
		s.infraUp.Delete(key)
		return 0
	}
	seen, _ := s.infraUp.LoadOrStore(key, now)
	return max(0, hold-now.Sub(seen.(time.Time)))
}

// pendingSince is when a machine with no status began to wait for its
// bootstrap data (Input.PendingSince): when this process first saw it
// without a status, so a machine-manager that was down while machines
// were made gives each the whole bootstrap timeout. A restart starts the
// wait anew: it is bounded all the same.
func (s *Service) pendingSince(key string, desired *capnv1.Machine, st *capnv1.MachineStatus, now time.Time) time.Time {
	if st != nil || desired == nil || desired.GetMetadata().GetDeletionTimestamp() != nil {
		s.pending.Delete(key)
		return time.Time{}
	}
	seen, _ := s.pending.LoadOrStore(key, now)
	return seen.(time.Time)
}

var newStatus = store.New[capnv1.MachineStatus]()
var newMachine = store.New[capnv1.Machine]()
var newInfra = store.New[capnv1.InfraMachine]()

// restsOnInfraAbsence tells whether Step decides something because a
// machine's infrastructure key is absent: a Running machine fails as
// InfrastructureGone, a deleting one becomes Deleted. Elsewhere an absent
// key only means "not yet" and costs no read.
func restsOnInfraAbsence(desired *capnv1.Machine, st *capnv1.MachineStatus) bool {
	return st.GetPhaseValue() == capnv1.MachineRunning || st.GetPhaseValue() == capnv1.MachineDeleting ||
		desired == nil || desired.GetMetadata().GetDeletionTimestamp() != nil
}

// provider of a machine: from its spec, or from its status once the spec
// is gone.
func provider(m *capnv1.Machine, st *capnv1.MachineStatus) string {
	if p := m.GetSpec().GetProvider(); p != "" {
		return p
	}
	return st.GetProvider()
}

// send publishes one of Step's commands; st is the status Step read (fresh
// from the bucket), the source of the bootstrap data's checksum and of the
// provider once the spec is gone.
func (s *Service) send(ctx context.Context, c Command, cluster, name string, m *capnv1.Machine, st *capnv1.MachineStatus) error {
	spec := m.GetSpec()
	switch c.Kind {
	case CmdBootstrap:
		cmd := capnv1.NewGenerateBootstrap(cluster, name, m) // the bootstrapper's own request for m is the same
		_, err := s.pub.Publish(ctx, events.CommandSubject("bootstrap", "generate", cluster, name), events.TypeGenerateBootstrap, c.ID, cmd)
		return err
	case CmdCreate:
		cmd := &capnv1.CreateMachine{Cluster: cluster, Machine: name, Role: spec.GetRole(), Version: spec.GetVersion(), Template: spec.GetTemplate(),
			BootstrapSecretKey: keys.Bootstrap(cluster, name), Labels: spec.GetLabels(), BootstrapProvider: spec.GetBootstrap().GetProvider(), Os: spec.GetOs()}
		cmd.BootstrapChecksum = st.GetBootstrapDataChecksum()
		_, err := s.pub.Publish(ctx, events.ProviderSubject(spec.GetProvider(), "machine", "create", cluster, name), events.TypeProviderCommand+".machine.create", c.ID, cmd)
		return err
	case CmdDelete:
		p := provider(m, st)
		if p == "" {
			return fmt.Errorf("delete %s.%s: no provider known", cluster, name)
		}
		_, err := s.pub.Publish(ctx, events.ProviderSubject(p, "machine", "delete", cluster, name), events.TypeProviderCommand+".machine.delete", c.ID,
			&capnv1.DeleteMachine{Cluster: cluster, Machine: name})
		return err
	case CmdOrphan:
		p := provider(m, st)
		if p == "" {
			return fmt.Errorf("orphan %s.%s: no provider known", cluster, name)
		}
		_, err := s.pub.Publish(ctx, events.ProviderSubject(p, "machine", "orphan", cluster, name), events.TypeProviderCommand+".machine.orphan", c.ID,
			&capnv1.DeleteMachine{Cluster: cluster, Machine: name})
		return err
	case CmdStop, CmdStart:
		_, err := s.pub.Publish(ctx, events.ProviderSubject(provider(m, st), "machine", c.Kind, cluster, name), events.TypeProviderCommand+".machine."+c.Kind, c.ID,
			&capnv1.MachinePower{Cluster: cluster, Machine: name, Action: c.Kind})
		return err
	}
	return fmt.Errorf("unknown command kind %q", c.Kind)
}

// publishPhase records a phase change on the cluster's timeline. It is best
// effort — the status is the truth, the event its history — so it does not
// wait for JetStream's acknowledgement (a round trip per phase off every
// machine's critical path); a failure is logged. The id carries the time of
// the change: a machine that is Running again after hibernation is a new
// fact, not a duplicate of its first Running.
func (s *Service) publishPhase(ctx context.Context, cluster, name string, m *capnv1.Machine, st *capnv1.MachineStatus, change Event) {
	what := strings.ToLower(change.Phase)
	ev := &capnv1.MachineEvent{Cluster: cluster, Machine: name, Phase: change.Phase, Reason: change.Reason, Message: change.Message}
	id := fmt.Sprintf("machine.%s.%s.%s.%s.%d", what, cluster, name, m.GetMetadata().GetUid(), st.GetPhaseSince().AsTime().UnixNano())
	if !change.At.IsZero() {
		// A step within the phase (drain, hook hold): one fact per step.
		id = fmt.Sprintf("machine.%s.%s.%s.%s.%s.%d", what, cluster, name, m.GetMetadata().GetUid(), strings.ToLower(change.Reason), change.At.UnixNano())
	}
	log := zerolog.Ctx(ctx)
	s.pub.PublishAsync(events.EventSubject("machine", what, cluster, name), events.TypeMachineEvent+"."+what, id, ev, func(err error) {
		if err != nil {
			log.Warn().Err(err).Msg("publish machine event")
		}
	})
}

// onBootstrap records the bootstrapper's answer in the machine's status.
func (s *Service) onBootstrap(ctx context.Context, m *events.Message) error {
	switch m.Event.Type() {
	case events.TypeBootstrapReady:
		return events.Typed(func(ctx context.Context, _ *events.Message, r *capnv1.BootstrapReady) error {
			// The checksum and the step it allows (→ Provisioning, the
			// create command) in one write; the loop, woken by it, does
			// the rest.
			return s.stepOrWait(ctx, r.GetCluster(), r.GetMachine(), func(st *capnv1.MachineStatus) {
				if st.GetPhaseValue() == capnv1.MachineBootstrapping || st.GetPhaseValue() == capnv1.MachinePending {
					st.BootstrapDataChecksum = r.GetChecksum()
				}
			})
		})(ctx, m)
	case events.TypeBootstrapWaiting:
		return events.Typed(func(ctx context.Context, _ *events.Message, w *capnv1.BootstrapWaiting) error {
			return s.stepOrWait(ctx, w.GetCluster(), w.GetMachine(), func(st *capnv1.MachineStatus) {
				if st.GetPhaseValue() == capnv1.MachinePending {
					// Not written while it waited for an answer: the
					// wait now has something to say.
					setPhase(st, capnv1.MachineBootstrapping, s.cfg.Now())
				}
				if st.GetPhaseValue() == capnv1.MachineBootstrapping && st.GetBootstrapDataChecksum() == "" {
					setCondition(st, CondBootstrapReady, capnv1.ConditionFalse, w.GetReason(), w.GetMessage(), s.cfg.Now())
					setCondition(st, CondReady, capnv1.ConditionFalse, "Bootstrapping", "waiting for bootstrap secret "+w.GetSecret(), s.cfg.Now())
				}
			})
		})(ctx, m)
	case events.TypeBootstrapFailed:
		return events.Typed(func(ctx context.Context, _ *events.Message, f *capnv1.BootstrapFailed) error {
			return s.stepOrWait(ctx, f.GetCluster(), f.GetMachine(), func(st *capnv1.MachineStatus) {
				if st.GetPhaseValue() == capnv1.MachineBootstrapping || st.GetPhaseValue() == capnv1.MachinePending {
					fail(st, ReasonBootstrapFailed, f.GetReason()+": "+f.GetMessage(), s.cfg.Now())
					setCondition(st, CondBootstrapReady, capnv1.ConditionFalse, f.GetReason(), f.GetMessage(), s.cfg.Now())
				}
			})
		})(ctx, m)
	}
	return nil
}

// errNoStatus: the answer came before the status that asked for it was
// written (commands go out first); the message is retried.
var errNoStatus = errors.New("no machine status yet")

// answerAttempts bounds stepOrWait's compare-and-sets; past it the
// message is redelivered.
const answerAttempts = 5

// stepOrWait is step for an answer to our own commands: the answer and
// the step it allows are one compare-and-set. A machine with no status
// gets its first from the answer; the answer for a machine no longer
// wanted is dropped (orWait).
func (s *Service) stepOrWait(ctx context.Context, cluster, machine string, answer func(*capnv1.MachineStatus)) error {
	if cluster == "" || machine == "" {
		return events.Permanent(errors.New("cluster and machine are required"))
	}
	var err error
	for range answerAttempts {
		// A lost compare-and-set (the loop stepped the machine meanwhile)
		// is tried again from a fresh read, as Mutate does.
		if _, err = s.step(ctx, cluster+"."+machine, answer); !errors.Is(err, store.ErrConflict) {
			break
		}
	}
	return s.orWait(ctx, cluster, machine, err)
}

// orWait is err, but nil for a missing status (errNoStatus) of a machine
// no longer wanted.
func (s *Service) orWait(ctx context.Context, cluster, machine string, err error) error {
	if errors.Is(err, errNoStatus) {
		// Dropping the answer rests on the machine's absence: confirmed.
		_, _, wanted, cerr := store.LookupConfirmed(ctx, s.desiredView, s.machines, keys.Machine(cluster, machine))
		if cerr != nil {
			return cerr
		}
		if !wanted {
			return nil
		}
	}
	return err
}
