package bootstrap

import (
	"fmt"
	"regexp"
	"slices"
	"strings"

	capnv1 "github.com/capn-dev/capn/schemas/capn/v1alpha1"
)

var (
	labelNameRe  = regexp.MustCompile(`^[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?$`)
	dnsSubdomain = regexp.MustCompile(`^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$`)
	taintEffects = []string{"NoSchedule", "PreferNoSchedule", "NoExecute"}
)

// kubeletLabels are the kubernetes.io labels a kubelet may set on its own
// node (k8s.io/kubelet/pkg/apis IsKubeletLabel); any other label in the
// kubernetes.io or k8s.io namespaces makes the kubelet refuse to start.
var kubeletLabels = []string{
	"kubernetes.io/hostname", "kubernetes.io/os", "kubernetes.io/arch",
	"beta.kubernetes.io/os", "beta.kubernetes.io/arch", "beta.kubernetes.io/instance-type",
	"node.kubernetes.io/instance-type",
	"topology.kubernetes.io/zone", "topology.kubernetes.io/region",
	"failure-domain.beta.kubernetes.io/zone", "failure-domain.beta.kubernetes.io/region",
}

// ValidateLabels checks node labels: Kubernetes label syntax, and only
// labels a kubelet may set on itself (rendered into --node-labels).
func ValidateLabels(path string, labels map[string]string) []error {
	var errs []error
	keys := make([]string, 0, len(labels))
	for k := range labels {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	for _, k := range keys {
		p := fmt.Sprintf("%s[%q]", path, k)
		if err := checkQualifiedName(k); err != nil {
			errs = append(errs, fmt.Errorf("%s: key %w", p, err))
			continue
		}
		if err := checkLabelValue(labels[k]); err != nil {
			errs = append(errs, fmt.Errorf("%s: %w", p, err))
		}
		if !kubeletMaySet(k) {
			errs = append(errs, fmt.Errorf("%s: a kubelet may not set labels in the kubernetes.io or k8s.io namespaces except under node.kubernetes.io/, kubelet.kubernetes.io/ and the well-known %s", p, strings.Join(kubeletLabels, ", ")))
		}
	}
	return errs
}

// ValidateTaints checks node taints: key and value syntax, a known effect,
// and no key given twice with the same effect.
func ValidateTaints(path string, taints []*capnv1.Taint) []error {
	var errs []error
	seen := map[string]bool{}
	for i, t := range taints {
		p := fmt.Sprintf("%s[%d]", path, i)
		if t == nil {
			errs = append(errs, fmt.Errorf("%s: null", p))
			continue
		}
		if err := checkQualifiedName(t.GetKey()); err != nil {
			errs = append(errs, fmt.Errorf("%s.key: %w", p, err))
		}
		if err := checkLabelValue(t.GetValue()); err != nil {
			errs = append(errs, fmt.Errorf("%s.value: %w", p, err))
		}
		if !slices.Contains(taintEffects, t.GetEffect()) {
			errs = append(errs, fmt.Errorf("%s.effect %q: want one of %s", p, t.GetEffect(), strings.Join(taintEffects, ", ")))
		}
		id := t.GetKey() + ":" + t.GetEffect()
		if seen[id] {
			errs = append(errs, fmt.Errorf("%s: taint %s given twice", p, id))
		}
		seen[id] = true
	}
	return errs
}

func checkQualifiedName(k string) error {
	prefix, name, hasPrefix := strings.Cut(k, "/")
	if !hasPrefix {
		name, prefix = prefix, ""
	}
	if hasPrefix && (prefix == "" || len(prefix) > 253 || !dnsSubdomain.MatchString(prefix)) {
		return fmt.Errorf("%q: the prefix must be a lowercase DNS subdomain of at most 253 characters", k)
	}
	if name == "" || len(name) > 63 || !labelNameRe.MatchString(name) {
		return fmt.Errorf("%q: the name must be 1-63 characters of A-Z, a-z, 0-9, '-', '_', '.', starting and ending alphanumeric", k)
	}
	return nil
}

func checkLabelValue(v string) error {
	if v != "" && (len(v) > 63 || !labelNameRe.MatchString(v)) {
		return fmt.Errorf("value %q: want at most 63 characters of A-Z, a-z, 0-9, '-', '_', '.', starting and ending alphanumeric", v)
	}
	return nil
}

func kubeletMaySet(key string) bool {
	prefix, _, ok := strings.Cut(key, "/")
	if !ok {
		return true
	}
	inNS := func(ns string) bool { return prefix == ns || strings.HasSuffix(prefix, "."+ns) }
	if !inNS("kubernetes.io") && !inNS("k8s.io") {
		return true
	}
	return inNS("kubelet.kubernetes.io") || inNS("node.kubernetes.io") || slices.Contains(kubeletLabels, key)
}

// NodeLabelsArg renders labels as the kubelet --node-labels value,
// k=v pairs sorted by key and joined by commas ("" for no labels).
func NodeLabelsArg(labels map[string]string) string {
	keys := make([]string, 0, len(labels))
	for k := range labels {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	pairs := make([]string, len(keys))
	for i, k := range keys {
		pairs[i] = k + "=" + labels[k]
	}
	return strings.Join(pairs, ",")
}
