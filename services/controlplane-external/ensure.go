package controlplaneexternal

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"time"

	"github.com/rs/zerolog"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/capn-dev/capn/events"
	"github.com/capn-dev/capn/events/store"
	"github.com/capn-dev/capn/kubeapi"
	capnv1 "github.com/capn-dev/capn/schemas/capn/v1alpha1"
	"github.com/capn-dev/capn/schemas/conditions"
	"github.com/capn-dev/capn/schemas/keys"
	"github.com/capn-dev/capn/secrets/kubeconfig"
)

// Conditions of the record beside Ready.
const (
	// ConditionReady: the API server answers (the contract's condition).
	ConditionReady = "Ready"
	// ConditionJoinPrepared: the external cluster holds what capn's
	// workers need to join it with a bootstrap token (objects.go).
	ConditionJoinPrepared = "JoinPrepared"
)

// Reasons of Ready and JoinPrepared.
const (
	ReasonAnswering          = "Answering"          // Ready True: the API server answered /version and discovery
	ReasonKubeconfigNotFound = "KubeconfigNotFound" // no kubeconfig registered under the name the spec gives
	ReasonKubeconfigInvalid  = "KubeconfigInvalid"  // the registered kubeconfig does not parse (registered before a rule it breaks)
	ReasonUnreachable        = "Unreachable"        // no connection, TLS not of the kubeconfig's CA, timeout, 5xx
	ReasonUnauthorized       = "Unauthorized"       // 401: the credential is not accepted
	ReasonForbidden          = "Forbidden"          // 403: the credential lacks the RBAC docs/security.md lists
	ReasonAPIMissing         = "APIMissing"         // the server does not serve an API workers need
	ReasonPrepared           = "Prepared"           // JoinPrepared True
	ReasonPrepareFailed      = "PrepareFailed"      // JoinPrepared False: another failure
	ReasonNotAnswering       = "APIServerNotAnswering"
)

// apisWorkersNeed: the kinds discovery must find (CSRs for the nodes'
// certificates, RBAC for the join objects, leases for kwok).
var apisWorkersNeed = []struct{ apiVersion, kind string }{
	{"certificates.k8s.io/v1", "CertificateSigningRequest"},
	{"rbac.authorization.k8s.io/v1", "ClusterRoleBinding"},
	{"coordination.k8s.io/v1", "Lease"},
}

// check is what one look at the external cluster found.
type check struct {
	ready, join *capnv1.Condition
	answered    bool
	version     string
	endpoint    *capnv1.Endpoint
	caPEM       []byte
}

// ensure is the ensure verb and the periodic check of cluster: a command
// of generation below the record's changes nothing; a cluster that is not
// external, gone or deleting is not touched (delete is its own verb).
func (s *Service) ensure(ctx context.Context, cluster string, generation int64) error {
	defer s.lock(cluster)()
	log := zerolog.Ctx(ctx).With().Str("cluster", cluster).Logger()
	rec, _, err := s.records.Get(ctx, keys.ControlPlane(cluster))
	if err != nil && !errors.Is(err, store.ErrNotFound) {
		return err
	}
	if generation > 0 && generation < rec.GetObservedGeneration() {
		log.Debug().Int64("generation", generation).Int64("observed", rec.GetObservedGeneration()).Msg("ensure older than the record: nothing to do")
		return nil
	}
	desired, rev, err := s.clusters.Get(ctx, keys.Cluster(cluster))
	if errors.Is(err, store.ErrNotFound) {
		return nil
	}
	if err != nil {
		return err
	}
	cp := desired.GetSpec().GetControlPlane()
	if cp.Implementation() != capnv1.ControlPlaneExternal || desired.GetMetadata().GetDeletionTimestamp() != nil {
		return nil
	}
	ck := s.look(ctx, cluster, cp.GetExternal().GetKubeconfig())
	now := s.cfg.Now().UTC()
	written, _, err := s.records.Mutate(ctx, keys.ControlPlane(cluster), func(cur *capnv1.ControlPlaneRecord, exists bool) (*capnv1.ControlPlaneRecord, error) {
		next := record(cur, ck, cluster, int64(rev), now)
		if exists && proto.Equal(withoutUpdated(cur), withoutUpdated(next)) {
			return nil, store.ErrNoChange
		}
		return next, nil
	})
	if err != nil && !errors.Is(err, store.ErrNoChange) {
		return err
	}
	if written != nil && err == nil {
		log.Info().Str("ready", ck.ready.GetStatus()).Str("reason", ck.ready.GetReason()).Str("join", ck.join.GetReason()).
			Str("version", ck.version).Msg("external control-plane record written")
	}
	return nil
}

// look reads the registered kubeconfig name and asks its API server.
func (s *Service) look(ctx context.Context, cluster, name string) check {
	ck := check{}
	fail := func(reason, format string, args ...any) check {
		ck.ready = conditions.New(ConditionReady, capnv1.ConditionFalse, reason, fmt.Sprintf(format, args...))
		ck.join = conditions.New(ConditionJoinPrepared, capnv1.ConditionUnknown, ReasonNotAnswering, "the API server must answer first")
		return ck
	}
	reg, _, err := s.kubeconfigs.Get(ctx, keys.ExternalKubeconfig(name))
	if errors.Is(err, store.ErrNotFound) {
		return fail(ReasonKubeconfigNotFound, "no kubeconfig %q is registered (capn external-kubeconfig set %s --kubeconfig FILE)", name, name)
	}
	if err != nil {
		return fail(ReasonKubeconfigInvalid, "kubeconfig %q: %v", name, err)
	}
	kc, err := kubeconfig.ParseExternal(reg.GetKubeconfig())
	if err != nil {
		return fail(ReasonKubeconfigInvalid, "kubeconfig %q: %s", name, strings.ReplaceAll(err.Error(), "\n", "; "))
	}
	ck.caPEM = kc.CACertPEM
	if host, port, err := kc.HostPort(); err == nil {
		ck.endpoint = &capnv1.Endpoint{Host: host, Port: port}
	}
	client, err := s.client(kc)
	if err != nil {
		return fail(ReasonKubeconfigInvalid, "kubeconfig %q: %v", name, err)
	}
	defer client.Close()
	cctx, cancel := context.WithTimeout(ctx, s.cfg.KubeAPITimeout)
	defer cancel()
	version, err := client.Version(cctx)
	if err != nil {
		return fail(reasonOf(err), "%s (kubeconfig %s): GET /version: %v", kc.Server, name, err)
	}
	ck.version = version
	for _, a := range apisWorkersNeed {
		if _, err := client.ResourceFor(cctx, a.apiVersion, a.kind); err != nil {
			reason := reasonOf(err)
			if errors.Is(err, kubeapi.ErrNoKind) {
				reason = ReasonAPIMissing
			}
			return fail(reason, "%s (kubeconfig %s): discovery of %s %s, which workers need: %v", kc.Server, name, a.apiVersion, a.kind, err)
		}
	}
	ck.answered = true
	ck.ready = conditions.New(ConditionReady, capnv1.ConditionTrue, ReasonAnswering, fmt.Sprintf("%s answers (%s)", kc.Server, version))
	if err := prepareJoin(cctx, client, cluster, kc.Server, kc.CACertPEM); err != nil {
		reason := ReasonPrepareFailed
		if kubeapi.IsStatus(err, http.StatusForbidden) {
			reason = ReasonForbidden
		}
		ck.join = conditions.New(ConditionJoinPrepared, capnv1.ConditionFalse, reason,
			fmt.Sprintf("kubeconfig %s: %v (the RBAC it needs: docs/security.md)", name, err))
		return ck
	}
	ck.join = conditions.New(ConditionJoinPrepared, capnv1.ConditionTrue, ReasonPrepared, "bootstrap-token join RBAC and cluster-info are in place")
	return ck
}

// client is a client of the kubeconfig's user.
func (s *Service) client(kc kubeconfig.External) (*kubeapi.Client, error) {
	c, err := kubeapi.NewKubeconfigClient(kc)
	if err != nil {
		return nil, err
	}
	c.HTTP.Timeout = s.cfg.KubeAPITimeout
	return c, nil
}

// reasonOf classifies a failed request.
func reasonOf(err error) string {
	switch {
	case kubeapi.IsStatus(err, http.StatusUnauthorized):
		return ReasonUnauthorized
	case kubeapi.IsStatus(err, http.StatusForbidden):
		return ReasonForbidden
	}
	return ReasonUnreachable
}

// record is the next record from the current one and a check: initialized
// sticks, and what an unanswered check cannot know (the version) is kept.
func record(cur *capnv1.ControlPlaneRecord, ck check, cluster string, generation int64, now time.Time) *capnv1.ControlPlaneRecord {
	next := &capnv1.ControlPlaneRecord{
		Cluster: cluster, Implementation: capnv1.ControlPlaneExternal, ObservedGeneration: generation,
		Initialized: cur.GetInitialized() || ck.answered,
		Endpoint:    cur.GetEndpoint(), Version: cur.GetVersion(), CaCertificatePem: cur.GetCaCertificatePem(),
		Replicas: 1, Updated: timestamppb.New(now),
	}
	if ck.endpoint != nil {
		next.Endpoint = ck.endpoint
	}
	if ck.caPEM != nil {
		next.CaCertificatePem = string(ck.caPEM)
	}
	if ck.answered {
		next.Version, next.ReadyReplicas = ck.version, 1
	}
	next.Conditions = append(next.Conditions, cur.GetConditions()...)
	conditions.Set(&next.Conditions, ck.ready, now)
	conditions.Set(&next.Conditions, ck.join, now)
	return next
}

func withoutUpdated(r *capnv1.ControlPlaneRecord) *capnv1.ControlPlaneRecord {
	c := proto.Clone(r).(*capnv1.ControlPlaneRecord)
	c.Updated = nil
	return c
}

// delete removes what the service created in the external cluster, then
// the record. The kubeconfig is the one the desired cluster names, or,
// the cluster gone, the one of the command's spec. An API server that does
// not answer is retried (capn must not forget what it made there).
func (s *Service) delete(ctx context.Context, cluster string, cmd *capnv1.ControlPlaneCommand) error {
	defer s.lock(cluster)()
	log := zerolog.Ctx(ctx).With().Str("cluster", cluster).Logger()
	// The record goes last: without it, there is nothing left (a delete
	// done before, redelivered).
	_, rev, err := s.records.Get(ctx, keys.ControlPlane(cluster))
	if errors.Is(err, store.ErrNotFound) {
		return nil
	}
	if err != nil {
		return err
	}
	spec := cmd.GetSpec()
	desired, _, err := s.clusters.Get(ctx, keys.Cluster(cluster))
	switch {
	case err == nil && desired.GetMetadata().GetDeletionTimestamp() == nil:
		return events.Permanent(fmt.Errorf("delete of cluster %s, which is not being deleted: refused", cluster))
	case err == nil:
		spec = desired.GetSpec().GetControlPlane()
	case !errors.Is(err, store.ErrNotFound):
		return err
	}
	if spec.Implementation() != capnv1.ControlPlaneExternal {
		return events.Permanent(fmt.Errorf("delete of cluster %s: %w (type %s)", cluster, errGone, spec.Implementation()))
	}
	name := spec.GetExternal().GetKubeconfig()
	reg, _, err := s.kubeconfigs.Get(ctx, keys.ExternalKubeconfig(name))
	if err != nil {
		return fmt.Errorf("delete of cluster %s: kubeconfig %q: %w", cluster, name, err)
	}
	kc, err := kubeconfig.ParseExternal(reg.GetKubeconfig())
	if err != nil {
		return events.Permanent(fmt.Errorf("delete of cluster %s: kubeconfig %q: %w", cluster, name, err))
	}
	client, err := s.client(kc)
	if err != nil {
		return err
	}
	defer client.Close()
	deleted, err := removeJoin(ctx, client, cluster)
	if err != nil {
		return fmt.Errorf("delete of cluster %s: in %s: %w", cluster, kc.Server, err)
	}
	log.Info().Strs("deleted", deleted).Str("server", kc.Server).Msg("removed capn's objects from the external cluster")
	return s.records.Delete(ctx, keys.ControlPlane(cluster), rev)
}
