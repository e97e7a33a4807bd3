package manifest

import (
	"errors"
	"fmt"
	"strings"
	"time"

	"go.yaml.in/yaml/v2"
	"google.golang.org/protobuf/reflect/protoreflect"

	capnv1 "github.com/capn-dev/capn/schemas/capn/v1alpha1"
)

// Fleet resources' kinds (fleet.proto).
const (
	KindClusterClass = "ClusterClass"
	KindRollout      = "Rollout"
)

// DecodeClusterClass reads exactly one ClusterClass from YAML or JSON,
// every unknown field and wrong type reported with its path.
func DecodeClusterClass(data []byte) (*capnv1.ClusterClass, error) {
	c := &capnv1.ClusterClass{}
	return c, decodeOne(data, KindClusterClass, c.ProtoReflect())
}

// DecodeRollout reads exactly one Rollout.
func DecodeRollout(data []byte) (*capnv1.Rollout, error) {
	r := &capnv1.Rollout{}
	return r, decodeOne(data, KindRollout, r.ProtoReflect())
}

// decodeOne fills m from the one document of data, of kind.
func decodeOne(data []byte, kind string, m protoreflect.Message) error {
	docs, err := parseDocuments(data)
	if err != nil {
		return err
	}
	switch len(docs) {
	case 0:
		return ErrEmpty
	case 1:
	default:
		return fmt.Errorf("%w: found %d; send one %s per request", ErrMultipleDocuments, len(docs), kind)
	}
	top, ok := docs[0].(yaml.MapSlice)
	if !ok {
		return &FieldError{Path: "(document)", Reason: "must be a mapping with apiVersion, kind, metadata and spec, not " + describe(docs[0])}
	}
	f := &filler{}
	f.message(top, m, "")
	fields := m.Descriptor().Fields()
	if v := m.Get(fields.ByName("api_version")).String(); v != "" && v != APIVersion {
		f.errs.add("apiVersion", v, "unsupported: must be %s", APIVersion)
	}
	if k := m.Get(fields.ByName("kind")).String(); k != "" && k != kind {
		f.errs.add("kind", k, "unsupported: must be %s", kind)
	}
	return errors.Join(f.errs...)
}

// DefaultRollout fills what a Rollout may leave out, in place: apiVersion,
// kind, waves ["1", "100%"], ready timeout 30m, max unhealthy machines "0".
func DefaultRollout(r *capnv1.Rollout) {
	if r.ApiVersion == "" {
		r.ApiVersion = APIVersion
	}
	if r.Kind == "" {
		r.Kind = KindRollout
	}
	if r.Spec == nil {
		r.Spec = &capnv1.RolloutSpec{}
	}
	if len(r.Spec.Waves) == 0 {
		r.Spec.Waves = []string{"1", "100%"}
	}
	if r.Spec.MaxUnhealthyMachines == "" {
		r.Spec.MaxUnhealthyMachines = "0"
	}
}

// ValidateRollout reports every problem of a rollout at once: its name,
// exactly one change, the waves (counts of at least 1 or percentages
// 1-100%), soak and ready timeout (not negative), the unhealthy threshold
// and the selector.
func ValidateRollout(r *capnv1.Rollout) error {
	var errs fieldErrors
	if n := r.GetMetadata().GetName(); !IsDNSLabel(n) {
		errs.add("metadata.name", n, "required: a DNS label (lower-case letters, digits and '-', at most 63)")
	}
	sp := r.GetSpec()
	ch := sp.GetChange()
	set := 0
	if ch.GetClass() != "" {
		set++
		if !IsDNSLabel(ch.GetClass()) {
			errs.add("spec.change.class", ch.GetClass(), "must be a class name (a DNS label)")
		}
	} else if ch.GetClassRevision() != 0 {
		errs.add("spec.change.classRevision", ch.GetClassRevision(), "needs spec.change.class")
	}
	if ch.GetClassRevision() < 0 {
		errs.add("spec.change.classRevision", ch.GetClassRevision(), "must be 0 (the class's current revision) or a revision")
	}
	if v := ch.GetKubernetesVersion(); v != "" {
		set++
		if _, err := ParseVersion(v); err != nil {
			errs.add("spec.change.kubernetesVersion", v, "must be a Kubernetes version such as v1.34.2")
		}
	}
	if len(ch.GetVariables()) > 0 {
		set++
	}
	if set != 1 {
		errs.add("spec.change", nil, "must set exactly one of class (with classRevision), kubernetesVersion or variables; %d set", set)
	}
	for i, w := range sp.GetWaves() {
		p := path("spec.waves").index(i)
		if pct, ok := strings.CutSuffix(w, "%"); ok {
			var n int
			if _, err := fmt.Sscanf(pct, "%d", &n); err != nil || fmt.Sprint(n) != pct || n < 1 || n > 100 {
				errs.add(p, w, "must be a count of at least 1 (\"2\") or a percentage from 1%% to 100%% (\"10%%\")")
			}
			continue
		}
		var n int
		if _, err := fmt.Sscanf(w, "%d", &n); err != nil || fmt.Sprint(n) != w || n < 1 {
			errs.add(p, w, "must be a count of at least 1 (\"2\") or a percentage from 1%% to 100%% (\"10%%\")")
		}
	}
	if d := sp.GetSoak(); d != nil && d.AsDuration() < 0 {
		errs.add("spec.soak", d.AsDuration(), "must not be negative")
	}
	if d := sp.GetReadyTimeout(); d != nil && d.AsDuration() < 0 {
		errs.add("spec.readyTimeout", d.AsDuration(), "must not be negative")
	} else if d != nil && d.AsDuration() > 0 && d.AsDuration() < time.Second {
		errs.add("spec.readyTimeout", d.AsDuration(), "must be at least 1s (or 0: 30m)")
	}
	if _, err := ResolveIntOrPercent(sp.GetMaxUnhealthyMachines(), 100, false); sp.GetMaxUnhealthyMachines() != "" && err != nil {
		errs.add("spec.maxUnhealthyMachines", sp.GetMaxUnhealthyMachines(), "must be a count (\"1\") or a percentage (\"20%%\")")
	}
	validateSelector(sp.GetClusterSelector(), "spec.clusterSelector", &errs)
	return errors.Join(errs...)
}
