// Package clusterplanner is the cluster-planner service: for every cluster
// it computes a plan with the pure plan.Plan and applies it — desired
// machines with compare-and-set, teardown commands with deterministic ids,
// and the cluster's observed status.
package clusterplanner

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"time"

	"github.com/rs/zerolog"

	"github.com/capn-dev/capn/events"
	"github.com/capn-dev/capn/events/reconcile"
	"github.com/capn-dev/capn/events/store"
	capnv1 "github.com/capn-dev/capn/schemas/capn/v1alpha1"
	"github.com/capn-dev/capn/schemas/keys"
	"github.com/capn-dev/capn/services/cluster-planner/plan"
	"github.com/capn-dev/capn/services/daemon"
)

// Name is the service's name.
const Name = "cluster-planner"

// DefaultMaxActionsPerPlan bounds one plan of one cluster: at about a
// millisecond a KV write, a plan holds a worker some 100ms at most before
// the other clusters' turn.
const DefaultMaxActionsPerPlan = 100

// Config configures the planner.
type Config struct {
	Workers int
	Now     func() time.Time
	Cache   store.CacheOptions
	// MaxPoolReplicas and MaxClusterReplicas bound what a stored spec may
	// ask for (0: manifest's defaults, 1,000 and 5,000); a spec over them
	// is not planned and its status says why.
	MaxPoolReplicas, MaxClusterReplicas int
	// MaxActionsPerPlan bounds one plan (0: DefaultMaxActionsPerPlan); a
	// cluster with more to do is planned again after the clusters waiting.
	MaxActionsPerPlan int
	// StatusCoalesce is how often at most a cluster's status is rewritten
	// when only its counts, condition messages or change time moved (0:
	// DefaultStatusCoalesce; negative: every change at once). Phase,
	// generation, conditions' status and the like are written at once.
	StatusCoalesce time.Duration
	// PlanCoalesce is how long a cluster whose machines changed waits for
	// more of their changes before it is planned (0: DefaultPlanCoalesce;
	// negative: at once): a create's machines move through their phases
	// in bursts, and one plan after a burst does what a plan per change
	// would. Changes of the cluster's own spec are planned at once.
	PlanCoalesce time.Duration
}

// DefaultPlanCoalesce is Config.PlanCoalesce's default: short beside the
// status's coalescing (DefaultStatusCoalesce) and a machine's boot, long
// beside the milliseconds between a burst's changes.
const DefaultPlanCoalesce = 100 * time.Millisecond

func (s *Service) planCoalesce() time.Duration {
	if s.cfg.PlanCoalesce == 0 {
		return DefaultPlanCoalesce
	}
	return max(0, s.cfg.PlanCoalesce)
}

// Service is the cluster-planner.
type Service struct {
	cfg      Config
	pub      *events.Publisher
	desired  *store.Cache
	observed *store.Cache
	clusters *store.Bucket[*capnv1.Cluster]
	machines *store.Bucket[*capnv1.Machine]
	statuses *store.Bucket[*capnv1.ClusterStatus]
	// records are the control-plane records (observed controlplane.<c>):
	// the machines implementation's, which this service writes.
	records *store.Bucket[*capnv1.ControlPlaneRecord]
	// announcements are the providers' (observed provider.<name>).
	announcements *store.Bucket[*capnv1.ProviderAnnouncement]
	queue         *reconcile.Queue
	// observedRev is the last revision the observed cache applied
	// (s.observed.Revision; a test's may lag).
	observedRev func() uint64
	// written is, per cluster, the desired revision of this replica's last
	// machine create or update. A plan waits until the desired cache has
	// applied it — read-your-writes, as Kubernetes controllers'
	// expectations do: a plan from a cache that misses a machine this
	// replica just created would create another one in the next free slot.
	written sync.Map // cluster name → uint64
	// statusWritten: cluster name → time.Time of this process's last
	// write of its status (coalesceWait).
	statusWritten sync.Map
	// deferred: cluster names whose last plan created machines and left
	// its status to the next plan (deferStatus).
	deferred sync.Map
}

// New returns the service.
func New(cfg Config) *Service {
	if cfg.Workers < 1 {
		cfg.Workers = 4
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	return &Service{cfg: cfg}
}

var (
	_ daemon.FlagProvider = (*Service)(nil)
	_ daemon.Validator    = (*Service)(nil)
)

// Name implements daemon.Service.
func (s *Service) Name() string { return Name }

// Flags implements daemon.FlagProvider: the replica bounds (keep them
// the gateway's) and the bound of one plan.
func (s *Service) Flags() []daemon.Flag {
	return []daemon.Flag{
		{Name: "max-pool-replicas", Env: "CAPN_MAX_POOL_REPLICAS", Usage: "most replicas a worker pool may have (0: 1000); a stored spec asking more is not planned", Value: daemon.IntValue(&s.cfg.MaxPoolReplicas)},
		{Name: "max-cluster-replicas", Env: "CAPN_MAX_CLUSTER_REPLICAS", Usage: "most machines a cluster may have, control plane and pools (0: 5000)", Value: daemon.IntValue(&s.cfg.MaxClusterReplicas)},
		{Name: "max-actions-per-plan", Env: "CAPN_PLANNER_MAX_ACTIONS_PER_PLAN", Usage: "most machine writes and commands one plan of one cluster makes before the other clusters' turn (0: 100)", Value: daemon.IntValue(&s.cfg.MaxActionsPerPlan)},
	}
}

// Validate implements daemon.Validator.
func (s *Service) Validate() error {
	var errs []error
	for _, f := range []struct {
		flag, env string
		v         int
	}{
		{"max-pool-replicas", "CAPN_MAX_POOL_REPLICAS", s.cfg.MaxPoolReplicas},
		{"max-cluster-replicas", "CAPN_MAX_CLUSTER_REPLICAS", s.cfg.MaxClusterReplicas},
		{"max-actions-per-plan", "CAPN_PLANNER_MAX_ACTIONS_PER_PLAN", s.cfg.MaxActionsPerPlan},
	} {
		if f.v < 0 {
			errs = append(errs, &daemon.FieldError{Flag: f.flag, Env: f.env, Value: strconv.Itoa(f.v), Problem: "must not be negative (0: the default)"})
		}
	}
	return errors.Join(errs...)
}

func (s *Service) maxActions() int {
	if s.cfg.MaxActionsPerPlan > 0 {
		return s.cfg.MaxActionsPerPlan
	}
	return DefaultMaxActionsPerPlan
}

// Run implements daemon.Service.
func (s *Service) Run(ctx context.Context, d *daemon.Deps) error {
	desiredKV, err := d.JS.KeyValue(ctx, events.BucketDesired)
	if err != nil {
		return fmt.Errorf("bucket %s: %w", events.BucketDesired, err)
	}
	observedKV, err := d.JS.KeyValue(ctx, events.BucketObserved)
	if err != nil {
		return fmt.Errorf("bucket %s: %w", events.BucketObserved, err)
	}
	s.pub = events.NewPublisher(d.JS, "capn/"+Name)
	s.clusters = store.NewBucket(desiredKV, store.New[capnv1.Cluster]())
	s.machines = store.NewBucket(desiredKV, store.New[capnv1.Machine]())
	s.statuses = store.NewBucket(observedKV, store.New[capnv1.ClusterStatus]())
	s.records = store.NewBucket(observedKV, store.New[capnv1.ControlPlaneRecord]())
	s.announcements = store.NewBucket(observedKV, store.New[capnv1.ProviderAnnouncement]())
	s.desired = store.NewCache(desiredKV, s.cfg.Cache)
	s.observed = store.NewCache(observedKV, store.Keep(s.cfg.Cache, d.JS, keys.ClusterPrefix, keys.MachinePrefix, keys.InfraPrefix, keys.SecretsPrefix, keys.ProviderPrefix, keys.AutoscalerPrefix, keys.AddonPrefix, keys.MaintenancePrefix, keys.ControlPlanePrefix))
	if s.observedRev == nil {
		s.observedRev = s.observed.Revision
	}
	s.queue = reconcile.NewQueue()
	providers := newProviderWatch(s)
	c := &reconcile.Controller{
		Watches: []reconcile.Source{
			{Cache: s.desired, Prefixes: []string{keys.ClusterPrefix}, Key: keys.ClusterOf},
			// The cluster's machines and what others report of it, coalesced
			// per cluster (PlanCoalesce). controlplane.<c>: an implementation's
			// record changed (initialized, version, endpoint, generation
			// answered, gone): plan the cluster again.
			{Cache: s.desired, Prefixes: []string{keys.MachinePrefix}, Key: keys.ClusterOf, Coalesce: s.planCoalesce()},
			{Cache: s.observed, Prefixes: []string{keys.MachinePrefix, keys.InfraPrefix, keys.SecretsPrefix, keys.AutoscalerPrefix, keys.AddonPrefix, keys.MaintenancePrefix, keys.ControlPlanePrefix}, Key: keys.ClusterOf, Coalesce: s.planCoalesce()},
			// A set changed: any cluster may be selected or not now.
			{Cache: s.desired, Prefixes: []string{keys.AddonSetPrefix}, Changed: func(store.Change) []string { return s.desired.KeysUnder(keys.ClusterPrefix) }},
			{Cache: s.observed, Prefixes: []string{keys.ProviderPrefix}, Changed: providers.changed,
				Tick: providers.recheck, Every: providerRecheckEvery},
		},
		Resync:    func() []string { return s.desired.KeysUnder(keys.ClusterPrefix) },
		Reconcile: s.reconcile,
		Workers:   s.cfg.Workers,
		// A conflict is logged at debug: another writer moved first, and
		// the retry plans from a fresh read.
		OnError: reconcile.LogFailures(d.Log, "cluster", "plan not applied; will retry"),
		Queue:   s.queue,
	}
	return c.Run(ctx, reconcile.Env{JS: d.JS, Log: d.Log, Events: d.Events, Ready: d.Ready.Set})
}

// deferStatus says whether a plan leaves its status to the next plan: it
// creates machines, so the status it computed counts none of them and is
// out of date the moment they are written; the next plan, which those
// writes wake (from a cache that has them: read-your-writes), writes one
// that does — one write where there were two (the control plane up and
// the workers scaling up, then the workers there). Never a status that
// does not exist yet or a phase change (written at once, with their
// event), and never twice in a row: a plan after a deferred one writes,
// so a create that keeps failing cannot hold the status back.
func (s *Service) deferStatus(name string, old *capnv1.ClusterStatus, res plan.Result) bool {
	if _, was := s.deferred.LoadAndDelete(name); was || old == nil || res.Status == nil || old.GetPhase() != res.Status.GetPhase() {
		return false
	}
	for _, a := range res.Actions {
		if _, ok := a.(plan.CreateMachine); ok {
			s.deferred.Store(name, true)
			return true
		}
	}
	return false
}

// reconcile plans one cluster and applies the plan.
func (s *Service) reconcile(ctx context.Context, name string) (reconcile.Result, error) {
	if w, ok := s.written.Load(name); ok && s.desired.Revision() < w.(uint64) {
		return reconcile.Result{RequeueAfter: cacheBehindWait}, nil // plan once the cache has our last write
	}
	log := zerolog.Ctx(ctx).With().Str("cluster", name).Logger()
	ctx = log.WithContext(ctx)
	in, revs, ok, err := s.snapshot(ctx, name)
	if err != nil {
		return reconcile.Result{}, err
	}
	if !ok {
		s.written.Delete(name) // the cluster is gone: nothing more to wait for
		return reconcile.Result{}, nil
	}

	res := plan.Plan(in)
	if len(res.Actions) > 0 {
		log.Info().Fields(res.Fields()).Msg("plan")
	}
	// Status first: it says what the plan is about to do.
	requeue := res.RequeueAfter
	var later coalesced
	if s.deferStatus(name, in.Status, res) {
		// Written by the next plan, woken by these creates.
	} else if err := s.writeStatus(ctx, name, in.Status, res.Status, res.PhaseMessage); errors.Is(err, errCacheBehind) {
		return reconcile.Result{RequeueAfter: cacheBehindWait}, nil // plan again once the cache caught up
	} else if errors.As(err, &later) {
		// The counts are written by the plan after later.wait (or sooner,
		// with news): the latest requeue replaces the pending one, so it
		// is the sooner of the two.
		if requeue <= 0 || later.wait < requeue {
			requeue = later.wait
		}
	} else if err != nil {
		return reconcile.Result{}, err
	}
	ap := s.applier(in.Cluster, revs)
	if res.ControlPlaneRecord != nil {
		// The machines implementation's record, before the actions: a
		// DeleteCluster among them takes it away.
		if err := ap.WriteControlPlaneRecord(ctx, res.ControlPlaneRecord); err != nil {
			return reconcile.Result{}, err
		}
	}
	if err := plan.Apply(ctx, ap, res.Actions); err != nil {
		return reconcile.Result{}, err
	}
	return reconcile.Result{RequeueAfter: requeue}, nil
}
