package gateway

import (
	"errors"
	"net/http"
	"slices"
	"strings"

	"github.com/capn-dev/capn/events/store"
	"github.com/capn-dev/capn/gateway/api"
	capnv1 "github.com/capn-dev/capn/schemas/capn/v1alpha1"
	"github.com/capn-dev/capn/schemas/keys"
)

// listMachines is GET /v1/clusters/{name}/machines[?labelSelector=]: a
// MachineList of the cluster's machines, each its desired spec (written by
// the cluster-planner) and observed status (the machine-manager's), sorted
// by name. A machine whose spec is gone but whose status is left (its
// infrastructure is being deleted) is listed with its status only. 404 when
// the cluster does not exist and has no machine left.
func (s *server) listMachines(w http.ResponseWriter, r *http.Request) error {
	name, err := pathName(r, "name")
	if err != nil {
		return err
	}
	sel, err := selectorFrom(r)
	if err != nil {
		return err
	}
	ctx := r.Context()
	prefix := keys.MachinesOf(name)
	desired, badDesired, err := s.machines.ListSkipping(ctx, prefix)
	if err != nil {
		return err
	}
	observed, badObserved, err := s.machineStatuses.ListSkipping(ctx, prefix)
	if err != nil {
		return err
	}
	s.skipped(w, r, api.KindMachine, badDesired)
	s.skipped(w, r, kindMachineStatus, badObserved)
	if len(desired) == 0 && len(observed) == 0 && len(badDesired) == 0 {
		if _, _, err := s.clusters.Get(ctx, keys.Cluster(name)); errors.Is(err, store.ErrNotFound) {
			return notFound("cluster %s not found", name)
		} else if err != nil && !errors.Is(err, store.ErrCorrupt) {
			return err
		}
	}
	type pair struct {
		m   *capnv1.Machine
		rev uint64
		st  *capnv1.MachineStatus
	}
	byName := map[string]*pair{}
	get := func(key string) *pair {
		n := strings.TrimPrefix(key, prefix)
		if byName[n] == nil {
			byName[n] = &pair{}
		}
		return byName[n]
	}
	for _, e := range desired {
		p := get(e.Key)
		p.m, p.rev = e.Value, e.Revision
	}
	for _, e := range observed {
		get(e.Key).st = e.Value
	}
	for _, ce := range badDesired {
		delete(byName, strings.TrimPrefix(ce.Key, prefix)) // not shown as a machine whose spec is gone
	}
	names := make([]string, 0, len(byName))
	for n := range byName {
		names = append(names, n)
	}
	slices.Sort(names)
	items := make([]*capnv1.Machine, 0, len(names))
	for _, n := range names {
		p := byName[n]
		m := machineObject(n, p.m, p.rev, p.st)
		if matches(sel, m.GetMetadata()) {
			items = append(items, m)
		}
	}
	list, err := listOf(api.KindMachineList, items)
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, list)
	return nil
}

// getMachine is GET /v1/clusters/{name}/machines/{machine}.
func (s *server) getMachine(w http.ResponseWriter, r *http.Request) error {
	cluster, err := pathName(r, "name")
	if err != nil {
		return err
	}
	name, err := pathName(r, "machine")
	if err != nil {
		return err
	}
	ctx := r.Context()
	key := keys.Machine(cluster, name)
	m, rev, err := s.machines.Get(ctx, key)
	if err != nil && !errors.Is(err, store.ErrNotFound) {
		return err
	}
	st, _, serr := s.machineStatuses.Get(ctx, key)
	if serr != nil && !errors.Is(serr, store.ErrNotFound) {
		return serr
	}
	if m == nil && st == nil {
		return notFound("machine %s of cluster %s not found", name, cluster)
	}
	b, err := marshalObject(machineObject(name, m, rev, st))
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, b)
	return nil
}
