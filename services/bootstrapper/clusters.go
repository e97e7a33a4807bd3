package bootstrapper

import (
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/capn-dev/capn/events/reconcile"
	"github.com/capn-dev/capn/events/store"
	capnv1 "github.com/capn-dev/capn/schemas/capn/v1alpha1"
	"github.com/capn-dev/capn/schemas/keys"
	"github.com/capn-dev/capn/secrets/kubeconfig"
	"github.com/capn-dev/capn/secrets/pki"
	"github.com/capn-dev/capn/secrets/token"
	"github.com/capn-dev/capn/services/bootstrapper/bootstrap"
	"github.com/rs/zerolog"
)

// reconcileCluster makes one cluster's secrets current: the PKI exists, the
// admin kubeconfig names the current endpoint with a fresh certificate,
// join tokens of joining machines are renewed and those of joined machines
// deleted, and observed secrets.<cluster> says so. A cluster being deleted
// is left alone: its secrets go only on the cleanup command, the last step
// of deletion.
func (s *Service) reconcileCluster(ctx context.Context, name string) (reconcile.Result, error) {
	cluster, ok, err := s.cluster(name)
	if err != nil || !ok || cluster.GetMetadata().GetDeletionTimestamp() != nil {
		return reconcile.Result{}, err
	}
	log := zerolog.Ctx(ctx).With().Str("cluster", name).Logger()
	status := &capnv1.ClusterSecretsStatus{Cluster: name}
	set, err := s.ensurePKI(ctx, cluster)
	switch {
	case errors.Is(err, pki.ErrCAConflict) || isUserCAError(err):
		// Nothing a retry can fix: say why, and wait for the user.
		status.Message = err.Error()
		log.Warn().Err(err).Msg("cluster PKI refused")
		return reconcile.Result{}, s.writeStatus(ctx, status)
	case err != nil:
		return reconcile.Result{}, err
	}
	status.PkiReady = true
	status.UserSuppliedCa = set.user
	// The pin providers hand their machines (capn-node --ca-cert-hash) is
	// the CA the workers trust for the API server: the cluster PKI's on
	// machines, the record's for a hosted or external control plane (whose
	// server capn's CA did not sign); none until the record has one.
	pinned := set.set.CA.CertPEM
	if cluster.GetSpec().GetControlPlane().Implementation() != capnv1.ControlPlaneMachines {
		pinned, _ = s.workerCA(cluster)
	}
	if len(pinned) > 0 {
		if status.CaCertHash, err = s.caHashes.hash(pinned); err != nil {
			return reconcile.Result{}, fmt.Errorf("the CA workers of %s trust: %w", name, err)
		}
	}
	var requeue time.Duration
	if cluster.GetSpec().GetControlPlane().Implementation() == capnv1.ControlPlaneExternal {
		// Someone else's API server, whose certificate capn's CA did not
		// sign: no admin kubeconfig of capn's would reach it.
		status.Message = "external control plane: capn writes no admin kubeconfig for it"
	} else if ep, ok := s.endpoint(cluster); ok {
		kc, err := s.ensureKubeconfig(ctx, name, ep, set.set) // kicks the join-token pass when it writes
		if err != nil {
			return reconcile.Result{}, err
		}
		status.KubeconfigReady = true
		status.AdminCertNotAfter = kc.GetClientCertNotAfter()
		requeue = time.Hour // re-check the admin certificate's renewal
	} else if cluster.GetSpec().GetControlPlane().Implementation() != capnv1.ControlPlaneMachines {
		status.Message = "waiting for the " + cluster.GetSpec().GetControlPlane().Implementation() + " control plane's record (controlplane." + name + ") to report its endpoint"
	} else {
		status.Message = "waiting for the infrastructure to report the control-plane endpoint"
	}
	next, err := s.tendTokens(ctx, name)
	if err != nil {
		return reconcile.Result{}, err
	}
	if next > 0 && (requeue == 0 || next < requeue) {
		requeue = next
	}
	return reconcile.Result{RequeueAfter: requeue}, s.writeStatus(ctx, status)
}

func isUserCAError(err error) bool {
	return err != nil && strings.HasPrefix(err.Error(), "user-supplied CA")
}

// clusterNow reads the cluster from KV rather than the cache: a command may
// name a cluster the cache has not caught up with yet.
func (s *Service) clusterNow(ctx context.Context, name string) (*capnv1.Cluster, bool, error) {
	c, _, err := s.clusters.Get(ctx, keys.Cluster(name))
	if errors.Is(err, store.ErrNotFound) {
		return nil, false, nil
	}
	return c, err == nil, err
}

// clusterForData is the cluster a machine's data is generated for: the
// cached one when the cache has it and it is not being deleted (the cache
// that showed the machine is at least as new), else clusterNow's (a
// command may name a cluster the cache has not caught up with yet, and a
// refusal is decided on the bucket's word).
func (s *Service) clusterForData(ctx context.Context, name string) (*capnv1.Cluster, bool, error) {
	if c, ok, err := s.cluster(name); err == nil && ok && c.GetMetadata().GetDeletionTimestamp() == nil {
		return c, true, nil
	}
	return s.clusterNow(ctx, name)
}

func (s *Service) cluster(name string) (*capnv1.Cluster, bool, error) {
	e, ok := s.desired.Get(keys.Cluster(name))
	if !ok {
		return nil, false, nil
	}
	c, err := store.Decode(e.Value, store.New[capnv1.Cluster]())
	if err != nil {
		return nil, false, fmt.Errorf("decode cluster %s: %w", name, err)
	}
	return c, true, nil
}

// endpoint is the control-plane endpoint: for a control plane on machines,
// the one its provider reports (observed infra.<provider>.<cluster>._);
// for a hosted or external one, its implementation's record's (observed
// controlplane.<cluster>).
func (s *Service) endpoint(c *capnv1.Cluster) (bootstrap.Endpoint, bool) {
	if c.GetSpec().GetControlPlane().Implementation() != capnv1.ControlPlaneMachines {
		rec, ok := s.controlPlaneRecord(c)
		if !ok || rec.GetEndpoint().GetHost() == "" || rec.GetEndpoint().GetPort() == 0 {
			return bootstrap.Endpoint{}, false
		}
		return bootstrap.Endpoint{Host: rec.GetEndpoint().GetHost(), Port: rec.GetEndpoint().GetPort()}, true
	}
	p := c.GetSpec().GetControlPlane().GetProvider()
	ic, _, ok := store.NewView(s.observed, store.New[capnv1.InfraCluster]()).Get(keys.InfraCluster(p, c.GetMetadata().GetName()))
	if !ok || ic.GetControlPlaneEndpoint().GetHost() == "" || ic.GetControlPlaneEndpoint().GetPort() == 0 {
		return bootstrap.Endpoint{}, false
	}
	return bootstrap.Endpoint{Host: ic.GetControlPlaneEndpoint().GetHost(), Port: ic.GetControlPlaneEndpoint().GetPort()}, true
}

// controlPlaneRecord is c's control-plane record (observed
// controlplane.<cluster>), written by its implementation.
func (s *Service) controlPlaneRecord(c *capnv1.Cluster) (*capnv1.ControlPlaneRecord, bool) {
	rec, _, ok := store.NewView(s.observed, store.New[capnv1.ControlPlaneRecord]()).Get(keys.ControlPlane(c.GetMetadata().GetName()))
	return rec, ok
}

// workerCA is the CA certificate workers of c trust for its API server:
// nil for a control plane on machines (the cluster PKI's CA), the record's
// for a hosted or external one; ok is false while the record has none.
func (s *Service) workerCA(c *capnv1.Cluster) (ca []byte, ok bool) {
	if c.GetSpec().GetControlPlane().Implementation() == capnv1.ControlPlaneMachines {
		return nil, true
	}
	rec, found := s.controlPlaneRecord(c)
	if !found || rec.GetCaCertificatePem() == "" {
		return nil, false
	}
	return []byte(rec.GetCaCertificatePem()), true
}

type clusterPKI struct {
	set  pki.Set
	user bool
}

// ensurePKI creates the cluster's PKI once (compare-and-set: two replicas
// racing store one) and returns it. A user-supplied CA is used as is and
// never overwritten.
//
// A PKI that passed the checks is not read again while the secrets cache
// shows the revision it was read at (pkiChecks, for pkiCheckFor): every
// machine's bootstrap data and many cluster changes need it, and the read
// (a request, unsealing, decoding) was most of what a check that hits the
// memo cost. The cache lags the bucket by a delivery: a PKI rewritten
// meanwhile (a CA rotation) is seen as if read just before the write.
func (s *Service) ensurePKI(ctx context.Context, c *capnv1.Cluster) (clusterPKI, error) {
	name := c.GetMetadata().GetName()
	var userCA *pki.KeyPair
	if ca := c.GetSpec().GetBootstrap().GetCa(); ca.GetCertificatePem() != "" || ca.GetPrivateKeyPem() != "" {
		userCA = &pki.KeyPair{CertPEM: []byte(ca.GetCertificatePem()), KeyPEM: []byte(ca.GetPrivateKeyPem())}
	}
	user := pkiDigest(nil, userCA)
	if e, ok := s.secrets.Get(keys.PKI(name)); ok {
		if m, ok := s.pkiChecks.atRevision(name, e.Revision, user, s.cfg.Now()); ok {
			return m, nil
		}
	}
	var (
		out clusterPKI
		// passed is the digest of the PKI stored now when it passed the
		// checks or was completed by them (fresh: not from the memo).
		passed *[sha256.Size]byte
		hit    *[sha256.Size]byte // the digest the memo knew
	)
	_, rev, err := s.pkis.Mutate(ctx, keys.PKI(name), func(cur *capnv1.ClusterPKI, exists bool) (*capnv1.ClusterPKI, error) {
		now := s.cfg.Now()
		digest := pkiDigest(cur, userCA)
		passed, hit = nil, nil
		if m, ok := s.pkiChecks.get(name, digest, now); ok {
			out, hit = m, &digest
			return nil, store.ErrNoChange
		}
		set, added, err := pki.Ensure(pki.FromProto(cur), pki.Options{Now: now, UserCA: userCA})
		if err != nil {
			return nil, err
		}
		out = clusterPKI{set: set, user: cur.GetUserSuppliedCa() || (userCA != nil && containsPart(added, pki.PartCA))}
		if len(added) == 0 {
			passed = &digest
			return nil, store.ErrNoChange
		}
		next := pki.ToProto(set)
		next.UserSuppliedCa = out.user
		next.Created = cur.GetCreated()
		if next.Created == nil {
			next.Created = timestamppb.New(s.cfg.Now())
		}
		// What Ensure completed passes its checks: the next read of it
		// need not run them.
		d := pkiDigest(next, userCA)
		passed = &d
		return next, nil
	})
	switch {
	case err != nil || rev == 0:
	case passed != nil:
		s.pkiChecks.put(name, *passed, out, s.cfg.Now())
		s.pkiChecks.readAt(name, *passed, rev, user)
	case hit != nil:
		s.pkiChecks.readAt(name, *hit, rev, user)
	}
	return out, err
}

// pkiCheckFor is how long a complete PKI that passed pki.Ensure's checks
// is taken as passing them again, for the same stored bytes and the same
// user-supplied CA: the checks parse every CA and key (most of a bootstrap
// data's CPU, and ensurePKI runs for every machine and many cluster
// changes), and their answer for the same bytes changes only when a part
// expires.
const pkiCheckFor = time.Minute

// pkiChecks remembers, per cluster, the last PKI that passed the checks.
// It only saves CPU: a restart starts empty.
type pkiChecks struct {
	mu sync.Mutex
	by map[string]pkiCheck
}

type pkiCheck struct {
	digest [sha256.Size]byte
	// rev is the revision of pki.<cluster> that held the bytes of digest,
	// once known (0: not yet), and userCA the digest of the user-supplied
	// CA they were checked against (pkiDigest(nil, userCA)).
	rev    uint64
	userCA [sha256.Size]byte
	out    clusterPKI
	at     time.Time
}

func (c *pkiChecks) get(cluster string, digest [sha256.Size]byte, now time.Time) (clusterPKI, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	m, ok := c.by[cluster]
	if !ok || m.digest != digest || !m.fresh(now) {
		return clusterPKI{}, false
	}
	return m.out, true
}

// atRevision is get for the PKI stored at revision rev, checked against
// the user-supplied CA of digest userCA, without its bytes.
func (c *pkiChecks) atRevision(cluster string, rev uint64, userCA [sha256.Size]byte, now time.Time) (clusterPKI, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	m, ok := c.by[cluster]
	if !ok || m.rev == 0 || m.rev != rev || m.userCA != userCA || !m.fresh(now) {
		return clusterPKI{}, false
	}
	return m.out, true
}

func (m pkiCheck) fresh(now time.Time) bool {
	return !now.Before(m.at) && now.Sub(m.at) < pkiCheckFor
}

func (c *pkiChecks) put(cluster string, digest [sha256.Size]byte, out clusterPKI, now time.Time) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.by == nil {
		c.by = map[string]pkiCheck{}
	}
	c.by[cluster] = pkiCheck{digest: digest, out: out, at: now}
}

// readAt records that the PKI of digest, checked against the user CA of
// digest userCA, was stored at revision rev (unless the memo moved on to
// other bytes meanwhile).
func (c *pkiChecks) readAt(cluster string, digest [sha256.Size]byte, rev uint64, userCA [sha256.Size]byte) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if m, ok := c.by[cluster]; ok && m.digest == digest {
		m.rev, m.userCA = rev, userCA
		c.by[cluster] = m
	}
}

func (c *pkiChecks) forget(cluster string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	delete(c.by, cluster)
}

// pkiDigest identifies a stored PKI and the user-supplied CA it is
// checked against (pkiDigest(nil, userCA): the user CA alone).
func pkiDigest(cur *capnv1.ClusterPKI, userCA *pki.KeyPair) [sha256.Size]byte {
	h := sha256.New()
	if cur != nil {
		b, _ := proto.MarshalOptions{Deterministic: true}.Marshal(cur)
		h.Write(b)
	}
	if userCA != nil {
		h.Write([]byte{1})
		h.Write(userCA.CertPEM)
		h.Write([]byte{0})
		h.Write(userCA.KeyPEM)
	}
	var d [sha256.Size]byte
	h.Sum(d[:0])
	return d
}

func containsPart(ps []pki.Part, p pki.Part) bool {
	for _, x := range ps {
		if x == p {
			return true
		}
	}
	return false
}

// ensureKubeconfig keeps kubeconfig.<cluster> naming the current endpoint
// with an admin certificate that is not due for renewal. A record it read
// or wrote is not read again while the secrets cache shows its revision
// (s.adminKCs).
func (s *Service) ensureKubeconfig(ctx context.Context, name string, ep bootstrap.Endpoint, set pki.Set) (*capnv1.AdminKubeconfig, error) {
	server, err := kubeconfig.Server(ep.Host, ep.Port)
	if err != nil {
		return nil, err
	}
	current := func(kc *capnv1.AdminKubeconfig, now time.Time) bool {
		return kc.GetServer() == server && now.Before(kc.GetClientCertNotAfter().AsTime().Add(-pki.ClientCertRenewBefore))
	}
	if e, ok := s.secrets.Get(keys.Kubeconfig(name)); ok {
		if kc, ok := s.adminKCs.at(name, e.Revision); ok && current(kc, s.cfg.Now()) {
			return kc, nil
		}
	}
	wrote := false
	kc, rev, err := s.kubeconfs.Mutate(ctx, keys.Kubeconfig(name), func(cur *capnv1.AdminKubeconfig, exists bool) (*capnv1.AdminKubeconfig, error) {
		now := s.cfg.Now()
		if exists && current(cur, now) {
			return nil, store.ErrNoChange
		}
		ca, err := pki.ParseCA(set.CA, now)
		if err != nil {
			return nil, err
		}
		admin, err := pki.IssueAdmin(ca, now)
		if err != nil {
			return nil, err
		}
		cert, err := pki.ParseCertificate(admin.CertPEM)
		if err != nil {
			return nil, err
		}
		data, err := kubeconfig.Render(kubeconfig.Input{ClusterName: name, Host: ep.Host, Port: ep.Port,
			CACertPEM: set.CA.CertPEM, ClientCertPEM: admin.CertPEM, ClientKeyPEM: admin.KeyPEM})
		if err != nil {
			return nil, err
		}
		wrote = true
		return &capnv1.AdminKubeconfig{Kubeconfig: data, Server: server, ClientCertNotAfter: timestamppb.New(cert.NotAfter)}, nil
	})
	if err == nil && rev != 0 {
		s.adminKCs.put(name, rev, kc)
	}
	if err == nil && wrote {
		s.kickJoins(name)
	}
	return kc, err
}

// kubeconfigMemo remembers, per cluster, the admin kubeconfig record last
// read or written and its revision. It only saves reads: a restart starts
// empty. Values are shared: callers must not modify them.
type kubeconfigMemo struct {
	mu sync.Mutex
	by map[string]kubeconfigAt
}

type kubeconfigAt struct {
	rev uint64
	kc  *capnv1.AdminKubeconfig
}

// at returns the record stored at revision rev, if that is the one
// remembered.
func (m *kubeconfigMemo) at(cluster string, rev uint64) (*capnv1.AdminKubeconfig, bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	e, ok := m.by[cluster]
	if !ok || e.rev != rev {
		return nil, false
	}
	return e.kc, true
}

func (m *kubeconfigMemo) put(cluster string, rev uint64, kc *capnv1.AdminKubeconfig) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.by == nil {
		m.by = map[string]kubeconfigAt{}
	}
	if e, ok := m.by[cluster]; !ok || e.rev <= rev {
		m.by[cluster] = kubeconfigAt{rev: rev, kc: kc}
	}
}

func (m *kubeconfigMemo) forget(cluster string) {
	m.mu.Lock()
	defer m.mu.Unlock()
	delete(m.by, cluster)
}

// tendTokens renews the join tokens of machines still joining and deletes
// those of machines that joined (observed phase Running). It walks the
// cluster's machines from the cache (no listing of the secrets bucket) and
// remembers, in memory, which records are done and when the others are due,
// so a busy cluster costs a KV read only when a token needs attention. It
// returns when to look again.
func (s *Service) tendTokens(ctx context.Context, cluster string) (time.Duration, error) {
	now := s.cfg.Now()
	var next time.Duration
	// A token renewed or done with changes what the workload cluster must
	// hold: the join-token pass follows.
	wrote := false
	defer func() {
		if wrote {
			s.kickJoins(cluster)
		}
	}()
	soonest := func(d time.Duration) {
		if d > 0 && (next == 0 || d < next) {
			next = d
		}
	}
	for _, e := range s.observed.List(keys.MachinesOf(cluster)) {
		machine := strings.TrimPrefix(e.Key, keys.MachinesOf(cluster))
		key := keys.Bootstrap(cluster, machine)
		joined := s.machineJoined(cluster, machine)
		if done, due := s.tokens.state(key); done || (!joined && now.Before(due)) {
			if !done {
				soonest(due.Sub(now))
			}
			continue
		}
		_, _, err := s.boots.Mutate(ctx, key, func(cur *capnv1.BootstrapData, exists bool) (*capnv1.BootstrapData, error) {
			switch {
			case !exists:
				s.tokens.wait(key, now.Add(s.cfg.TokenCheckEvery))
				return nil, store.ErrNoChange
			case cur.GetJoined() || cur.GetToken() == "":
				s.tokens.done(key)
				return nil, store.ErrNoChange
			case joined && cur.GetFetchCredential() == "":
				// Nothing to forget: no credential was minted (its
				// provider runs no node agent) and the token, which its
				// data holds too, is dead once its Secret is deleted
				// (the join-token pass) or expired. The status says it
				// joined (machineJoined): no write.
				s.tokens.done(key)
				return nil, store.ErrNoChange
			case joined:
				s.tokens.done(key)
				cur.Joined, cur.Token, cur.TokenExpires, cur.FetchCredential = true, "", nil, ""
				wrote = true
				return cur, nil
			}
			ttl := tokenTTL(cur)
			exp := cur.GetTokenExpires().AsTime()
			renew := token.NeedsRenewal(exp, ttl, now)
			if renew {
				exp = token.Expiry(now, ttl)
			}
			due := min(token.RenewAfter(exp, ttl, now), s.cfg.TokenCheckEvery)
			s.tokens.wait(key, now.Add(due))
			soonest(due)
			if !renew {
				return nil, store.ErrNoChange
			}
			cur.TokenExpires = timestamppb.New(exp)
			wrote = true
			return cur, nil
		})
		if err != nil {
			s.tokens.forget(key)
			return 0, err
		}
	}
	return next, nil
}

// tokenMemo remembers, per bootstrap record, that its token is done with
// (the machine joined) or when it is next due. It only saves KV reads: a
// restart starts empty and looks at every record once.
type tokenMemo struct {
	mu      sync.Mutex
	joined  map[string]bool
	dueTime map[string]time.Time
}

func (m *tokenMemo) state(key string) (done bool, due time.Time) {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.joined[key], m.dueTime[key]
}

func (m *tokenMemo) done(key string) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.joined == nil {
		m.joined = map[string]bool{}
	}
	m.joined[key] = true
	delete(m.dueTime, key)
}

func (m *tokenMemo) wait(key string, due time.Time) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.dueTime == nil {
		m.dueTime = map[string]time.Time{}
	}
	m.dueTime[key] = due
}

func (m *tokenMemo) forget(key string) {
	m.mu.Lock()
	defer m.mu.Unlock()
	delete(m.joined, key)
	delete(m.dueTime, key)
}

// forgetCluster drops a deleted cluster's records.
func (m *tokenMemo) forgetCluster(cluster string) {
	m.mu.Lock()
	defer m.mu.Unlock()
	prefix := keys.BootstrapsOf(cluster)
	for k := range m.joined {
		if strings.HasPrefix(k, prefix) {
			delete(m.joined, k)
		}
	}
	for k := range m.dueTime {
		if strings.HasPrefix(k, prefix) {
			delete(m.dueTime, k)
		}
	}
}

// tokenTTL is the TTL a record's token was issued with.
func tokenTTL(b *capnv1.BootstrapData) time.Duration {
	if b.GetTokenTtl() != nil {
		return b.GetTokenTtl().AsDuration()
	}
	return token.DefaultTTL
}

// machineCoalesce is how long a cluster whose machines joined waits for
// more of them before its reconcile (reconcile.Source.Coalesce): short
// beside a token's lifetime and TokenCheckEvery, long beside the
// milliseconds between a create's joins.
const machineCoalesce = 100 * time.Millisecond

// clusterOfClusterLevel maps a cluster-level key (a cluster's
// infrastructure, infra.<p>.<c>._; its control-plane record,
// controlplane.<c>) to its cluster, "" for any other (a machine's
// infrastructure).
func clusterOfClusterLevel(key string) string {
	k, err := keys.Parse(key)
	if err != nil || (k.Kind == keys.KindInfra && k.Name != keys.ClusterObject) {
		return ""
	}
	return k.Cluster
}

// clusterOfJoined maps an observed machine key to its cluster when that
// machine is Running, "" otherwise.
func (s *Service) clusterOfJoined(key string) string {
	k, err := keys.Parse(key)
	if err != nil || k.Kind != keys.KindMachine || !s.machineJoined(k.Cluster, k.Name) {
		return ""
	}
	return k.Cluster
}

// machineJoined says whether a machine joined: its observed phase is
// Running, or its node was ready once (the status keeps its first ready
// time: a machine stopped for hibernation, or failed since, joined all
// the same). A bootstrap record with no credential is not rewritten at the
// join, so this, not the record's joined flag, is what keeps its token
// from being renewed or registered again.
func (s *Service) machineJoined(cluster, machine string) bool {
	st, _, ok := store.NewView(s.observed, store.New[capnv1.MachineStatus]()).Get(keys.Machine(cluster, machine))
	return ok && (st.GetPhaseValue() == capnv1.MachineRunning || st.GetNodeReadyTime() != nil)
}

// writeStatus writes the cluster's secrets status, keeping the conditions
// other passes own (JoinTokensRegistered). The one that creates the status
// kicks the join-token pass, which writes its condition only into an
// existing status.
func (s *Service) writeStatus(ctx context.Context, st *capnv1.ClusterSecretsStatus) error {
	created := false
	_, _, err := s.statuses.Mutate(ctx, keys.Secrets(st.GetCluster()), func(cur *capnv1.ClusterSecretsStatus, exists bool) (*capnv1.ClusterSecretsStatus, error) {
		st.Conditions, created = cur.GetConditions(), !exists
		return st, nil
	})
	if err == nil && created {
		s.kickJoins(st.GetCluster())
	}
	return err
}
