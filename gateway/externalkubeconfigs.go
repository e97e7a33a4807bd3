package gateway

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"net/http"
	"slices"
	"strings"
	"time"

	"github.com/rs/zerolog"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/capn-dev/capn/events/store"
	"github.com/capn-dev/capn/gateway/api"
	capnv1 "github.com/capn-dev/capn/schemas/capn/v1alpha1"
	"github.com/capn-dev/capn/schemas/keys"
	"github.com/capn-dev/capn/schemas/manifest"
	"github.com/capn-dev/capn/secrets/kubeconfig"
)

// External kubeconfigs (capn external-kubeconfig): the kubeconfig of a
// cluster someone else runs, which a cluster with controlPlane.type
// external names (controlPlane.external.kubeconfig). Sealed in secrets as
// externalkubeconfig.<name>; written here, read by the
// controlplane-external service; the API gives back what it is (server,
// how it authenticates, hash, the clusters using it), never the
// credentials. Every route needs the secrets scope.

// putExternalKubeconfig is PUT /v1/externalkubeconfigs/{name}: the body
// is the kubeconfig (YAML or JSON), checked by kubeconfig.ParseExternal:
// a 422 names each field it refuses and stores nothing. 201 when created.
func (s *server) putExternalKubeconfig(w http.ResponseWriter, r *http.Request) error {
	if s.externalKubeconfigs == nil {
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
	parsed, err := kubeconfig.ParseExternal(body)
	if err != nil {
		var errs []error
		for _, e := range flattenErrs(err) {
			// ParseExternal's errors are "<field>: <reason>".
			path, reason, ok := strings.Cut(e.Error(), ": ")
			if !ok {
				path, reason = "(kubeconfig)", e.Error()
			}
			errs = append(errs, &manifest.FieldError{Path: path, Reason: reason})
		}
		return fieldProblem(http.StatusUnprocessableEntity, api.ProblemInvalidSpec, "Invalid external kubeconfig", errors.Join(errs...))
	}
	sum := sha256.Sum256(body)
	rec := &capnv1.ExternalKubeconfig{Name: name, Kubeconfig: body, Server: parsed.Server, Auth: parsed.Auth(),
		Hash: hex.EncodeToString(sum[:])[:16], Updated: timestamppb.New(s.now().UTC().Truncate(time.Second))}
	created := false
	_, _, err = s.externalKubeconfigs.Mutate(r.Context(), keys.ExternalKubeconfig(name), func(cur *capnv1.ExternalKubeconfig, exists bool) (*capnv1.ExternalKubeconfig, error) {
		created = !exists
		if exists && cur.GetHash() == rec.GetHash() && string(cur.GetKubeconfig()) == string(body) {
			rec.Updated = cur.GetUpdated()
			return nil, store.ErrNoChange
		}
		return rec, nil
	})
	if err != nil {
		return err
	}
	zerolog.Ctx(r.Context()).Info().Str("external_kubeconfig", name).Str("server", parsed.Server).Str("auth", parsed.Auth()).Msg("external kubeconfig written")
	used, err := s.clustersUsingExternal(r, name)
	if err != nil {
		return err
	}
	status := http.StatusOK
	if created {
		status = http.StatusCreated
	}
	writeJSON(w, status, externalInfo(rec, used))
	return nil
}

// getExternalKubeconfig is GET /v1/externalkubeconfigs/{name}: what the
// kubeconfig is, without its credentials.
func (s *server) getExternalKubeconfig(w http.ResponseWriter, r *http.Request) error {
	if s.externalKubeconfigs == nil {
		return unavailableSecrets()
	}
	name, err := pathName(r, "name")
	if err != nil {
		return err
	}
	rec, _, err := s.externalKubeconfigs.Get(r.Context(), keys.ExternalKubeconfig(name))
	if errors.Is(err, store.ErrNotFound) {
		return notFound("external kubeconfig %s not found", name)
	}
	if err != nil {
		return err
	}
	used, err := s.clustersUsingExternal(r, name)
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, externalInfo(rec, used))
	return nil
}

// deleteExternalKubeconfig is DELETE /v1/externalkubeconfigs/{name}:
// refused (409, naming them) while a cluster's control plane names it —
// capn would lose its way to the cluster's API server, and with it the
// way to clean up what it made there.
func (s *server) deleteExternalKubeconfig(w http.ResponseWriter, r *http.Request) error {
	if s.externalKubeconfigs == nil {
		return unavailableSecrets()
	}
	name, err := pathName(r, "name")
	if err != nil {
		return err
	}
	used, err := s.clustersUsingExternal(r, name)
	if err != nil {
		return err
	}
	if len(used) > 0 {
		return conflict("external kubeconfig %s is used by cluster(s) %s (spec.controlPlane.external.kubeconfig): delete them first, or point them at another kubeconfig", name, strings.Join(used, ", "))
	}
	return deleteSecret(w, r, s.externalKubeconfigs, keys.ExternalKubeconfig, "external kubeconfig")
}

// clustersUsingExternal are the desired clusters (deleting ones included)
// whose external control plane names the kubeconfig, sorted.
func (s *server) clustersUsingExternal(r *http.Request, name string) ([]string, error) {
	entries, err := s.clusters.List(r.Context(), keys.ClusterPrefix)
	if err != nil {
		return nil, err
	}
	var out []string
	for _, e := range entries {
		cp := e.Value.GetSpec().GetControlPlane()
		if cp.Implementation() == capnv1.ControlPlaneExternal && cp.GetExternal().GetKubeconfig() == name {
			out = append(out, keys.ClusterOf(e.Key))
		}
	}
	slices.Sort(out)
	return out, nil
}

func externalInfo(rec *capnv1.ExternalKubeconfig, used []string) api.ExternalKubeconfigInfo {
	if used == nil {
		used = []string{}
	}
	return api.ExternalKubeconfigInfo{Name: rec.GetName(), Server: rec.GetServer(), Auth: rec.GetAuth(), Hash: rec.GetHash(),
		Updated: rec.GetUpdated().AsTime(), UsedBy: used}
}
