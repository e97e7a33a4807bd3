package manifest

import (
	"fmt"
	"regexp"
	"strconv"
	"strings"
)

// Version is a Kubernetes version: vMAJOR.MINOR.PATCH with optional
// pre-release and build metadata (v1.34.0-rc.1, v1.33.2+k3s1).
type Version struct {
	Major, Minor, Patch int
	Pre, Build          string
}

var versionRE = regexp.MustCompile(`^v(0|[1-9]\d*)\.(0|[1-9]\d*)\.(0|[1-9]\d*)(?:-([0-9A-Za-z-]+(?:\.[0-9A-Za-z-]+)*))?(?:\+([0-9A-Za-z-]+(?:\.[0-9A-Za-z-]+)*))?$`)

// ParseVersion parses "v1.34.2"; the leading v is required, as Kubernetes
// writes it.
func ParseVersion(s string) (Version, error) {
	m := versionRE.FindStringSubmatch(s)
	if m == nil {
		return Version{}, fmt.Errorf("version %q: must be vMAJOR.MINOR.PATCH, e.g. v1.34.2", s)
	}
	var v Version
	var err error
	for i, dst := range []*int{&v.Major, &v.Minor, &v.Patch} {
		if *dst, err = strconv.Atoi(m[i+1]); err != nil {
			return Version{}, fmt.Errorf("version %q: %w", s, err)
		}
	}
	v.Pre, v.Build = m[4], m[5]
	return v, nil
}

func (v Version) String() string {
	s := fmt.Sprintf("v%d.%d.%d", v.Major, v.Minor, v.Patch)
	if v.Pre != "" {
		s += "-" + v.Pre
	}
	if v.Build != "" {
		s += "+" + v.Build
	}
	return s
}

// Compare orders versions by semantic-version precedence (build metadata is
// ignored): -1 if v < o, 0 if equal, +1 if v > o.
func (v Version) Compare(o Version) int {
	for _, d := range [3]int{v.Major - o.Major, v.Minor - o.Minor, v.Patch - o.Patch} {
		if d != 0 {
			return sign(d)
		}
	}
	return comparePre(v.Pre, o.Pre)
}

// CompareVersions orders two version strings by precedence (Compare);
// a string that is no version sorts after every version, and two such by
// text. For sorting what a binary or a directory says it is.
func CompareVersions(a, b string) int {
	va, erra := ParseVersion(a)
	vb, errb := ParseVersion(b)
	switch {
	case erra == nil && errb == nil:
		return va.Compare(vb)
	case erra == nil:
		return -1
	case errb == nil:
		return 1
	}
	return strings.Compare(a, b)
}

// MinorsAfter is how many minor versions v is ahead of o (negative if behind);
// meaningful when the majors are equal.
func (v Version) MinorsAfter(o Version) int { return v.Minor - o.Minor }

func comparePre(a, b string) int {
	switch {
	case a == b:
		return 0
	case a == "":
		return 1 // a release is newer than its pre-releases
	case b == "":
		return -1
	}
	ap, bp := strings.Split(a, "."), strings.Split(b, ".")
	for i := 0; i < len(ap) && i < len(bp); i++ {
		ai, aerr := strconv.Atoi(ap[i])
		bi, berr := strconv.Atoi(bp[i])
		switch {
		case aerr == nil && berr == nil:
			if ai != bi {
				return sign(ai - bi)
			}
		case aerr == nil:
			return -1 // numeric identifiers sort before alphanumeric ones
		case berr == nil:
			return 1
		default:
			if c := strings.Compare(ap[i], bp[i]); c != 0 {
				return c
			}
		}
	}
	return sign(len(ap) - len(bp))
}

func sign(d int) int {
	switch {
	case d < 0:
		return -1
	case d > 0:
		return 1
	}
	return 0
}
