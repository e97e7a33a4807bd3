package gateway

import (
	"errors"
	"net/http"
	"time"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/capn-dev/capn/events/store"
	"github.com/capn-dev/capn/gateway/api"
	capnv1 "github.com/capn-dev/capn/schemas/capn/v1alpha1"
	"github.com/capn-dev/capn/schemas/keys"
	"github.com/capn-dev/capn/schemas/manifest"
)

// listClusters is GET /v1/clusters[?labelSelector=]: a ClusterList of every
// desired cluster (a consistent read of the bucket, not a cache) with its
// observed status, sorted by name.
func (s *server) listClusters(w http.ResponseWriter, r *http.Request) error {
	sel, err := selectorFrom(r)
	if err != nil {
		return err
	}
	ctx := r.Context()
	desired, bad, err := s.clusters.ListSkipping(ctx, keys.ClusterPrefix)
	if err != nil {
		return err
	}
	s.skipped(w, r, api.KindCluster, bad)
	observed, bad, err := s.clusterStatuses.ListSkipping(ctx, keys.ClusterPrefix)
	if err != nil {
		return err
	}
	s.skipped(w, r, kindClusterStatus, bad)
	statuses := make(map[string]*capnv1.ClusterStatus, len(observed))
	for _, e := range observed {
		statuses[e.Key] = e.Value
	}
	items := make([]*capnv1.Cluster, 0, len(desired))
	for _, e := range desired {
		if matches(sel, e.Value.GetMetadata()) {
			items = append(items, clusterObject(e.Value, e.Revision, statuses[e.Key]))
		}
	}
	if err := s.topologyStatuses(ctx, items...); err != nil {
		return err
	}
	if err := s.certificateStatuses(ctx, items...); err != nil {
		return err
	}
	list, err := listOf(api.KindClusterList, items)
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, list)
	return nil
}

// getCluster is GET /v1/clusters/{name}.
func (s *server) getCluster(w http.ResponseWriter, r *http.Request) error {
	name, err := pathName(r, "name")
	if err != nil {
		return err
	}
	c, rev, err := s.clusters.Get(r.Context(), keys.Cluster(name))
	if errors.Is(err, store.ErrNotFound) {
		return notFound("cluster %s not found", name)
	}
	if err != nil {
		return err
	}
	return s.respondCluster(r.Context(), w, http.StatusOK, c, rev)
}

// getControlPlane is GET /v1/clusters/{name}/controlplane: the cluster's
// control-plane record (observed controlplane.<c>), written by its
// implementation (the planner for type machines); 404 while there is none.
func (s *server) getControlPlane(w http.ResponseWriter, r *http.Request) error {
	name, err := pathName(r, "name")
	if err != nil {
		return err
	}
	rec, _, err := s.controlPlanes.Get(r.Context(), keys.ControlPlane(name))
	if errors.Is(err, store.ErrNotFound) {
		return notFound("cluster %s has no control-plane record: its control plane's implementation has not reported yet", name)
	}
	if err != nil {
		return err
	}
	return writeProtoJSON(w, http.StatusOK, rec)
}

// applyCluster is POST /v1/clusters: create-or-update from a manifest.
func (s *server) applyCluster(w http.ResponseWriter, r *http.Request) error {
	return s.apply(w, r, "")
}

// putCluster is PUT /v1/clusters/{name}: apply to that name.
func (s *server) putCluster(w http.ResponseWriter, r *http.Request) error {
	name, err := pathName(r, "name")
	if err != nil {
		return err
	}
	return s.apply(w, r, name)
}

// apply creates or updates the cluster a manifest declares. The manifest is
// decoded (400 with paths), defaulted and validated against the stored
// cluster (422 with paths), then written with a compare-and-set: on the
// manifest's metadata.resourceVersion when it has one (409 when stale),
// else on the revision just read, retried after a lost race. A manifest's
// status, generation and timestamps are ignored; a uid, when present, must
// be the stored cluster's (409 otherwise: it was deleted and re-created).
// 201 on create, 200 otherwise (also when nothing changed).
//
// With ?dryRun=All every check above runs against the stored cluster (the
// precondition, the uid, the update rules) but nothing is written: the
// answer is the cluster as it would be stored, with the same status code.
func (s *server) apply(w http.ResponseWriter, r *http.Request, pathName string) error {
	dryRun, err := dryRunFrom(r)
	if err != nil {
		return err
	}
	in, err := readManifest(r)
	if err != nil {
		return err
	}
	md := ensure(&in.Metadata)
	switch {
	case pathName != "" && md.Name == "":
		md.Name = pathName
	case pathName != "" && md.Name != pathName:
		return badRequest("the manifest names another cluster than the path").
			withField("metadata.name", "must be "+pathName+", the name in the path", md.Name)
	}
	name, uid := md.Name, md.Uid
	var mutate func(cur, _ *capnv1.Cluster) (*capnv1.Cluster, error)
	if isTopology(in) {
		// A class cluster: its spec is rendered from the class revision
		// it pins, which depends on the stored cluster; so the render and
		// the check run in each write attempt (fleet.go).
		if !manifest.IsDNSLabel(md.Name) {
			return badRequest("the cluster has no valid name").withField("metadata.name", "required", md.Name)
		}
		ctx := r.Context()
		mutate = func(cur, _ *capnv1.Cluster) (*capnv1.Cluster, error) {
			c, err := s.renderCluster(ctx, in, cur)
			if err != nil {
				return nil, err
			}
			return applyChecked(s.validator, s.validator.Check(c), name, uid)(cur, nil)
		}
	} else {
		// The one default and the one validation of the manifest; each write
		// attempt below adds only the update rules against what is stored.
		checked := s.validator.Check(in)
		if !manifest.IsDNSLabel(md.Name) {
			// Without a usable name there is no key: report it with the rest.
			if err := invalidSpec(checked.Err(), ""); err != nil {
				return err
			}
			return badRequest("the cluster has no valid name").withField("metadata.name", "required", md.Name)
		}
		mutate = applyChecked(s.validator, checked, name, uid)
	}
	res, err := s.writeCluster(r.Context(), writeOp{
		name:         name,
		precondition: md.ResourceVersion,
		create:       true,
		replace:      true,
		dryRun:       dryRun,
		mutate:       mutate,
	})
	if err != nil {
		return err
	}
	status := http.StatusOK
	if res.created {
		status = http.StatusCreated
		if !dryRun {
			w.Header().Set("Location", "/v1/clusters/"+name)
		}
	}
	return s.respondCluster(r.Context(), w, status, res.cluster, res.rev)
}

// applyChecked is apply's mutation: the checked manifest replaces the
// stored cluster (cur, nil on create) when its uid, if any, is cur's and
// the update rules allow the change. It returns the checked cluster itself,
// not a copy: writeCluster sets only server-owned fields on it (none that
// Validate looks at, and all of them again on a retry). The one exception:
// an autoscaled pool whose replicas the manifest leaves out (or gives as
// stored) keeps the stored replicas (manifest.KeepAutoscaledReplicas) —
// then a copy, checked again, against the cluster this attempt read.
func applyChecked(v manifest.Validator, checked manifest.Checked, name, uid string) func(cur, _ *capnv1.Cluster) (*capnv1.Cluster, error) {
	return func(cur, _ *capnv1.Cluster) (*capnv1.Cluster, error) {
		if cur != nil && uid != "" && uid != cur.GetMetadata().GetUid() {
			return nil, conflict("metadata.uid %s is not the uid of cluster %s (%s): the cluster was deleted and created again since the manifest was read",
				uid, name, cur.GetMetadata().GetUid())
		}
		k := checked
		if autoscaled(checked.Cluster()) {
			next := proto.CloneOf(checked.Cluster())
			if manifest.KeepAutoscaledReplicas(cur, next) {
				k = v.Check(next)
			}
		}
		if err := invalidSpec(k.ValidateUpdate(cur), ""); err != nil {
			return nil, err
		}
		return k.Cluster(), nil
	}
}

// autoscaled is true when a pool of c has autoscaling.
func autoscaled(c *capnv1.Cluster) bool {
	for _, p := range c.GetSpec().GetWorkerPools() {
		if p.GetAutoscaling() != nil {
			return true
		}
	}
	return false
}

// deleteCluster is DELETE /v1/clusters/{name}[?resourceVersion=][&dryRun=All]:
// it sets metadata.deletion_timestamp (once) and answers 202 with the
// cluster; the cluster-planner tears the cluster down and removes it.
// policyName is a deletion policy as the API names it.
func policyName(p string) string {
	if p == capnv1.DeletionOrphan {
		return api.PropagationOrphan
	}
	return api.PropagationBackground
}

func (s *server) deleteCluster(w http.ResponseWriter, r *http.Request) error {
	name, err := pathName(r, "name")
	if err != nil {
		return err
	}
	dryRun, err := dryRunFrom(r)
	if err != nil {
		return err
	}
	policy, err := propagationFrom(r)
	if err != nil {
		return err
	}
	now := timestamppb.New(s.now().UTC().Truncate(time.Second))
	res, err := s.writeCluster(r.Context(), writeOp{
		name:             name,
		precondition:     r.URL.Query().Get("resourceVersion"),
		preconditionPath: "resourceVersion",
		whileDeleting:    true,
		deleting:         true,
		deletionPolicy:   policy,
		dryRun:           dryRun,
		mutate: func(cur, next *capnv1.Cluster) (*capnv1.Cluster, error) {
			md := ensure(&next.Metadata)
			if policy == capnv1.DeletionOrphan && cur.GetSpec().GetControlPlane().Implementation() == capnv1.ControlPlaneHosted {
				// Nothing else could adopt it: its processes and etcd
				// data are this deployment's, and letting go would leave
				// them running with no cluster to delete them.
				return nil, conflict("cluster %s has a hosted control plane, run by this deployment's controlplane-hosted: capn cannot let go of it (propagationPolicy Orphan, capn move); delete it with propagationPolicy Background, which tears it down", name).
					withField(api.ParamPropagationPolicy, `must be "Background" for a cluster whose spec.controlPlane.type is hosted`, api.PropagationOrphan)
			}
			if md.DeletionTimestamp == nil {
				md.DeletionTimestamp = now
			} else if was := cur.GetMetadata().GetDeletionPolicy(); was != policy {
				// The first delete decides: tearing down what another
				// deployment may have adopted, or orphaning what is half
				// torn down, is never what a second delete means.
				return nil, conflict("cluster %s is already being deleted with propagationPolicy %s; a delete with %s cannot change that",
					name, policyName(was), policyName(policy))
			}
			return next, nil
		},
	})
	var ce *store.CorruptError
	if errors.As(err, &ce) { // the record does not decode: replace it with a deleting one
		res, err = s.replaceCorrupt(r.Context(), name, ce, r.URL.Query().Get("resourceVersion"), now, dryRun)
	}
	if err != nil {
		return err
	}
	return s.respondCluster(r.Context(), w, http.StatusAccepted, res.cluster, res.rev)
}
