package policy

import (
	"fmt"
	"regexp"
	"strconv"
	"strings"
)

// Threshold is a max-unhealthy setting: a count ("2"), a percentage of the
// pool ("40%", rounded down, as Cluster API's maxUnhealthy) or an inclusive
// range of counts ("[1-3]", Cluster API's unhealthyRange). The zero value
// allows nothing but zero unhealthy machines.
type Threshold struct {
	kind thresholdKind
	a, b int
}

type thresholdKind uint8

const (
	count thresholdKind = iota
	percent
	between
)

var rangeRE = regexp.MustCompile(`^\[(0|[1-9][0-9]*)-(0|[1-9][0-9]*)\]$`)

// ParseThreshold parses a count, a percentage or a range "[a-b]" with a <= b.
func ParseThreshold(s string) (Threshold, error) {
	if m := rangeRE.FindStringSubmatch(s); m != nil {
		a, errA := strconv.Atoi(m[1])
		b, errB := strconv.Atoi(m[2])
		if errA != nil || errB != nil || a > b {
			return Threshold{}, fmt.Errorf("%q: a range [a-b] needs 0 <= a <= b", s)
		}
		return Threshold{kind: between, a: a, b: b}, nil
	}
	if p, ok := strings.CutSuffix(s, "%"); ok {
		n, err := strconv.Atoi(p)
		if err != nil || n < 0 {
			return Threshold{}, fmt.Errorf("%q: want a count, a percentage such as \"40%%\" or a range such as \"[1-3]\"", s)
		}
		return Threshold{kind: percent, a: n}, nil
	}
	n, err := strconv.Atoi(s)
	if err != nil || n < 0 {
		return Threshold{}, fmt.Errorf("%q: want a count, a percentage such as \"40%%\" or a range such as \"[1-3]\"", s)
	}
	return Threshold{kind: count, a: n}, nil
}

// MustThreshold is ParseThreshold for constants; it panics on a bad one.
func MustThreshold(s string) Threshold {
	t, err := ParseThreshold(s)
	if err != nil {
		panic(err)
	}
	return t
}

// Allows reports whether repairs may go on with unhealthy of total machines
// unhealthy: unhealthy <= the count, or <= floor(percent × total / 100), or
// within the range.
func (t Threshold) Allows(unhealthy, total int) bool {
	switch t.kind {
	case between:
		return unhealthy >= t.a && unhealthy <= t.b
	case percent:
		return unhealthy <= t.a*total/100
	}
	return unhealthy <= t.a
}

// Describe says what t allows for a pool of total machines, for messages:
// "40% of 5 = 2", "2", "[1-3]".
func (t Threshold) Describe(total int) string {
	switch t.kind {
	case between:
		return t.String()
	case percent:
		return fmt.Sprintf("%s of %d = %d", t, total, t.a*total/100)
	}
	return t.String()
}

// String is the setting as written.
func (t Threshold) String() string {
	switch t.kind {
	case between:
		return fmt.Sprintf("[%d-%d]", t.a, t.b)
	case percent:
		return fmt.Sprintf("%d%%", t.a)
	}
	return strconv.Itoa(t.a)
}
