package gateway

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"net/http"
	"slices"
	"strings"
	"time"

	"github.com/google/uuid"
	"github.com/rs/zerolog"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/capn-dev/capn/events/store"
	"github.com/capn-dev/capn/gateway/api"
	capnv1 "github.com/capn-dev/capn/schemas/capn/v1alpha1"
	"github.com/capn-dev/capn/schemas/keys"
	"github.com/capn-dev/capn/schemas/manifest"
)

// Add-on sets (desired addonset.<name>), their per-cluster records
// (observed addon.<cluster>.<set>, the addon-manager's) and add-on secrets
// (sealed in secrets as addonsecret.<name>; written here, never read back).

// addonSetObject is what the API shows of a set: as stored at rev, with
// the records of it on each cluster as its status.
func addonSetObject(s *capnv1.AddonSet, rev uint64, recs []*capnv1.ClusterAddonStatus) *capnv1.AddonSet {
	out := proto.CloneOf(s)
	md := ensure(&out.Metadata)
	if rev > 0 {
		md.ResourceVersion = resourceVersion(rev)
	}
	out.Status = &capnv1.AddonSetStatus{Clusters: recs}
	return out
}

// addonRecords reads every record (observed addon.*), by set name, each
// list sorted by cluster. Records that do not decode are skipped (and
// said so in a Warning header).
func (s *server) addonRecords(ctx context.Context, w http.ResponseWriter, r *http.Request) (map[string][]*capnv1.ClusterAddonStatus, error) {
	all, bad, err := s.addonStatuses.ListSkipping(ctx, keys.AddonPrefix)
	if err != nil {
		return nil, err
	}
	s.skipped(w, r, kindAddonRecord, bad)
	out := map[string][]*capnv1.ClusterAddonStatus{}
	for _, e := range all {
		k, err := keys.Parse(e.Key)
		if err != nil {
			continue
		}
		out[k.Name] = append(out[k.Name], e.Value)
	}
	for _, l := range out {
		slices.SortFunc(l, func(a, b *capnv1.ClusterAddonStatus) int { return strings.Compare(a.GetCluster(), b.GetCluster()) })
	}
	return out, nil
}

// listAddonSets is GET /v1/addonsets[?labelSelector=]: every set with its
// records, sorted by name.
func (s *server) listAddonSets(w http.ResponseWriter, r *http.Request) error {
	sel, err := selectorFrom(r)
	if err != nil {
		return err
	}
	ctx := r.Context()
	sets, bad, err := s.addonSets.ListSkipping(ctx, keys.AddonSetPrefix)
	if err != nil {
		return err
	}
	s.skipped(w, r, api.KindAddonSet, bad)
	recs, err := s.addonRecords(ctx, w, r)
	if err != nil {
		return err
	}
	items := make([]*capnv1.AddonSet, 0, len(sets))
	for _, e := range sets {
		if matches(sel, e.Value.GetMetadata()) {
			items = append(items, addonSetObject(e.Value, e.Revision, recs[e.Value.GetMetadata().GetName()]))
		}
	}
	list, err := listOf(api.KindAddonSetList, items)
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, list)
	return nil
}

// getAddonSet is GET /v1/addonsets/{name}.
func (s *server) getAddonSet(w http.ResponseWriter, r *http.Request) error {
	name, err := pathName(r, "name")
	if err != nil {
		return err
	}
	set, rev, err := s.addonSets.Get(r.Context(), keys.AddonSet(name))
	if errors.Is(err, store.ErrNotFound) {
		return notFound("add-on set %s not found", name)
	}
	if err != nil {
		return err
	}
	return s.respondAddonSet(w, r, http.StatusOK, set, rev)
}

func (s *server) respondAddonSet(w http.ResponseWriter, r *http.Request, status int, set *capnv1.AddonSet, rev uint64) error {
	recs, err := s.addonRecords(r.Context(), w, r)
	if err != nil {
		return err
	}
	b, err := marshalObject(addonSetObject(set, rev, recs[set.GetMetadata().GetName()]))
	if err != nil {
		return err
	}
	writeJSON(w, status, b)
	return nil
}

// applyAddonSet is POST /v1/addonsets; putAddonSet PUT /v1/addonsets/{name}.
func (s *server) applyAddonSet(w http.ResponseWriter, r *http.Request) error {
	return s.applySet(w, r, "")
}

func (s *server) putAddonSet(w http.ResponseWriter, r *http.Request) error {
	name, err := pathName(r, "name")
	if err != nil {
		return err
	}
	return s.applySet(w, r, name)
}

// applySet creates or updates the add-on set a manifest declares, as apply
// does a cluster: decoded (400 with paths), defaulted and validated (422
// with paths; every inline manifest parsed into objects), written with a
// compare-and-set on its metadata.resourceVersion when it has one (409 when
// stale) or on the revision read (retried after a lost race); a uid must
// be the stored set's. generation is bumped when the spec changes. 201 on
// create, 200 otherwise; ?dryRun=All writes nothing.
func (s *server) applySet(w http.ResponseWriter, r *http.Request, pathName string) error {
	dryRun, err := dryRunFrom(r)
	if err != nil {
		return err
	}
	in, err := readOne(r, "AddonSet", manifest.DecodeAddonSet)
	if err != nil {
		return err
	}
	md := ensure(&in.Metadata)
	switch {
	case pathName != "" && md.Name == "":
		md.Name = pathName
	case pathName != "" && md.Name != pathName:
		return badRequest("the manifest names another add-on set than the path").
			withField("metadata.name", "must be "+pathName+", the name in the path", md.Name)
	}
	manifest.DefaultAddonSet(in)
	if err := manifest.ValidateAddonSet(in); err != nil {
		return fieldProblem(http.StatusUnprocessableEntity, api.ProblemInvalidSpec, "Invalid add-on set", err)
	}
	want, err := parseResourceVersion(md.ResourceVersion, "metadata.resourceVersion")
	if err != nil {
		return err
	}
	name, uid := md.Name, md.Uid
	key := keys.AddonSet(name)
	var out *capnv1.AddonSet
	var outRev uint64
	created := false
	err = store.RetryOnConflict(r.Context(), store.DefaultAttempts, func(ctx context.Context) error {
		cur, rev, err := s.addonSets.Get(ctx, key)
		exists := err == nil
		if err != nil && !errors.Is(err, store.ErrNotFound) {
			return err
		}
		switch {
		case want != 0 && !exists:
			return conflict("resourceVersion %d is stale: add-on set %s does not exist (any more)", want, name)
		case want != 0 && rev != want:
			return conflict("resourceVersion %d is stale: add-on set %s has changed since it was read; get it again and reapply your change", want, name)
		case exists && uid != "" && uid != cur.GetMetadata().GetUid():
			return conflict("metadata.uid %s is not the uid of add-on set %s (%s): the set was deleted and created again since the manifest was read",
				uid, name, cur.GetMetadata().GetUid())
		}
		next := proto.CloneOf(in)
		next.Status = nil
		nm := next.Metadata
		nm.Name, nm.ResourceVersion, nm.DeletionTimestamp = name, "", nil
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
			rev = 0
		}
		if dryRun {
			out, outRev, created = next, rev, !exists
			return nil
		}
		var newRev uint64
		if exists {
			newRev, err = s.addonSets.Update(ctx, key, next, rev)
		} else {
			newRev, err = s.addonSets.Create(ctx, key, next)
		}
		if err != nil {
			if want != 0 && errors.Is(err, store.ErrConflict) {
				return conflict("resourceVersion %d is stale: add-on set %s has changed since it was read", want, name)
			}
			return err
		}
		out, outRev, created = next, newRev, !exists
		return nil
	})
	if errors.Is(err, store.ErrConflict) {
		return conflict("add-on set %s kept changing while it was written; retry", name)
	}
	if err != nil {
		return err
	}
	status := http.StatusOK
	if created {
		status = http.StatusCreated
		if !dryRun {
			w.Header().Set("Location", "/v1/addonsets/"+name)
		}
	}
	return s.respondAddonSet(w, r, status, out, outRev)
}

// deleteAddonSet is DELETE /v1/addonsets/{name}[?resourceVersion=][&dryRun=All]:
// the set is deleted at once (a compare-and-set on the revision read); the
// addon-manager then forgets it on every cluster, deleting its objects
// where it said onRemove: Delete. 200 with the set as it was.
func (s *server) deleteAddonSet(w http.ResponseWriter, r *http.Request) error {
	name, err := pathName(r, "name")
	if err != nil {
		return err
	}
	dryRun, err := dryRunFrom(r)
	if err != nil {
		return err
	}
	want, err := parseResourceVersion(r.URL.Query().Get("resourceVersion"), "resourceVersion")
	if err != nil {
		return err
	}
	key := keys.AddonSet(name)
	set, rev, err := s.addonSets.Get(r.Context(), key)
	switch {
	case errors.Is(err, store.ErrNotFound):
		return notFound("add-on set %s not found", name)
	case err != nil:
		return err
	case want != 0 && rev != want:
		return conflict("resourceVersion %d is stale: add-on set %s has changed since it was read", want, name)
	}
	if !dryRun {
		if err := s.addonSets.Delete(r.Context(), key, rev); err != nil {
			if errors.Is(err, store.ErrConflict) {
				return conflict("add-on set %s changed while it was deleted; get it again and retry", name)
			}
			return err
		}
		zerolog.Ctx(r.Context()).Info().Str("addon_set", name).Msg("add-on set deleted")
	}
	return s.respondAddonSet(w, r, http.StatusOK, set, rev)
}

// clusterAddons is GET /v1/clusters/{name}/addons: the addon-manager's
// records of every set on the cluster, sorted by set.
func (s *server) clusterAddons(w http.ResponseWriter, r *http.Request) error {
	name, err := pathName(r, "name")
	if err != nil {
		return err
	}
	all, bad, err := s.addonStatuses.ListSkipping(r.Context(), keys.AddonsOf(name))
	if err != nil {
		return err
	}
	s.skipped(w, r, kindAddonRecord, bad)
	items := make([]*capnv1.ClusterAddonStatus, 0, len(all))
	for _, e := range all {
		items = append(items, e.Value)
	}
	list, err := listOf(api.KindClusterAddonStatusList, items)
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, list)
	return nil
}

// putAddonSecret is PUT /v1/addonsecrets/{name}: the body (YAML or JSON
// Kubernetes objects, as an AddonSet's inline yaml) becomes the sealed
// add-on secret of that name. Its objects are checked as an inline
// manifest's (422 naming each bad document). The answer is the secret
// without its content (name, hash, updated): the API never gives the
// content back. 201 when it was created.
func (s *server) putAddonSecret(w http.ResponseWriter, r *http.Request) error {
	if s.addonSecrets == nil {
		return unavailableSecrets()
	}
	name, err := pathName(r, "name")
	if err != nil {
		return err
	}
	if err := bodyMediaTypes.check(r); err != nil {
		return err
	}
	body, err := readBody(r)
	if err != nil {
		return err
	}
	objs, err := manifest.ParseAddonObjects(string(body))
	if err == nil && len(objs) == 0 {
		err = errors.New("holds no object")
	}
	if err != nil {
		var errs []error
		for _, e := range flattenErrs(err) {
			errs = append(errs, &manifest.FieldError{Path: "(body)", Reason: e.Error()})
		}
		return fieldProblem(http.StatusUnprocessableEntity, api.ProblemInvalidSpec, "Invalid add-on secret", errors.Join(errs...))
	}
	sum := sha256.Sum256(body)
	sec := &capnv1.AddonSecret{Name: name, Yaml: string(body), Hash: hex.EncodeToString(sum[:])[:16],
		Updated: timestamppb.New(s.now().UTC().Truncate(time.Second))}
	created := false
	_, _, err = s.addonSecrets.Mutate(r.Context(), keys.AddonSecret(name), func(cur *capnv1.AddonSecret, exists bool) (*capnv1.AddonSecret, error) {
		created = !exists
		if exists && cur.GetHash() == sec.GetHash() && cur.GetYaml() == sec.GetYaml() {
			sec.Updated = cur.GetUpdated()
			return nil, store.ErrNoChange
		}
		return sec, nil
	})
	if err != nil {
		return err
	}
	zerolog.Ctx(r.Context()).Info().Str("addon_secret", name).Int("objects", len(objs)).Msg("add-on secret written")
	status := http.StatusOK
	if created {
		status = http.StatusCreated
	}
	writeJSON(w, status, api.AddonSecretInfo{Name: name, Hash: sec.GetHash(), Objects: len(objs), Updated: sec.GetUpdated().AsTime()})
	return nil
}

// deleteAddonSecret is DELETE /v1/addonsecrets/{name}.
func (s *server) deleteAddonSecret(w http.ResponseWriter, r *http.Request) error {
	return deleteSecret(w, r, s.addonSecrets, keys.AddonSecret, "add-on secret")
}

// deleteSecret deletes a write-only secret (an add-on or bootstrap
// secret) named by the path: 204, or 404 naming it; a compare-and-set on
// the revision read.
func deleteSecret[T proto.Message](w http.ResponseWriter, r *http.Request, b *store.Bucket[T], key func(string) string, what string) error {
	if b == nil {
		return unavailableSecrets()
	}
	name, err := pathName(r, "name")
	if err != nil {
		return err
	}
	_, rev, err := b.Get(r.Context(), key(name))
	if errors.Is(err, store.ErrNotFound) {
		return notFound("%s %s not found", what, name)
	}
	if err != nil {
		return err
	}
	if err := b.Delete(r.Context(), key(name), rev); err != nil {
		return err
	}
	w.WriteHeader(http.StatusNoContent)
	return nil
}

func unavailableSecrets() error {
	return problem(http.StatusServiceUnavailable, api.ProblemUnavailable, "Secrets unavailable",
		"the gateway has no secrets key (--secrets-key-file or CAPN_SECRETS_KEY): add-on secrets cannot be sealed")
}

// flattenErrs returns the errors an errors.Join holds, or err itself.
func flattenErrs(err error) []error {
	if j, ok := err.(interface{ Unwrap() []error }); ok {
		return j.Unwrap()
	}
	return []error{err}
}
