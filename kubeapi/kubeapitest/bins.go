package kubeapitest

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/capn-dev/capn/schemas/manifest"
)

// Bin is one directory of Kubernetes binaries and the version its
// kube-apiserver reports.
type Bin struct {
	Dir, Version string
}

// Bins reads list — $CAPN_KUBE_BIN: bin directories separated by ':', one
// per Kubernetes version as `make kube` builds them (KUBE_VERSIONS); a
// single directory is a list of one — and returns the directories that
// hold every binary of need (and a kube-apiserver that answers
// --version), sorted oldest version first, and why each other one was
// left out.
func Bins(list string, need ...string) (bins []Bin, skipped []string) {
	for _, dir := range filepath.SplitList(list) {
		if dir == "" {
			continue
		}
		var missing []string
		for _, b := range append(slices.Clone(need), "kube-apiserver") {
			if fi, err := os.Stat(filepath.Join(dir, b)); err != nil || fi.IsDir() || fi.Mode()&0o111 == 0 {
				if !slices.Contains(missing, b) {
					missing = append(missing, b)
				}
			}
		}
		if len(missing) > 0 {
			skipped = append(skipped, fmt.Sprintf("%s has no %s", dir, strings.Join(missing, ", ")))
			continue
		}
		v, err := apiserverVersion(filepath.Join(dir, "kube-apiserver"))
		if err != nil {
			skipped = append(skipped, err.Error())
			continue
		}
		bins = append(bins, Bin{Dir: dir, Version: v})
	}
	slices.SortStableFunc(bins, func(a, b Bin) int {
		va, erra := manifest.ParseVersion(a.Version)
		vb, errb := manifest.ParseVersion(b.Version)
		if erra != nil || errb != nil {
			return strings.Compare(a.Version, b.Version)
		}
		return va.Compare(vb)
	})
	return bins, skipped
}

// Newest is the directory of $CAPN_KUBE_BIN's newest version that holds
// every binary of need, or "" and why there is none.
func Newest(need ...string) (dir, why string) {
	list := os.Getenv("CAPN_KUBE_BIN")
	if list == "" {
		return "", "CAPN_KUBE_BIN is not set"
	}
	bins, skipped := Bins(list, need...)
	if len(bins) == 0 {
		return "", "CAPN_KUBE_BIN: " + strings.Join(skipped, "; ")
	}
	return bins[len(bins)-1].Dir, ""
}

var (
	versionRe = regexp.MustCompile(`Kubernetes (v[0-9]+\.[0-9]+\.[0-9]+\S*)`)
	versionMu sync.Mutex
	versions  = map[string]string{} // by kube-apiserver path, for this test binary
)

// apiserverVersion is what path --version says, asked once per path.
func apiserverVersion(path string) (string, error) {
	versionMu.Lock()
	defer versionMu.Unlock()
	if v, ok := versions[path]; ok {
		return v, nil
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	out, err := exec.CommandContext(ctx, path, "--version").CombinedOutput()
	m := versionRe.FindSubmatch(out)
	if err != nil || m == nil {
		return "", fmt.Errorf("%s --version: %v: %s", path, err, strings.TrimSpace(string(out)))
	}
	versions[path] = string(m[1])
	return versions[path], nil
}
