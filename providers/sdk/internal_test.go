package sdk

import (
	"context"
	"errors"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/protobuf/types/known/timestamppb"

	capnv1 "github.com/capn-dev/capn/schemas/capn/v1alpha1"
	"github.com/capn-dev/capn/schemas/keys"
)

func TestClassify(t *testing.T) {
	t0 := time.Unix(1000, 0)
	im := func(state capnv1.InfraState, pid string, at time.Time) *capnv1.InfraMachine {
		return &capnv1.InfraMachine{Provider: "p", Cluster: "c", Machine: "m", State: state.Wire(), ProviderId: pid, Updated: timestamppb.New(at)}
	}
	const none = capnv1.InfraState_INFRA_STATE_UNSPECIFIED
	tests := []struct {
		name      string
		obs, real *capnv1.InfraMachine
		kind      string
		write     capnv1.InfraState // state written, none for none
	}{
		{"nothing anywhere", nil, nil, "", none},
		{"orphan", nil, im(StateRunning, "x", t0), DriftOrphan, none},
		{"gone while running", im(StateRunning, "x", t0), nil, DriftGone, StateDeleted},
		{"gone while creating", im(StateCreating, "x", t0), nil, DriftGone, StateDeleted},
		{"gone while stopped", im(StateStopped, "x", t0), nil, DriftGone, StateDeleted},
		{"already deleted", im(StateDeleted, "x", t0), nil, "", none},
		{"failed and absent", im(StateFailed, "", t0), nil, "", none},
		{"deleting and present", im(StateDeleting, "x", t0), im(StateRunning, "x", t0), "", none},
		{"in sync", im(StateRunning, "x", t0), im(StateRunning, "x", t0), "", none},
		{"stopped out of band", im(StateRunning, "x", t0), im(StateStopped, "x", t0.Add(time.Second)), DriftStopped, StateStopped},
		{"replaced out of band", im(StateRunning, "x", t0), im(StateRunning, "y", t0.Add(time.Second)), DriftChanged, StateRunning},
		{"lost boot report", im(StateCreating, "x", t0), im(StateRunning, "x", t0.Add(time.Second)), "", StateRunning},
		{"record newer than reality", im(StateRunning, "x", t0.Add(time.Second)), im(StateCreating, "x", t0), "", none},
		{"started out of band", im(StateStopped, "x", t0), im(StateRunning, "x", t0.Add(time.Second)), "", StateRunning},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			kind, next := classify(tt.obs, tt.real)
			if kind != tt.kind {
				t.Errorf("kind = %q, want %q", kind, tt.kind)
			}
			switch {
			case tt.write == none && next != nil:
				t.Errorf("writes %v, want nothing", next)
			case tt.write != none && next.GetStateValue() != tt.write:
				t.Errorf("writes %v, want state %s", next, tt.write)
			}
			if kind == DriftGone && (next.GetMessage() != MessageGone || next.GetProviderId() != tt.obs.GetProviderId()) {
				t.Errorf("gone record = %v", next)
			}
		})
	}
}

func TestKeyLocks(t *testing.T) {
	var l keyLocks
	var inside, maxInside atomic.Int32
	var wg sync.WaitGroup
	for range 20 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			unlock, err := l.lock(context.Background(), "k")
			if err != nil {
				t.Error(err)
				return
			}
			n := inside.Add(1)
			for {
				m := maxInside.Load()
				if n <= m || maxInside.CompareAndSwap(m, n) {
					break
				}
			}
			inside.Add(-1)
			unlock()
		}()
	}
	wg.Wait()
	if maxInside.Load() != 1 {
		t.Errorf("%d holders at once", maxInside.Load())
	}
	if l.len() != 0 {
		t.Errorf("%d locks left", l.len())
	}

	unlock, _ := l.lock(context.Background(), "k")
	other, err := l.lock(context.Background(), "other")
	if err != nil {
		t.Fatal("another key is blocked")
	}
	other()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Millisecond)
	defer cancel()
	if _, err := l.lock(ctx, "k"); !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("lock of a held key with a deadline: %v", err)
	}
	unlock()
	if l.len() != 0 {
		t.Errorf("%d locks left after a cancelled wait", l.len())
	}
}

func TestOptionsValidate(t *testing.T) {
	tests := []struct {
		name string
		o    Options
		want []string
	}{
		{"zero value", Options{}, nil},
		{"reconcile disabled", Options{ReconcileEvery: NoReconcile}, nil},
		{"everything wrong", Options{Concurrency: -1, MaxDeliver: -2, ReconcileEvery: -time.Second, AnnounceEvery: time.Minute},
			[]string{"provider-concurrency", "MaxDeliver", "provider-reconcile-every", "provider-announce-every"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := tt.o.Validate()
			if len(tt.want) == 0 {
				if err != nil {
					t.Fatalf("Validate: %v", err)
				}
				return
			}
			if err == nil {
				t.Fatal("Validate: no error")
			}
			for _, w := range tt.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q does not mention %s", err, w)
				}
			}
		})
	}
}

func TestParseSubject(t *testing.T) {
	cmd := func(kind, verb, cluster, object string) keys.Subject {
		return keys.Subject{Root: keys.ProvidersRoot, Provider: "sim", Entity: kind, Verb: verb, Cluster: cluster, Object: object}
	}
	tests := []struct {
		subject string
		want    keys.Subject
		ok      bool
	}{
		{"capn.provider.sim.machine.create.c1.m1", cmd("machine", "create", "c1", "m1"), true},
		{"capn.provider.sim.cluster.ensure.c1._", cmd("cluster", "ensure", "c1", "_"), true},
		{"capn.provider.other.machine.create.c1.m1", keys.Subject{}, false},
		{"capn.provider.sim.machine.create.c1", keys.Subject{}, false},
		{"capn.evt.sim.machine.create.c1.m1", keys.Subject{}, false},
	}
	for _, tt := range tests {
		got, err := parseSubject("sim", tt.subject)
		if (err == nil) != tt.ok || got != tt.want {
			t.Errorf("parseSubject(%s) = %v, %v", tt.subject, got, err)
		}
	}
}

func TestTombstones(t *testing.T) {
	var ts tombstones
	t0 := time.Unix(1000, 0)
	ts.add("a", t0)
	if !ts.after("a", t0.Add(-time.Second)) || !ts.after("a", t0) || ts.after("a", t0.Add(time.Nanosecond)) || ts.after("b", t0) {
		t.Error("tombstone comparisons are wrong")
	}
	ts.add("b", t0.Add(tombstoneTTL+time.Minute))
	if ts.after("a", t0.Add(-time.Second)) {
		t.Error("an expired tombstone was kept")
	}
}

func TestValidateName(t *testing.T) {
	for _, ok := range []string{"m1", "web-0", "Pool_1", "a"} {
		if err := ValidateName("machine", ok); err != nil {
			t.Errorf("%q: %v", ok, err)
		}
	}
	for _, bad := range []string{"", "_", "a.b", "a*", "a>", "a b", "-a", strings.Repeat("a", 254)} {
		if err := ValidateName("machine", bad); err == nil {
			t.Errorf("%q accepted", bad)
		}
	}
}
