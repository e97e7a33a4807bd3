package healthwatcher

import (
	"context"
	"fmt"
	"maps"
	"net/http"
	"slices"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/rs/zerolog"

	"github.com/capn-dev/capn/kubeapi"
	capnv1 "github.com/capn-dev/capn/schemas/capn/v1alpha1"
	"github.com/capn-dev/capn/schemas/keys"
)

// Syncing a pool's labels and taints to its Nodes, in the workload Node
// read (workload.go): after each read, every matched machine's Node gets
// SyncNode's change, one PATCH per Node that needs one (none while the
// Node is as its machine wants it).

// Outcomes of a Node sync (metric labels).
const (
	syncPatched  = "patched"
	syncConflict = "conflict"
	syncFailed   = "failed"
)

// nodeSyncAttempts bounds the patches of one Node in one pass: a patch the
// API server refuses because the Node changed since it was read (409) is
// computed again from a fresh read, at most this many times.
const nodeSyncAttempts = 3

func nodeSyncCounter(reg prometheus.Registerer) *prometheus.CounterVec {
	c := prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "capn_health_node_syncs_total",
		Help: "PATCHes of workload Nodes' labels and taints to their pool's, by outcome (patched; conflict: the Node changed since it was read, computed again from a fresh read; failed: retried at the next read).",
	}, []string{"outcome"})
	if reg != nil {
		reg.MustRegister(c)
	}
	return c
}

func (m *metrics) nodeSynced(outcome string) { m.nodeSyncs.WithLabelValues(outcome).Inc() }

// nodeMetaFields are the Node's metadata fields the sync reads (listNodes
// decodes them beside the others).
type nodeMetaFields struct {
	ResourceVersion string            `json:"resourceVersion"`
	Labels          map[string]string `json:"labels"`
	Annotations     map[string]string `json:"annotations"`
}

func (f nodeMetaFields) meta(taints []NodeTaint) NodeMeta {
	return NodeMeta{ResourceVersion: f.ResourceVersion, Labels: f.Labels, Annotations: f.Annotations, Taints: taints}
}

// syncNodes sets each matched machine's labels and taints on its Node.
// Machines being deleted are not in match (PlanNodes); a machine whose
// deletion was requested since, and every machine of a paused cluster,
// are left alone. A Node that cannot be patched is logged with its name
// and tried again at the next read; the others go on.
func (s *Service) syncNodes(ctx context.Context, log *zerolog.Logger, cluster string, cl *capnv1.Cluster, c *kubeapi.Client, match map[string]WorkloadNode) {
	if cl.GetSpec().GetPaused() {
		return
	}
	for _, machine := range slices.Sorted(maps.Keys(match)) {
		if ctx.Err() != nil {
			return
		}
		m, ok := decodeCached(s.desired, keys.Machine(cluster, machine), newMachine)
		if !ok || m.GetMetadata().GetDeletionTimestamp() != nil {
			continue
		}
		n := match[machine]
		done, err := syncNode(ctx, c, n.Name, n.Meta, m.GetSpec(), s.metrics)
		if err != nil {
			if ctx.Err() == nil {
				s.metrics.nodeSynced(syncFailed)
				log.Warn().Err(err).Str("machine", machine).Str("node", n.Name).
					Msg("cannot set the pool's labels and taints on the Node; retrying at the next read")
			}
			continue
		}
		if !done.Empty() {
			log.Info().Str("machine", machine).Str("node", n.Name).
				Int("labels_set", done.LabelsSet).Int("labels_removed", done.LabelsRemoved).
				Int("taints_set", done.TaintsSet).Int("taints_removed", done.TaintsRemoved).
				Msg("set the pool's labels and taints on the Node")
		}
	}
}

// syncNode patches the Node named name, read as cur, to carry spec's
// labels and taints, and returns the change it made (empty: none was
// due). A conflict (the Node changed since it was read) reads it again and
// computes again, up to nodeSyncAttempts times; a Node gone is done.
func syncNode(ctx context.Context, c *kubeapi.Client, name string, cur NodeMeta, spec *capnv1.MachineSpec, m *metrics) (NodeSync, error) {
	path := nodesPath + "/" + name
	for attempt := 1; ; attempt++ {
		change := SyncNode(cur, spec.GetLabels(), spec.GetTaints())
		if change.Empty() {
			return change, nil
		}
		err := c.MergePatch(ctx, path, change.Patch(cur.ResourceVersion))
		switch {
		case err == nil:
			m.nodeSynced(syncPatched)
			return change, nil
		case kubeapi.IsStatus(err, http.StatusNotFound):
			return NodeSync{}, nil
		case !kubeapi.IsStatus(err, http.StatusConflict):
			return NodeSync{}, fmt.Errorf("patch Node %s: %w", name, err)
		}
		m.nodeSynced(syncConflict)
		if attempt == nodeSyncAttempts {
			return NodeSync{}, fmt.Errorf("patch Node %s: changed under each of %d attempts: %w", name, attempt, err)
		}
		if cur, err = getNodeMeta(ctx, c, path); kubeapi.IsStatus(err, http.StatusNotFound) {
			return NodeSync{}, nil
		} else if err != nil {
			return NodeSync{}, fmt.Errorf("read Node %s again: %w", name, err)
		}
	}
}

// getNodeMeta reads one Node's labels, annotations, taints and
// resourceVersion.
func getNodeMeta(ctx context.Context, c *kubeapi.Client, path string) (NodeMeta, error) {
	var n struct {
		Metadata nodeMetaFields `json:"metadata"`
		Spec     struct {
			Taints []NodeTaint `json:"taints"`
		} `json:"spec"`
	}
	if err := c.Get(ctx, path, &n); err != nil {
		return NodeMeta{}, err
	}
	return n.Metadata.meta(n.Spec.Taints), nil
}
