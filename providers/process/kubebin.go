package process

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

// BootstrapKubeLocal is the bootstrap provider whose machines run real
// Kubernetes from --kube-bin (services/bootstrapper/bootstrap/kubelocal).
const BootstrapKubeLocal = "kube-local"

// KubeBin is one directory of Options.KubeBin and the Kubernetes version
// its kube-apiserver reports.
type KubeBin struct {
	Dir     string
	Version string
}

// SplitKubeBin splits a --kube-bin list (directories separated by ':', as
// PATH; `make kube` gives one per version) into its directories, empty
// entries dropped.
func SplitKubeBin(list string) []string {
	var out []string
	for _, d := range filepath.SplitList(list) {
		if d = strings.TrimSpace(d); d != "" {
			out = append(out, d)
		}
	}
	return out
}

// kubeBins reads which Kubernetes version each --kube-bin directory holds
// (`kube-apiserver --version`, remembered while the file is unchanged), so
// binaries built after the start count. Directories without a
// kube-apiserver that answers are left out. Sorted oldest first.
type kubeBins struct {
	mu    sync.Mutex
	known map[string]kubeBinStamp // by kube-apiserver path
}

type kubeBinStamp struct {
	size    int64
	mod     time.Time
	version string
}

// list is every directory with a working kube-apiserver and its version,
// oldest first.
func (k *kubeBins) list(ctx context.Context, dirs []string) []KubeBin {
	var out []KubeBin
	for _, d := range dirs {
		if v := k.version(ctx, filepath.Join(d, "kube-apiserver")); v != "" {
			out = append(out, KubeBin{Dir: d, Version: v})
		}
	}
	slices.SortStableFunc(out, func(a, b KubeBin) int { return manifest.CompareVersions(a.Version, b.Version) })
	return out
}

func (k *kubeBins) version(ctx context.Context, apiserver string) string {
	fi, err := os.Stat(apiserver)
	if err != nil || !fi.Mode().IsRegular() || fi.Mode().Perm()&0o111 == 0 {
		return ""
	}
	k.mu.Lock()
	defer k.mu.Unlock()
	if s, ok := k.known[apiserver]; ok && s.size == fi.Size() && s.mod.Equal(fi.ModTime()) {
		return s.version
	}
	v, err := binaryVersion(ctx, apiserver)
	if err != nil {
		return ""
	}
	if k.known == nil {
		k.known = map[string]kubeBinStamp{}
	}
	k.known[apiserver] = kubeBinStamp{size: fi.Size(), mod: fi.ModTime(), version: v}
	return v
}

// forVersion is the directory of version, or an error that names the
// version, what is built and the make kube that builds it.
func (k *kubeBins) forVersion(ctx context.Context, dirs []string, version string) (string, error) {
	bins := k.list(ctx, dirs)
	have := make([]string, 0, len(bins))
	for _, b := range bins {
		if b.Version == version {
			return b.Dir, nil
		}
		have = append(have, b.Version)
	}
	return "", &MissingVersionError{Version: version, Have: have}
}

// MissingVersionError is a machine's Kubernetes version that no --kube-bin
// directory holds.
type MissingVersionError struct {
	Version string
	Have    []string // oldest first
}

func (e *MissingVersionError) Error() string {
	have := "none"
	if len(e.Have) > 0 {
		have = strings.Join(e.Have, ", ")
	}
	want := slices.Clone(e.Have)
	want = append(want, e.Version)
	slices.SortStableFunc(want, manifest.CompareVersions)
	return fmt.Sprintf("Kubernetes %s binaries are not built here (have %s): run make kube KUBE_VERSIONS=\"%s\" and give the provider the bin directories (--kube-bin, colon-separated)",
		e.Version, have, strings.Join(want, " "))
}

var versionRe = regexp.MustCompile(`Kubernetes (v[0-9]+\.[0-9]+\.[0-9]+\S*)`)

// binaryVersion runs `<path> --version` and reads "Kubernetes vX.Y.Z".
func binaryVersion(ctx context.Context, path string) (string, error) {
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	out, err := exec.CommandContext(ctx, path, "--version").CombinedOutput()
	if err != nil {
		return "", fmt.Errorf("%s --version: %w", path, err)
	}
	m := versionRe.FindSubmatch(out)
	if m == nil {
		return "", fmt.Errorf("%s --version printed %q, not Kubernetes vX.Y.Z", path, strings.TrimSpace(string(out)))
	}
	return string(m[1]), nil
}
