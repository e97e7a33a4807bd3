// Package clusterplanner is the cluster-planner service: for every cluster
// it computes a plan with the pure plan.Plan and applies it — desired
// machines with compare-and-set, teardown commands with deterministic ids,
// and the cluster's observed status.
package clusterplanner

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/google/uuid"
	"github.com/rs/zerolog"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/capn-dev/capn/events"
	"github.com/capn-dev/capn/events/reconcile"
	"github.com/capn-dev/capn/events/store"
	capnv1 "github.com/capn-dev/capn/schemas/capn/v1alpha1"
	"github.com/capn-dev/capn/services/cluster-planner/plan"
	"github.com/capn-dev/capn/services/runtime"
)

// Name is the service's name.
const Name = "cluster-planner"

const (
	clusterPrefix = "cluster."
	machinePrefix = "machine."
	infraPrefix   = "infra."
	secretsPrefix = "secrets."
)

// Config configures the planner.
type Config struct {
	Workers int
	Now     func() time.Time
	Cache   store.CacheOptions
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
	queue    *reconcile.Queue
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

// Name implements runtime.Service.
func (s *Service) Name() string { return Name }

// Run implements runtime.Service.
func (s *Service) Run(ctx context.Context, d *runtime.Deps) error {
	desiredKV, err := d.JS.KeyValue(ctx, events.BucketDesired)
	if err != nil {
		return fmt.Errorf("bucket %s: %w", events.BucketDesired, err)
	}
	observedKV, err := d.JS.KeyValue(ctx, events.BucketObserved)
	if err != nil {
		return fmt.Errorf("bucket %s: %w", events.BucketObserved, err)
	}
	s.pub = events.NewPublisher(d.JS, "capn/"+Name)
	s.clusters = store.NewBucket(desiredKV, func() *capnv1.Cluster { return new(capnv1.Cluster) })
	s.machines = store.NewBucket(desiredKV, func() *capnv1.Machine { return new(capnv1.Machine) })
	s.statuses = store.NewBucket(observedKV, func() *capnv1.ClusterStatus { return new(capnv1.ClusterStatus) })
	s.desired = store.NewCache(desiredKV, s.cfg.Cache)
	s.observed = store.NewCache(observedKV, s.cfg.Cache)
	for _, c := range []*store.Cache{s.desired, s.observed} {
		if err := c.Start(ctx); err != nil {
			return err
		}
	}
	s.queue = reconcile.NewQueue()
	var wg sync.WaitGroup
	for _, sub := range []*store.Subscription{
		s.desired.Subscribe(clusterPrefix), s.desired.Subscribe(machinePrefix),
		s.observed.Subscribe(machinePrefix), s.observed.Subscribe(infraPrefix), s.observed.Subscribe(secretsPrefix),
	} {
		wg.Add(1)
		go func() {
			defer wg.Done()
			reconcile.Watch(ctx, s.queue, sub, clusterOf, func() []string { return s.desired.KeysUnder(clusterPrefix) })
		}()
	}
	loop := &reconcile.Loop{Queue: s.queue, Reconciler: reconcile.Func(s.reconcile), Workers: s.cfg.Workers,
		OnError: func(key string, err error, n int) {
			lvl := d.Log.Warn()
			if errors.Is(err, store.ErrConflict) {
				lvl = d.Log.Debug() // another writer moved first: plan again from a fresh read
			}
			lvl.Err(err).Str("cluster", key).Int("failures", n).Msg("plan not applied; will retry")
		}}
	d.Ready.Set(true)
	loop.Run(d.Log.WithContext(ctx))
	wg.Wait()
	return nil
}

// clusterOf maps a watched key to the cluster it concerns.
func clusterOf(key string) string {
	toks := strings.Split(key, ".")
	switch {
	case toks[0] == "cluster" && len(toks) == 2, toks[0] == "secrets" && len(toks) == 2:
		return toks[1]
	case toks[0] == "machine" && len(toks) == 3:
		return toks[1]
	case toks[0] == "infra" && len(toks) == 4:
		return toks[2]
	}
	return ""
}

func newMachine() *capnv1.Machine             { return new(capnv1.Machine) }
func newStatus() *capnv1.MachineStatus        { return new(capnv1.MachineStatus) }
func newClusterStatus() *capnv1.ClusterStatus { return new(capnv1.ClusterStatus) }

// reconcile plans one cluster and applies the plan.
func (s *Service) reconcile(ctx context.Context, name string) (reconcile.Result, error) {
	cluster, _, ok := store.Lookup(s.desired, clusterPrefix+name, func() *capnv1.Cluster { return new(capnv1.Cluster) })
	if !ok {
		return reconcile.Result{}, nil
	}
	in := plan.Input{Cluster: cluster, Machines: map[string]*capnv1.Machine{}, Observed: map[string]*capnv1.MachineStatus{}, Now: s.cfg.Now()}
	revs := map[string]uint64{}
	for _, e := range s.desired.List(machinePrefix + name + ".") {
		m, err := store.Decode(e.Value, newMachine)
		if err != nil {
			return reconcile.Result{}, err
		}
		n := strings.TrimPrefix(e.Key, machinePrefix+name+".")
		in.Machines[n], revs[n] = m, e.Revision
	}
	for _, e := range s.observed.List(machinePrefix + name + ".") {
		st, err := store.Decode(e.Value, newStatus)
		if err != nil {
			return reconcile.Result{}, err
		}
		in.Observed[strings.TrimPrefix(e.Key, machinePrefix+name+".")] = st
	}
	cp := cluster.GetSpec().GetControlPlane().GetProvider()
	if ic, _, ok := store.Lookup(s.observed, infraPrefix+cp+"."+name+"."+events.ClusterObject, func() *capnv1.InfraCluster { return new(capnv1.InfraCluster) }); ok {
		in.Infra = plan.Infra{Exists: true, Ready: ic.GetReady(), Endpoint: ic.GetControlPlaneEndpoint()}
	}
	if sec, _, ok := store.Lookup(s.observed, secretsPrefix+name, func() *capnv1.ClusterSecretsStatus { return new(capnv1.ClusterSecretsStatus) }); ok {
		in.PKIExists = sec.GetPkiReady()
	}
	in.Status, _, _ = store.Lookup(s.observed, clusterPrefix+name, newClusterStatus)

	res := plan.Plan(in)
	log := zerolog.Ctx(ctx).With().Str("cluster", name).Logger()
	if len(res.Actions) > 0 {
		log.Info().Fields(res.Fields()).Msg("plan")
	}
	// Status first: it says what the plan is about to do.
	if err := s.writeStatus(ctx, name, in.Status, res.Status); err != nil {
		return reconcile.Result{}, err
	}
	for _, a := range res.Actions {
		if err := s.apply(ctx, cluster, a, revs); err != nil {
			return reconcile.Result{}, err
		}
	}
	return reconcile.Result{RequeueAfter: res.RequeueAfter}, nil
}

func (s *Service) apply(ctx context.Context, c *capnv1.Cluster, a plan.Action, revs map[string]uint64) error {
	name := c.GetMetadata().GetName()
	uid := c.GetMetadata().GetUid()
	switch a := a.(type) {
	case plan.CreateMachine:
		m := proto.Clone(a.Machine).(*capnv1.Machine)
		if m.Metadata == nil {
			m.Metadata = &capnv1.ObjectMeta{}
		}
		if m.Metadata.Uid == "" {
			m.Metadata.Uid = uuid.NewString()
		}
		if m.Metadata.CreationTimestamp == nil {
			m.Metadata.CreationTimestamp = timestamppb.New(s.cfg.Now())
		}
		if m.Metadata.Generation == 0 {
			m.Metadata.Generation = 1
		}
		_, err := s.machines.Create(ctx, machinePrefix+name+"."+m.GetMetadata().GetName(), m)
		if errors.Is(err, store.ErrConflict) {
			return nil // another planner created this slot's machine: the same name, by design
		}
		return err
	case plan.DeleteMachine:
		_, _, err := s.machines.Mutate(ctx, machinePrefix+name+"."+a.Name, func(m *capnv1.Machine, exists bool) (*capnv1.Machine, error) {
			if !exists || m.GetMetadata().GetDeletionTimestamp() != nil {
				return nil, store.ErrNoChange
			}
			m.Metadata.DeletionTimestamp = timestamppb.New(s.cfg.Now())
			return m, nil
		})
		return err
	case plan.UpdateMachine:
		_, _, err := s.machines.Mutate(ctx, machinePrefix+name+"."+a.Machine.GetMetadata().GetName(), func(m *capnv1.Machine, exists bool) (*capnv1.Machine, error) {
			if !exists {
				return nil, store.ErrNoChange
			}
			m.Spec = proto.Clone(a.Machine.GetSpec()).(*capnv1.MachineSpec)
			m.Metadata.Annotations = a.Machine.GetMetadata().GetAnnotations()
			m.Metadata.Labels = a.Machine.GetMetadata().GetLabels()
			m.Metadata.Generation++
			return m, nil
		})
		return err
	case plan.RemoveMachine:
		return s.machines.Delete(ctx, machinePrefix+name+"."+a.Name, revs[a.Name])
	case plan.EnsureClusterInfra:
		_, err := s.pub.Publish(ctx, events.ProviderSubject(a.Provider, "cluster", "ensure", name, events.ClusterObject), events.TypeProviderCommand+".cluster.ensure",
			"ensure."+name+"."+a.Provider+"."+uid, &capnv1.EnsureClusterInfra{Cluster: name})
		return err
	case plan.DeleteClusterInfra:
		_, err := s.pub.Publish(ctx, events.ProviderSubject(a.Provider, "cluster", "delete", name, events.ClusterObject), events.TypeProviderCommand+".cluster.delete",
			"delete-infra."+name+"."+a.Provider+"."+uid, &capnv1.DeleteClusterInfra{Cluster: name})
		return err
	case plan.DeletePKI:
		_, err := s.pub.Publish(ctx, events.CommandSubject("bootstrap", "cleanup", name, events.ClusterObject), events.TypeDeleteClusterSecrets,
			"cleanup."+name+"."+uid, &capnv1.DeleteClusterSecrets{Cluster: name})
		return err
	case plan.DeleteCluster:
		if err := s.statuses.Delete(ctx, clusterPrefix+name, 0); err != nil {
			return err
		}
		_, _, err := s.clusters.Mutate(ctx, clusterPrefix+name, func(cur *capnv1.Cluster, exists bool) (*capnv1.Cluster, error) {
			if !exists || cur.GetMetadata().GetUid() != uid || cur.GetMetadata().GetDeletionTimestamp() == nil {
				return nil, store.ErrNoChange // re-created meanwhile: not ours to delete
			}
			return nil, store.ErrDelete
		})
		if err == nil {
			s.event(ctx, name, "deleted", &capnv1.ClusterEvent{Cluster: name, Phase: "Deleted", Reason: "Deleted", Message: "cluster deleted"}, uid)
		}
		return err
	}
	return fmt.Errorf("unknown plan action %T", a)
}

// writeStatus compare-and-sets the cluster's observed status when it
// changed, and records phase changes on the cluster's timeline.
func (s *Service) writeStatus(ctx context.Context, name string, old, st *capnv1.ClusterStatus) error {
	if st == nil || proto.Equal(old, st) {
		return nil
	}
	_, _, err := s.statuses.Mutate(ctx, clusterPrefix+name, func(cur *capnv1.ClusterStatus, exists bool) (*capnv1.ClusterStatus, error) {
		if exists && proto.Equal(cur, st) {
			return nil, store.ErrNoChange
		}
		return st, nil
	})
	if err == nil && old.GetPhase() != st.GetPhase() {
		msg := ""
		for _, c := range st.GetConditions() {
			if c.GetType() == plan.ConditionReady {
				msg = c.GetMessage()
			}
		}
		s.event(ctx, name, strings.ToLower(st.GetPhase()), &capnv1.ClusterEvent{Cluster: name, Phase: st.GetPhase(), Reason: st.GetPhase(), Message: msg}, fmt.Sprint(st.GetObservedGeneration()))
	}
	return err
}

func (s *Service) event(ctx context.Context, cluster, what string, ev *capnv1.ClusterEvent, discriminator string) {
	id := "cluster." + what + "." + cluster + "." + discriminator + "." + s.cfg.Now().UTC().Format(time.RFC3339)
	if _, err := s.pub.Publish(ctx, events.EventSubject("cluster", what, cluster, events.ClusterObject), events.TypeClusterEvent+"."+what, id, ev); err != nil {
		zerolog.Ctx(ctx).Warn().Err(err).Msg("publish cluster event")
	}
}
