package gateway

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"net/http"
	"slices"
	"strconv"

	"github.com/google/uuid"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/capn-dev/capn/events/store"
	"github.com/capn-dev/capn/gateway/api"
	capnv1 "github.com/capn-dev/capn/schemas/capn/v1alpha1"
	"github.com/capn-dev/capn/schemas/keys"
	"github.com/capn-dev/capn/schemas/manifest"
	"github.com/capn-dev/capn/schemas/topology"
)

// Cluster classes (desired clusterclass.<name>, with their revisions
// classrev.<name>.<n>), class clusters (rendered at apply) and rollouts
// (desired rollout.<name>; status observed rollout.<name>, the
// fleet-manager's).

// listClasses is GET /v1/clusterclasses.
func (s *server) listClasses(w http.ResponseWriter, r *http.Request) error {
	all, bad, err := s.classes.ListSkipping(r.Context(), keys.ClassPrefix)
	if err != nil {
		return err
	}
	s.skipped(w, r, api.KindClusterClass, bad)
	items := make([]*capnv1.ClusterClass, 0, len(all))
	for _, e := range all {
		items = append(items, withRV(e.Value, e.Revision))
	}
	list, err := listOf(api.KindClusterClassList, items)
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, list)
	return nil
}

func withRV[T interface {
	proto.Message
	GetMetadata() *capnv1.ObjectMeta
}](m T, rev uint64) T {
	out := proto.CloneOf(m)
	if md := out.GetMetadata(); md != nil && rev > 0 {
		md.ResourceVersion = resourceVersion(rev)
	}
	return out
}

// getClass is GET /v1/clusterclasses/{name}[?revision=n]: the class at its
// current revision, or at revision n (kept for the clusters pinned to it).
func (s *server) getClass(w http.ResponseWriter, r *http.Request) error {
	name, err := pathName(r, "name")
	if err != nil {
		return err
	}
	key := keys.Class(name)
	if q := r.URL.Query().Get("revision"); q != "" {
		n, err := strconv.ParseInt(q, 10, 64)
		if err != nil || n < 1 {
			return badRequest("revision must be a revision number (1, 2, ...)").withField("revision", "must be a positive integer", q)
		}
		key = keys.ClassRev(name, n)
	}
	c, rev, err := s.classes.Get(r.Context(), key)
	if errors.Is(err, store.ErrNotFound) {
		return notFound("cluster class %s not found (key %s)", name, key)
	}
	if err != nil {
		return err
	}
	b, err := marshalObject(withRV(c, rev))
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, b)
	return nil
}

// applyClass is POST /v1/clusterclasses: create or update a class. The
// manifest is decoded (400) and validated (422: every bad field with its
// path); a spec that differs from the stored one (by hash) is a new
// revision: first its immutable record classrev.<name>.<n> is written,
// then the class, each with a compare-and-set. Clusters stay pinned to the
// revision they have. 201 on create, 200 otherwise; ?dryRun=All writes
// nothing and answers with the class as it would be stored.
func (s *server) applyClass(w http.ResponseWriter, r *http.Request) error {
	dryRun, err := dryRunFrom(r)
	if err != nil {
		return err
	}
	in, err := readOne(r, "ClusterClass", manifest.DecodeClusterClass)
	if err != nil {
		return err
	}
	in.ApiVersion, in.Kind = manifest.APIVersion, manifest.KindClusterClass
	if err := topology.ValidateClass(in); err != nil {
		return fieldProblem(http.StatusUnprocessableEntity, api.ProblemInvalidSpec, "Invalid cluster class", err)
	}
	name := in.GetMetadata().GetName()
	hash := topology.Hash(in.GetSpec())
	var out *capnv1.ClusterClass
	var outRev uint64
	created := false
	err = store.RetryOnConflict(r.Context(), store.DefaultAttempts, func(ctx context.Context) error {
		cur, rev, err := s.classes.Get(ctx, keys.Class(name))
		exists := err == nil
		if err != nil && !errors.Is(err, store.ErrNotFound) {
			return err
		}
		if exists && cur.GetStatus().GetHash() == hash && maps.Equal(cur.GetMetadata().GetLabels(), in.GetMetadata().GetLabels()) {
			out, outRev = cur, rev
			return nil
		}
		next := proto.CloneOf(in)
		md := ensure(&next.Metadata)
		md.ResourceVersion = ""
		now := timestamppb.New(s.now())
		if exists {
			cm := cur.GetMetadata()
			md.Uid, md.CreationTimestamp, md.Generation = cm.GetUid(), cm.GetCreationTimestamp(), cm.GetGeneration()
			next.Status = proto.CloneOf(cur.GetStatus())
		} else {
			md.Uid, md.CreationTimestamp = uuid.NewString(), now
			next.Status = &capnv1.ClusterClassStatus{}
		}
		if next.Status.GetHash() != hash {
			md.Generation++
			next.Status.Revision++
			next.Status.Hash = hash
			next.Status.Updated = now
			if dryRun {
				out, outRev, created = next, rev, !exists
				return nil
			}
			if err := s.writeClassRevision(ctx, next); err != nil {
				return err
			}
		}
		if dryRun {
			out, outRev, created = next, rev, !exists
			return nil
		}
		if exists {
			outRev, err = s.classes.Update(ctx, keys.Class(name), next, rev)
		} else {
			outRev, err = s.classes.Create(ctx, keys.Class(name), next)
		}
		out, created = next, !exists
		return err
	})
	if errors.Is(err, store.ErrConflict) {
		return conflict("cluster class %s kept changing while it was written; retry", name)
	}
	if err != nil {
		return err
	}
	status := http.StatusOK
	if created {
		status = http.StatusCreated
		if !dryRun {
			w.Header().Set("Location", "/v1/clusterclasses/"+name)
		}
	}
	b, err := marshalObject(withRV(out, outRev))
	if err != nil {
		return err
	}
	writeJSON(w, status, b)
	return nil
}

// writeClassRevision stores c as its revision's immutable record. A
// record already there with the same hash is kept (a retried write); one
// with another hash is left from an attempt whose class write lost a race
// (no cluster can pin it: the class never named it) and is replaced.
func (s *server) writeClassRevision(ctx context.Context, c *capnv1.ClusterClass) error {
	key := keys.ClassRev(c.GetMetadata().GetName(), c.GetStatus().GetRevision())
	_, err := s.classes.Create(ctx, key, c)
	if !errors.Is(err, store.ErrConflict) {
		return err
	}
	old, rev, err := s.classes.Get(ctx, key)
	if err != nil {
		return err
	}
	if old.GetStatus().GetHash() == c.GetStatus().GetHash() {
		return nil
	}
	_, err = s.classes.Update(ctx, key, c, rev)
	return err
}

// renderCluster is a class cluster's manifest with its spec rendered: the
// topology's revision pinned (the stored cluster's when it has the same
// class, else the class's current revision), the class revision read and
// rendered with the variables, paused and hibernated kept from the
// manifest. Every problem is a 422 with its path.
func (s *server) renderCluster(ctx context.Context, in, cur *capnv1.Cluster) (*capnv1.Cluster, error) {
	var errs []error
	in.GetSpec().ProtoReflect().Range(func(fd protoreflect.FieldDescriptor, _ protoreflect.Value) bool {
		if !slices.Contains(topology.ClusterOwned, string(fd.Name())) {
			errs = append(errs, &manifest.FieldError{Path: "spec." + fd.JSONName(),
				Reason: "set by the cluster's class: with spec.topology a manifest sets only topology, paused, hibernated, maintenance and hibernation (a class variable sets the rest)"})
		}
		return true
	})
	if m := in.GetSpec().GetMaintenance(); m.GetAutoPatch() || m.GetPendingVersion() != "" {
		path := "spec.maintenance.autoPatch"
		if !m.GetAutoPatch() {
			path = "spec.maintenance.pendingVersion"
		}
		errs = append(errs, &manifest.FieldError{Path: path,
			Reason: "not for a class cluster: its Kubernetes version is its class revision's; roll out a class revision instead (capn rollout); windows are allowed and hold the rollout"})
	}
	topo := proto.CloneOf(in.GetSpec().GetTopology())
	if !manifest.IsDNSLabel(topo.GetClass()) {
		errs = append(errs, &manifest.FieldError{Path: "spec.topology.class", Value: topo.GetClass(), Reason: "required: the name of a ClusterClass"})
	}
	if topo.GetRevision() < 0 {
		errs = append(errs, &manifest.FieldError{Path: "spec.topology.revision", Value: topo.GetRevision(), Reason: "must be 0 (keep the pinned revision) or a revision of the class"})
	}
	if len(errs) > 0 {
		return nil, fieldProblem(http.StatusUnprocessableEntity, api.ProblemInvalidSpec, "Invalid cluster", errors.Join(errs...))
	}
	if topo.GetRevision() == 0 {
		if ct := cur.GetSpec().GetTopology(); ct.GetClass() == topo.GetClass() && ct.GetRevision() > 0 {
			topo.Revision = ct.GetRevision()
		} else {
			class, _, err := s.classes.Get(ctx, keys.Class(topo.GetClass()))
			if errors.Is(err, store.ErrNotFound) {
				return nil, unprocessableField("spec.topology.class", topo.GetClass(), "no ClusterClass of that name: apply the class first")
			}
			if err != nil {
				return nil, err
			}
			topo.Revision = class.GetStatus().GetRevision()
		}
	}
	class, _, err := s.classes.Get(ctx, keys.ClassRev(topo.GetClass(), topo.GetRevision()))
	if errors.Is(err, store.ErrNotFound) {
		return nil, unprocessableField("spec.topology.revision", topo.GetRevision(), fmt.Sprintf("class %s has no such revision", topo.GetClass()))
	}
	if err != nil {
		return nil, err
	}
	spec, err := topology.Render(class, topo)
	if err != nil {
		return nil, fieldProblem(http.StatusUnprocessableEntity, api.ProblemInvalidSpec, "Invalid cluster", err)
	}
	topology.KeepClusterOwned(spec, in.GetSpec())
	out := proto.CloneOf(in)
	out.Spec = spec
	return out, nil
}

func unprocessableField(path string, value any, reason string) error {
	return fieldProblem(http.StatusUnprocessableEntity, api.ProblemInvalidSpec, "Invalid cluster",
		&manifest.FieldError{Path: path, Value: value, Reason: reason})
}

// topologyStatuses fills status.topology of class clusters: their
// revision against their class's current one.
func (s *server) topologyStatuses(ctx context.Context, items ...*capnv1.Cluster) error {
	latest := map[string]int64{}
	for _, c := range items {
		t := c.GetSpec().GetTopology()
		if t == nil {
			continue
		}
		l, ok := latest[t.GetClass()]
		if !ok {
			class, _, err := s.classes.Get(ctx, keys.Class(t.GetClass()))
			if err != nil && !errors.Is(err, store.ErrNotFound) {
				return err
			}
			l = class.GetStatus().GetRevision()
			latest[t.GetClass()] = l
		}
		st := proto.CloneOf(c.GetStatus())
		if st == nil {
			st = &capnv1.ClusterStatus{}
		}
		st.Topology = &capnv1.TopologyStatus{Class: t.GetClass(), Revision: t.GetRevision(), LatestRevision: l, UpToDate: t.GetRevision() == l}
		c.Status = st
	}
	return nil
}

// listRollouts is GET /v1/rollouts: every rollout with its status.
func (s *server) listRollouts(w http.ResponseWriter, r *http.Request) error {
	ctx := r.Context()
	all, bad, err := s.rollouts.ListSkipping(ctx, keys.RolloutPrefix)
	if err != nil {
		return err
	}
	s.skipped(w, r, api.KindRollout, bad)
	items := make([]*capnv1.Rollout, 0, len(all))
	for _, e := range all {
		items = append(items, s.rolloutObject(ctx, e.Value, e.Revision))
	}
	list, err := listOf(api.KindRolloutList, items)
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, list)
	return nil
}

func (s *server) rolloutObject(ctx context.Context, ro *capnv1.Rollout, rev uint64) *capnv1.Rollout {
	out := withRV(ro, rev)
	if st, _, err := s.rolloutStatuses.Get(ctx, keys.Rollout(ro.GetMetadata().GetName())); err == nil {
		out.Status = st
	}
	return out
}

// getRollout is GET /v1/rollouts/{name}.
func (s *server) getRollout(w http.ResponseWriter, r *http.Request) error {
	name, err := pathName(r, "name")
	if err != nil {
		return err
	}
	ro, rev, err := s.rollouts.Get(r.Context(), keys.Rollout(name))
	if errors.Is(err, store.ErrNotFound) {
		return notFound("rollout %s not found", name)
	}
	if err != nil {
		return err
	}
	b, err := marshalObject(s.rolloutObject(r.Context(), ro, rev))
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, b)
	return nil
}

// createRollout is POST /v1/rollouts: a new rollout (409 if the name is
// taken: a rollout's spec is not changed by apply, only paused, resumed or
// aborted). A class change with classRevision 0 is pinned to the class's
// current revision now, so that a class changed during the rollout does
// not change what it rolls.
func (s *server) createRollout(w http.ResponseWriter, r *http.Request) error {
	in, err := readOne(r, "Rollout", manifest.DecodeRollout)
	if err != nil {
		return err
	}
	manifest.DefaultRollout(in)
	if err := manifest.ValidateRollout(in); err != nil {
		return fieldProblem(http.StatusUnprocessableEntity, api.ProblemInvalidSpec, "Invalid rollout", err)
	}
	ctx := r.Context()
	if ch := in.GetSpec().GetChange(); ch.GetClass() != "" {
		class, _, err := s.classes.Get(ctx, keys.Class(ch.GetClass()))
		if errors.Is(err, store.ErrNotFound) {
			return fieldProblem(http.StatusUnprocessableEntity, api.ProblemInvalidSpec, "Invalid rollout",
				&manifest.FieldError{Path: "spec.change.class", Value: ch.GetClass(), Reason: "no ClusterClass of that name"})
		}
		if err != nil {
			return err
		}
		switch latest := class.GetStatus().GetRevision(); {
		case ch.GetClassRevision() == 0:
			ch.ClassRevision = latest
		case ch.GetClassRevision() > latest:
			return fieldProblem(http.StatusUnprocessableEntity, api.ProblemInvalidSpec, "Invalid rollout",
				&manifest.FieldError{Path: "spec.change.classRevision", Value: ch.GetClassRevision(), Reason: fmt.Sprintf("class %s is at revision %d", ch.GetClass(), latest)})
		}
	}
	md := ensure(&in.Metadata)
	md.Uid, md.CreationTimestamp, md.Generation, md.ResourceVersion = uuid.NewString(), timestamppb.New(s.now()), 1, ""
	in.Status = nil
	rev, err := s.rollouts.Create(ctx, keys.Rollout(md.GetName()), in)
	if errors.Is(err, store.ErrConflict) {
		return conflict("rollout %s exists: a rollout is created once; pause, resume or abort it, or create one under another name", md.GetName())
	}
	if err != nil {
		return err
	}
	w.Header().Set("Location", "/v1/rollouts/"+md.GetName())
	b, err := marshalObject(withRV(in, rev))
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusCreated, b)
	return nil
}

// rolloutAction is POST /v1/rollouts/{name}/{pause,resume,abort}: a
// compare-and-set of the rollout's spec. resume clears paused and bumps
// spec.resume (which ends a halt); abort is final.
func (s *server) rolloutAction(action string) apiHandler {
	return func(w http.ResponseWriter, r *http.Request) error {
		name, err := pathName(r, "name")
		if err != nil {
			return err
		}
		var out *capnv1.Rollout
		var outRev uint64
		err = store.RetryOnConflict(r.Context(), store.DefaultAttempts, func(ctx context.Context) error {
			cur, rev, err := s.rollouts.Get(ctx, keys.Rollout(name))
			if errors.Is(err, store.ErrNotFound) {
				return notFound("rollout %s not found", name)
			}
			if err != nil {
				return err
			}
			if cur.GetSpec().GetAborted() {
				return conflict("rollout %s was aborted: that is final; create a new rollout", name)
			}
			next := proto.CloneOf(cur)
			sp := next.GetSpec()
			switch action {
			case "pause":
				sp.Paused = true
			case "resume":
				sp.Paused = false
				sp.Resume++
			case "abort":
				sp.Aborted = true
			}
			next.Metadata.Generation++
			outRev, err = s.rollouts.Update(ctx, keys.Rollout(name), next, rev)
			out = next
			return err
		})
		if errors.Is(err, store.ErrConflict) {
			return conflict("rollout %s kept changing while it was written; retry", name)
		}
		if err != nil {
			return err
		}
		b, err := marshalObject(s.rolloutObject(r.Context(), out, outRev))
		if err != nil {
			return err
		}
		writeJSON(w, http.StatusOK, b)
		return nil
	}
}

// isTopology reports whether a manifest is a class cluster's.
func isTopology(c *capnv1.Cluster) bool { return c.GetSpec().GetTopology() != nil }
