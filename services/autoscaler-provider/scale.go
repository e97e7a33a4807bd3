package autoscalerprovider

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"

	"github.com/rs/zerolog"

	"github.com/capn-dev/capn/events/store"
	capnv1 "github.com/capn-dev/capn/schemas/capn/v1alpha1"
	"github.com/capn-dev/capn/schemas/externalgrpc"
	"github.com/capn-dev/capn/schemas/keys"
)

// Reasons of the autoscaler's actions (AutoscalerAction.reason) and the
// <what> token of their events.
const (
	ReasonScaledUp            = "ScaledUp"
	ReasonDeletedNodes        = "DeletedNodes"
	ReasonDecreasedTargetSize = "DecreasedTargetSize"
)

// The changes of one pool are made one at a time (the autoscaler may
// delete several nodes of a group at once, each in its own call): a
// DeleteNodes reads the marks and replicas another one is writing
// otherwise. One autoscaler-provider runs per deployment.
type poolLocks struct {
	mu    sync.Mutex
	locks map[string]*sync.Mutex
}

func (l *poolLocks) lock(cluster, pool string) func() {
	l.mu.Lock()
	if l.locks == nil {
		l.locks = map[string]*sync.Mutex{}
	}
	m, ok := l.locks[cluster+"/"+pool]
	if !ok {
		m = &sync.Mutex{}
		l.locks[cluster+"/"+pool] = m
	}
	l.mu.Unlock()
	m.Lock()
	return m.Unlock
}

// resize is the one write of a pool's replicas: the desired cluster's,
// with a compare-and-set (retried from a fresh read), its generation bumped
// as the gateway bumps it for a spec change. change gets the pool's
// replicas and its bounds and returns the new replicas or an error. It
// returns the replicas before and after and the cluster's new revision.
func (s *Service) resize(ctx context.Context, cluster, pool string, change func(replicas int32, a *capnv1.Autoscaling) (int32, error)) (from, to int32, rev uint64, err error) {
	_, rev, err = s.clusters.Mutate(ctx, keys.Cluster(cluster), func(c *capnv1.Cluster, exists bool) (*capnv1.Cluster, error) {
		if !exists {
			return nil, notFound("cluster %s does not exist", cluster)
		}
		p, ok := autoscaledPool(c, pool)
		if !ok {
			return nil, noGroup(c, pool)
		}
		from = p.Replicas
		n, err := change(p.Replicas, p.GetAutoscaling())
		if err != nil {
			return nil, err
		}
		if n == p.Replicas {
			return nil, store.ErrNoChange
		}
		if n < p.GetAutoscaling().GetMin() || n > p.GetAutoscaling().GetMax() {
			return nil, invalidArgument("pool %s would have %d replicas, outside its autoscaling %d..%d", pool, n, p.GetAutoscaling().GetMin(), p.GetAutoscaling().GetMax())
		}
		p.Replicas, to = n, n
		if c.Metadata == nil {
			c.Metadata = &capnv1.ObjectMeta{}
		}
		c.Metadata.Generation = max(c.Metadata.Generation, 1) + 1
		return c, nil
	})
	return from, to, rev, err
}

// increase is NodeGroupIncreaseSize: replicas + delta, at most max.
func (s *Service) increase(ctx context.Context, cluster, pool string, delta int32) error {
	if delta <= 0 {
		return invalidArgument("size increase must be positive, got %d", delta)
	}
	defer s.locks.lock(cluster, pool)()
	from, to, rev, err := s.resize(ctx, cluster, pool, func(r int32, a *capnv1.Autoscaling) (int32, error) {
		if r+delta > a.GetMax() {
			return 0, invalidArgument("size increase too large: pool %s has %d replicas, +%d is over its autoscaling.max %d", pool, r, delta, a.GetMax())
		}
		return r + delta, nil
	})
	if err != nil || rev == 0 {
		return err
	}
	s.record(ctx, cluster, pool, rev, &capnv1.AutoscalerAction{Reason: ReasonScaledUp, From: from, To: to,
		Message: fmt.Sprintf("autoscaler scaled %s %d → %d", pool, from, to)})
	return nil
}

// decrease is NodeGroupDecreaseTargetSize: fewer machines to make, never
// one that exists (a machine record, made or being made) deleted.
func (s *Service) decrease(ctx context.Context, cluster, pool string, delta int32) error {
	if delta >= 0 {
		return invalidArgument("size decrease must be negative, got %d", delta)
	}
	defer s.locks.lock(cluster, pool)()
	ms, err := s.poolMachines(ctx, cluster, pool)
	if err != nil {
		return err
	}
	active := int32(0)
	for _, m := range ms {
		if m.desired.GetMetadata().GetDeletionTimestamp() == nil {
			active++
		}
	}
	from, to, rev, err := s.resize(ctx, cluster, pool, func(r int32, a *capnv1.Autoscaling) (int32, error) {
		switch {
		case r+delta < active:
			return 0, failedPrecondition("attempt to delete existing machines: pool %s has %d replicas and %d machines, a decrease of %d would delete %d of them (DeleteNodes names the nodes to delete)",
				pool, r, active, -delta, active-(r+delta))
		case r+delta < a.GetMin():
			return 0, failedPrecondition("pool %s would have %d replicas, below its autoscaling.min %d", pool, r+delta, a.GetMin())
		}
		return r + delta, nil
	})
	if err != nil || rev == 0 {
		return err
	}
	s.record(ctx, cluster, pool, rev, &capnv1.AutoscalerAction{Reason: ReasonDecreasedTargetSize, From: from, To: to,
		Message: fmt.Sprintf("autoscaler lowered %s's target %d → %d: machines not made yet", pool, from, to)})
	return nil
}

// deleteNodes is NodeGroupDeleteNodes: the named machines, and only them,
// are deleted (drained first by the machine-manager). First the machines
// are marked capn.dev/delete-machine, then the pool's replicas are
// lowered by their number (planDeletion): the lowering is the commit —
// marks alone delete nothing. If it fails, the marks are taken off again.
func (s *Service) deleteNodes(ctx context.Context, cluster, pool string, nodes []*externalgrpc.ExternalGrpcNode) error {
	defer s.locks.lock(cluster, pool)()
	c, _, err := s.clusters.Get(ctx, keys.Cluster(cluster))
	if errors.Is(err, store.ErrNotFound) {
		return notFound("cluster %s does not exist", cluster)
	}
	if err != nil {
		return err
	}
	p, ok := autoscaledPool(c, pool)
	if !ok {
		return noGroup(c, pool)
	}
	ms, err := s.poolMachines(ctx, cluster, pool)
	if err != nil {
		return err
	}
	all, err := s.clusterMembers(ctx, cluster)
	if err != nil {
		return err
	}
	var targets, gone []string
	for _, n := range nodes {
		m, ok := findMember(cluster, all, n.GetProviderID(), n.GetName())
		if !ok {
			return invalidArgument("node %s (provider id %q) is no machine of cluster %s", n.GetName(), n.GetProviderID(), cluster)
		}
		if m.desired.GetSpec().GetPool() != pool {
			return invalidArgument("node %s is machine %s of pool %s, not of node group %s", n.GetName(), m.name, m.desired.GetSpec().GetPool(), pool)
		}
		// The pool's fresh record decides whether it is still there.
		i := slices.IndexFunc(ms, func(x member) bool { return x.name == m.name })
		switch {
		case i < 0 || ms[i].deleting():
			gone = append(gone, m.name) // already on its way out
		case !slices.Contains(targets, m.name):
			targets = append(targets, m.name)
		}
	}
	var active []poolMachine
	for _, m := range ms {
		if !m.deleting() {
			v, marked := m.marked()
			active = append(active, poolMachine{name: m.name, mark: v, marked: marked})
		}
	}
	d, err := planDeletion(pool, p.GetReplicas(), p.GetAutoscaling().GetMin(), active, targets)
	if err != nil {
		return err
	}
	log := zerolog.Ctx(ctx)
	log.Info().Str("pool", pool).Strs("machines", targets).Strs("already_deleting", gone).Str("plan", d.String()).Msg("deleting nodes")
	for _, name := range d.mark {
		if err := s.setMark(ctx, cluster, name, true); err != nil {
			s.unmarkAll(ctx, cluster, d.mark)
			return err
		}
	}
	for _, name := range d.unmark {
		if err := s.setMark(ctx, cluster, name, false); err != nil {
			return err
		}
	}
	if d.lower == 0 {
		return nil
	}
	from, to, rev, err := s.resize(ctx, cluster, pool, func(r int32, a *capnv1.Autoscaling) (int32, error) {
		if r-d.lower < a.GetMin() {
			return 0, failedPrecondition("deleting %d machines of pool %s would leave %d, below its autoscaling.min %d", d.lower, pool, r-d.lower, a.GetMin())
		}
		return r - d.lower, nil
	})
	if err != nil {
		s.unmarkAll(ctx, cluster, d.mark)
		return err
	}
	if rev == 0 {
		return nil
	}
	s.record(ctx, cluster, pool, rev, &capnv1.AutoscalerAction{Reason: ReasonDeletedNodes, From: from, To: to, Machines: targets,
		Message: fmt.Sprintf("autoscaler deleted %s from %s: %d → %d", strings.Join(targets, ", "), pool, from, to)})
	return nil
}

// setMark puts the autoscaler's delete-machine mark on a machine, or takes
// it off (only its own: a user's mark is the user's). A machine already
// deleting is left as it is.
func (s *Service) setMark(ctx context.Context, cluster, machine string, on bool) error {
	_, _, err := s.machines.Mutate(ctx, keys.Machine(cluster, machine), func(m *capnv1.Machine, exists bool) (*capnv1.Machine, error) {
		if !exists || m.GetMetadata().GetDeletionTimestamp() != nil {
			return nil, store.ErrNoChange
		}
		if m.Metadata == nil {
			m.Metadata = &capnv1.ObjectMeta{}
		}
		v, marked := m.Metadata.Annotations[markAnnotation]
		switch {
		case on && !marked:
			if m.Metadata.Annotations == nil {
				m.Metadata.Annotations = map[string]string{}
			}
			m.Metadata.Annotations[markAnnotation] = markValue
		case !on && marked && v == markValue:
			delete(m.Metadata.Annotations, markAnnotation)
		default:
			return nil, store.ErrNoChange
		}
		return m, nil
	})
	if err != nil {
		return fmt.Errorf("mark machine %s: %w", machine, err)
	}
	return nil
}

// unmarkAll takes the marks of a failed DeleteNodes off (best effort: a
// mark left behind is accounted for by the next DeleteNodes).
func (s *Service) unmarkAll(ctx context.Context, cluster string, names []string) {
	for _, name := range names {
		if err := s.setMark(ctx, cluster, name, false); err != nil {
			zerolog.Ctx(ctx).Warn().Err(err).Str("machine", name).Msg("could not take the delete-machine mark off after a failed DeleteNodes")
		}
	}
}

// poolMachines reads the pool's machine records from the bucket (not the
// cache: a decision on marks and replicas reads what is there now).
func (s *Service) poolMachines(ctx context.Context, cluster, pool string) ([]member, error) {
	es, _, err := s.machines.ListSkipping(ctx, keys.MachinesOf(cluster))
	if err != nil {
		return nil, err
	}
	var out []member
	for _, e := range es {
		if e.Value.GetSpec().GetPool() == pool {
			out = append(out, member{name: strings.TrimPrefix(e.Key, keys.MachinesOf(cluster)), desired: e.Value, rev: e.Revision})
		}
	}
	return out, nil
}
