package gateway

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strings"

	"github.com/google/uuid"
	"github.com/rs/zerolog"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/capn-dev/capn/events/store"
	"github.com/capn-dev/capn/gateway/api"
	capnv1 "github.com/capn-dev/capn/schemas/capn/v1alpha1"
	"github.com/capn-dev/capn/schemas/keys"
	"github.com/capn-dev/capn/schemas/manifest"
)

// Corrupt records
//
// A stored value that does not decode (a junk write, a record of another
// type) must not take the API down for everyone. Lists leave it out and
// say so: a warning log line, capn_gateway_corrupt_records_total, and a
// Warning response header per record (299, as the Kubernetes API's
// warnings, which kubectl and capn print on stderr). A GET of it is a 500
// problem of type corrupt-record naming the key and how to remove it. A
// DELETE of a corrupt cluster replaces the record with an empty cluster
// whose deletion is requested, so the cluster-planner tears down whatever
// machines it had and removes it like any deleted cluster.

// AnnotationCorruptRecord is set on the cluster that replaces a corrupt
// record on DELETE: why the old record did not decode.
const AnnotationCorruptRecord = "capn.dev/corrupt-record"

// Kinds of observed records, for the corrupt-records metric and warnings.
const (
	kindClusterStatus = "ClusterStatus"
	kindMachineStatus = "MachineStatus"
	kindAddonRecord   = "ClusterAddonStatus"
)

// maxWarnings bounds the Warning headers of one response.
const maxWarnings = 10

// skipped reports the records a list left out because they do not decode;
// kind says what each one is (api.KindCluster, "ClusterStatus", ...).
func (s *server) skipped(w http.ResponseWriter, r *http.Request, kind string, bad []*store.CorruptError) {
	for i, ce := range bad {
		zerolog.Ctx(r.Context()).Warn().Err(ce.Err).Str("key", ce.Key).Uint64("revision", ce.Revision).
			Str("kind", kind).Msg("listing without a record that does not decode")
		s.metrics.corrupt(kind)
		switch {
		case i < maxWarnings:
			w.Header().Add("Warning", warning(corruptText(kind, ce)))
		case i == maxWarnings:
			w.Header().Add("Warning", warning(fmt.Sprintf("%d more corrupt %s records left out (see the gateway's log)", len(bad)-maxWarnings, kind)))
		}
	}
}

// corruptText says which record a list left out and what to do about it.
func corruptText(kind string, ce *store.CorruptError) string {
	name := objectName(ce.Key)
	where := fmt.Sprintf("%s (key %s, revision %d)", store.ErrCorrupt, ce.Key, ce.Revision)
	switch kind {
	case api.KindCluster:
		return fmt.Sprintf("cluster %s left out: %s; DELETE /v1/clusters/%s (capn delete cluster %s) removes it", name, where, name, name)
	case kindClusterStatus:
		return fmt.Sprintf("cluster %s listed without its status: %s", name, where)
	case kindMachineStatus:
		return fmt.Sprintf("machine %s listed without its status: %s", name, where)
	case api.KindAddonSet:
		return fmt.Sprintf("add-on set %s left out: %s; DELETE /v1/addonsets/%s removes it", name, where, name)
	case kindAddonRecord:
		return fmt.Sprintf("the add-on record %s left out: %s (the addon-manager replaces it)", name, where)
	}
	return fmt.Sprintf("machine %s left out: %s", name, where)
}

// objectName is the name a key stands for: cluster.<name> → <name>,
// machine.<cluster>.<name> → <cluster>/<name>.
func objectName(key string) string {
	_, rest, _ := strings.Cut(key, ".")
	return strings.ReplaceAll(rest, ".", "/")
}

// warning renders one Warning header value (RFC 9111 §5.5's 299 code, as
// the Kubernetes API sends them).
func warning(text string) string {
	return `299 - "` + strings.NewReplacer(`\`, `\\`, `"`, `\"`, "\n", " ").Replace(text) + `"`
}

// corruptProblem is the answer to a request for a record that does not
// decode.
func corruptProblem(ce *store.CorruptError) *problemError {
	hint := "an operator must remove or rewrite it"
	if strings.HasPrefix(ce.Key, keys.ClusterPrefix) {
		hint = "DELETE /v1/clusters/" + objectName(ce.Key) + " removes it"
	}
	return problem(http.StatusInternalServerError, api.ProblemCorruptRecord, "Corrupt record",
		"%s: %s at revision %d does not decode (%v); %s", store.ErrCorrupt, ce.Key, ce.Revision, ce.Err, hint)
}

// replaceCorrupt is the DELETE of a cluster whose record does not decode:
// a compare-and-set at the corrupt revision (or the client's
// resourceVersion, which must be it) writes an empty cluster whose
// deletion is requested. A dry run writes nothing.
func (s *server) replaceCorrupt(ctx context.Context, name string, ce *store.CorruptError, precondition string, now *timestamppb.Timestamp, dryRun bool) (writeResult, error) {
	want, err := parseResourceVersion(precondition, "resourceVersion")
	if err != nil {
		return writeResult{}, err
	}
	if want != 0 && want != ce.Revision {
		return writeResult{}, stale(name, want)
	}
	c := &capnv1.Cluster{ApiVersion: manifest.APIVersion, Kind: manifest.KindCluster,
		Metadata: &capnv1.ObjectMeta{Name: name, Uid: uuid.NewString(), Generation: 1, CreationTimestamp: now, DeletionTimestamp: now,
			Annotations: map[string]string{AnnotationCorruptRecord: ce.Err.Error()}},
		Spec: &capnv1.ClusterSpec{}}
	if dryRun {
		return writeResult{cluster: c, rev: ce.Revision}, nil
	}
	zerolog.Ctx(ctx).Warn().Err(ce.Err).Str("cluster", name).Uint64("revision", ce.Revision).Msg("deleting a cluster whose record does not decode")
	rev, err := s.clusters.Update(ctx, keys.Cluster(name), c, ce.Revision)
	if errors.Is(err, store.ErrConflict) {
		return writeResult{}, conflict("cluster %s changed while its corrupt record was being replaced; get it and retry", name)
	}
	if err != nil {
		return writeResult{}, err
	}
	return writeResult{cluster: c, rev: rev, changed: true}, nil
}
