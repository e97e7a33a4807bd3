package gateway

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strings"

	"github.com/rs/zerolog"

	"github.com/capn-dev/capn/events/store"
	"github.com/capn-dev/capn/schemas/keys"
)

// classUsersShown is how many of the clusters still using a class a
// refused delete names; the rest are counted ("and 7 more").
const classUsersShown = 10

// deleteClass is DELETE /v1/clusterclasses/{name}[?resourceVersion=][&dryRun=All]:
// refused (409, naming them) while a cluster's spec.topology names the
// class, since a class cluster is rendered from its pinned revision
// whenever it is applied. Otherwise the class is deleted with a
// compare-and-set on the revision read, then its revision records
// classrev.<name>.*; a record that a cluster pinned in the meantime (an
// apply that rendered before the class went) is kept. 200 with the class
// as it was.
func (s *server) deleteClass(w http.ResponseWriter, r *http.Request) error {
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
	ctx := r.Context()
	key := keys.Class(name)
	class, rev, err := s.classes.Get(ctx, key)
	switch {
	case errors.Is(err, store.ErrNotFound):
		return notFound("cluster class %s not found", name)
	case err != nil:
		return err
	case want != 0 && rev != want:
		return conflict("resourceVersion %d is stale: cluster class %s has changed since it was read", want, name)
	}
	users, err := s.classUsers(ctx, name)
	if err != nil {
		return err
	}
	if len(users) > 0 {
		return conflict("cluster class %s is used by %s: delete those clusters (or apply them without spec.topology) first",
			name, namesUpTo(users, classUsersShown))
	}
	if !dryRun {
		if err := s.classes.Delete(ctx, key, rev); err != nil {
			if errors.Is(err, store.ErrConflict) {
				return conflict("cluster class %s changed while it was deleted; get it again and retry", name)
			}
			return err
		}
		kept, err := s.deleteClassRevisions(ctx, name)
		if err != nil {
			return fmt.Errorf("cluster class %s deleted, its revision records not all: %w", name, err)
		}
		log := zerolog.Ctx(ctx).Info().Str("class", name)
		if len(kept) > 0 {
			log = log.Ints64("kept_revisions", kept)
		}
		log.Msg("cluster class deleted")
	}
	b, err := marshalObject(withRV(class, rev))
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, b)
	return nil
}

// classUsers names the clusters (sorted) whose spec.topology names class.
func (s *server) classUsers(ctx context.Context, class string) ([]string, error) {
	all, _, err := s.clusters.ListSkipping(ctx, keys.ClusterPrefix)
	if err != nil {
		return nil, err
	}
	var users []string
	for _, e := range all {
		if e.Value.GetSpec().GetTopology().GetClass() == class {
			users = append(users, e.Value.GetMetadata().GetName())
		}
	}
	slices.Sort(users)
	return users, nil
}

// deleteClassRevisions deletes a deleted class's revision records, each
// with a compare-and-set, except those a cluster is pinned to (read after
// the class was deleted, so a racing apply's pin is seen); it returns the
// revisions kept.
func (s *server) deleteClassRevisions(ctx context.Context, class string) ([]int64, error) {
	pinned := map[int64]bool{}
	all, _, err := s.clusters.ListSkipping(ctx, keys.ClusterPrefix)
	if err != nil {
		return nil, err
	}
	for _, e := range all {
		if t := e.Value.GetSpec().GetTopology(); t.GetClass() == class {
			pinned[t.GetRevision()] = true
		}
	}
	revs, _, err := s.classes.ListSkipping(ctx, keys.ClassRevsOf(class))
	if err != nil {
		return nil, err
	}
	var kept []int64
	var errs []error
	for _, e := range revs {
		if n := e.Value.GetStatus().GetRevision(); pinned[n] {
			kept = append(kept, n)
			continue
		}
		if err := s.classes.Delete(ctx, e.Key, e.Revision); err != nil {
			errs = append(errs, err)
		}
	}
	return kept, errors.Join(errs...)
}

// namesUpTo counts names and lists the first n: "3 clusters: a, b, c",
// "12 clusters: a, ..., j and 2 more".
func namesUpTo(names []string, n int) string {
	word := "clusters"
	if len(names) == 1 {
		word = "cluster"
	}
	if len(names) <= n {
		return fmt.Sprintf("%d %s: %s", len(names), word, strings.Join(names, ", "))
	}
	return fmt.Sprintf("%d %s: %s and %d more", len(names), word, strings.Join(names[:n], ", "), len(names)-n)
}
