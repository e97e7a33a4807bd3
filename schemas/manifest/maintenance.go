package manifest

import (
	"errors"
	"fmt"
	"strings"

	"go.yaml.in/yaml/v2"

	capnv1 "github.com/capn-dev/capn/schemas/capn/v1alpha1"
	"github.com/capn-dev/capn/schemas/maintenance"
)

// KindKubernetesVersions is the kind of the Kubernetes version catalogue.
const KindKubernetesVersions = "KubernetesVersions"

// Classifications of a KubernetesVersion.
const (
	ClassSupported  = "supported"
	ClassDeprecated = "deprecated"
	ClassPreview    = "preview"
)

// validateMaintenance checks spec.maintenance: its windows (days, HH:MM
// times, an IANA time zone) and a pending upgrade's version, which must
// parse and not be older than the control plane's.
func validateMaintenance(m *capnv1.MaintenanceSpec, cp Version, cpOK bool, p path, errs *fieldErrors) {
	if m == nil {
		return
	}
	for i, w := range m.GetWindows() {
		if w == nil {
			errs.add(p.child("windows").index(i), nil, "must not be null")
		}
	}
	_, werrs := maintenance.ParseWindows(m)
	for _, e := range werrs {
		errs.add(p+path("."+e.Field), nil, "%s", e.Problem)
	}
	if pv := m.GetPendingVersion(); pv != "" {
		v, err := ParseVersion(pv)
		switch {
		case err != nil:
			errs.add(p.child("pendingVersion"), pv, "must be vMAJOR.MINOR.PATCH, e.g. v1.34.2")
		case cpOK && v.Compare(cp) < 0:
			errs.add(p.child("pendingVersion"), pv, "older than spec.kubernetesVersion %s: Kubernetes can only be upgraded", cp)
		case cpOK && (v.Major != cp.Major || v.MinorsAfter(cp) >= 2):
			errs.add(p.child("pendingVersion"), pv, "more than one minor version after spec.kubernetesVersion %s: the control plane upgrades one minor version at a time", cp)
		}
	}
}

// validateHibernation checks spec.hibernation's schedules: cron
// expressions and an IANA location.
func validateHibernation(h *capnv1.HibernationSpec, p path, errs *fieldErrors) {
	if h == nil {
		return
	}
	for i, s := range h.GetSchedules() {
		if s == nil {
			errs.add(p.child("schedules").index(i), nil, "must not be null")
		}
	}
	_, serrs := maintenance.ParseSchedules(h)
	for _, e := range serrs {
		errs.add(p+path("."+e.Field), nil, "%s", e.Problem)
	}
}

// ValidateKubernetesVersions reports every bad field of a catalogue:
// versions that do not parse, are listed twice, or have an unknown
// classification.
func ValidateKubernetesVersions(kv *capnv1.KubernetesVersions) error {
	if kv == nil {
		return &FieldError{Path: "(document)", Reason: "no KubernetesVersions"}
	}
	var errs fieldErrors
	if kv.ApiVersion != APIVersion {
		errs.add("apiVersion", kv.ApiVersion, "must be %s", APIVersion)
	}
	if kv.Kind != KindKubernetesVersions {
		errs.add("kind", kv.Kind, "must be %s", KindKubernetesVersions)
	}
	validateMeta(kv.Metadata, "metadata", &errs)
	seen := map[string]int{}
	vp := path("spec").child("versions")
	for i, v := range kv.GetSpec().GetVersions() {
		p := vp.index(i)
		if v == nil {
			errs.add(p, nil, "must not be null")
			continue
		}
		if _, err := ParseVersion(v.GetVersion()); err != nil {
			errs.add(p.child("version"), v.GetVersion(), "must be vMAJOR.MINOR.PATCH, e.g. v1.34.2")
		} else if j, dup := seen[v.GetVersion()]; dup {
			errs.add(p.child("version"), v.GetVersion(), "duplicate: spec.versions[%d] lists it already", j)
		} else {
			seen[v.GetVersion()] = i
		}
		switch v.GetClassification() {
		case "", ClassSupported, ClassDeprecated, ClassPreview:
		default:
			errs.add(p.child("classification"), v.GetClassification(), "must be one of %s", strings.Join([]string{ClassSupported, ClassDeprecated, ClassPreview}, ", "))
		}
	}
	return errors.Join(errs...)
}

// NewestPatch is the version auto-patch moves a cluster at current to:
// the newest supported version of the same major.minor that is newer
// than current, from the catalogue; ok is false when there is none.
func NewestPatch(kv *capnv1.KubernetesVersions, current string) (string, bool) {
	cur, err := ParseVersion(current)
	if err != nil {
		return "", false
	}
	best, bestRaw := cur, ""
	for _, v := range kv.GetSpec().GetVersions() {
		c := v.GetClassification()
		if c != "" && c != ClassSupported {
			continue
		}
		pv, err := ParseVersion(v.GetVersion())
		if err != nil || pv.Major != cur.Major || pv.Minor != cur.Minor || pv.Pre != "" {
			continue
		}
		if pv.Compare(best) > 0 {
			best, bestRaw = pv, v.GetVersion()
		}
	}
	return bestRaw, bestRaw != ""
}

// DecodeKubernetesVersions reads exactly one KubernetesVersions from YAML
// or JSON, reporting every unknown field and wrong type with its path.
func DecodeKubernetesVersions(data []byte) (*capnv1.KubernetesVersions, error) {
	docs, err := parseDocuments(data)
	if err != nil {
		return nil, err
	}
	switch len(docs) {
	case 0:
		return nil, ErrEmpty
	case 1:
	default:
		return nil, fmt.Errorf("%w: found %d; send one KubernetesVersions per request", ErrMultipleDocuments, len(docs))
	}
	top, ok := docs[0].(yaml.MapSlice)
	if !ok {
		return nil, &FieldError{Path: "(document)", Reason: "must be a mapping with apiVersion, kind, metadata and spec, not " + describe(docs[0])}
	}
	kv := &capnv1.KubernetesVersions{}
	f := &filler{}
	f.message(top, kv.ProtoReflect(), "")
	if len(f.errs) > 0 {
		return nil, errors.Join(f.errs...)
	}
	return kv, nil
}

// DefaultKubernetesVersions fills apiVersion and kind (idempotent).
func DefaultKubernetesVersions(kv *capnv1.KubernetesVersions) {
	if kv.ApiVersion == "" {
		kv.ApiVersion = APIVersion
	}
	if kv.Kind == "" {
		kv.Kind = KindKubernetesVersions
	}
}
