package bootstrapper

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"slices"
	"sync"

	"github.com/rs/zerolog"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/capn-dev/capn/events"
	"github.com/capn-dev/capn/events/store"
	capnv1 "github.com/capn-dev/capn/schemas/capn/v1alpha1"
	"github.com/capn-dev/capn/schemas/keys"
	"github.com/capn-dev/capn/secrets/pki"
	"github.com/capn-dev/capn/secrets/token"
	"github.com/capn-dev/capn/services/bootstrapper/bootstrap"
)

// Reasons of BootstrapFailed.
const (
	ReasonInvalidCommand   = "InvalidCommand"
	ReasonClusterNotFound  = "ClusterNotFound"
	ReasonInvalidBootstrap = "InvalidBootstrapConfig"
	ReasonPKIUnavailable   = "PKIUnavailable"
)

// errWaiting means a precondition is not met yet; the command is retried.
var errWaiting = errors.New("waiting")

func (s *Service) handleCommand(ctx context.Context, m *events.Message) error {
	switch m.Event.Type() {
	case events.TypeGenerateBootstrap:
		return events.Typed(s.generate)(ctx, m)
	case events.TypeDeleteClusterSecrets:
		return events.Typed(s.cleanup)(ctx, m)
	}
	return events.Permanent(fmt.Errorf("unknown command type %q (want %s or %s)", m.Event.Type(), events.TypeGenerateBootstrap, events.TypeDeleteClusterSecrets))
}

// generate answers a GenerateBootstrap command with bootstrap.ready once the
// machine's data is sealed in secrets, or bootstrap.failed with a reason.
// A repeated command (same content) gets the same data and the same
// bootstrap.ready event id, so JetStream drops the repeat.
func (s *Service) generate(ctx context.Context, m *events.Message, cmd *capnv1.GenerateBootstrap) error {
	return s.generateFor(ctx, m.Event.ID(), cmd)
}

// generateFor is generate for one request: request (the command's id, or
// levelRequest for the machines loop) makes the answer's id.
func (s *Service) generateFor(ctx context.Context, request string, cmd *capnv1.GenerateBootstrap) error {
	log := zerolog.Ctx(ctx).With().Str("cluster", cmd.GetCluster()).Str("machine", cmd.GetMachine()).Logger()
	if cmd.GetCluster() == "" || cmd.GetMachine() == "" {
		return s.fail(ctx, cmd, ReasonInvalidCommand, "cluster and machine are required")
	}
	spec := cmd.GetBootstrap()
	if err := s.cfg.Registry.ValidateFor("bootstrap", "os", bootstrap.OSOf(cmd.GetOs()), spec); err != nil {
		return s.fail(ctx, cmd, ReasonInvalidBootstrap, err.Error())
	}
	// Files from bootstrap secrets: read now, rendered as content.
	resolved, digest, miss, err := s.resolveFiles(ctx, spec)
	if err != nil {
		return err
	}
	if miss != nil {
		log.Info().Str("secret", miss.name).Str("key", miss.key).Msg("bootstrap data waits for a bootstrap secret")
		return s.waiting(ctx, request, cmd, miss)
	}
	hash, err := inputHash(cmd)
	if err != nil {
		return events.Permanent(err)
	}
	hash = withSecrets(hash, digest)
	key := keys.Bootstrap(cmd.GetCluster(), cmd.GetMachine())
	cur, _, err := s.boots.Get(ctx, key)
	switch {
	case err == nil && cur.GetInputHash() == hash:
		return s.ready(ctx, request, cmd, key, cur)
	case err != nil && !errors.Is(err, store.ErrNotFound):
		return err
	}
	absent := err != nil // no record: the first write is a create

	cluster, ok, err := s.clusterForData(ctx, cmd.GetCluster())
	if err != nil {
		return err
	}
	if !ok || cluster.GetMetadata().GetDeletionTimestamp() != nil {
		return s.fail(ctx, cmd, ReasonClusterNotFound, fmt.Sprintf("cluster %q does not exist or is being deleted", cmd.GetCluster()))
	}
	set, err := s.ensurePKI(ctx, cluster)
	if err != nil {
		if isUserCAError(err) || errors.Is(err, pki.ErrCAConflict) {
			return s.fail(ctx, cmd, ReasonPKIUnavailable, err.Error())
		}
		return err
	}
	ep, ok := s.endpoint(cluster)
	if !ok {
		log.Debug().Msg("control-plane endpoint not reported yet; retrying")
		return fmt.Errorf("%w for the control-plane endpoint of %s", errWaiting, cmd.GetCluster())
	}
	workerCA, ok := s.workerCA(cluster)
	if !ok {
		log.Debug().Msg("control-plane CA not reported yet; retrying")
		return fmt.Errorf("%w for the control-plane CA of %s (its record controlplane.%s)", errWaiting, cmd.GetCluster(), cmd.GetCluster())
	}
	tok, err := token.Generate()
	if err != nil {
		return err
	}
	if digest != "" {
		cmd = proto.Clone(cmd).(*capnv1.GenerateBootstrap)
		cmd.Bootstrap = resolved
	}
	in, err := bootstrap.NewInput(cmd, bootstrap.Cluster{Endpoint: ep, Network: cluster.GetSpec().GetNetwork(), PKI: set.set, WorkerCA: workerCA,
		CACertHash: s.caHashes.hash}, tok)
	if err != nil {
		return s.fail(ctx, cmd, ReasonInvalidBootstrap, err.Error())
	}
	out, err := s.cfg.Registry.Render(in)
	if err != nil {
		return s.fail(ctx, cmd, ReasonInvalidBootstrap, err.Error())
	}
	// The bootstrap credential is minted with the data only for a machine
	// whose provider runs node agents (or does not say): the others never
	// ask for it, and a record without one has nothing to forget at the
	// join (tendTokens: one write fewer). A provider that asks all the
	// same gets one minted then (credential.go).
	cred := ""
	if s.mintsCredential(cmd.GetCluster(), cmd.GetMachine()) {
		if cred, err = newCredential(); err != nil {
			return err
		}
	}
	secret, err := newCredential()
	if err != nil {
		return err
	}
	now := s.cfg.Now()
	rec := &capnv1.BootstrapData{FetchCredential: cred, MachineSecret: secret,
		Format: string(out.Format), Data: out.Data, Checksum: out.Checksum(), Provider: providerName(spec, s.cfg.Registry),
		InputHash: hash, Token: tok.Value(), TokenExpires: timestamppb.New(token.Expiry(now, in.TokenTTL)),
		TokenTtl: durationpb.New(in.TokenTTL),
	}
	stored, err := s.store(ctx, key, hash, rec, absent)
	if err != nil {
		return err
	}
	if _, ok := s.desired.Get(keys.Machine(cmd.GetCluster(), cmd.GetMachine())); !ok {
		// Data for a machine deleted meanwhile (or not seen yet): the
		// join-token pass looks for data to purge.
		s.gone.dirty(cmd.GetCluster())
	}
	// A new token: the join-token pass registers it in the workload cluster.
	s.joinMemo.unsettle(key)
	s.kickJoins(cmd.GetCluster())
	log.Info().Str("format", stored.GetFormat()).Str("checksum", stored.GetChecksum()).Msg("bootstrap data ready")
	return s.ready(ctx, request, cmd, key, stored)
}

// store writes a machine's new bootstrap data rec (input hash hash) with
// a compare-and-set and returns what is stored: if another replica stored
// data for the same input first, theirs, so every answer is the same.
// absent says the record was missing when generateFor read it: it is
// created without reading it again, and read only if that create loses.
func (s *Service) store(ctx context.Context, key, hash string, rec *capnv1.BootstrapData, absent bool) (*capnv1.BootstrapData, error) {
	if absent {
		_, err := s.boots.Create(ctx, key, rec)
		if err == nil {
			return rec, nil
		}
		if !errors.Is(err, store.ErrConflict) {
			return nil, err
		}
	}
	stored, _, err := s.boots.Mutate(ctx, key, func(cur *capnv1.BootstrapData, exists bool) (*capnv1.BootstrapData, error) {
		if exists && cur.GetInputHash() == hash {
			return nil, store.ErrNoChange
		}
		if exists && cur.GetMachineSecret() != "" {
			// New data for the same machine: a machine that is running
			// keeps logging in with the secret it has.
			rec.MachineSecret = cur.GetMachineSecret()
		}
		return rec, nil
	})
	return stored, err
}

// capabilityNodeAgent is the provider SDK's sdk.CapabilityNodeAgent
// (services do not import the SDK).
const capabilityNodeAgent = "node-agent"

// mintsCredential says whether a machine's bootstrap credential is minted
// with its data: unless its provider's announcement is there and does not
// name node-agent (a machine or announcement not in the cache: minted).
func (s *Service) mintsCredential(cluster, machine string) bool {
	m, _, ok := store.NewView(s.desired, store.New[capnv1.Machine]()).Get(keys.Machine(cluster, machine))
	if !ok || m.GetSpec().GetProvider() == "" {
		return true
	}
	a, _, ok := store.NewView(s.observed, store.New[capnv1.ProviderAnnouncement]()).Get(keys.Provider(m.GetSpec().GetProvider()))
	return !ok || slices.Contains(a.GetCapabilities(), capabilityNodeAgent)
}

func providerName(spec *capnv1.BootstrapSpec, r *bootstrap.Registry) string {
	if spec.GetProvider() != "" {
		return spec.GetProvider()
	}
	return r.Default()
}

// ready answers a generate command. The answer's id is deterministic per
// data and per request: a redelivered command gets an answer JetStream
// de-duplicates, while a machine-manager asking again (a new command id,
// because it never got the first answer) gets a new one.
func (s *Service) ready(ctx context.Context, request string, cmd *capnv1.GenerateBootstrap, key string, rec *capnv1.BootstrapData) error {
	ev := &capnv1.BootstrapReady{Cluster: cmd.GetCluster(), Machine: cmd.GetMachine(), SecretKey: key,
		Format: rec.GetFormat(), Checksum: rec.GetChecksum(), Provider: rec.GetProvider()}
	id := "bootstrap-ready." + cmd.GetCluster() + "." + cmd.GetMachine() + "." + shortHash(rec.GetChecksum()+"\n"+request)
	_, err := s.pub.Publish(ctx, events.EventSubject("bootstrap", "ready", cmd.GetCluster(), cmd.GetMachine()),
		events.TypeBootstrapReady, id, ev, events.WithSubject(cmd.GetMachine()))
	return err
}

// fail publishes bootstrap.failed and ends the command: retrying the same
// command cannot succeed.
func (s *Service) fail(ctx context.Context, cmd *capnv1.GenerateBootstrap, reason, msg string) error {
	zerolog.Ctx(ctx).Warn().Str("reason", reason).Str("detail", msg).Msg("bootstrap failed")
	ev := &capnv1.BootstrapFailed{Cluster: cmd.GetCluster(), Machine: cmd.GetMachine(), Reason: reason, Message: msg}
	id := "bootstrap-failed." + cmd.GetCluster() + "." + cmd.GetMachine() + "." + shortHash(reason+msg)
	if _, err := s.pub.Publish(ctx, events.EventSubject("bootstrap", "failed", orUnderscore(cmd.GetCluster()), orUnderscore(cmd.GetMachine())),
		events.TypeBootstrapFailed, id, ev); err != nil {
		return err // retry: the failure must be told
	}
	return events.Permanent(fmt.Errorf("%s: %s", reason, msg))
}

func orUnderscore(s string) string {
	if s == "" {
		return events.ClusterObject
	}
	return s
}

// cleanup removes a deleted cluster's PKI, kubeconfig, bootstrap data and
// secrets status. It is the last step of a cluster's deletion and is
// idempotent.
func (s *Service) cleanup(ctx context.Context, m *events.Message, cmd *capnv1.DeleteClusterSecrets) error {
	name := cmd.GetCluster()
	if name == "" {
		return events.Permanent(errors.New("cleanup: cluster is required"))
	}
	c, ok, err := s.clusterNow(ctx, name)
	if err != nil {
		return err
	}
	if ok && c.GetMetadata().GetDeletionTimestamp() == nil {
		return events.Permanent(fmt.Errorf("cleanup: cluster %q exists and is not being deleted; refusing to delete its secrets", name))
	}
	purge, err := s.boots.Keys(ctx, keys.BootstrapsOf(name))
	if err != nil {
		return err
	}
	purge = append(purge, keys.PKI(name), keys.Kubeconfig(name))
	for _, k := range purge {
		if err := s.secretsKV.Purge(ctx, k); err != nil {
			return fmt.Errorf("purge %s: %w", k, err)
		}
	}
	if err := s.statuses.KV().Purge(ctx, keys.Secrets(name)); err != nil {
		return fmt.Errorf("purge %s: %w", keys.Secrets(name), err)
	}
	s.tokens.forgetCluster(name)
	s.joinMemo.forgetCluster(name)
	s.workload.Invalidate(name)
	s.pkiChecks.forget(name)
	s.adminKCs.forget(name)
	s.gone.forget(name)
	zerolog.Ctx(ctx).Info().Str("cluster", name).Int("keys", len(purge)).Msg("cluster secrets deleted")
	_, err = s.pub.Publish(ctx, events.EventSubject("bootstrap", "cleaned", name, events.ClusterObject), events.TypeClusterEvent+".secrets-deleted",
		"secrets-deleted."+name+"."+shortHash(m.Event.ID()), &capnv1.ClusterEvent{Cluster: name, Reason: "SecretsDeleted", Message: "PKI, kubeconfig and bootstrap data deleted"})
	return err
}

// inputHash identifies a command's content.
func inputHash(m proto.Message) (string, error) {
	b, err := proto.MarshalOptions{Deterministic: true}.Marshal(m)
	if err != nil {
		return "", err
	}
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:]), nil
}

// caHashMemo remembers the pins (pki.CACertHash) of the CA certificates
// seen last, by their PEM: every machine of a cluster trusts the same one.
// It holds at most caHashMemoSize; it is emptied when full.
type caHashMemo struct {
	mu sync.Mutex
	by map[string]string
}

const caHashMemoSize = 4096

func (m *caHashMemo) hash(certPEM []byte) (string, error) {
	m.mu.Lock()
	h, ok := m.by[string(certPEM)]
	m.mu.Unlock()
	if ok {
		return h, nil
	}
	h, err := pki.CACertHash(certPEM)
	if err != nil {
		return "", err
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.by == nil || len(m.by) >= caHashMemoSize {
		m.by = map[string]string{}
	}
	m.by[string(certPEM)] = h
	return h, nil
}

func shortHash(s string) string {
	sum := sha256.Sum256([]byte(s))
	return hex.EncodeToString(sum[:6])
}
