package gateway

import (
	"context"
	"errors"
	"net/http"
	"time"

	"github.com/google/uuid"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/capn-dev/capn/events/store"
	"github.com/capn-dev/capn/gateway/api"
	capnv1 "github.com/capn-dev/capn/schemas/capn/v1alpha1"
	"github.com/capn-dev/capn/schemas/keys"
	"github.com/capn-dev/capn/schemas/manifest"
)

// Kubernetes version catalogues (desired kubernetesversions.<name>):
// auto-patch picks from "default" (the maintenance service).

func versionsObject(kv *capnv1.KubernetesVersions, rev uint64) *capnv1.KubernetesVersions {
	out := proto.CloneOf(kv)
	if rev > 0 {
		ensure(&out.Metadata).ResourceVersion = resourceVersion(rev)
	}
	return out
}

func (s *server) respondVersions(w http.ResponseWriter, status int, kv *capnv1.KubernetesVersions, rev uint64) error {
	b, err := marshalObject(versionsObject(kv, rev))
	if err != nil {
		return err
	}
	writeJSON(w, status, b)
	return nil
}

// getVersions is GET /v1/kubernetesversions/{name}.
func (s *server) getVersions(w http.ResponseWriter, r *http.Request) error {
	name, err := pathName(r, "name")
	if err != nil {
		return err
	}
	kv, rev, err := s.versions.Get(r.Context(), keys.K8sVersions(name))
	if errors.Is(err, store.ErrNotFound) {
		return notFound("Kubernetes version catalogue %s not found", name)
	}
	if err != nil {
		return err
	}
	return s.respondVersions(w, http.StatusOK, kv, rev)
}

// putVersions is PUT /v1/kubernetesversions/{name}: creates or replaces a
// catalogue, decoded (400 with paths), defaulted and validated (422 with
// paths), written with a compare-and-set on its resourceVersion when it
// has one (409 when stale) or on the revision read. 201 on create, 200
// otherwise; ?dryRun=All writes nothing.
func (s *server) putVersions(w http.ResponseWriter, r *http.Request) error {
	pathN, err := pathName(r, "name")
	if err != nil {
		return err
	}
	dryRun, err := dryRunFrom(r)
	if err != nil {
		return err
	}
	in, err := readOne(r, "KubernetesVersions", manifest.DecodeKubernetesVersions)
	if err != nil {
		return err
	}
	md := ensure(&in.Metadata)
	switch {
	case md.Name == "":
		md.Name = pathN
	case md.Name != pathN:
		return badRequest("the manifest names another catalogue than the path").
			withField("metadata.name", "must be "+pathN+", the name in the path", md.Name)
	}
	manifest.DefaultKubernetesVersions(in)
	if err := manifest.ValidateKubernetesVersions(in); err != nil {
		return fieldProblem(http.StatusUnprocessableEntity, api.ProblemInvalidSpec, "Invalid Kubernetes version catalogue", err)
	}
	want, err := parseResourceVersion(md.ResourceVersion, "metadata.resourceVersion")
	if err != nil {
		return err
	}
	key := keys.K8sVersions(pathN)
	var out *capnv1.KubernetesVersions
	var outRev uint64
	created := false
	err = store.RetryOnConflict(r.Context(), store.DefaultAttempts, func(ctx context.Context) error {
		cur, rev, err := s.versions.Get(ctx, key)
		exists := err == nil
		if err != nil && !errors.Is(err, store.ErrNotFound) {
			return err
		}
		switch {
		case want != 0 && !exists:
			return conflict("resourceVersion %d is stale: catalogue %s does not exist (any more)", want, pathN)
		case want != 0 && rev != want:
			return conflict("resourceVersion %d is stale: catalogue %s has changed since it was read; get it again and reapply your change", want, pathN)
		}
		next := proto.CloneOf(in)
		nm := next.Metadata
		nm.ResourceVersion, nm.DeletionTimestamp = "", nil
		if exists {
			cm := cur.GetMetadata()
			nm.Uid, nm.CreationTimestamp, nm.Generation = cm.GetUid(), cm.GetCreationTimestamp(), max(cm.GetGeneration(), 1)
			if !proto.Equal(cur.GetSpec(), next.GetSpec()) {
				nm.Generation++
			}
			if proto.Equal(cur, next) {
				out, outRev = cur, rev
				return nil
			}
		} else {
			nm.Uid, nm.Generation = uuid.NewString(), 1
			nm.CreationTimestamp = timestamppb.New(s.now().UTC().Truncate(time.Second))
		}
		if dryRun {
			out, outRev, created = next, rev, !exists
			return nil
		}
		var newRev uint64
		if exists {
			newRev, err = s.versions.Update(ctx, key, next, rev)
		} else {
			newRev, err = s.versions.Create(ctx, key, next)
		}
		if err != nil {
			return err
		}
		out, outRev, created = next, newRev, !exists
		return nil
	})
	if errors.Is(err, store.ErrConflict) {
		return conflict("catalogue %s kept changing while it was written; retry", pathN)
	}
	if err != nil {
		return err
	}
	status := http.StatusOK
	if created {
		status = http.StatusCreated
	}
	return s.respondVersions(w, status, out, outRev)
}
