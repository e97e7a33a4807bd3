package manifest

import (
	"fmt"
	"strconv"
	"strings"
)

// ResolveIntOrPercent turns a count ("2") or a percentage ("25%") of total
// into a count. Percentages round up when roundUp is set (maxSurge) and down
// otherwise (maxUnavailable), as Kubernetes does. Negative values, and
// anything else that is neither, are errors.
func ResolveIntOrPercent(s string, total int, roundUp bool) (int, error) {
	if pct, ok := strings.CutSuffix(s, "%"); ok {
		p, err := strconv.Atoi(pct)
		if err != nil || p < 0 {
			return 0, fmt.Errorf("%q: must be a non-negative integer or a percentage such as \"25%%\"", s)
		}
		if roundUp {
			return (p*total + 99) / 100, nil
		}
		return p * total / 100, nil
	}
	n, err := strconv.Atoi(s)
	if err != nil || n < 0 {
		return 0, fmt.Errorf("%q: must be a non-negative integer or a percentage such as \"25%%\"", s)
	}
	return n, nil
}
