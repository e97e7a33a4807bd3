package controlplanehosted

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"time"
)

// Binaries a hosted control plane runs, from the directory of its
// Kubernetes version.
var Binaries = []string{"etcd", "kube-apiserver", "kube-controller-manager", "kube-scheduler"}

// kubeBins finds the directory of a Kubernetes version among the
// configured ones (colon-separated, as make kube prints them; the process
// provider reads the same list): the one whose kube-apiserver --version
// says it, remembered while the file is unchanged, so binaries built
// after the start count.
type kubeBins struct {
	dirs  []string
	mu    sync.Mutex
	known map[string]binStamp
}

type binStamp struct {
	size    int64
	mod     time.Time
	version string
}

func newKubeBins(list string) *kubeBins {
	var dirs []string
	for _, d := range filepath.SplitList(list) {
		if d = strings.TrimSpace(d); d != "" {
			dirs = append(dirs, d)
		}
	}
	return &kubeBins{dirs: dirs, known: map[string]binStamp{}}
}

// forVersion is the directory holding every binary of version.
func (k *kubeBins) forVersion(ctx context.Context, version string) (string, error) {
	var have []string
	for _, d := range k.dirs {
		v := k.version(ctx, filepath.Join(d, "kube-apiserver"))
		if v == "" {
			continue
		}
		if v != version {
			have = append(have, v)
			continue
		}
		for _, b := range Binaries {
			if fi, err := os.Stat(filepath.Join(d, b)); err != nil || fi.Mode().Perm()&0o111 == 0 {
				return "", fmt.Errorf("kube-bin %s (Kubernetes %s) has no %s", d, version, b)
			}
		}
		return d, nil
	}
	if len(have) == 0 {
		have = []string{"none"}
	}
	return "", fmt.Errorf("the Kubernetes %s binaries are not built here (have %s): run make kube KUBE_VERSIONS=%q and give the service the bin directories (--kube-bin, colon-separated)", version, strings.Join(have, ", "), version)
}

var versionRe = regexp.MustCompile(`Kubernetes (v[0-9]+\.[0-9]+\.[0-9]+\S*)`)

func (k *kubeBins) version(ctx context.Context, path string) string {
	fi, err := os.Stat(path)
	if err != nil || !fi.Mode().IsRegular() || fi.Mode().Perm()&0o111 == 0 {
		return ""
	}
	k.mu.Lock()
	defer k.mu.Unlock()
	if s, ok := k.known[path]; ok && s.size == fi.Size() && s.mod.Equal(fi.ModTime()) {
		return s.version
	}
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	out, err := exec.CommandContext(ctx, path, "--version").CombinedOutput()
	if err != nil {
		return ""
	}
	m := versionRe.FindSubmatch(out)
	if m == nil {
		return ""
	}
	k.known[path] = binStamp{size: fi.Size(), mod: fi.ModTime(), version: string(m[1])}
	return string(m[1])
}
