package gateway

import (
	"context"
	"errors"
	"net/http"
	"strconv"
	"time"

	"github.com/google/uuid"
	"github.com/rs/zerolog"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/capn-dev/capn/events/store"
	"github.com/capn-dev/capn/gateway/api"
	"github.com/capn-dev/capn/schemas/annotations"
	capnv1 "github.com/capn-dev/capn/schemas/capn/v1alpha1"
	"github.com/capn-dev/capn/schemas/keys"
	"github.com/capn-dev/capn/schemas/manifest"
)

// writeOp is one change of a desired cluster, applied by writeCluster.
type writeOp struct {
	name string
	// precondition is the resourceVersion the client read; "" for none
	// (then the write is still a compare-and-set, retried on a lost race:
	// last writer wins). preconditionPath names where it came from, for
	// the problem if it does not parse.
	precondition     string
	preconditionPath string
	// create allows creating a cluster that does not exist (apply); else a
	// missing cluster is 404.
	create bool
	// whileDeleting allows the change on a cluster whose deletion was
	// requested (delete, pause, resume); else it is 409.
	whileDeleting bool
	// deleting keeps the deletion_timestamp mutate sets, and with it
	// deletionPolicy (a delete's propagationPolicy, "" or Orphan).
	deleting       bool
	deletionPolicy string
	// replace: mutate returns a new cluster (apply), so it gets no copy of
	// the stored one (next is nil).
	replace bool
	// dryRun does every check and the mutation but writes nothing: the
	// result is the cluster as it would be stored, at the revision read (0
	// for a would-be create).
	dryRun bool
	// mutate returns the cluster to store. cur is the stored cluster
	// (read-only; nil when there is none) and next a copy of it to change
	// and return (nil when there is none, or op.replace). It may be called again after a
	// lost race, so it must depend only on its input. An error stops the
	// write and is returned as it is.
	mutate func(cur, next *capnv1.Cluster) (*capnv1.Cluster, error)
}

// writeResult is what writeCluster stored.
type writeResult struct {
	cluster *capnv1.Cluster
	rev     uint64
	created bool
	// changed is false when the mutation left the cluster as it was and
	// nothing was written.
	changed bool
}

// writeCluster is the read-modify-write of one desired cluster: read it with
// its revision, check the precondition, mutate, set the server-owned
// fields, and write with a compare-and-set (Create, or Update on the
// revision read). A lost race is retried from a fresh read (bounded), unless
// the client gave a resourceVersion: then it is a 409, as is any stale
// resourceVersion. Nothing is written when mutate fails or changes nothing.
func (s *server) writeCluster(ctx context.Context, op writeOp) (writeResult, error) {
	path := op.preconditionPath
	if path == "" {
		path = "metadata.resourceVersion"
	}
	want, err := parseResourceVersion(op.precondition, path)
	if err != nil {
		return writeResult{}, err
	}
	key := keys.Cluster(op.name)
	var res writeResult
	err = store.RetryOnConflict(ctx, store.DefaultAttempts, func(ctx context.Context) error {
		cur, rev, err := s.clusters.Get(ctx, key)
		exists := err == nil
		if err != nil && !errors.Is(err, store.ErrNotFound) {
			return err
		}
		switch {
		case want != 0 && !exists:
			return conflict("resourceVersion %d is stale: cluster %s does not exist (any more)", want, op.name)
		case want != 0 && rev != want:
			return stale(op.name, want)
		case !exists && !op.create:
			return notFound("cluster %s not found", op.name)
		case exists && cur.GetMetadata().GetDeletionTimestamp() != nil && !op.whileDeleting:
			return conflict("cluster %s is being deleted (requested at %s); wait until it is gone before creating or changing it",
				op.name, cur.GetMetadata().GetDeletionTimestamp().AsTime().Format(time.RFC3339))
		}
		var next *capnv1.Cluster
		switch {
		case exists && !op.replace:
			next = cloneCluster(cur)
		case !exists:
			cur = nil
		}
		next, err = op.mutate(cur, next)
		if err != nil {
			return err
		}
		s.setServerOwned(next, cur, op)
		if exists && proto.Equal(next, cur) {
			res = writeResult{cluster: cur, rev: rev}
			return nil
		}
		if op.dryRun {
			if !exists {
				rev = 0
			}
			res = writeResult{cluster: next, rev: rev, created: !exists, changed: true}
			return nil
		}
		var newRev uint64
		if exists {
			newRev, err = s.clusters.Update(ctx, key, next, rev)
		} else {
			newRev, err = s.clusters.Create(ctx, key, next)
		}
		if err != nil {
			if want != 0 && errors.Is(err, store.ErrConflict) {
				return stale(op.name, want) // a conditional write is never retried
			}
			return err
		}
		res = writeResult{cluster: next, rev: newRev, created: !exists, changed: true}
		return nil
	})
	if errors.Is(err, store.ErrConflict) {
		return res, conflict("cluster %s kept changing while it was written; retry", op.name)
	}
	return res, err
}

func stale(name string, rev uint64) *problemError {
	return conflict("resourceVersion %d is stale: cluster %s has changed since it was read; get it again and reapply your change", rev, name)
}

// dryRunFrom reads ?dryRun=: absent is a real write; All (Kubernetes'
// only value, which may be repeated) a server-side dry run; anything else a
// 400, so that a misspelt dry run never becomes a write.
func dryRunFrom(r *http.Request) (bool, error) {
	vals, ok := r.URL.Query()[api.ParamDryRun]
	if !ok {
		return false, nil
	}
	for _, v := range vals {
		if v != api.DryRunAll {
			return false, badRequest("%s %q is not valid", api.ParamDryRun, v).
				withField(api.ParamDryRun, `must be "All" (a server-side dry run: everything is checked, nothing is written), or left out`, v)
		}
	}
	return true, nil
}

// propagationFrom reads ?propagationPolicy= of a delete: absent or
// Background tears the cluster down (""); Orphan lets go of it without
// touching it (capnv1.DeletionOrphan); anything else is a 400.
func propagationFrom(r *http.Request) (string, error) {
	vals := r.URL.Query()[api.ParamPropagationPolicy]
	policy := ""
	for _, v := range vals {
		switch v {
		case api.PropagationBackground:
		case api.PropagationOrphan:
			policy = capnv1.DeletionOrphan
		default:
			return "", badRequest("%s %q is not valid", api.ParamPropagationPolicy, v).
				withField(api.ParamPropagationPolicy, `must be "Orphan" (capn lets go of the cluster and leaves its machines and infrastructure running, for another capn to adopt: capn move) or "Background" (the default: tear it down)`, v)
		}
	}
	return policy, nil
}

// parseResourceVersion reads a resourceVersion precondition ("" is none).
func parseResourceVersion(s, path string) (uint64, error) {
	if s == "" {
		return 0, nil
	}
	rev, err := strconv.ParseUint(s, 10, 64)
	if err != nil || rev == 0 {
		return 0, badRequest("resourceVersion is not valid").
			withField(path, "must be a resourceVersion as returned by the API (a positive integer)", s)
	}
	return rev, nil
}

// setServerOwned sets what only the gateway decides, whatever the client
// sent: apiVersion and kind; metadata.name (the key's); uid and
// creation_timestamp (new on create, kept after); deletion_timestamp (kept,
// or set by a delete); generation (1 on create, +1 whenever the spec
// changes); no resourceVersion (it is the KV revision, set on read) and no
// status (the cluster-planner's, in the observed bucket).
func (s *server) setServerOwned(next, cur *capnv1.Cluster, op writeOp) {
	next.ApiVersion = manifest.APIVersion
	next.Kind = manifest.KindCluster
	next.Status = nil
	md := ensure(&next.Metadata)
	md.Name = op.name
	md.ResourceVersion = ""
	if cur == nil {
		md.Uid = uuid.NewString()
		md.CreationTimestamp = timestamppb.New(s.now().UTC().Truncate(time.Second))
		md.Generation = 1
		md.DeletionTimestamp = nil
		md.DeletionPolicy = ""
		return
	}
	cm := cur.GetMetadata()
	md.Uid = cm.GetUid()
	if md.Uid == "" {
		md.Uid = uuid.NewString()
	}
	md.CreationTimestamp = cm.GetCreationTimestamp()
	if !op.deleting || cm.GetDeletionTimestamp() != nil {
		md.DeletionTimestamp = cm.GetDeletionTimestamp()
		md.DeletionPolicy = cm.GetDeletionPolicy()
	} else {
		md.DeletionPolicy = op.deletionPolicy
	}
	if v, ok := cm.GetAnnotations()[annotations.UpgradeAtOnce]; ok {
		// capn upgrade's mark outlives an apply of a manifest without
		// it: an explicit upgrade in progress is not confined by it.
		if _, set := md.GetAnnotations()[annotations.UpgradeAtOnce]; !set {
			if md.Annotations == nil {
				md.Annotations = map[string]string{}
			}
			md.Annotations[annotations.UpgradeAtOnce] = v
		}
	}
	md.Generation = max(cm.GetGeneration(), 1)
	if !proto.Equal(cur.GetSpec(), next.GetSpec()) {
		md.Generation++
	}
}

// validate checks a change of old (nil: a create) into next with the
// manifest rules, as a 422 listing every bad field.
func (s *server) validate(old, next *capnv1.Cluster, detail string) error {
	return invalidSpec(s.validator.ValidateUpdate(old, next), detail)
}

// invalidSpec is the 422 of a validation's error, listing every bad field;
// nil for nil.
func invalidSpec(err error, detail string) error {
	if err == nil {
		return nil
	}
	p := fieldProblem(http.StatusUnprocessableEntity, api.ProblemInvalidSpec, "Invalid cluster", err)
	if detail != "" {
		p.Detail = detail + ": " + p.Detail
	}
	return p
}

// respondCluster answers with the cluster as stored (at rev) and its
// observed status.
func (s *server) respondCluster(ctx context.Context, w http.ResponseWriter, status int, c *capnv1.Cluster, rev uint64) error {
	st, err := s.clusterStatus(ctx, c.GetMetadata().GetName())
	if err != nil {
		return err
	}
	obj := clusterObject(c, rev, st)
	if err := s.certificateStatuses(ctx, obj); err != nil {
		return err
	}
	if err := s.topologyStatuses(ctx, obj); err != nil {
		return err
	}
	b, err := marshalObject(obj)
	if err != nil {
		return err
	}
	writeJSON(w, status, b)
	return nil
}

// clusterStatus reads a cluster's observed status; nil when there is none.
func (s *server) clusterStatus(ctx context.Context, name string) (*capnv1.ClusterStatus, error) {
	st, _, err := s.clusterStatuses.Get(ctx, keys.Cluster(name))
	if errors.Is(err, store.ErrNotFound) {
		return nil, nil
	}
	if errors.Is(err, store.ErrCorrupt) {
		// The cluster is still worth showing: without its status.
		zerolog.Ctx(ctx).Warn().Err(err).Str("cluster", name).Msg("cluster status does not decode; answered without it")
		return nil, nil
	}
	return st, err
}
