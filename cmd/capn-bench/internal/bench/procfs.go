package bench

import (
	"bufio"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
)

// The hosted benchmark reads its figures from /proc: which processes
// belong to which control plane (their command line names a file under
// the control plane's directory), their CPU time (stat) and resident set
// (status), and the memory the machine has left (meminfo). The parsing is
// apart from the reading so that it can be tested on fixed text.

// parseStatCPU is the user+system CPU time, in clock ticks, of the content
// of a /proc/<pid>/stat.
func parseStatCPU(stat string) (float64, error) {
	// The command name (field 2) may hold spaces and parentheses; the
	// fields after its last closing parenthesis are space-separated: the
	// state is field 3, utime field 14, stime field 15.
	i := strings.LastIndexByte(stat, ')')
	if i < 0 || i+2 > len(stat) {
		return 0, fmt.Errorf("no command name in %q", stat)
	}
	f := strings.Fields(stat[i+1:])
	if len(f) < 13 {
		return 0, fmt.Errorf("%d fields after the command name, want at least 13: %q", len(f), stat)
	}
	ut, err1 := strconv.ParseFloat(f[11], 64)
	st, err2 := strconv.ParseFloat(f[12], 64)
	if err1 != nil || err2 != nil {
		return 0, fmt.Errorf("utime %q, stime %q: not numbers", f[11], f[12])
	}
	return ut + st, nil
}

// parseKiB is the value in MiB of the first line of a /proc file (status,
// meminfo) that starts with field, "VmRSS:" or "MemAvailable:", given in
// kB.
func parseKiB(text, field string) (float64, error) {
	sc := bufio.NewScanner(strings.NewReader(text))
	for sc.Scan() {
		v, ok := strings.CutPrefix(sc.Text(), field)
		if !ok {
			continue
		}
		num, unit, _ := strings.Cut(strings.TrimSpace(v), " ")
		kb, err := strconv.ParseFloat(num, 64)
		if err != nil || unit != "kB" {
			return 0, fmt.Errorf("%s %q: want a number of kB", field, strings.TrimSpace(v))
		}
		return kb / 1024, nil
	}
	return 0, fmt.Errorf("no %s line", field)
}

// memAvailableMiB is what the kernel says can be allocated without
// swapping (MemAvailable).
func memAvailableMiB() (float64, error) {
	b, err := os.ReadFile("/proc/meminfo")
	if err != nil {
		return 0, err
	}
	return parseKiB(string(b), "MemAvailable:")
}

// ownerUnder is the name of the directory right under root that one of
// argv's arguments names a file in ("--data-dir=<root>/c1/etcd-0": c1),
// or "" if none does.
func ownerUnder(argv []string, root string) string {
	prefix := strings.TrimSuffix(root, "/") + "/"
	for _, a := range argv {
		i := strings.Index(a, prefix)
		if i < 0 {
			continue
		}
		rest := a[i+len(prefix):]
		if j := strings.IndexByte(rest, '/'); j >= 0 {
			rest = rest[:j]
		}
		if rest != "" && rest != "." && rest != ".." {
			return rest
		}
	}
	return ""
}

// proc is one process found under a directory.
type proc struct {
	PID   int
	Name  string // its executable's base name (argv[0])
	Owner string // the directory under the root it belongs to
}

// procsUnder are the processes whose command line names a file under root,
// by the directory right under root they belong to (ownerUnder).
func procsUnder(root string) map[string][]proc {
	out := map[string][]proc{}
	paths, _ := filepath.Glob("/proc/[0-9]*/cmdline")
	for _, p := range paths {
		b, err := os.ReadFile(p)
		if err != nil || len(b) == 0 {
			continue // gone, or a kernel thread
		}
		argv := strings.Split(strings.TrimRight(string(b), "\x00"), "\x00")
		owner := ownerUnder(argv, root)
		if owner == "" {
			continue
		}
		pid, err := strconv.Atoi(filepath.Base(filepath.Dir(p)))
		if err != nil {
			continue
		}
		out[owner] = append(out[owner], proc{PID: pid, Name: filepath.Base(argv[0]), Owner: owner})
	}
	for _, ps := range out {
		slices.SortFunc(ps, func(a, b proc) int { return strings.Compare(a.Name, b.Name) })
	}
	return out
}

// percentile is the nearest-rank p-th percentile (0 < p <= 1) of xs: the
// smallest value at least a fraction p of them are at or below; 0 for
// none.
func percentile(xs []float64, p float64) float64 {
	if len(xs) == 0 {
		return 0
	}
	s := slices.Clone(xs)
	slices.Sort(s)
	i := int(math.Ceil(p*float64(len(s)))) - 1
	return s[min(max(i, 0), len(s)-1)]
}

// Sizing of --hosted auto: the share of the available memory the
// benchmark may fill, and what one 1-replica hosted control plane was
// measured to take (docs/benchmarks.md, 468–484 MiB).
const (
	hostedAutoShare   = 0.5
	hostedAutoPerCP   = 500.0 // MiB
	hostedAutoCeiling = 20
)

// pickHosted is how many hosted control planes --hosted auto runs on a
// machine with availMiB available, and why.
func pickHosted(availMiB float64) (int, string) {
	fit := int(hostedAutoShare * availMiB / hostedAutoPerCP)
	n := min(max(fit, 1), hostedAutoCeiling)
	why := fmt.Sprintf("%.1f GiB available; half of it at %.0f MiB per control plane (the earlier measure) is %d", availMiB/1024, hostedAutoPerCP, fit)
	switch {
	case fit > hostedAutoCeiling:
		why += fmt.Sprintf(", capped at %d: the machine is shared and every API server starting at once is CPU-bound", hostedAutoCeiling)
	case fit < 1:
		why += ", run 1 anyway"
	}
	return n, why
}
