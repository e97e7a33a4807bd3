package process

import (
	"errors"
	"os"
	"path/filepath"
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
	errs = append(errs, os.RemoveAll(opts.StateDir))
	return errors.Join(errs...)
}
