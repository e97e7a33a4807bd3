package manifest

import (
	"regexp"
	"strings"
)

// Kubernetes name rules (k8s.io/apimachinery/pkg/util/validation), written
// out so this package needs no apimachinery.
var (
	dnsLabelRE       = regexp.MustCompile(`^[a-z0-9]([-a-z0-9]*[a-z0-9])?$`)
	qualifiedNameRE  = regexp.MustCompile(`^([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]$`)
	labelValueRE     = regexp.MustCompile(`^(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?$`)
	fileModeRE       = regexp.MustCompile(`^0?[0-7]{3,4}$`)
	intOrPercentRE   = regexp.MustCompile(`^(0|[1-9][0-9]*)(%?)$`)
	unhealthyRangeRE = regexp.MustCompile(`^\[(0|[1-9][0-9]*)-(0|[1-9][0-9]*)\]$`)
	windowsPathRE    = regexp.MustCompile(`^[A-Za-z]:[\\/][^\x00-\x1f<>:"|?*]*$`)
)

const (
	dnsLabelRule      = "must be a DNS-1123 label: at most 63 characters, lower-case letters, digits and '-', starting and ending with a letter or digit"
	qualifiedNameRule = "must be a qualified name: an optional DNS subdomain prefix and '/', then at most 63 characters of letters, digits, '-', '_' and '.', starting and ending with a letter or digit"
	labelValueRule    = "must be empty or at most 63 characters of letters, digits, '-', '_' and '.', starting and ending with a letter or digit"
)

// IsDNSLabel reports whether s is a DNS-1123 label (a name of a cluster, a
// pool, a machine or a provider).
func IsDNSLabel(s string) bool { return len(s) <= 63 && dnsLabelRE.MatchString(s) }

// IsDNSSubdomain reports whether s is a DNS-1123 subdomain: dot-separated
// labels, at most 253 characters.
func IsDNSSubdomain(s string) bool {
	if s == "" || len(s) > 253 {
		return false
	}
	for l := range strings.SplitSeq(s, ".") {
		if !IsDNSLabel(l) {
			return false
		}
	}
	return true
}

// IsQualifiedName reports whether s is a valid label, annotation or taint
// key: "name" or "prefix/name" with a DNS subdomain prefix.
func IsQualifiedName(s string) bool {
	prefix, name, found := strings.Cut(s, "/")
	if !found {
		name, prefix = prefix, ""
	} else if !IsDNSSubdomain(prefix) {
		return false
	}
	return len(name) <= 63 && qualifiedNameRE.MatchString(name)
}

// IsLabelValue reports whether s is a valid label (or taint) value.
func IsLabelValue(s string) bool { return len(s) <= 63 && labelValueRE.MatchString(s) }
