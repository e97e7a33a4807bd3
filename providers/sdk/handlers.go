package sdk

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/rs/zerolog"
	"google.golang.org/protobuf/proto"

	"github.com/capn-dev/capn/events"
	"github.com/capn-dev/capn/events/store"
	capnv1 "github.com/capn-dev/capn/schemas/capn/v1alpha1"
)

// builtinHandlers maps the contract's command types to their handlers.
func (s *server) builtinHandlers() map[string]events.Handler {
	return map[string]events.Handler{
		TypeEnsureCluster: events.Typed(s.ensureCluster),
		TypeDeleteCluster: events.Typed(s.deleteCluster),
		TypeCreateMachine: events.Typed(s.createMachine),
		TypeDeleteMachine: events.Typed(s.deleteMachine),
		TypeStopMachine:   events.Typed(s.power),
		TypeStartMachine:  events.Typed(s.power),
		TypeRebootMachine: events.Typed(s.power),
		TypeAdoptMachine:  events.Typed(s.adoptMachine),
		TypeOrphanMachine: events.Typed(s.orphanMachine),
		TypeAdoptCluster:  events.Typed(s.adoptCluster),
		TypeOrphanCluster: events.Typed(s.orphanCluster),
	}
}

// handle checks a command's subject and type, enriches the logger, takes
// the lock of the machine (or cluster) it is about and dispatches it by
// event type. A malformed or unknown command is terminated.
func (s *server) handle(ctx context.Context, m *events.Message) error {
	subj, err := parseSubject(s.name, m.Subject)
	if err != nil {
		return events.Permanent(err)
	}
	typ := m.Event.Type()
	if want := CommandType(subj.Entity, subj.Verb); typ != want {
		return events.Permanent(fmt.Errorf("event type %q does not match subject %s (want %q)", typ, m.Subject, want))
	}
	h, ok := s.handlers[typ]
	if !ok {
		return events.Permanent(fmt.Errorf("provider %s does not handle %s: %w", s.name, typ, ErrUnsupported))
	}
	if err := ValidateName("cluster", subj.Cluster); err != nil {
		return events.Permanent(err)
	}
	if subj.Object != events.ClusterObject {
		if err := ValidateName("machine", subj.Object); err != nil {
			return events.Permanent(err)
		}
	}
	log := zerolog.Ctx(ctx).With().Str("provider", s.name).Str("cluster", subj.Cluster).Str("machine", subj.Object).Logger()
	ctx = log.WithContext(ctx)
	unlock, err := s.locks.lock(ctx, InfraKey(s.name, subj.Cluster, subj.Object))
	if err != nil {
		return err
	}
	defer unlock()
	err = h(ctx, m)
	outcome := "done"
	if err != nil && !events.IsPermanent(err) {
		outcome = "retry"
	}
	s.commands.WithLabelValues(s.name, subj.Entity, subj.Verb, outcome).Inc()
	return err
}

// target checks that a command's data names what its subject names.
func (s *server) target(m *events.Message, cluster, object string) error {
	want := events.Subject(cluster, object)
	subj, err := parseSubject(s.name, m.Subject)
	if err != nil {
		return events.Permanent(err)
	}
	if got := events.Subject(subj.Cluster, subj.Object); got != want {
		return events.Permanent(fmt.Errorf("subject %s names %s but the data names %s", m.Subject, got, want))
	}
	return nil
}

// lastTry reports whether m is on its last allowed delivery.
func (s *server) lastTry(m *events.Message) bool {
	return m.Delivery >= uint64(s.opts.MaxDeliver)
}

// giveUp reports whether a provider error is final: marked permanent, or
// on the command's last delivery.
func (s *server) giveUp(m *events.Message, err error) bool {
	return IsPermanent(err) || s.lastTry(m)
}

// record normalises what the provider returned and writes it.
func (s *server) record(ctx context.Context, im *capnv1.InfraMachine, cluster, machine string) error {
	if im == nil {
		return events.Permanent(fmt.Errorf("provider %s returned no machine for %s/%s", s.name, cluster, machine))
	}
	im = proto.Clone(im).(*capnv1.InfraMachine)
	s.obs.normalise(im, cluster, machine)
	if err := s.obs.writeMachine(ctx, im, false); err != nil {
		return err
	}
	zerolog.Ctx(ctx).Debug().Str("state", im.GetState()).Str("provider_id", im.GetProviderId()).Msg("machine recorded")
	return nil
}

func (s *server) createMachine(ctx context.Context, m *events.Message, req *capnv1.CreateMachine) error {
	c, name := req.GetCluster(), req.GetMachine()
	if err := s.target(m, c, name); err != nil {
		return err
	}
	log := zerolog.Ctx(ctx)
	cur, _, err := s.obs.machines.Get(ctx, InfraKey(s.name, c, name))
	if err != nil && !errors.Is(err, store.ErrNotFound) {
		return err
	}
	if err == nil && live(cur.GetStateValue()) {
		got, derr := s.p.Describe(ctx, c, name)
		switch {
		case derr == nil:
			log.Debug().Str("state", got.GetState()).Msg("machine already exists; create is a no-op")
			return s.record(ctx, got, c, name)
		case !errors.Is(derr, ErrNotFound):
			return fmt.Errorf("describe %s/%s: %w", c, name, derr)
		}
		log.Info().Msg("machine recorded as existing is gone; creating it again")
	}
	if !RunsOS(s.p, req.GetOs()) {
		log.Warn().Str("os", req.GetOs()).Msg("create refused: the provider does not run this operating system")
		return s.obs.failMachine(ctx, c, name, fmt.Sprintf("create refused: provider %s does not run %s machines (it announces %s)", s.name, req.GetOs(), strings.Join(s.operatingSystems(), ", ")))
	}
	if err := s.withCredential(ctx, req); err != nil {
		if !s.giveUp(m, err) {
			return fmt.Errorf("create %s/%s: %w", c, name, err)
		}
		log.Warn().Err(err).Msg("no bootstrap credential for good; recording the machine as Failed")
		return s.obs.failMachine(ctx, c, name, "create failed: "+err.Error())
	}
	log.Info().Str("version", req.GetVersion()).Str("role", req.GetRole()).Msg("creating machine")
	im, err := s.p.CreateMachine(ctx, req)
	if err != nil {
		if !s.giveUp(m, err) {
			return fmt.Errorf("create %s/%s: %w", c, name, err)
		}
		log.Warn().Err(err).Msg("create failed for good; recording the machine as Failed")
		return s.obs.failMachine(ctx, c, name, "create failed: "+err.Error())
	}
	return s.record(ctx, im, c, name)
}

func (s *server) deleteMachine(ctx context.Context, m *events.Message, req *capnv1.DeleteMachine) error {
	c, name := req.GetCluster(), req.GetMachine()
	if err := s.target(m, c, name); err != nil {
		return err
	}
	log := zerolog.Ctx(ctx)
	cur, _, err := s.obs.machines.Get(ctx, InfraKey(s.name, c, name))
	switch {
	case err == nil && live(cur.GetStateValue()):
		if err := s.obs.markMachine(ctx, c, name, StateDeleting, "deleting"); err != nil {
			return err
		}
	case err != nil && !errors.Is(err, store.ErrNotFound):
		return err
	}
	log.Info().Msg("deleting machine")
	err = s.p.DeleteMachine(ctx, c, name)
	if errors.Is(err, ErrNotFound) {
		err = nil
	}
	if err != nil {
		if !s.giveUp(m, err) {
			return fmt.Errorf("delete %s/%s: %w", c, name, err)
		}
		log.Warn().Err(err).Msg("delete failed for good; recording the machine as Failed")
		return s.obs.failMachine(ctx, c, name, "delete failed: "+err.Error())
	}
	return s.obs.deleteMachine(ctx, c, name)
}

func (s *server) power(ctx context.Context, m *events.Message, req *capnv1.MachinePower) error {
	c, name := req.GetCluster(), req.GetMachine()
	if err := s.target(m, c, name); err != nil {
		return err
	}
	subj, _ := parseSubject(s.name, m.Subject)
	action := req.GetAction()
	if action == "" {
		action = subj.Verb
	}
	if action != subj.Verb {
		return events.Permanent(fmt.Errorf("action %q does not match subject verb %q", action, subj.Verb))
	}
	pc, ok := s.p.(PowerController)
	if !ok {
		return events.Permanent(fmt.Errorf("%s %s/%s: %w", action, c, name, ErrUnsupported))
	}
	var do func(context.Context, string, string) error
	switch action {
	case ActionStop:
		do = pc.Stop
	case ActionStart:
		do = pc.Start
	case ActionReboot:
		do = pc.Reboot
	default:
		return events.Permanent(fmt.Errorf("unknown power action %q", action))
	}
	log := zerolog.Ctx(ctx)
	log.Info().Str("action", action).Msg("power action")
	err := do(ctx, c, name)
	switch {
	case errors.Is(err, ErrNotFound):
		return events.Permanent(fmt.Errorf("%s %s/%s: %w", action, c, name, err))
	case err != nil && !s.giveUp(m, err):
		return fmt.Errorf("%s %s/%s: %w", action, c, name, err)
	case err != nil:
		log.Warn().Err(err).Str("action", action).Msg("power action failed for good")
		return s.obs.markMachine(ctx, c, name, capnv1.InfraState_INFRA_STATE_UNSPECIFIED, action+" failed: "+err.Error())
	}
	got, err := s.p.Describe(ctx, c, name)
	if err != nil {
		return fmt.Errorf("describe %s/%s after %s: %w", c, name, action, err)
	}
	return s.record(ctx, got, c, name)
}

func (s *server) ensureCluster(ctx context.Context, m *events.Message, req *capnv1.EnsureClusterInfra) error {
	c := req.GetCluster()
	if err := s.target(m, c, events.ClusterObject); err != nil {
		return err
	}
	log := zerolog.Ctx(ctx)
	log.Info().Msg("ensuring cluster infrastructure")
	ic, err := s.p.EnsureCluster(ctx, c, req.GetParameters())
	if err != nil {
		if !s.giveUp(m, err) {
			return fmt.Errorf("ensure cluster %s: %w", c, err)
		}
		log.Warn().Err(err).Msg("ensure cluster failed for good")
		return s.obs.clusterMessage(ctx, c, "ensure failed: "+err.Error())
	}
	if ic == nil {
		return events.Permanent(fmt.Errorf("provider %s returned no cluster for %s", s.name, c))
	}
	ic = proto.Clone(ic).(*capnv1.InfraCluster)
	ic.Provider, ic.Cluster = s.name, c
	return s.obs.writeCluster(ctx, ic)
}

func (s *server) deleteCluster(ctx context.Context, m *events.Message, req *capnv1.DeleteClusterInfra) error {
	c := req.GetCluster()
	if err := s.target(m, c, events.ClusterObject); err != nil {
		return err
	}
	log := zerolog.Ctx(ctx)
	log.Info().Msg("deleting cluster infrastructure")
	err := s.p.DeleteCluster(ctx, c)
	if errors.Is(err, ErrNotFound) {
		err = nil
	}
	if err != nil {
		if !s.giveUp(m, err) {
			return fmt.Errorf("delete cluster %s: %w", c, err)
		}
		log.Warn().Err(err).Msg("delete cluster failed for good")
		return s.obs.clusterMessage(ctx, c, "delete failed: "+err.Error())
	}
	return s.obs.deleteCluster(ctx, c)
}

// withCredential sets req.BootstrapCredential for a NodeAgentProvider,
// from the bootstrapper; whatever the command carried is dropped: the
// credential never travels in a command. A refusal that cannot change
// (the checksum is not current, the machine joined or is another
// provider's) is permanent.
func (s *server) withCredential(ctx context.Context, req *capnv1.CreateMachine) error {
	req.BootstrapCredential = ""
	if _, ok := s.p.(NodeAgentProvider); !ok || req.GetBootstrapChecksum() == "" {
		return nil
	}
	cred, err := BootstrapCredential(ctx, s.js.Conn(), s.name, req.GetCluster(), req.GetMachine(), req.GetBootstrapChecksum())
	var fe *FetchError
	if errors.As(err, &fe) && !fe.Retryable() {
		return Permanent(err)
	}
	if err != nil {
		return err
	}
	req.BootstrapCredential = cred
	return nil
}

// operatingSystems are what the provider announces it runs.
func (s *server) operatingSystems() []string {
	if o, ok := s.p.(OperatingSystemer); ok {
		return o.OperatingSystems()
	}
	return []string{OSLinux}
}
