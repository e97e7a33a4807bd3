package healthwatcher

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/rs/zerolog"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/capn-dev/capn/events/reconcile"
	"github.com/capn-dev/capn/events/store"
	"github.com/capn-dev/capn/kubeapi"
	capnv1 "github.com/capn-dev/capn/schemas/capn/v1alpha1"
	"github.com/capn-dev/capn/schemas/keys"
	"github.com/capn-dev/capn/secrets/clusterkubeconfig"
	"github.com/capn-dev/capn/secrets/seal"
)

// Nodes of workload clusters. For a cluster with a real API server (a
// hosted or external control plane, or one on machines whose provider
// announces capability real-kubernetes: clusterkubeconfig.HasAPIServer),
// the health-watcher reads the cluster's Nodes with the kubeconfig capn
// uses for it (the admin one the bootstrapper seals in the secrets bucket,
// or an external cluster's registered one), every
// Config.NodePollEvery: each machine's Node (matched by providerID) gives
// its record the node name, kubelet version and the Node's conditions, and
// the Node of a machine being deleted or gone is deleted. It is a
// reconcile loop of its own (queue per cluster, requeued after the poll
// interval or the backoff), apart from the evaluation: an API server that
// does not answer costs one failed request per attempt and holds up
// nothing else. Clusters whose control plane runs on other providers
// (sim, ...) are never polled.

// Defaults of the workload Node reads.
const (
	DefaultNodePollEvery   = 10 * time.Second
	DefaultNodeBackoffMax  = 2 * time.Minute
	DefaultNodeDeleteGrace = 30 * time.Second
	DefaultKubeAPITimeout  = 10 * time.Second
	nodesPath              = "/api/v1/nodes"
)

// keyring loads the secrets key as the gateway does (seal.LoadKeyring);
// nil without one.
func (s *Service) keyring() (*seal.Keyring, error) {
	if s.cfg.Keyring != nil {
		return s.cfg.Keyring, nil
	}
	return seal.LoadKeyring(s.cfg.SecretsKeyFile, s.cfg.OldSecretsKeyFiles)
}

// Validate implements runtime.Validator: a secrets key given must load.
func (s *Service) Validate() error {
	_, err := s.keyring()
	return err
}

// workload is the Node reads' state; the API clients and their backoff
// are the cache's.
type workload struct {
	cache *kubeapi.ClusterCache
	queue *reconcile.Queue

	mu sync.Mutex
	// polled: the clusters whose Nodes are read (a change to their
	// machines wakes a read).
	polled map[string]bool
	// nodes: what each machine's Node says ("<cluster>.<machine>"), so that
	// a heartbeat's node name and version never undo the Node's.
	nodes map[string]nodeIdentity
	// real: providers announcing real-kubernetes.
	real map[string]bool
}

type nodeIdentity struct{ name, version string }

func newWorkload(cache *kubeapi.ClusterCache) *workload {
	return &workload{cache: cache, queue: reconcile.NewQueue(), polled: map[string]bool{},
		nodes: map[string]nodeIdentity{}, real: map[string]bool{}}
}

// identity is what the machine's Node said, if it was read.
func (w *workload) identity(key string) (nodeIdentity, bool) {
	if w == nil {
		return nodeIdentity{}, false
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	n, ok := w.nodes[key]
	return n, ok
}

// forget drops a cluster that is no longer polled.
func (w *workload) forget(cluster string) {
	w.cache.Invalidate(cluster)
	w.mu.Lock()
	defer w.mu.Unlock()
	delete(w.polled, cluster)
	for k := range w.nodes {
		if strings.HasPrefix(k, cluster+".") {
			delete(w.nodes, k)
		}
	}
}

// polled says whether the cluster's API server is read: it has one
// (clusterkubeconfig.HasAPIServer) and is neither hibernated nor, unless
// its control plane is external, being deleted.
func (s *Service) polled(cl *capnv1.Cluster) bool {
	if cl.GetSpec().GetHibernated() {
		return false
	}
	if cl.GetMetadata().GetDeletionTimestamp() != nil && !clusterkubeconfig.External(cl) {
		// An external API server outlives the cluster's deletion: the
		// Nodes of its deleted machines must go from it. The others go
		// with the cluster.
		return false
	}
	return clusterkubeconfig.HasAPIServer(cl, func(p string) []string {
		a, _ := decodeCached(s.observed, keys.Provider(p), newAnnouncement)
		return a.GetCapabilities()
	})
}

// nodeExpected: the cluster's Nodes are read (polled), so its machines
// have Nodes there once their agents are up (NodeHealth.node_expected).
func (s *Service) nodeExpected(cluster string) bool {
	cl, ok := decodeCached(s.desired, keys.Cluster(cluster), newCluster)
	return ok && s.polled(cl)
}

// workloadChanged wakes the Node reads: a cluster whose spec or machines
// changed is read now (only if it is polled: sim clusters cost a map
// lookup), and every cluster when a provider starts or stops announcing
// real-kubernetes (announcements are rewritten every few seconds; only a
// change of that capability counts), or on a resync. A woken cluster's
// backoff ends (ClusterCache.Kick): a machine being deleted must lose its
// Node within a poll.
func (s *Service) workloadChanged(ch store.Change) []string {
	if ch.Resync {
		return s.kickAll()
	}
	if p, ok := strings.CutPrefix(ch.Key, keys.ProviderPrefix); ok {
		real := false
		if ch.Op == store.OpPut {
			if a, err := store.Decode(ch.Value, newAnnouncement); err == nil {
				real = slices.Contains(a.GetCapabilities(), clusterkubeconfig.CapabilityRealKubernetes)
			}
		}
		s.work.mu.Lock()
		changed := s.work.real[p] != real
		s.work.real[p] = real
		s.work.mu.Unlock()
		if changed {
			return s.kickAll()
		}
		return nil
	}
	c := clusterOf(ch.Key)
	if c == "" {
		return nil
	}
	s.work.mu.Lock()
	known := s.work.polled[c]
	s.work.mu.Unlock()
	if known || strings.HasPrefix(ch.Key, keys.ClusterPrefix) {
		s.work.cache.Kick(c)
		return []string{c}
	}
	return nil
}

// kickAll ends every cluster's backoff and returns them all to read.
func (s *Service) kickAll() []string {
	all := s.desired.KeysUnder(keys.ClusterPrefix)
	for _, c := range all {
		s.work.cache.Kick(c)
	}
	return all
}

// reconcileWorkload reads one cluster's Nodes: it matches them to the
// machines, merges each machine's Node into its record (compare-and-set,
// only on change), drains the Nodes of machines whose deletion drains
// (drain.go), deletes the Nodes of machines being deleted (once past the
// drain) or gone, records a deleting machine's Node deleted,
// and comes back after NodePollEvery — or after the backoff while the API
// server does not answer.
func (s *Service) reconcileWorkload(ctx context.Context, cluster string) (reconcile.Result, error) {
	log := zerolog.Ctx(ctx).With().Str("cluster", cluster).Logger()
	cl, ok := decodeCached(s.desired, keys.Cluster(cluster), newCluster)
	if !ok || !s.polled(cl) {
		s.work.forget(cluster)
		return reconcile.Result{}, nil
	}
	s.work.mu.Lock()
	s.work.polled[cluster] = true
	s.work.mu.Unlock()
	if wait := s.work.cache.Wait(cluster); wait > 0 {
		return reconcile.Result{RequeueAfter: wait}, nil
	}
	client, err := s.work.cache.Client(ctx, cluster)
	if errors.Is(err, store.ErrNotFound) {
		// The bootstrapper writes it once the endpoint is known.
		return reconcile.Result{RequeueAfter: s.cfg.NodePollEvery}, nil
	} else if err != nil {
		if ctx.Err() != nil {
			return reconcile.Result{}, ctx.Err()
		}
		return s.workloadFailed(&log, cluster, err), nil
	}
	now := s.cfg.Now()
	nodes, err := listNodes(ctx, client)
	if err != nil {
		if ctx.Err() != nil {
			return reconcile.Result{}, ctx.Err()
		}
		return s.workloadFailed(&log, cluster, err), nil
	}
	machines, live, schemes := s.workloadMachines(cluster, cl)
	plan := PlanNodes(nodes, machines, live, schemes, s.cfg.NodeDeleteGrace, now)
	var errs []error
	wrote := false
	for _, d := range plan.Drain {
		w, err := s.drain(ctx, &log, client, cluster, d, now)
		if ctx.Err() != nil {
			return reconcile.Result{}, ctx.Err()
		}
		wrote = wrote || w
		errs = append(errs, err)
	}
	for _, d := range plan.Delete {
		log.Info().Str("node", d.Node.Name).Str("machine", d.Machine).Msg("deleting a Node from the workload cluster")
		if err := deleteNode(ctx, client, d.Node); err != nil {
			if ctx.Err() != nil {
				return reconcile.Result{}, ctx.Err()
			}
			return s.workloadFailed(&log, cluster, err), nil
		}
		ev := log.Info().Str("node", d.Node.Name).Str("provider_id", d.Node.ProviderID)
		if d.Machine != "" {
			ev.Str("machine", d.Machine).Msg("deleted the Node of a machine being deleted from the workload cluster")
			plan.Gone = append(plan.Gone, d.Machine)
		} else {
			ev.Msg("deleted a Node whose machine is gone from the workload cluster")
		}
	}
	for _, d := range plan.Found {
		w, err := s.recordDeleting(ctx, cluster, d.Machine, now, func(h *capnv1.NodeHealth) bool { return mergeNodeRef(h, d.Node) })
		wrote = wrote || w
		errs = append(errs, err)
	}
	for _, m := range plan.Gone {
		w, err := s.recordDeleting(ctx, cluster, m, now, func(h *capnv1.NodeHealth) bool { return mergeNodeDeleted(h, now) })
		wrote = wrote || w
		errs = append(errs, err)
	}
	if a := s.work.cache.Answered(cluster); a.Changed {
		log.Info().Str("server", a.Server).Int("nodes", len(nodes)).Msg("workload API server answers; reading its Nodes")
	}
	seen := map[string]bool{}
	for machine, n := range plan.Match {
		key := cluster + "." + machine
		seen[key] = true
		s.work.mu.Lock()
		s.work.nodes[key] = nodeIdentity{name: n.Name, version: n.KubeletVersion}
		s.work.mu.Unlock()
		w, err := s.mergeWorkloadNode(ctx, cluster, machine, n, now)
		wrote = wrote || w
		errs = append(errs, err)
	}
	s.syncNodes(ctx, &log, cluster, cl, client, plan.Match)
	s.work.mu.Lock()
	for k := range s.work.nodes {
		if strings.HasPrefix(k, cluster+".") && !seen[k] {
			delete(s.work.nodes, k)
		}
	}
	s.work.mu.Unlock()
	if wrote {
		s.touch(cluster, "")
	}
	if err := errors.Join(errs...); err != nil {
		return reconcile.Result{}, err
	}
	return reconcile.Result{RequeueAfter: s.cfg.NodePollEvery}, nil
}

// workloadMachines lists the cluster's machines with their provider ids,
// the provider ids of infrastructure records (live: a Node with one is
// never taken for an orphan) and the schemes of the cluster's providers.
func (s *Service) workloadMachines(cluster string, cl *capnv1.Cluster) ([]WorkloadMachine, map[string]bool, []string) {
	var machines []WorkloadMachine
	live := map[string]bool{}
	schemes := []string{}
	addScheme := func(p string) {
		if p != "" && !slices.Contains(schemes, p) {
			schemes = append(schemes, p)
		}
	}
	addScheme(cl.GetSpec().GetControlPlane().GetProvider())
	for _, p := range cl.GetSpec().GetWorkerPools() {
		addScheme(p.GetProvider())
	}
	prefix := keys.MachinesOf(cluster)
	for _, e := range s.desired.List(prefix) {
		m, err := store.Decode(e.Value, newMachine)
		if err != nil {
			continue
		}
		name := strings.TrimPrefix(e.Key, prefix)
		st, _ := decodeCached(s.observed, e.Key, newMachineStatus)
		addScheme(m.GetSpec().GetProvider())
		wm := WorkloadMachine{Name: name, ProviderID: st.GetProviderId(),
			Deleting: m.GetMetadata().GetDeletionTimestamp() != nil || st.GetPhaseValue() == capnv1.MachineDeleting || st.GetPhaseValue() == capnv1.MachineDeleted}
		if wm.Deleting {
			wm.HoldNode, wm.Drain = NodeDeletionHold(m, st)
			wm.Drained = m.GetMetadata().GetDeletionTimestamp() != nil && st.GetPhaseValue() == capnv1.MachineDeleting && st.GetDrainStartTime() != nil
		}
		if p := m.GetSpec().GetProvider(); p != "" && !wm.Deleting {
			// The provider's record may name the machine's providerID before
			// its status does: such a Node is never taken for an orphan.
			if im, ok := decodeCached(s.observed, keys.Infra(p, cluster, name), newInfraMachine); ok && im.GetProviderId() != "" {
				live[im.GetProviderId()] = true
			}
		}
		machines = append(machines, wm)
	}
	// A machine still in the observed bucket but gone from desired (the
	// planner removes Deleted machines) is being deleted.
	for _, e := range s.observed.List(prefix) {
		name := strings.TrimPrefix(e.Key, prefix)
		if _, ok := s.desired.Get(e.Key); ok {
			continue
		}
		if st, err := store.Decode(e.Value, newMachineStatus); err == nil && st.GetProviderId() != "" {
			machines = append(machines, WorkloadMachine{Name: name, ProviderID: st.GetProviderId(), Deleting: true})
		}
	}
	return machines, live, schemes
}

// mergeWorkloadNode writes what the machine's Node says into its record,
// judged, in one write if that changes it (applyReport, as a report on
// NATS). A machine being deleted is left alone, as reports about it are.
func (s *Service) mergeWorkloadNode(ctx context.Context, cluster, machine string, n WorkloadNode, at time.Time) (bool, error) {
	dm, ok := decodeCached(s.desired, keys.Machine(cluster, machine), newMachine)
	if !ok || dm.GetMetadata().GetDeletionTimestamp() != nil {
		return false, nil
	}
	r := report{cluster: cluster, machine: machine, key: cluster + "." + machine, at: at, created: dm.GetMetadata().GetCreationTimestamp().AsTime()}
	wrote, err := s.applyReport(ctx, r, func(h *capnv1.NodeHealth) bool { return mergeNode(h, n, at) })
	if err != nil {
		return false, fmt.Errorf("record the Node of %s.%s: %w", cluster, machine, err)
	}
	s.metrics.report(SourceKubernetes, outcome(wrote))
	return wrote, nil
}

// workloadFailed backs the cluster off and logs a change of state only:
// an API server that does not answer is normal before the first control
// plane is up and behind a placeholder endpoint (Info, once); one that
// refuses, or a kubeconfig that does not open, is a problem (Warn, once).
func (s *Service) workloadFailed(log *zerolog.Logger, cluster string, err error) reconcile.Result {
	a := s.work.cache.Failed(cluster, err)
	if a.Changed {
		ev := log.Info()
		if a.State != kubeapi.StateUnreachable {
			ev = log.Warn()
		}
		ev.Err(err).Str("server", a.Server).Str("state", string(a.State)).Dur("retry_in", a.RetryIn).
			Msg("cannot read the workload cluster's Nodes; retrying with backoff (logged again when this changes)")
	}
	return reconcile.Result{RequeueAfter: a.RetryIn}
}

// listNodes reads every Node of the workload cluster.
func listNodes(ctx context.Context, c *kubeapi.Client) ([]WorkloadNode, error) {
	var list struct {
		Items []struct {
			Metadata struct {
				Name              string    `json:"name"`
				UID               string    `json:"uid"`
				CreationTimestamp time.Time `json:"creationTimestamp"`
				nodeMetaFields
			} `json:"metadata"`
			Spec struct {
				ProviderID string      `json:"providerID"`
				Taints     []NodeTaint `json:"taints"`
			} `json:"spec"`
			Status struct {
				NodeInfo struct {
					KubeletVersion string `json:"kubeletVersion"`
				} `json:"nodeInfo"`
				Conditions []struct {
					Type               string    `json:"type"`
					Status             string    `json:"status"`
					Reason             string    `json:"reason"`
					Message            string    `json:"message"`
					LastHeartbeatTime  time.Time `json:"lastHeartbeatTime"`
					LastTransitionTime time.Time `json:"lastTransitionTime"`
				} `json:"conditions"`
			} `json:"status"`
		} `json:"items"`
	}
	if err := c.Get(ctx, nodesPath, &list); err != nil {
		return nil, err
	}
	out := make([]WorkloadNode, 0, len(list.Items))
	for _, it := range list.Items {
		n := WorkloadNode{Name: it.Metadata.Name, UID: it.Metadata.UID, ProviderID: it.Spec.ProviderID,
			KubeletVersion: it.Status.NodeInfo.KubeletVersion, Created: it.Metadata.CreationTimestamp,
			Meta: it.Metadata.nodeMetaFields.meta(it.Spec.Taints)}
		for _, c := range it.Status.Conditions {
			nc := &capnv1.NodeCondition{Type: c.Type, Status: c.Status, Reason: c.Reason, Message: c.Message}
			if !c.LastHeartbeatTime.IsZero() {
				nc.LastHeartbeatTime = timestamppb.New(c.LastHeartbeatTime)
			}
			if !c.LastTransitionTime.IsZero() {
				nc.LastTransitionTime = timestamppb.New(c.LastTransitionTime)
			}
			n.Conditions = append(n.Conditions, nc)
		}
		out = append(out, n)
	}
	return out, nil
}

// deleteNode deletes n — only the Node that was read (a precondition on its
// uid: a Node of that name registered since is not touched). Gone already
// (404) or replaced (409) is done.
func deleteNode(ctx context.Context, c *kubeapi.Client, n WorkloadNode) error {
	body := map[string]any{"apiVersion": "v1", "kind": "DeleteOptions"}
	if n.UID != "" {
		body["preconditions"] = map[string]any{"uid": n.UID}
	}
	err := c.Do(ctx, http.MethodDelete, nodesPath+"/"+n.Name, "application/json", body, nil)
	if err == nil || kubeapi.IsStatus(err, http.StatusNotFound) || kubeapi.IsStatus(err, http.StatusConflict) {
		return nil
	}
	return fmt.Errorf("delete Node %s: %w", n.Name, err)
}

// drain makes one drain pass over the Node of a deleting machine and
// records its progress (one write, only when it changed). A pass that
// fails is logged and retried at the next read.
func (s *Service) drain(ctx context.Context, log *zerolog.Logger, c *kubeapi.Client, cluster string, d NodeDeletion, now time.Time) (bool, error) {
	pass, err := drainPass(ctx, c, d.Node)
	sum := pass.Summary()
	if err != nil {
		log.Warn().Err(err).Str("machine", d.Machine).Str("node", d.Node.Name).Msg("drain pass failed; retrying at the next read")
		if !pass.Cordoned {
			return false, nil
		}
		// Cordoned, but the pods could not be read or evicted: say so.
		sum = &capnv1.NodeDrain{State: capnv1.NodeDrainCordoned, Message: "cordoned; reading its pods failed: " + err.Error()}
	}
	wrote, err := s.recordDeleting(ctx, cluster, d.Machine, now, func(h *capnv1.NodeHealth) bool { return mergeDrain(h, sum, now) })
	if wrote {
		log.Info().Str("machine", d.Machine).Str("node", d.Node.Name).Str("state", sum.GetState()).Int32("pods_remaining", sum.GetPodsRemaining()).
			Int("evicted", len(pass.Evicted)).Str("message", sum.GetMessage()).Msg("draining the Node of a machine being deleted")
	}
	return wrote, err
}

var newAnnouncement = store.New[capnv1.ProviderAnnouncement]()
