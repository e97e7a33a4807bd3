package bootstrapper

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"net/url"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/rs/zerolog"

	"github.com/capn-dev/capn/events/reconcile"
	"github.com/capn-dev/capn/events/store"
	"github.com/capn-dev/capn/kubeapi"
	capnv1 "github.com/capn-dev/capn/schemas/capn/v1alpha1"
	"github.com/capn-dev/capn/schemas/conditions"
	"github.com/capn-dev/capn/schemas/keys"
	"github.com/capn-dev/capn/secrets/clusterkubeconfig"
	"github.com/capn-dev/capn/secrets/token"
	"github.com/capn-dev/capn/services/bootstrapper/bootstrap/kubeadm"
	"github.com/capn-dev/capn/services/bootstrapper/bootstrap/kubelocal"
)

// Join tokens in the workload cluster. A machine joins with the bootstrap
// token of its bootstrap data, which the workload cluster's API server
// accepts only while the Secret kube-system/bootstrap-token-<id> exists.
// The first control plane registers its own; for every other machine the
// bootstrapper does it, as Cluster API's kubeadm bootstrap provider does:
// with the admin kubeconfig it issues, it creates the Secret while the
// machine has not joined (its expiration following the token's renewals)
// and deletes it once the machine joined or is gone.
//
// It is a reconcile of its own (queue s.joins), apart from the one that
// keeps the PKI and kubeconfig: a workload API server that does not answer
// — a placeholder endpoint (sim, or process and docker machines without
// Kubernetes), or a first control plane not up yet — costs one failed
// request per attempt, with backoff, and never holds up anything else.

// ConditionJoinTokensRegistered is the condition of ClusterSecretsStatus
// that says whether the join tokens of the machines still joining are
// registered in the workload cluster. It is set only for clusters whose
// bootstrap providers join nodes with a bootstrap token (kubeadm,
// kube-local).
const ConditionJoinTokensRegistered = "JoinTokensRegistered"

// Reasons of ConditionJoinTokensRegistered.
const (
	// ReasonRegistered (True): every joining machine's token Secret is in
	// the workload cluster.
	ReasonRegistered = "Registered"
	// ReasonNoMachineJoining (True): no machine is joining with a token,
	// and no Secret of the bootstrapper is left in the workload cluster.
	ReasonNoMachineJoining = "NoMachineJoining"
	// ReasonWaitingForKubeconfig (Unknown): the control-plane endpoint, and
	// so the admin kubeconfig, is not known yet.
	ReasonWaitingForKubeconfig = "WaitingForKubeconfig"
	// ReasonAPIServerUnreachable (False): the endpoint does not answer as a
	// Kubernetes API server — no connection, not TLS of the cluster CA, or a
	// 5xx/429 answer (a placeholder endpoint answers 503). Retried with
	// backoff.
	ReasonAPIServerUnreachable = "APIServerUnreachable"
	// ReasonRegistrationFailed (False): the API server answered and refused
	// (e.g. 403). Retried with backoff.
	ReasonRegistrationFailed = "RegistrationFailed"
)

// JoinTokenManagedBy is the value of the app.kubernetes.io/managed-by
// label on every token Secret the bootstrapper creates; it lists them by it
// to delete those no machine needs any more.
const (
	managedByLabel     = "app.kubernetes.io/managed-by"
	JoinTokenManagedBy = "capn-bootstrapper"
	// Annotations say whose token a Secret holds.
	annotationCluster = "capn.dev/cluster"
	annotationMachine = "capn.dev/machine"
)

// Defaults of Config.
var (
	DefaultJoinTokenBackoff = reconcile.Backoff{Base: 2 * time.Second, Max: 2 * time.Minute}
	DefaultKubeAPITimeout   = 10 * time.Second
)

// tokenJoins says whether nodes of a bootstrap provider join with a
// bootstrap token that must be registered in the cluster.
func tokenJoins(provider string) bool {
	return provider == kubeadm.Name || provider == kubelocal.Name
}

// clusterJoinsWithTokens is true when the control plane or a pool uses a
// bootstrap provider whose nodes join with a token (the effective spec's
// provider, as bootstrap.Merge picks it).
func (s *Service) clusterJoinsWithTokens(c *capnv1.Cluster) bool {
	base := c.GetSpec().GetBootstrap().GetProvider()
	effective := func(o *capnv1.BootstrapSpec) string {
		switch {
		case o.GetProvider() != "":
			return o.GetProvider()
		case base != "":
			return base
		}
		return s.cfg.Registry.Default()
	}
	if tokenJoins(effective(c.GetSpec().GetControlPlane().GetBootstrap())) {
		return true
	}
	for _, p := range c.GetSpec().GetWorkerPools() {
		if tokenJoins(effective(p.GetBootstrap())) {
			return true
		}
	}
	return false
}

// realKubernetes says whether the cluster has a real API server that join
// tokens are registered in (clusterkubeconfig.HasAPIServer: the
// health-watcher and the addon-manager ask the same).
func (s *Service) realKubernetes(c *capnv1.Cluster) bool {
	return clusterkubeconfig.HasAPIServer(c, func(p string) []string {
		a, _, _ := store.NewView(s.observed, store.New[capnv1.ProviderAnnouncement]()).Get(keys.Provider(p))
		return a.GetCapabilities()
	})
}

// realKubernetesChanged wakes every cluster's join-token pass when a
// provider starts or stops announcing real-kubernetes (announcements are
// rewritten every few seconds: only a change of that capability counts),
// and on a resync.
func (s *Service) realKubernetesChanged(all func() []string) func(store.Change) []string {
	real := map[string]bool{} // called from one goroutine (reconcile.Source)
	return func(ch store.Change) []string {
		if ch.Resync {
			return all()
		}
		p, ok := strings.CutPrefix(ch.Key, keys.ProviderPrefix)
		if !ok {
			return nil
		}
		is := false
		if ch.Op == store.OpPut {
			if a, err := store.Decode(ch.Value, store.New[capnv1.ProviderAnnouncement]()); err == nil {
				is = slices.Contains(a.GetCapabilities(), clusterkubeconfig.CapabilityRealKubernetes)
			}
		}
		if real[p] == is {
			return nil
		}
		real[p] = is
		return all()
	}
}

// kickJoins asks for a join-token pass over cluster now, even while it
// waits out a backoff: something it works from changed (a new record, a
// renewed or joined token, a new kubeconfig).
func (s *Service) kickJoins(cluster string) {
	if s.joins == nil {
		return
	}
	s.workload.Kick(cluster)
	s.joins.Add(cluster)
}

// dropJoinSecrets is the pass over an external cluster being deleted: its
// API server stays, so every token Secret the bootstrapper registered
// there for the cluster goes (no machine of it joins any more); no
// condition is written (the cluster's records are being removed).
func (s *Service) dropJoinSecrets(ctx context.Context, name string) (reconcile.Result, error) {
	if wait := s.workload.Wait(name); wait > 0 {
		return reconcile.Result{RequeueAfter: wait}, nil
	}
	wanted, stale, err := s.joinPlan(ctx, name, s.cfg.Now())
	if err != nil {
		return reconcile.Result{}, err
	}
	for _, it := range wanted {
		if it.secret != "" {
			stale = append(stale, it)
		}
	}
	client, err := s.workload.Client(ctx, name)
	if errors.Is(err, store.ErrNotFound) {
		return reconcile.Result{}, nil
	} else if err != nil {
		return reconcile.Result{}, err
	}
	if _, err := s.syncJoinSecrets(ctx, client, name, nil, stale); err != nil {
		if ctx.Err() != nil || errors.Is(err, errStore) {
			return reconcile.Result{}, err
		}
		a := s.workload.Failed(name, err)
		zerolog.Ctx(ctx).Info().Err(err).Str("cluster", name).Dur("retry_in", a.RetryIn).Msg("cannot delete join tokens from the external cluster; retrying")
		return reconcile.Result{RequeueAfter: a.RetryIn}, nil
	}
	s.workload.Answered(name)
	return reconcile.Result{}, nil
}

// joinItem is one machine's token as the pass sees it.
type joinItem struct {
	key, machine string
	tok          token.Token
	expires      time.Time
	secret       string // token_secret recorded
}

// reconcileJoinTokens makes the workload cluster hold exactly the token
// Secrets of the machines still joining: it creates or updates theirs and
// deletes the bootstrapper's others. It writes ConditionJoinTokensRegistered.
func (s *Service) reconcileJoinTokens(ctx context.Context, name string) (reconcile.Result, error) {
	cluster, ok, err := s.cluster(name)
	if err != nil || !ok {
		return reconcile.Result{}, err
	}
	if cluster.GetMetadata().GetDeletionTimestamp() != nil {
		if clusterkubeconfig.External(cluster) {
			return s.dropJoinSecrets(ctx, name)
		}
		return reconcile.Result{}, nil
	}
	// Woken by every desired machine change, this pass also drops the
	// sealed data of machines that are gone (gone.go).
	if _, err := s.purgeGone(ctx, name); err != nil {
		return reconcile.Result{}, err
	}
	if !s.clusterJoinsWithTokens(cluster) || !s.realKubernetes(cluster) {
		// script: nodes join by their own means; a control plane whose
		// provider does not announce real Kubernetes (sim, process without
		// Kubernetes binaries) has no API server to register them in.
		// Nothing to register, and no condition.
		return reconcile.Result{}, s.setJoinCondition(ctx, name, nil)
	}
	now := s.cfg.Now()
	if wait := s.workload.Wait(name); wait > 0 {
		return reconcile.Result{RequeueAfter: wait}, nil
	}
	wanted, stale, err := s.joinPlan(ctx, name, now)
	if err != nil {
		return reconcile.Result{}, err
	}
	if len(wanted) == 0 && len(stale) == 0 {
		// Nothing to create and nothing known to delete: the API server is
		// not asked at all (a placeholder endpoint costs nothing).
		return reconcile.Result{}, s.setJoinCondition(ctx, name, &capnv1.Condition{Type: ConditionJoinTokensRegistered, Status: capnv1.ConditionTrue.Wire(),
			Reason: ReasonNoMachineJoining, Message: "no machine is joining with a bootstrap token"})
	}
	client, err := s.workload.Client(ctx, name)
	if errors.Is(err, store.ErrNotFound) {
		// ensureKubeconfig kicks this pass once it writes one.
		return reconcile.Result{}, s.setJoinCondition(ctx, name, &capnv1.Condition{Type: ConditionJoinTokensRegistered, Status: capnv1.ConditionUnknown.Wire(),
			Reason: ReasonWaitingForKubeconfig, Message: "waiting for the control-plane endpoint and the admin kubeconfig"})
	} else if err != nil {
		return reconcile.Result{}, err
	}
	registered, err := s.syncJoinSecrets(ctx, client, name, wanted, stale)
	if err != nil {
		if ctx.Err() != nil {
			return reconcile.Result{}, ctx.Err()
		}
		if errors.Is(err, errStore) {
			return reconcile.Result{}, err
		}
		return s.joinFailed(ctx, name, err)
	}
	if len(stale) > 0 {
		// Secrets of gone machines are deleted now: their records can go.
		if _, err := s.purgeGone(ctx, name); err != nil {
			return reconcile.Result{}, err
		}
	}
	if a := s.workload.Answered(name); a.Changed {
		zerolog.Ctx(ctx).Info().Str("cluster", name).Str("server", a.Server).Msg("workload API server answers; join tokens registered")
	}
	cond := &capnv1.Condition{Type: ConditionJoinTokensRegistered, Status: capnv1.ConditionTrue.Wire(), Reason: ReasonNoMachineJoining,
		Message: "no machine is joining with a bootstrap token"}
	if n := len(registered); n > 0 {
		cond.Reason, cond.Message = ReasonRegistered, fmt.Sprintf("token Secrets of %d joining machine(s) registered: %s", n, machineList(registered))
	}
	var res reconcile.Result
	if len(wanted) > 0 {
		// While machines join, look again now and then: one deleted before
		// it joined leaves a Secret to delete (renewals and joins kick a
		// pass themselves).
		res.RequeueAfter = s.cfg.TokenCheckEvery
	}
	return res, s.setJoinCondition(ctx, name, cond)
}

// errStore marks a KV failure inside a sync: the reconcile loop retries it,
// it says nothing about the workload API server.
var errStore = errors.New("secrets bucket")

// joinFailed records a failed attempt: the condition says why, and the
// pass comes back after the cluster's backoff.
func (s *Service) joinFailed(ctx context.Context, name string, err error) (reconcile.Result, error) {
	a := s.workload.Failed(name, err)
	reason := ReasonAPIServerUnreachable
	if a.State == kubeapi.StateRefused {
		reason = ReasonRegistrationFailed
	}
	// An API server that does not answer is normal before the first
	// control plane is up, and for good behind a placeholder endpoint: the
	// condition says so, the log only at debug level. One that answers and
	// refuses is a problem.
	log := zerolog.Ctx(ctx).Debug()
	if a.Changed && reason == ReasonRegistrationFailed {
		log = zerolog.Ctx(ctx).Warn()
	}
	log.Err(err).Str("cluster", name).Str("reason", reason).Dur("retry_in", a.RetryIn).Msg("cannot register join tokens in the workload cluster")
	cond := &capnv1.Condition{Type: ConditionJoinTokensRegistered, Status: capnv1.ConditionFalse.Wire(), Reason: reason,
		Message: fmt.Sprintf("workload API server %s: %v", a.Server, err), Severity: "Info"}
	if reason == ReasonRegistrationFailed {
		cond.Severity = "Warning"
	}
	return reconcile.Result{RequeueAfter: a.RetryIn}, s.setJoinCondition(ctx, name, cond)
}

func machineList(items []joinItem) string {
	names := make([]string, 0, len(items))
	for _, it := range items {
		names = append(names, it.machine)
	}
	slices.Sort(names)
	if len(names) > 5 {
		return strings.Join(names[:5], ", ") + fmt.Sprintf(" and %d more", len(names)-5)
	}
	return strings.Join(names, ", ")
}

// joinPlan reads the bootstrap records of the cluster's machines that are
// not settled: wanted are the tokens of machines still joining (their
// Secret must exist), stale the recorded Secrets no machine needs any more
// (joined, being deleted, or gone). A record settles once its token is done
// with and no Secret is recorded: it is not read again until generate
// writes a new one.
func (s *Service) joinPlan(ctx context.Context, cluster string, now time.Time) (wanted, stale []joinItem, err error) {
	machines := map[string]*capnv1.Machine{}
	prefix := keys.MachinesOf(cluster)
	for _, e := range s.desired.List(prefix) {
		m, err := store.Decode(e.Value, store.New[capnv1.Machine]())
		if err != nil {
			return nil, nil, fmt.Errorf("decode %s: %w", e.Key, err)
		}
		machines[strings.TrimPrefix(e.Key, prefix)] = m
	}
	// Records with a Secret recorded whose machine is no longer desired
	// (this process saw them): their Secret goes too.
	for _, m := range s.joinMemo.registered(cluster) {
		if _, ok := machines[m]; !ok {
			machines[m] = nil
		}
	}
	for _, machine := range slices.Sorted(maps.Keys(machines)) {
		key := keys.Bootstrap(cluster, machine)
		if s.joinMemo.settled(key) {
			continue
		}
		rec, _, err := s.boots.Get(ctx, key)
		if errors.Is(err, store.ErrNotFound) {
			s.joinMemo.unregistered(cluster, machine)
			continue
		} else if err != nil {
			return nil, nil, err
		}
		want := machines[machine] != nil && machines[machine].GetMetadata().GetDeletionTimestamp() == nil &&
			tokenJoins(rec.GetProvider()) && rec.GetToken() != "" && !rec.GetJoined() && !s.machineJoined(cluster, machine) &&
			rec.GetTokenExpires().AsTime().After(now) // an expired token is no use: tokencleaner would delete it
		it := joinItem{key: key, machine: machine, secret: rec.GetTokenSecret()}
		switch {
		case want:
			if it.tok, err = token.Parse(rec.GetToken()); err != nil {
				return nil, nil, fmt.Errorf("%s: %w", key, err)
			}
			it.expires = rec.GetTokenExpires().AsTime()
			wanted = append(wanted, it)
		case rec.GetTokenSecret() != "":
			stale = append(stale, it)
		case rec.GetJoined() || rec.GetToken() == "" || !tokenJoins(rec.GetProvider()) || s.machineJoined(cluster, machine):
			s.joinMemo.settle(key)
		}
		if rec.GetTokenSecret() != "" {
			s.joinMemo.registeredAt(cluster, machine)
		} else {
			s.joinMemo.unregistered(cluster, machine)
		}
	}
	return wanted, stale, nil
}

// secretObject is the token Secret of it, as `kubeadm token create` writes
// it, labelled as the bootstrapper's.
func secretObject(cluster string, it joinItem) kubeapi.Object {
	name := token.SecretName(it.tok)
	return kubeapi.Object{Collection: secretsPath, Name: name, Body: map[string]any{
		"apiVersion": "v1", "kind": "Secret", "type": token.SecretType,
		"metadata": map[string]any{
			"name": name, "namespace": token.SecretNamespace,
			"labels":      map[string]string{managedByLabel: JoinTokenManagedBy},
			"annotations": map[string]string{annotationCluster: cluster, annotationMachine: it.machine},
		},
		"stringData": token.SecretData(it.tok, it.expires, fmt.Sprintf("capn: join token of machine %s of cluster %s", it.machine, cluster)),
	}}
}

var secretsPath = "/api/v1/namespaces/" + token.SecretNamespace + "/secrets"

// syncJoinSecrets lists the bootstrapper's Secrets in the workload
// cluster, creates or updates the wanted ones and deletes the rest. Each
// wanted Secret is recorded in its bootstrap record before it is created,
// and a recorded one is forgotten only after it is deleted, so a Secret
// the bootstrapper made is never lost track of. It returns the wanted
// items whose Secrets are in place.
func (s *Service) syncJoinSecrets(ctx context.Context, c *kubeapi.Client, cluster string, wanted, stale []joinItem) ([]joinItem, error) {
	var list struct {
		Items []struct {
			Metadata struct {
				Name        string            `json:"name"`
				Annotations map[string]string `json:"annotations"`
			} `json:"metadata"`
			Type string            `json:"type"`
			Data map[string][]byte `json:"data"`
		} `json:"items"`
	}
	if err := c.Get(ctx, secretsPath+"?labelSelector="+url.QueryEscape(managedByLabel+"="+JoinTokenManagedBy), &list); err != nil {
		return nil, err
	}
	present := map[string]map[string]string{}
	owner := map[string]string{}
	for _, it := range list.Items {
		if c, ok := it.Metadata.Annotations[annotationCluster]; ok && c != cluster {
			// Another capn cluster's: several may join workers to one
			// external cluster.
			continue
		}
		owner[it.Metadata.Name] = it.Metadata.Annotations[annotationMachine]
		data := map[string]string{}
		for k, v := range it.Data {
			data[k] = string(v)
		}
		if it.Type != token.SecretType {
			data = nil // replaced by Apply
		}
		present[it.Metadata.Name] = data
	}
	keep := map[string]bool{}
	var registered []joinItem
	for _, it := range wanted {
		o := secretObject(cluster, it)
		keep[o.Name] = true
		current, err := s.recordTokenSecret(ctx, it, o.Name)
		if err != nil {
			return nil, err
		}
		if !current {
			continue // generate wrote the record anew: a pass of its own follows
		}
		registered = append(registered, it)
		if cur, ok := present[o.Name]; ok && maps.Equal(cur, o.Body["stringData"].(map[string]string)) {
			continue
		}
		if err := c.Apply(ctx, o); err != nil {
			return nil, err
		}
		zerolog.Ctx(ctx).Info().Str("cluster", cluster).Str("machine", it.machine).Str("secret", o.Name).
			Time("expires", it.expires).Msg("join token registered in the workload cluster")
	}
	for _, it := range stale {
		if !keep[it.secret] {
			if err := s.deleteJoinSecret(ctx, c, cluster, it.machine, it.secret); err != nil {
				return nil, err
			}
			delete(present, it.secret)
		}
		if err := s.forgetTokenSecret(ctx, it); err != nil {
			return nil, err
		}
	}
	for name := range present {
		if !keep[name] {
			// The bootstrapper's, and no machine wants it: a machine gone
			// before this process saw its record, or an earlier incarnation.
			if err := s.deleteJoinSecret(ctx, c, cluster, owner[name], name); err != nil {
				return nil, err
			}
		}
	}
	return registered, nil
}

func (s *Service) deleteJoinSecret(ctx context.Context, c *kubeapi.Client, cluster, machine, name string) error {
	gone, err := c.Delete(ctx, secretsPath+"/"+name)
	if err != nil {
		return err
	}
	if gone {
		zerolog.Ctx(ctx).Info().Str("cluster", cluster).Str("machine", machine).Str("secret", name).Msg("join token deleted from the workload cluster")
	}
	return nil
}

// recordTokenSecret notes in it's bootstrap record, before the Secret is
// created, that it may exist. current is false when the record no longer
// holds that token (generate wrote a new incarnation's, or it joined): the
// Secret is then not created.
func (s *Service) recordTokenSecret(ctx context.Context, it joinItem, secret string) (current bool, err error) {
	_, _, err = s.boots.Mutate(ctx, it.key, func(cur *capnv1.BootstrapData, exists bool) (*capnv1.BootstrapData, error) {
		current = exists && cur.GetToken() == it.tok.Value() && !cur.GetJoined()
		if !current || cur.GetTokenSecret() == secret {
			return nil, store.ErrNoChange
		}
		cur.TokenSecret = secret
		return cur, nil
	})
	if err != nil {
		return false, fmt.Errorf("%w: %s: %w", errStore, it.key, err)
	}
	if current {
		s.joinMemo.registeredAt(keys.ClusterOf(it.key), it.machine)
	}
	return current, nil
}

// forgetTokenSecret clears the record's token_secret once its Secret is
// deleted (only if it still names that Secret).
func (s *Service) forgetTokenSecret(ctx context.Context, it joinItem) error {
	_, _, err := s.boots.Mutate(ctx, it.key, func(cur *capnv1.BootstrapData, exists bool) (*capnv1.BootstrapData, error) {
		if !exists || cur.GetTokenSecret() != it.secret {
			return nil, store.ErrNoChange
		}
		cur.TokenSecret = ""
		return cur, nil
	})
	if err != nil {
		return fmt.Errorf("%w: %s: %w", errStore, it.key, err)
	}
	s.joinMemo.unregistered(keys.ClusterOf(it.key), it.machine)
	return nil
}

// setJoinCondition sets (nil: removes) ConditionJoinTokensRegistered in
// observed secrets.<cluster>, keeping its transition time while its status
// holds. An unchanged condition is not written, nor a missing status.
func (s *Service) setJoinCondition(ctx context.Context, cluster string, c *capnv1.Condition) error {
	if s.joinMemo.sameCondition(cluster, c) {
		return nil // written already: not even read again
	}
	written := false
	_, _, err := s.statuses.Mutate(ctx, keys.Secrets(cluster), func(cur *capnv1.ClusterSecretsStatus, exists bool) (*capnv1.ClusterSecretsStatus, error) {
		written = false
		if !exists {
			// The cluster's reconcile makes the status (and kicks a pass
			// when it does); never bring back one a cleanup purged.
			return nil, store.ErrNoChange
		}
		written = true
		switch {
		case c == nil && !conditions.Delete(&cur.Conditions, ConditionJoinTokensRegistered):
			return nil, store.ErrNoChange
		case c == nil:
			return cur, nil
		}
		conditions.Set(&cur.Conditions, c, s.cfg.Now())
		return cur, nil
	})
	if err == nil && written {
		s.joinMemo.wroteCondition(cluster, c)
	}
	return err
}

// joinMemo is the join-token pass's memory (the API clients and their
// backoff are s.workload's). Per cluster: which machines have a Secret
// recorded, and the condition last written. Per
// bootstrap record: settled (nothing left to do until generate writes it
// anew). It only saves work: a restart starts empty and reads every
// record once.
type joinMemo struct {
	mu       sync.Mutex
	clusters map[string]*joinClusterState
	done     map[string]bool
}

type joinClusterState struct {
	registered map[string]bool // machines with token_secret set
	// cond is the condition last written (nil: removed); condKnown says
	// there is one.
	cond      *capnv1.Condition
	condKnown bool
}

func (m *joinMemo) state(cluster string) *joinClusterState {
	if m.clusters == nil {
		m.clusters = map[string]*joinClusterState{}
	}
	st := m.clusters[cluster]
	if st == nil {
		st = &joinClusterState{registered: map[string]bool{}}
		m.clusters[cluster] = st
	}
	return st
}

// sameCondition is true when c (nil: no condition) is what was last
// written, but for its transition time.
func (m *joinMemo) sameCondition(cluster string, c *capnv1.Condition) bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	st := m.state(cluster)
	if !st.condKnown || (st.cond == nil) != (c == nil) {
		return false
	}
	return c == nil || (st.cond.GetStatus() == c.GetStatus() && st.cond.GetReason() == c.GetReason() &&
		st.cond.GetMessage() == c.GetMessage() && st.cond.GetSeverity() == c.GetSeverity())
}

func (m *joinMemo) wroteCondition(cluster string, c *capnv1.Condition) {
	m.mu.Lock()
	defer m.mu.Unlock()
	st := m.state(cluster)
	st.cond, st.condKnown = c, true
}

func (m *joinMemo) registeredAt(cluster, machine string) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.state(cluster).registered[machine] = true
}

func (m *joinMemo) unregistered(cluster, machine string) {
	m.mu.Lock()
	defer m.mu.Unlock()
	delete(m.state(cluster).registered, machine)
}

func (m *joinMemo) registered(cluster string) []string {
	m.mu.Lock()
	defer m.mu.Unlock()
	return slices.Collect(maps.Keys(m.state(cluster).registered))
}

func (m *joinMemo) settled(key string) bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.done[key]
}

func (m *joinMemo) settle(key string) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.done == nil {
		m.done = map[string]bool{}
	}
	m.done[key] = true
}

// unsettle: generate wrote the record anew.
func (m *joinMemo) unsettle(key string) {
	m.mu.Lock()
	defer m.mu.Unlock()
	delete(m.done, key)
}

// forgetCluster drops a deleted cluster.
func (m *joinMemo) forgetCluster(cluster string) {
	m.mu.Lock()
	defer m.mu.Unlock()
	delete(m.clusters, cluster)
	prefix := keys.BootstrapsOf(cluster)
	for k := range m.done {
		if strings.HasPrefix(k, prefix) {
			delete(m.done, k)
		}
	}
}
