package machinemanager

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"google.golang.org/protobuf/proto"

	"github.com/capn-dev/capn/events"
	"github.com/capn-dev/capn/events/natstest"
	"github.com/capn-dev/capn/events/store"
	capnv1 "github.com/capn-dev/capn/schemas/capn/v1alpha1"
	"github.com/capn-dev/capn/schemas/keys"
)

// forgetful is a watch cache that misses some keys the bucket holds: what
// a replica's cache looks like before another replica's (or a provider's)
// write reaches it, or while its watcher is being re-created.
type forgetful struct {
	cache func() *store.Cache
	mu    sync.Mutex
	hide  map[string]bool
}

func (f *forgetful) Get(key string) (store.RawEntry, bool) {
	f.mu.Lock()
	hidden := f.hide[key]
	f.mu.Unlock()
	if hidden {
		return store.RawEntry{}, false
	}
	return f.cache().Get(key)
}

func (f *forgetful) forget(keys ...string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	for _, k := range keys {
		f.hide[k] = true
	}
}

// confirmWorld is a machine-manager on a real embedded server whose caches
// miss the keys the test says.
type confirmWorld struct {
	t                 *testing.T
	s                 *Service
	js                jetstream.JetStream
	desired, observed *forgetful
	machines          *store.Bucket[*capnv1.Machine]
	statuses          *store.Bucket[*capnv1.MachineStatus]
	infras            *store.Bucket[*capnv1.InfraMachine]
}

func newConfirmWorld(t *testing.T) *confirmWorld {
	t.Helper()
	srv := natstest.Start(t)
	_, js := srv.Connect(t)
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	if err := events.Provision(ctx, js, events.DefaultTopology(1)); err != nil {
		t.Fatal(err)
	}
	dkv, err := js.KeyValue(ctx, events.BucketDesired)
	if err != nil {
		t.Fatal(err)
	}
	okv, err := js.KeyValue(ctx, events.BucketObserved)
	if err != nil {
		t.Fatal(err)
	}
	s := New(Config{})
	w := &confirmWorld{t: t, s: s, js: js,
		desired:  &forgetful{cache: func() *store.Cache { return s.desired }, hide: map[string]bool{}},
		observed: &forgetful{cache: func() *store.Cache { return s.observed }, hide: map[string]bool{}},
		machines: store.NewBucket(dkv, newMachine), statuses: store.NewBucket(okv, newStatus), infras: store.NewBucket(okv, newInfra)}
	s.desiredView, s.observedView = w.desired, w.observed
	if err := s.open(ctx, js); err != nil {
		t.Fatal(err)
	}
	for _, c := range []*store.Cache{s.desired, s.observed} { // as reconcile.Run does
		if err := c.Start(ctx); err != nil {
			t.Fatal(err)
		}
	}
	return w
}

// put writes what exists in the buckets for machine c1.<name> (nil: none)
// and waits until the real caches hold it, so that only the forgetful
// view misses what the test hides.
func (w *confirmWorld) put(name string, m *capnv1.Machine, st *capnv1.MachineStatus, in *capnv1.InfraMachine) {
	w.t.Helper()
	ctx := context.Background()
	key := "c1." + name
	var want []string
	if m != nil {
		m = proto.Clone(m).(*capnv1.Machine)
		m.Metadata.Name = name
		if _, err := w.machines.Create(ctx, keys.MachinePrefix+key, m); err != nil {
			w.t.Fatal(err)
		}
		want = append(want, "desired "+keys.MachinePrefix+key)
	}
	if st != nil {
		if _, err := w.statuses.Create(ctx, keys.MachinePrefix+key, st); err != nil {
			w.t.Fatal(err)
		}
		want = append(want, "observed "+keys.MachinePrefix+key)
	}
	if in != nil {
		in = proto.Clone(in).(*capnv1.InfraMachine)
		in.Machine = name
		if _, err := w.infras.Create(ctx, keys.InfraPrefix+"sim."+key, in); err != nil {
			w.t.Fatal(err)
		}
		want = append(want, "observed "+keys.InfraPrefix+"sim."+key)
	}
	natstest.WaitFor(w.t, 5*time.Second, "the caches to hold what was written", func() bool {
		for _, k := range want {
			c, key := w.s.desired, k[len("desired "):]
			if k[0] == 'o' {
				c, key = w.s.observed, k[len("observed "):]
			}
			if _, ok := c.Get(key); !ok {
				return false
			}
		}
		return true
	})
}

// phase is the machine's status in the bucket ("" when there is none).
func (w *confirmWorld) phase(name string) string {
	w.t.Helper()
	st, _, err := w.statuses.Get(context.Background(), keys.MachinePrefix+"c1."+name)
	if errors.Is(err, store.ErrNotFound) {
		return ""
	}
	if err != nil {
		w.t.Fatal(err)
	}
	return st.GetPhase() + "/" + st.GetFailureReason()
}

// deleteSent tells whether a provider delete of c1.<name> was sent.
func (w *confirmWorld) deleteSent(name string) bool {
	w.t.Helper()
	s, err := w.js.Stream(context.Background(), events.StreamProviders)
	if err != nil {
		w.t.Fatal(err)
	}
	_, err = s.GetLastMsgForSubject(context.Background(), events.ProviderSubject("sim", "machine", "delete", "c1", name))
	if errors.Is(err, jetstream.ErrMsgNotFound) {
		return false
	}
	if err != nil {
		w.t.Fatal(err)
	}
	return true
}

func (w *confirmWorld) reconcile(name string) {
	w.t.Helper()
	if _, err := w.s.reconcile(context.Background(), "c1."+name); err != nil {
		w.t.Fatalf("reconcile %s: %v", name, err)
	}
}

// TestDecisionsOnAbsenceAreConfirmed: a machine-manager whose cache misses
// a key the bucket holds does not act on the miss. A Running machine whose
// infrastructure its cache has not seen stays Running (not
// InfrastructureGone); a machine whose spec its cache has not seen is not
// deleted nor its status forgotten; a deleting machine whose
// infrastructure is still there is not Deleted; a bootstrap answer for a
// machine it has not seen is retried, not dropped. When the bucket agrees
// the key is absent, it acts as before.
func TestDecisionsOnAbsenceAreConfirmed(t *testing.T) {
	w := newConfirmWorld(t)
	running := status(capnv1.MachineRunning.Wire(), withBootstrap)

	// The infrastructure the cache misses: the machine stays Running.
	w.put("m1", machine(false), running, infra("Running"))
	w.observed.forget(keys.InfraPrefix + "sim.c1.m1")
	w.reconcile("m1")
	if got := w.phase("m1"); got != capnv1.MachineRunning.Wire()+"/" {
		t.Errorf("Running machine whose infrastructure the cache missed: %s, want Running", got)
	}

	// The spec the cache misses: no delete, the machine stays Running.
	w.put("m2", machine(false), running, infra("Running"))
	w.desired.forget(keys.MachinePrefix + "c1.m2")
	w.reconcile("m2")
	if got := w.phase("m2"); got != capnv1.MachineRunning.Wire()+"/" {
		t.Errorf("Running machine whose spec the cache missed: %s, want Running", got)
	}
	if w.deleteSent("m2") {
		t.Error("a delete was sent for a machine whose spec is in the bucket")
	}

	// A Deleted machine whose spec is still there: its status is kept.
	w.put("m3", machine(false), status(capnv1.MachineDeleted.Wire(), withBootstrap), nil)
	w.desired.forget(keys.MachinePrefix + "c1.m3")
	w.reconcile("m3")
	if got := w.phase("m3"); got != capnv1.MachineDeleted.Wire()+"/" {
		t.Errorf("Deleted machine whose spec the cache missed: status %q, want kept", got)
	}

	// A deleting machine whose infrastructure the cache misses: Deleting.
	w.put("m4", machine(true), status(capnv1.MachineDeleting.Wire(), withBootstrap), infra("Running"))
	w.observed.forget(keys.InfraPrefix + "sim.c1.m4")
	w.reconcile("m4")
	if got := w.phase("m4"); got != capnv1.MachineDeleting.Wire()+"/" {
		t.Errorf("deleting machine whose infrastructure the cache missed: %s, want Deleting", got)
	}

	// A bootstrap answer before any status (a machine waits for its data
	// unwritten), for a machine the cache has not seen: not dropped; the
	// bucket has it, so the answer makes its first status.
	w.put("m5", machine(false), nil, nil)
	w.desired.forget(keys.MachinePrefix + "c1.m5")
	set := func(st *capnv1.MachineStatus) { st.BootstrapDataChecksum = "sha256:x" }
	if err := w.s.stepOrWait(context.Background(), "c1", "m5", set); err != nil {
		t.Errorf("answer for a wanted machine without status yet: %v, want it taken", err)
	}
	if got := w.phase("m5"); got != capnv1.MachineProvisioning.Wire()+"/" {
		t.Errorf("answer for a wanted machine without status yet: %s, want Provisioning", got)
	}

	// Where the bucket agrees, absence is acted on.
	w.put("m6", machine(false), running, nil)
	w.reconcile("m6")
	if got := w.phase("m6"); got != capnv1.MachineFailed.Wire()+"/"+ReasonInfrastructureGone {
		t.Errorf("Running machine without infrastructure: %s, want Failed/InfrastructureGone", got)
	}
	w.put("m7", nil, status(capnv1.MachineDeleted.Wire(), withBootstrap), nil)
	w.reconcile("m7")
	if got := w.phase("m7"); got != "" {
		t.Errorf("Deleted machine without spec: status %q, want forgotten", got)
	}
	w.put("m8", machine(true), status(capnv1.MachineDeleting.Wire(), withBootstrap), nil)
	w.reconcile("m8")
	if got := w.phase("m8"); got != capnv1.MachineDeleted.Wire()+"/" {
		t.Errorf("deleting machine without infrastructure: %s, want Deleted", got)
	}
	if err := w.s.stepOrWait(context.Background(), "c1", "m9", set); err != nil {
		t.Errorf("answer for a machine that is not wanted: %v, want nil (dropped)", err)
	}
}

// The bootstrapper's answer and the step it allows are one write: the
// checksum, Provisioning and the create command (with that checksum) from
// one compare-and-set, not a write of the checksum and then another of the
// phase.
func TestBootstrapAnswerStepsInOneWrite(t *testing.T) {
	w := newConfirmWorld(t)
	ctx := context.Background()
	w.put("m1", machine(false), status(capnv1.MachineBootstrapping.Wire()), nil)
	_, before, err := w.statuses.Get(ctx, keys.MachinePrefix+"c1.m1")
	if err != nil {
		t.Fatal(err)
	}
	if err := w.s.stepOrWait(ctx, "c1", "m1", func(st *capnv1.MachineStatus) { st.BootstrapDataChecksum = "sha256:answer" }); err != nil {
		t.Fatal(err)
	}
	st, after, err := w.statuses.Get(ctx, keys.MachinePrefix+"c1.m1")
	if err != nil {
		t.Fatal(err)
	}
	if st.GetPhaseValue() != capnv1.MachineProvisioning || st.GetBootstrapDataChecksum() != "sha256:answer" {
		t.Fatalf("after the answer: phase %s, checksum %q; want Provisioning, sha256:answer", st.GetPhase(), st.GetBootstrapDataChecksum())
	}
	// One write: nothing else writes the bucket here (no loop runs), and
	// its revisions are the stream's sequence.
	if after != before+1 {
		t.Fatalf("status revision %d after %d: %d writes, want one", after, before, after-before)
	}
	s, err := w.js.Stream(ctx, events.StreamProviders)
	if err != nil {
		t.Fatal(err)
	}
	msg, err := s.GetLastMsgForSubject(ctx, events.ProviderSubject("sim", "machine", "create", "c1", "m1"))
	if err != nil {
		t.Fatalf("no create command: %v", err)
	}
	if !strings.Contains(string(msg.Data), "sha256:answer") {
		t.Fatalf("the create command does not carry the answer's checksum: %q", msg.Data)
	}

	// A new machine is not written while it waits for its data, and no
	// command goes out (the bootstrapper generates from the desired
	// machine); the answer is the status's first write, Provisioning.
	w.put("m2", machine(false), nil, nil)
	w.reconcile("m2")
	if _, _, err := w.statuses.Get(ctx, keys.MachinePrefix+"c1.m2"); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("a machine waiting for its bootstrap data has a status (%v), want none", err)
	}
	cs, err := w.js.Stream(ctx, events.StreamCommands)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := cs.GetLastMsgForSubject(ctx, events.CommandSubject("bootstrap", "generate", "c1", "m2")); !errors.Is(err, jetstream.ErrMsgNotFound) {
		t.Fatalf("a bootstrap command for the new machine (%v), want none in its first %s", err, bootstrapReask)
	}
	obs, err := w.js.Stream(ctx, "KV_"+events.BucketObserved)
	if err != nil {
		t.Fatal(err)
	}
	info, err := obs.Info(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := w.s.stepOrWait(ctx, "c1", "m2", func(st *capnv1.MachineStatus) { st.BootstrapDataChecksum = "sha256:m2" }); err != nil {
		t.Fatal(err)
	}
	st, rev, err := w.statuses.Get(ctx, keys.MachinePrefix+"c1.m2")
	if err != nil {
		t.Fatal(err)
	}
	if st.GetPhaseValue() != capnv1.MachineProvisioning || st.GetBootstrapDataChecksum() != "sha256:m2" {
		t.Fatalf("after the answer: phase %s, checksum %q; want Provisioning, sha256:m2", st.GetPhase(), st.GetBootstrapDataChecksum())
	}
	if rev != info.State.LastSeq+1 {
		t.Fatalf("status revision %d after the bucket's %d: want the answer's one write", rev, info.State.LastSeq)
	}
}
