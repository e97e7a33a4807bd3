package e2e

import (
	"context"
	"fmt"
	"strings"
	"sync"

	"github.com/capn-dev/capn/events/store"
	capnv1 "github.com/capn-dev/capn/schemas/capn/v1alpha1"
)

// poolCounts is one pool at one moment: machines that exist (not yet
// gone), available ones (observed Running) and those on a given version.
type poolCounts struct {
	Total, Available int
	ByVersion        map[string]int
	AvailByVersion   map[string]int
}

// snapshot is the whole cluster at one revision.
type snapshot struct {
	Revision uint64
	Pools    map[string]poolCounts
}

// recorder watches desired and observed machines of one cluster and keeps a
// snapshot after every change, so a test can assert bounds that must hold
// at every moment, not only at the end.
type recorder struct {
	mu        sync.Mutex
	cluster   string
	machines  map[string]*capnv1.Machine
	statuses  map[string]*capnv1.MachineStatus
	snapshots []snapshot
}

func (w *world) record(cluster string) *recorder {
	r := &recorder{cluster: cluster, machines: map[string]*capnv1.Machine{}, statuses: map[string]*capnv1.MachineStatus{}}
	ctx, cancel := context.WithCancel(context.Background())
	w.t.Cleanup(cancel)
	for _, kv := range []struct {
		c       *store.Cache
		desired bool
	}{{store.NewCache(w.Desired, store.CacheOptions{}), true}, {store.NewCache(w.Observed, store.CacheOptions{}), false}} {
		if err := kv.c.Start(ctx); err != nil {
			w.t.Fatal(err)
		}
		sub := kv.c.Subscribe("machine." + cluster + ".")
		go func(desired bool) {
			for ch := range sub.C() {
				if ch.Resync {
					continue
				}
				name := strings.TrimPrefix(ch.Key, "machine."+cluster+".")
				r.apply(desired, name, ch)
			}
		}(kv.desired)
	}
	return r
}

func (r *recorder) apply(desired bool, name string, ch store.Change) {
	r.mu.Lock()
	defer r.mu.Unlock()
	switch {
	case ch.Op == store.OpDelete && desired:
		delete(r.machines, name)
	case ch.Op == store.OpDelete:
		delete(r.statuses, name)
	case desired:
		m, err := store.Decode(ch.Value, func() *capnv1.Machine { return new(capnv1.Machine) })
		if err == nil {
			r.machines[name] = m
		}
	default:
		st, err := store.Decode(ch.Value, func() *capnv1.MachineStatus { return new(capnv1.MachineStatus) })
		if err == nil {
			r.statuses[name] = st
		}
	}
	snap := snapshot{Revision: ch.Revision, Pools: map[string]poolCounts{}}
	for n, m := range r.machines {
		pool := m.GetSpec().GetPool()
		pc := snap.Pools[pool]
		if pc.ByVersion == nil {
			pc.ByVersion, pc.AvailByVersion = map[string]int{}, map[string]int{}
		}
		pc.Total++
		v := m.GetSpec().GetVersion()
		pc.ByVersion[v]++
		// Available is what the machine-manager observes: a machine asked to
		// go serves until its status says Deleting.
		if st := r.statuses[n]; st.GetPhase() == "Running" {
			pc.Available++
			pc.AvailByVersion[v]++
		}
		snap.Pools[pool] = pc
	}
	r.snapshots = append(r.snapshots, snap)
}

// since returns the snapshots recorded from index i on.
func (r *recorder) since(i int) []snapshot {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]snapshot(nil), r.snapshots[i:]...)
}

func (r *recorder) mark() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.snapshots)
}

// names lists the machines that exist now, by pool.
func (r *recorder) names() map[string][]string {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := map[string][]string{}
	for n, m := range r.machines {
		out[m.GetSpec().GetPool()] = append(out[m.GetSpec().GetPool()], n)
	}
	return out
}

func (p poolCounts) String() string {
	return fmt.Sprintf("total %d available %d versions %v", p.Total, p.Available, p.ByVersion)
}

func (r *recorder) machine(name string) *capnv1.Machine {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.machines[name]
}
