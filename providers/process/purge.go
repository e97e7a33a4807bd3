package process

import (
	"errors"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
)

// Purge stops every machine and endpoint process recorded in the state
// dir of opts (verified as its own in /proc, as always) and removes the
// state dir: what a test's cleanup, or an operator abandoning a host,
// runs. Processes get opts.StopTimeout after SIGTERM.
func Purge(opts Options) error {
	opts = opts.withDefaults()
	p := &Provider{opts: opts, dirs: layout{opts.StateDir}, children: map[string]*child{}}
	var errs []error
	recs, err := p.records()
	errs = append(errs, err)
	for _, rec := range recs {
		errs = append(errs, p.stopNode(rec))
	}
	clusters, err := p.dirs.clusterNames()
	errs = append(errs, err)
	for _, c := range clusters {
		rec := new(clusterRecord)
		if readJSON(filepath.Join(p.dirs.cluster(c), clusterFile), rec) != nil {
			continue
		}
		if ref, ok := readRef(filepath.Join(p.dirs.cluster(c), endpointPID)); ok {
			errs = append(errs, terminate(ref, p.endpointArgs(rec), opts.StopTimeout, nil))
		}
	}
	// Anything else that runs in the state dir (a pid file lost in a
	// crash): capn-node processes whose working directory is in it.
	for _, pid := range strays(opts.StateDir) {
		_ = syscall.Kill(pid, syscall.SIGKILL)
	}
	// Real nodes, whether or not opts says node mode: lan.json does.
	errs = append(errs, purgeRealNodes(opts))
	errs = append(errs, os.RemoveAll(opts.StateDir))
	return errors.Join(errs...)
}

// strays are the capn-node processes of this pid namespace whose working
// directory is under dir (every machine and endpoint runs in its own).
func strays(dir string) []int {
	self, _ := os.Readlink("/proc/self/ns/pid")
	ents, _ := os.ReadDir("/proc")
	var out []int
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		base := filepath.Join("/proc", e.Name())
		ns, _ := os.Readlink(filepath.Join(base, "ns", "pid"))
		cwd, err := os.Readlink(filepath.Join(base, "cwd"))
		if err != nil || ns != self || !strings.HasPrefix(cwd+"/", filepath.Clean(dir)+"/") {
			continue
		}
		if args, err := cmdline(pid); err == nil && filepath.Base(args[0]) == NodeBinaryName {
			out = append(out, pid)
		}
	}
	return out
}
