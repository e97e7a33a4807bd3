package realnode

import (
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"syscall"
	"time"
)

// held are the host locks this process holds, with how many holders each.
var held = struct {
	sync.Mutex
	files map[string]*os.File
	count map[string]int
}{files: map[string]*os.File{}, count: map[string]int{}}

// LockHost takes the host-wide lock called name, waiting for it, and
// returns its release. Real nodes' network namespaces, container cgroups,
// routes and iptables rules are the host's: tests that make real nodes
// take LockHost("realnodes") first, because `go test ./...` runs packages
// at once and two packages' nodes would take each other's for leftovers
// (and share the cores). It is an exclusive flock of
// $TMPDIR/capn-<name>.lock, which the kernel releases when the process
// ends, however it ends; logf (may be nil) says when it had to wait.
// Within one process it is counted, not taken again: a test and the
// helpers it calls may each hold it, and each releases once.
func LockHost(name string, logf func(format string, args ...any)) (release func(), err error) {
	held.Lock()
	defer held.Unlock()
	if held.count[name] == 0 {
		path := filepath.Join(os.TempDir(), "capn-"+name+".lock")
		f, err := os.OpenFile(path, os.O_CREATE|os.O_RDWR, 0o600)
		if err != nil {
			return nil, fmt.Errorf("host lock %s: %w", name, err)
		}
		if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
			began := time.Now()
			if logf != nil {
				logf("waiting for the host's %s (%s: another process holds it)", name, path)
			}
			if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX); err != nil {
				f.Close()
				return nil, fmt.Errorf("host lock %s: %w", name, err)
			}
			if logf != nil {
				logf("took the host's %s after %s", name, time.Since(began).Round(time.Millisecond))
			}
		}
		held.files[name] = f
	}
	held.count[name]++
	var once sync.Once
	return func() {
		once.Do(func() {
			held.Lock()
			defer held.Unlock()
			if held.count[name]--; held.count[name] == 0 {
				f := held.files[name]
				delete(held.files, name)
				_ = syscall.Flock(int(f.Fd()), syscall.LOCK_UN)
				f.Close()
			}
		})
	}, nil
}
