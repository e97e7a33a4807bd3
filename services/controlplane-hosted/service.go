// Package controlplanehosted is the hosted control-plane implementation
// (docs/architecture.md, Control-plane contract; type hosted): a cluster's
// etcd, kube-apiserver, kube-controller-manager and kube-scheduler run as
// processes supervised by this service on the management side, from the
// cached Kubernetes binaries of the cluster's version, as Kamaji and
// k0smotron run them in pods. It consumes capn.controlplane.hosted.>
// (stream CAPN_CONTROLPLANES) and is the one writer of the observed
// controlplane.<cluster> of its clusters.
//
//   - ensure: per cluster a data dir <data-dir>/<cluster> (state.json:
//     ports, versions; the PKI; each etcd member's data; logs), free
//     loopback ports, etcd (1 member, 3 with replicas 3), as many API
//     servers, one controller-manager and one scheduler (leader-elected),
//     and an endpoint that passes connections to the API servers that
//     answer, in turn. A version change restarts the API servers one at a
//     time on the new binaries; a replicas change (1 ↔ 3) adds or removes
//     etcd members and API servers one at a time (scale.go). The
//     certificates come from the cluster's CA, which the bootstrapper
//     hands out sealed to this service (RequestPKI).
//   - delete: stop everything, remove the data dir, delete the record.
//
// Processes are restarted when they die (internal/supervise); when the
// service stops they stop with it, and a start adopts every data dir it
// finds: the same ports, the same etcd data, so nothing is lost.
package controlplanehosted

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/rs/zerolog"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/capn-dev/capn/events"
	"github.com/capn-dev/capn/events/store"
	"github.com/capn-dev/capn/internal/supervise"
	capnv1 "github.com/capn-dev/capn/schemas/capn/v1alpha1"
	"github.com/capn-dev/capn/schemas/conditions"
	"github.com/capn-dev/capn/schemas/keys"
	"github.com/capn-dev/capn/secrets/pki"
	"github.com/capn-dev/capn/services/daemon"
)

// Name is the service's name, its NATS user and its durable consumer.
const Name = "controlplane-hosted"

// Concurrency is how many commands (of different clusters) are handled at
// once.
const Concurrency = 4

// Condition types of the record besides Ready.
const (
	// ConditionReady: every API server answers /readyz.
	ConditionReady = "Ready"
	// ConditionUpgrading is True while API servers run different versions.
	ConditionUpgrading = "Upgrading"
	// ConditionScaling is True while etcd members and API servers are
	// added or removed (a replicas change, 1 ↔ 3); its message is the last
	// step ("etcd member 2 of 3 added").
	ConditionScaling = "Scaling"
)

// Defaults of the network a cluster leaves out (kubeadm's service CIDR
// and DNS domain, flannel's pod CIDR), as kube-local machines take them.
const (
	DefaultServiceCIDR = "10.96.0.0/12"
	DefaultPodCIDR     = "10.244.0.0/16"
	DefaultDNSDomain   = "cluster.local"
)

// Config of the service.
type Config struct {
	// DataDir holds one directory per hosted control plane.
	DataDir string
	// KubeBin lists the directories of the Kubernetes binaries, one per
	// version, colon-separated (make kube).
	KubeBin string
	// Now is the clock of the certificates and the record (time.Now).
	Now func() time.Time
	// UpgradeWait bounds how long an upgraded API server has to answer
	// /readyz before the upgrade stops (default 2m).
	UpgradeWait time.Duration
}

// Service runs hosted control planes.
type Service struct {
	cfg  Config
	bins *kubeBins
	nc   *nats.Conn
	log  zerolog.Logger

	clusters *store.Bucket[*capnv1.Cluster]
	records  *store.Bucket[*capnv1.ControlPlaneRecord]

	mu      sync.Mutex
	running map[string]*controlPlane
	locks   map[string]*sync.Mutex
}

var (
	_ daemon.Service      = (*Service)(nil)
	_ daemon.FlagProvider = (*Service)(nil)
	_ daemon.Validator    = (*Service)(nil)
)

// New returns the service, as cmd/controlplane-hosted and capn dev run it.
func New(cfg Config) *Service {
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	if cfg.UpgradeWait <= 0 {
		cfg.UpgradeWait = 2 * time.Minute
	}
	return &Service{cfg: cfg, running: map[string]*controlPlane{}, locks: map[string]*sync.Mutex{}}
}

// Name implements daemon.Service.
func (s *Service) Name() string { return Name }

// Flags implements daemon.FlagProvider.
func (s *Service) Flags() []daemon.Flag {
	return []daemon.Flag{
		{Name: "hosted-data-dir", Env: "CAPN_HOSTED_DATA_DIR", Usage: "`dir` holding one directory per hosted control plane (etcd data, PKI, logs)", Value: daemon.StringValue(&s.cfg.DataDir)},
		{Name: "kube-bin", Env: "CAPN_KUBE_BIN", Usage: "`dirs` of the Kubernetes binaries, one per version, colon-separated (make kube): each hosted control plane runs those of its cluster's version", Value: daemon.StringValue(&s.cfg.KubeBin)},
	}
}

// Validate implements daemon.Validator.
func (s *Service) Validate() error {
	if s.cfg.DataDir == "" || !filepath.IsAbs(s.cfg.DataDir) {
		return &daemon.FieldError{Flag: "hosted-data-dir", Env: "CAPN_HOSTED_DATA_DIR", Value: s.cfg.DataDir, Problem: "must be an absolute directory"}
	}
	return nil
}

// ConsumerSpec is the service's durable consumer of its commands.
func ConsumerSpec() events.ConsumerSpec {
	return events.ConsumerSpec{Stream: events.StreamControlPlanes, Durable: Name,
		Filters:     []string{events.Subject(events.SubjectControlPlanes, capnv1.ControlPlaneHosted, ">")},
		Description: "hosted control planes: ensure and delete", AckWait: time.Minute}
}

// Run implements daemon.Service.
func (s *Service) Run(ctx context.Context, d *daemon.Deps) error {
	if err := s.Validate(); err != nil {
		return err
	}
	s.bins = newKubeBins(s.cfg.KubeBin)
	s.nc, s.log = d.NC, d.Log
	des, err := d.JS.KeyValue(ctx, events.BucketDesired)
	if err != nil {
		return fmt.Errorf("bucket %s: %w", events.BucketDesired, err)
	}
	obs, err := d.JS.KeyValue(ctx, events.BucketObserved)
	if err != nil {
		return fmt.Errorf("bucket %s: %w", events.BucketObserved, err)
	}
	s.clusters = store.NewBucket(des, store.New[capnv1.Cluster]())
	s.records = store.NewBucket(obs, store.New[capnv1.ControlPlaneRecord]())
	if err := os.MkdirAll(s.cfg.DataDir, 0o700); err != nil {
		return err
	}
	defer s.stopAll()
	s.adopt(ctx)
	d.Ready.Set(true)
	d.Log.Info().Str("data_dir", s.cfg.DataDir).Int("adopted", len(s.running)).Msg("hosted control planes running")
	// Several clusters at once (a scale or an upgrade takes minutes); one
	// command of a cluster at a time (s.lock).
	err = events.Consume(ctx, d.JS, ConsumerSpec(), events.Typed(s.handle), events.WithMetrics(d.Events), events.WithConcurrency(Concurrency))
	if ctx.Err() != nil {
		return nil
	}
	return err
}

// adopt starts again every control plane whose data dir is there (a
// restart of the service): the same ports, the same etcd data.
func (s *Service) adopt(ctx context.Context) {
	entries, _ := os.ReadDir(s.cfg.DataDir)
	for _, e := range entries {
		l := layout{dir: filepath.Join(s.cfg.DataDir, e.Name())}
		if !e.IsDir() || !l.exists() {
			continue
		}
		st, err := l.load()
		if err == nil {
			var set pki.Set
			if set, err = readPKI(l); err == nil {
				_, err = s.run(ctx, st, set)
			}
		}
		if err != nil {
			s.log.Error().Err(err).Str("cluster", e.Name()).Msg("cannot adopt a hosted control plane; the next ensure tries again")
		}
	}
}

func (s *Service) stopAll() {
	s.mu.Lock()
	all := s.running
	s.running = map[string]*controlPlane{}
	s.mu.Unlock()
	for _, cp := range all {
		cp.stop()
	}
}

func (s *Service) lock(cluster string) func() {
	s.mu.Lock()
	m, ok := s.locks[cluster]
	if !ok {
		m = &sync.Mutex{}
		s.locks[cluster] = m
	}
	s.mu.Unlock()
	m.Lock()
	return m.Unlock
}

func (s *Service) handle(ctx context.Context, m *events.Message, cmd *capnv1.ControlPlaneCommand) error {
	subj, err := keys.ParseSubject(m.Subject)
	if err != nil || subj.Root != keys.ControlPlaneRoot || subj.Entity != capnv1.ControlPlaneHosted {
		return events.Permanent(fmt.Errorf("subject %q is not %s.%s.<verb>.<cluster>", m.Subject, keys.ControlPlaneRoot, capnv1.ControlPlaneHosted))
	}
	if cmd.GetCluster() != "" && cmd.GetCluster() != subj.Cluster {
		return events.Permanent(fmt.Errorf("command for cluster %q on %s's subject", cmd.GetCluster(), subj.Cluster))
	}
	defer s.lock(subj.Cluster)()
	log := s.log.With().Str("cluster", subj.Cluster).Str("verb", subj.Verb).Int64("generation", cmd.GetGeneration()).Logger()
	switch subj.Verb {
	case keys.ControlPlaneEnsure:
		err = s.ensure(ctx, log, subj.Cluster, cmd)
	case keys.ControlPlaneDelete:
		err = s.delete(ctx, log, subj.Cluster)
	default:
		return events.Permanent(fmt.Errorf("verb %q: want %s or %s", subj.Verb, keys.ControlPlaneEnsure, keys.ControlPlaneDelete))
	}
	if err != nil {
		log.Warn().Err(err).Msg("hosted control plane not done; will retry")
	}
	return err
}

// ensure makes the control plane the desired cluster asks for.
func (s *Service) ensure(ctx context.Context, log zerolog.Logger, cluster string, cmd *capnv1.ControlPlaneCommand) error {
	c, gen, err := s.clusters.Get(ctx, keys.Cluster(cluster))
	if errors.Is(err, store.ErrNotFound) {
		log.Info().Msg("no desired cluster: nothing to ensure")
		return nil
	}
	if err != nil {
		return err
	}
	spec := c.GetSpec()
	if impl := spec.GetControlPlane().Implementation(); impl != capnv1.ControlPlaneHosted {
		return events.Permanent(fmt.Errorf("cluster %s's control plane is of type %s, not %s", cluster, impl, capnv1.ControlPlaneHosted))
	}
	if c.GetMetadata().GetDeletionTimestamp() != nil {
		log.Info().Msg("cluster is being deleted: ensure does nothing (delete follows)")
		return nil
	}
	if rec, _, err := s.records.Get(ctx, keys.ControlPlane(cluster)); err == nil && cmd.GetGeneration() < rec.GetObservedGeneration() {
		log.Info().Int64("observed", rec.GetObservedGeneration()).Msg("an older ensure: nothing to do")
		return nil
	}
	version := spec.GetKubernetesVersion()
	replicas := spec.GetControlPlane().GetReplicas()
	if replicas != 1 && replicas != 3 {
		return s.refuse(ctx, cluster, int64(gen), "InvalidReplicas", fmt.Sprintf("spec.controlPlane.replicas %d: a hosted control plane runs 1 or 3 (allowed: 1, 3)", replicas))
	}
	uid := c.GetMetadata().GetUid()
	if earlier := s.uidOf(cluster); earlier != "" && uid != "" && earlier != uid {
		// A cluster of this name deleted with the Orphan policy left its
		// control plane here: it is not this cluster's (another CA,
		// another etcd).
		return s.refuse(ctx, cluster, int64(gen), "EarlierControlPlane", fmt.Sprintf(
			"%s holds the hosted control plane of an earlier cluster %s (uid %s; this one is %s), left running by a delete with the Orphan policy: "+
				"stop the service, remove that directory (the earlier cluster's etcd data) and the record controlplane.%s, start it and apply the cluster again",
			filepath.Join(s.cfg.DataDir, cluster), cluster, earlier, uid, cluster))
	}
	bin, err := s.bins.forVersion(ctx, version)
	if err != nil {
		_ = s.condition(ctx, cluster, 0, "BinariesMissing", err.Error())
		return err
	}
	s.mu.Lock()
	cp := s.running[cluster]
	s.mu.Unlock()
	if cp == nil {
		l := layout{dir: filepath.Join(s.cfg.DataDir, cluster)}
		st, err := l.load()
		if err != nil {
			if st, err = newState(cluster, version, int(replicas), spec.GetNetwork()); err != nil {
				return err
			}
		}
		st.UID = uid
		set, err := RequestPKI(ctx, s.nc, cluster)
		if err != nil {
			_ = s.condition(ctx, cluster, 0, "PKIUnavailable", err.Error())
			return err
		}
		st.Generation = int64(gen)
		if cp, err = s.run(ctx, st, set); err != nil {
			_ = s.condition(ctx, cluster, 0, "StartFailed", err.Error())
			return err
		}
		log.Info().Str("endpoint", st.endpointAddr()).Str("version", version).Int32("replicas", replicas).Msg("hosted control plane started")
	}
	cp.mu.Lock()
	have := len(cp.st.Members)
	cp.bins[version] = bin
	upgrade := cp.st.Version != version || cp.st.lowestVersion() != version
	cp.mu.Unlock()
	// Fewer replicas: scaled down before an upgrade (fewer API servers to
	// move); more: after (the new ones start on the new version).
	scale := func() error {
		if err := cp.scale(ctx, int(replicas), s.cfg.UpgradeWait); err != nil {
			if ctx.Err() == nil {
				_ = s.condition(ctx, cluster, 0, "ScaleFailed", err.Error())
			}
			return err
		}
		return nil
	}
	if int(replicas) < have {
		if err := scale(); err != nil {
			return err
		}
	}
	if upgrade {
		log.Info().Str("version", version).Msg("upgrading the API servers one at a time")
		if err := cp.upgrade(ctx, version, s.cfg.UpgradeWait); err != nil {
			return err
		}
	}
	if err := scale(); err != nil {
		return err
	}
	cp.mu.Lock()
	cp.st.Generation = int64(gen)
	cp.st.UID = uid
	err = cp.l.save(cp.st)
	cp.mu.Unlock()
	cp.wake()
	return err
}

// uidOf is the uid of the cluster whose control plane runs or has its
// data dir here under the name ("" when none, or a state.json from before
// uids were kept).
func (s *Service) uidOf(cluster string) string {
	s.mu.Lock()
	cp := s.running[cluster]
	s.mu.Unlock()
	if cp != nil {
		cp.mu.Lock()
		defer cp.mu.Unlock()
		return cp.st.UID
	}
	if st, err := (layout{dir: filepath.Join(s.cfg.DataDir, cluster)}).load(); err == nil {
		return st.UID
	}
	return ""
}

// run starts a control plane from its state and PKI.
func (s *Service) run(ctx context.Context, st *state, set pki.Set) (*controlPlane, error) {
	l := layout{dir: filepath.Join(s.cfg.DataDir, st.Cluster)}
	cp := &controlPlane{l: l, st: st, log: s.log.With().Str("cluster", st.Cluster).Logger(), bins: map[string]string{}, changed: make(chan struct{}, 1), now: s.cfg.Now}
	cp.sup = &supervise.Supervisor{LogDir: l.logs(), Log: cp.log}
	versions := []string{st.Version}
	for _, m := range st.Members {
		versions = append(versions, m.Version)
	}
	for _, v := range versions {
		if v == "" || cp.bins[v] != "" {
			continue
		}
		bin, err := s.bins.forVersion(ctx, v)
		if err != nil {
			return nil, err
		}
		cp.bins[v] = bin
	}
	if err := cp.start(set, s.cfg.Now(), s.writeRecord); err != nil {
		cp.stop()
		return nil, err
	}
	s.mu.Lock()
	s.running[st.Cluster] = cp
	s.mu.Unlock()
	return cp, nil
}

// newState lays out a new control plane: fresh loopback ports for every
// member, the endpoint, the controller-manager and the scheduler.
func newState(cluster, version string, replicas int, n *capnv1.NetworkSpec) (*state, error) {
	ports, err := freePorts(3*replicas + 3)
	if err != nil {
		return nil, err
	}
	st := &state{Cluster: cluster, Version: version, Replicas: replicas, Endpoint: ports[0], KCM: ports[1], Scheduler: ports[2],
		ServiceCIDR: DefaultServiceCIDR, PodCIDR: DefaultPodCIDR, DNSDomain: DefaultDNSDomain}
	if l := n.GetServiceCidrs(); len(l) > 0 {
		st.ServiceCIDR = l[0]
	}
	if l := n.GetPodCidrs(); len(l) > 0 {
		st.PodCIDR = l[0]
	}
	if d := n.GetServiceDomain(); d != "" {
		st.DNSDomain = d
	}
	for i := range replicas {
		p := ports[3+3*i:]
		st.Members = append(st.Members, member{EtcdClient: p[0], EtcdPeer: p[1], APIServer: p[2], Version: version})
	}
	return st, nil
}

// readPKI reads back the CAs and keys a start wrote (an adoption needs no
// bootstrapper).
func readPKI(l layout) (pki.Set, error) {
	read := func(name string) []byte {
		b, _ := os.ReadFile(l.pkiFile(name))
		return b
	}
	set := pki.Set{
		CA:             pki.KeyPair{CertPEM: read("ca.crt"), KeyPEM: read("ca.key")},
		EtcdCA:         pki.KeyPair{CertPEM: read("etcd/ca.crt"), KeyPEM: read("etcd/ca.key")},
		FrontProxyCA:   pki.KeyPair{CertPEM: read("front-proxy-ca.crt"), KeyPEM: read("front-proxy-ca.key")},
		ServiceAccount: pki.ServiceAccountKey{PublicPEM: read("sa.pub"), PrivatePEM: read("sa.key")},
	}
	if set.CA.IsZero() || set.EtcdCA.IsZero() || set.FrontProxyCA.IsZero() || set.ServiceAccount.IsZero() {
		return pki.Set{}, fmt.Errorf("%s: the PKI is incomplete", l.pki())
	}
	return set, nil
}

// delete stops the cluster's processes, removes its data dir and deletes
// its record.
func (s *Service) delete(ctx context.Context, log zerolog.Logger, cluster string) error {
	s.mu.Lock()
	cp := s.running[cluster]
	delete(s.running, cluster)
	s.mu.Unlock()
	if cp != nil {
		cp.stop()
	}
	if err := (layout{dir: filepath.Join(s.cfg.DataDir, cluster)}).clean(); err != nil {
		return err
	}
	rec, rev, err := s.records.Get(ctx, keys.ControlPlane(cluster))
	switch {
	case errors.Is(err, store.ErrNotFound):
	case err != nil:
		return err
	case rec.GetImplementation() != capnv1.ControlPlaneHosted:
		log.Warn().Str("implementation", rec.GetImplementation()).Msg("the record is another implementation's: left alone")
	default:
		if err := s.records.Delete(ctx, keys.ControlPlane(cluster), rev); err != nil && !errors.Is(err, store.ErrNotFound) {
			return err
		}
	}
	log.Info().Msg("hosted control plane deleted")
	return nil
}

// writeRecord writes what the control plane is (compare-and-set).
func (s *Service) writeRecord(cp *controlPlane) {
	cp.mu.Lock()
	st := *cp.st
	st.Members = append([]member(nil), cp.st.Members...)
	ca, _ := os.ReadFile(cp.l.pkiFile("ca.crt"))
	cp.mu.Unlock()
	ready := int32(cp.readyCount())
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	_, _, err := s.records.Mutate(ctx, keys.ControlPlane(st.Cluster), func(cur *capnv1.ControlPlaneRecord, exists bool) (*capnv1.ControlPlaneRecord, error) {
		if exists && cur.GetImplementation() != "" && cur.GetImplementation() != capnv1.ControlPlaneHosted {
			return nil, store.ErrNoChange
		}
		now := s.cfg.Now()
		next := &capnv1.ControlPlaneRecord{
			Cluster: st.Cluster, Implementation: capnv1.ControlPlaneHosted, ObservedGeneration: st.Generation,
			Initialized: cur.GetInitialized() || ready > 0,
			Endpoint:    &capnv1.Endpoint{Host: loopback, Port: int32(st.Endpoint)},
			Version:     st.lowestVersion(), Replicas: st.replicas(), ReadyReplicas: ready,
			CaCertificatePem: string(ca), Conditions: cloneConditions(cur.GetConditions()),
		}
		scaling, progress := st.scaling()
		switch {
		case scaling && next.Initialized:
			conditions.Set(&next.Conditions, conditions.New(ConditionReady, capnv1.ConditionFalse, "Scaling",
				fmt.Sprintf("%d API servers answer /readyz, %d wanted; %s", ready, st.replicas(), progress)), now)
		case ready == st.replicas():
			conditions.Set(&next.Conditions, conditions.New(ConditionReady, capnv1.ConditionTrue, "AllReplicasReady",
				fmt.Sprintf("%d of %d API servers answer /readyz at %s", ready, st.replicas(), st.endpointAddr())), now)
		case next.Initialized:
			conditions.Set(&next.Conditions, conditions.New(ConditionReady, capnv1.ConditionFalse, "ReplicasNotReady",
				fmt.Sprintf("%d of %d API servers answer /readyz; the supervisor restarts those that died", ready, st.replicas())), now)
		default:
			conditions.Set(&next.Conditions, conditions.New(ConditionReady, capnv1.ConditionUnknown, "Starting",
				fmt.Sprintf("etcd and %d API servers starting at %s", st.replicas(), st.endpointAddr())), now)
		}
		if low := st.lowestVersion(); low != st.Version {
			conditions.Set(&next.Conditions, conditions.New(ConditionUpgrading, capnv1.ConditionTrue, "RollingAPIServers",
				fmt.Sprintf("API servers move from %s to %s one at a time", low, st.Version)), now)
		} else {
			conditions.Set(&next.Conditions, conditions.New(ConditionUpgrading, capnv1.ConditionFalse, "UpToDate",
				"every API server runs "+st.Version), now)
		}
		if scaling {
			conditions.Set(&next.Conditions, conditions.New(ConditionScaling, capnv1.ConditionTrue, "ScalingReplicas",
				fmt.Sprintf("to %d replica%s: %s", st.replicas(), plural(int(st.replicas())), progress)), now)
		} else {
			conditions.Set(&next.Conditions, conditions.New(ConditionScaling, capnv1.ConditionFalse, "AtReplicas",
				fmt.Sprintf("%d etcd member%s and %d API server%s", len(st.Members), plural(len(st.Members)), len(st.Members), plural(len(st.Members)))), now)
		}
		if exists {
			prev := proto.Clone(cur).(*capnv1.ControlPlaneRecord)
			prev.Updated = nil
			if proto.Equal(prev, next) {
				return nil, store.ErrNoChange
			}
		}
		next.Updated = timestamppb.New(now)
		return next, nil
	})
	if err != nil {
		cp.log.Warn().Err(err).Msg("cannot write the control-plane record; the next probe tries again")
	}
}

// condition records a problem of ensure in the record's Ready condition.
// answers, when above the record's observedGeneration, becomes it: a
// refusal answers that revision (the planner then shows the refusal, not
// "still updating"); a passing problem (0) answers nothing, so the record
// still says which revision it made.
func (s *Service) condition(ctx context.Context, cluster string, answers int64, reason, msg string) error {
	_, _, err := s.records.Mutate(ctx, keys.ControlPlane(cluster), func(cur *capnv1.ControlPlaneRecord, exists bool) (*capnv1.ControlPlaneRecord, error) {
		if exists && cur.GetImplementation() != "" && cur.GetImplementation() != capnv1.ControlPlaneHosted {
			return nil, store.ErrNoChange
		}
		next := proto.Clone(cur).(*capnv1.ControlPlaneRecord)
		if !exists {
			next = &capnv1.ControlPlaneRecord{Cluster: cluster}
		}
		next.Implementation = capnv1.ControlPlaneHosted
		r := conditions.Get(next.Conditions, ConditionReady)
		if r != nil && r.GetReason() == reason && r.GetMessage() == msg && answers <= next.GetObservedGeneration() {
			return nil, store.ErrNoChange
		}
		conditions.Set(&next.Conditions, conditions.New(ConditionReady, capnv1.ConditionFalse, reason, msg), s.cfg.Now())
		next.ObservedGeneration = max(next.GetObservedGeneration(), answers)
		next.Updated = timestamppb.New(s.cfg.Now())
		return next, nil
	})
	return err
}

// refuse records a spec the service cannot make as the answer to revision
// gen, and acknowledges the command: a retry changes nothing until the
// spec does.
func (s *Service) refuse(ctx context.Context, cluster string, gen int64, reason, msg string) error {
	if err := s.condition(ctx, cluster, gen, reason, msg); err != nil {
		return err
	}
	return events.Permanent(errors.New(msg))
}

func cloneConditions(in []*capnv1.Condition) []*capnv1.Condition {
	out := make([]*capnv1.Condition, len(in))
	for i, c := range in {
		out[i] = proto.Clone(c).(*capnv1.Condition)
	}
	return out
}
