package chaos

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/capn-dev/capn/events/store"
	"github.com/capn-dev/capn/internal/testkit"
	capnv1 "github.com/capn-dev/capn/schemas/capn/v1alpha1"
	"github.com/capn-dev/capn/tests/internal/harness"
)

// rank orders a machine's phases: a machine's observed phase may only move
// to a higher rank while its status key lives (Running → Failed → Deleting
// → Deleted are forward moves; Running → Provisioning is a regression).
var rank = map[string]int{
	"Pending": 0, "Bootstrapping": 1, "Provisioning": 2, "Provisioned": 3, "Running": 4,
	"Failed": 5, "Deleting": 6, "Deleted": 7,
}

// monitor watches desired and observed KV through the whole run, across
// server restarts (each watcher resumes after the last revision it saw),
// and records what a final look at KV cannot show: phase regressions,
// every uid a machine name had, and each time a machine's infrastructure
// came into existence.
type monitor struct {
	t   *testing.T
	sys *harness.System

	mu          sync.Mutex
	phase       map[string]string          // observed machine key → last phase
	uids        map[string]map[string]bool // c/m → every uid its desired record had
	desiredLive map[string]bool            // c/m → desired record present
	infraLive   map[string]bool            // c/m → infra key present
	infraBorn   map[string]int             // c/m → times its infra key appeared
	staleBorn   map[string]int             // c/m → times its infra appeared while its desired record was gone or being deleted
	stale       []string                   // those appearances
	regressions []string
	transitions int
	running     int
	revs        map[string]uint64 // watcher → last revision it saw

	cancel context.CancelFunc
	wg     sync.WaitGroup
}

func newMonitor(t *testing.T, sys *harness.System) *monitor {
	m := &monitor{t: t, sys: sys,
		phase: map[string]string{}, uids: map[string]map[string]bool{}, desiredLive: map[string]bool{},
		infraLive: map[string]bool{}, infraBorn: map[string]int{}, staleBorn: map[string]int{}, revs: map[string]uint64{}}
	m.start()
	t.Cleanup(m.stop)
	return m
}

// start (re)creates the watchers, each resuming after the last revision
// it saw.
func (m *monitor) start() {
	ctx, cancel := context.WithCancel(context.Background())
	m.cancel = cancel
	for _, w := range []struct {
		name, keys string
		kv         jetstream.KeyValue
	}{{"desired", "machine.>", m.sys.Desired}, {"observed", "machine.>", m.sys.Observed}, {"observed", "infra.sim.>", m.sys.Observed}} {
		id := w.name + " " + w.keys
		m.mu.Lock()
		rev := m.revs[id]
		m.mu.Unlock()
		var opts []jetstream.WatchOpt
		if rev > 0 {
			opts = append(opts, jetstream.ResumeFromRevision(rev+1))
		}
		var watcher jetstream.KeyWatcher
		if err := testkit.Poll(10*time.Second, 100*time.Millisecond, func() (err error) {
			watcher, err = w.kv.Watch(ctx, w.keys, opts...)
			return err
		}); err != nil {
			m.t.Fatalf("monitor: watch %s: %v", id, err)
		}
		m.wg.Add(1)
		go func() {
			defer m.wg.Done()
			defer watcher.Stop()
			for {
				select {
				case <-ctx.Done():
					return
				case e, ok := <-watcher.Updates():
					if !ok {
						return
					}
					if e != nil {
						m.see(w.name, id, e)
					}
				}
			}
		}()
	}
}

func (m *monitor) stop() {
	if m.cancel != nil {
		m.cancel()
		m.wg.Wait()
		m.cancel = nil
	}
}

// restart resumes the watchers after a server restart.
func (m *monitor) restart() {
	m.stop()
	m.start()
}

// cm is "cluster/machine" of a key <prefix>.<cluster>.<machine>.
func cm(key, prefix string) (string, bool) {
	rest, ok := strings.CutPrefix(key, prefix)
	if !ok {
		return "", false
	}
	c, mach, ok := strings.Cut(rest, ".")
	return c + "/" + mach, ok && mach != "_"
}

func (m *monitor) see(bucket, watcher string, e jetstream.KeyValueEntry) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if e.Revision() > m.revs[watcher] {
		m.revs[watcher] = e.Revision()
	}
	put := e.Operation() == jetstream.KeyValuePut
	switch {
	case bucket == "desired":
		k, ok := cm(e.Key(), "machine.")
		if !ok {
			return
		}
		m.desiredLive[k] = put
		if !put {
			return
		}
		mach, err := store.Decode(e.Value(), func() *capnv1.Machine { return new(capnv1.Machine) })
		if err != nil {
			m.t.Errorf("monitor: desired %s: %v", e.Key(), err)
			return
		}
		// A machine being deleted is not wanted any more: a create handled
		// now is a stale one, like one handled after the record is gone.
		m.desiredLive[k] = mach.GetMetadata().GetDeletionTimestamp() == nil
		if m.uids[k] == nil {
			m.uids[k] = map[string]bool{}
		}
		m.uids[k][mach.GetMetadata().GetUid()] = true
	case strings.HasPrefix(e.Key(), "machine."):
		if !put {
			if m.phase[e.Key()] == "Running" {
				m.running--
			}
			delete(m.phase, e.Key())
			return
		}
		st, err := store.Decode(e.Value(), func() *capnv1.MachineStatus { return new(capnv1.MachineStatus) })
		if err != nil {
			m.t.Errorf("monitor: observed %s: %v", e.Key(), err)
			return
		}
		before, had := m.phase[e.Key()]
		now := st.GetPhase()
		if had && before != now {
			m.transitions++
			if rank[now] < rank[before] {
				m.regressions = append(m.regressions, fmt.Sprintf("%s: %s → %s (revision %d)", e.Key(), before, now, e.Revision()))
			}
		}
		if before == "Running" && now != "Running" {
			m.running--
		}
		if now == "Running" && before != "Running" {
			m.running++
		}
		m.phase[e.Key()] = now
	default: // infra.sim.<c>.<m>
		k, ok := cm(e.Key(), "infra.sim.")
		if !ok {
			return
		}
		live := put
		if put {
			im, err := store.Decode(e.Value(), func() *capnv1.InfraMachine { return new(capnv1.InfraMachine) })
			if err != nil {
				m.t.Errorf("monitor: infra %s: %v", e.Key(), err)
				return
			}
			live = im.GetStateValue() != capnv1.InfraDeleted
		}
		if live && !m.infraLive[k] {
			if m.desiredLive[k] {
				m.infraBorn[k]++
			} else {
				// A create handled after its machine's delete (a stale,
				// replayed or redelivered command): not a second machine,
				// but infrastructure that the machine-manager's orphan
				// collector must delete (the final check finds any left).
				m.staleBorn[k]++
				m.stale = append(m.stale, fmt.Sprintf("%s (revision %d)", k, e.Revision()))
			}
		}
		m.infraLive[k] = live
	}
}

// runningCount is how many machines are Running now.
func (m *monitor) runningCount() int {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.running
}

// snapshot of what the monitor found.
type monitorFigures struct {
	transitions, machineNames, uids, infraBirths int
	regressions, doubleInfra, stale              []string
}

func (m *monitor) figures() monitorFigures {
	m.mu.Lock()
	defer m.mu.Unlock()
	f := monitorFigures{transitions: m.transitions, machineNames: len(m.uids),
		regressions: append([]string(nil), m.regressions...), stale: append([]string(nil), m.stale...)}
	for k, set := range m.uids {
		f.uids += len(set)
		if n := m.infraBorn[k]; n > len(set) {
			f.doubleInfra = append(f.doubleInfra, fmt.Sprintf("%s: infrastructure created %d times for %d machine uid(s)", k, n, len(set)))
		}
	}
	for k, n := range m.infraBorn {
		f.infraBirths += n
		if m.uids[k] == nil {
			f.doubleInfra = append(f.doubleInfra, fmt.Sprintf("%s: infrastructure created %d times for a machine never desired", k, n))
		}
	}
	return f
}

// uidsOf is how many uids a machine name had, and how many times its
// infrastructure was created by a stale create after its delete.
func (m *monitor) uidsOf(k string) (uids, stale int) {
	m.mu.Lock()
	defer m.mu.Unlock()
	return len(m.uids[k]), m.staleBorn[k]
}

// waitQuiet waits until the work queues are empty and every consumer has
// nothing pending or unacknowledged: everything injected was handled.
func waitQuiet(t *testing.T, sys *harness.System, timeout time.Duration) {
	t.Helper()
	if err := testkit.Poll(timeout, 200*time.Millisecond, func() error {
		busy, err := busyConsumers(sys.JS)
		if err == nil && busy != "" {
			err = errors.New(busy)
		}
		return err
	}); err != nil {
		t.Fatalf("not quiet after %s: %v", timeout, err)
	}
}

// waitSettled is waitQuiet, then until no machine infrastructure is left
// without its machine, then waitQuiet again: the orphan collector deletes
// what a stale create made from a watch, after the consumers went quiet,
// so its work is invisible to waitQuiet alone. The checks that follow are
// strict; this only gives the collector its time, and logs how long it took.
func waitSettled(t *testing.T, sys *harness.System, timeout time.Duration) {
	t.Helper()
	waitQuiet(t, sys, timeout)
	start := time.Now()
	if err := testkit.Poll(timeout, 100*time.Millisecond, func() error {
		orphans := 0
		for _, k := range harness.Keys(t, sys.Observed, "infra.sim.") {
			c, m, _ := strings.Cut(strings.TrimPrefix(k, "infra.sim."), ".")
			if m == "_" {
				continue
			}
			if _, _, err := sys.Machines.Get(context.Background(), "machine."+c+"."+m); errors.Is(err, store.ErrNotFound) {
				orphans++
			}
		}
		if orphans > 0 {
			return fmt.Errorf("%d infrastructure records still without a machine after %s: the check below names them", orphans, timeout)
		}
		return nil
	}); err != nil {
		t.Log(err)
	}
	if d := time.Since(start); d > 150*time.Millisecond {
		t.Logf("orphaned infrastructure collected %s after the consumers went quiet", d.Round(time.Millisecond))
	}
	waitQuiet(t, sys, timeout)
}

func busyConsumers(js jetstream.JetStream) (string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	var busy []string
	for _, name := range []string{"CAPN_COMMANDS", "CAPN_PROVIDERS", "CAPN_EVENTS"} {
		s, err := js.Stream(ctx, name)
		if err != nil {
			return "", err
		}
		cs := s.ListConsumers(ctx)
		for ci := range cs.Info() {
			if n := ci.NumPending + uint64(ci.NumAckPending); n > 0 {
				busy = append(busy, fmt.Sprintf("%s/%s: %d pending, %d unacknowledged", name, ci.Name, ci.NumPending, ci.NumAckPending))
			}
		}
		if err := cs.Err(); err != nil && !errors.Is(err, jetstream.ErrEndOfData) {
			return "", err
		}
	}
	return strings.Join(busy, "; "), nil
}
