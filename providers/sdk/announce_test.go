package sdk_test

import (
	"slices"
	"testing"
	"time"

	"github.com/capn-dev/capn/events/natstest"
	"github.com/capn-dev/capn/providers/sdk"
	"github.com/capn-dev/capn/providers/sdk/sdktest"
	capnv1 "github.com/capn-dev/capn/schemas/capn/v1alpha1"
)

func TestAnnouncement(t *testing.T) {
	env := sdktest.New(t)
	opts := fastOptions()
	opts.Version = "v0.1.0"
	stop := env.Run(sdk.NewService(newFake(), opts))

	var first *capnv1.ProviderAnnouncement
	natstest.WaitFor(t, sdktest.Timeout, "announcement", func() bool {
		var ok bool
		first, ok = env.Announcement("fake")
		return ok
	})
	if first.GetName() != "fake" || first.GetVersion() != "v0.1.0" || first.GetInstance() != "test" ||
		!slices.Equal(first.GetCapabilities(), []string{sdk.CapabilityStopStart}) || !sdk.Alive(first, time.Now()) {
		t.Errorf("announcement = %v", first)
	}
	natstest.WaitFor(t, sdktest.Timeout, "announcement refreshed", func() bool {
		a, ok := env.Announcement("fake")
		return ok && a.GetTime().AsTime().After(first.GetTime().AsTime())
	})

	stop()
	if a, ok := env.Announcement("fake"); ok {
		t.Errorf("announcement left after a clean shutdown: %v", a)
	}
}

// versioned is a provider whose machines run Kubernetes binaries of
// their own.
type versioned struct {
	*fake
	versions []string
}

func (v versioned) KubernetesVersions() []string { return v.versions }

// A provider with sdk.KubernetesVersioner announces its versions; one
// without announces none.
func TestAnnouncementListsKubernetesVersions(t *testing.T) {
	env := sdktest.New(t)
	stop := env.Run(sdk.NewService(versioned{newFake(), []string{"v1.36.5", "v1.37.2"}}, fastOptions()))
	var a *capnv1.ProviderAnnouncement
	natstest.WaitFor(t, sdktest.Timeout, "announcement", func() bool {
		var ok bool
		a, ok = env.Announcement("fake")
		return ok
	})
	if !slices.Equal(a.GetKubernetesVersions(), []string{"v1.36.5", "v1.37.2"}) {
		t.Errorf("kubernetes_versions %v", a.GetKubernetesVersions())
	}
	stop()
	stop = env.Run(sdk.NewService(newFake(), fastOptions()))
	defer stop()
	natstest.WaitFor(t, sdktest.Timeout, "announcement", func() bool {
		a, _ = env.Announcement("fake")
		return a != nil
	})
	if a.GetKubernetesVersions() != nil {
		t.Errorf("a provider without KubernetesVersions announces %v", a.GetKubernetesVersions())
	}
}

// agents is a provider whose machines run node agents.
type agents struct{ *fake }

func (agents) RunsNodeAgents() {}

// A NodeAgentProvider announces node-agent (the bootstrapper mints
// bootstrap credentials with the data only for such providers); the
// fake, which is none, does not (TestAnnouncement).
func TestAnnouncementNamesNodeAgents(t *testing.T) {
	env := sdktest.New(t)
	stop := env.Run(sdk.NewService(agents{newFake()}, fastOptions()))
	defer stop()
	var a *capnv1.ProviderAnnouncement
	natstest.WaitFor(t, sdktest.Timeout, "announcement", func() bool {
		var ok bool
		a, ok = env.Announcement("fake")
		return ok
	})
	if !slices.Equal(a.GetCapabilities(), []string{sdk.CapabilityStopStart, sdk.CapabilityNodeAgent}) {
		t.Errorf("capabilities %v, want stop-start and node-agent", a.GetCapabilities())
	}
}

func TestAlive(t *testing.T) {
	now := time.Now()
	tests := []struct {
		name string
		a    *capnv1.ProviderAnnouncement
		want bool
	}{
		{"none", nil, false},
		{"no time", &capnv1.ProviderAnnouncement{Name: "x"}, false},
		{"fresh", &capnv1.ProviderAnnouncement{Time: timestampOf(now.Add(-5 * time.Second))}, true},
		{"at the limit", &capnv1.ProviderAnnouncement{Time: timestampOf(now.Add(-sdk.AnnouncementStale))}, true},
		{"stale", &capnv1.ProviderAnnouncement{Time: timestampOf(now.Add(-sdk.AnnouncementStale - time.Second))}, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := sdk.Alive(tt.a, now); got != tt.want {
				t.Errorf("Alive = %v, want %v", got, tt.want)
			}
		})
	}
}

// A stop that lands while a refresh is in flight must not let the
// refresh resurrect the announcement after the withdrawal.
func TestNoAnnouncementLeftWhenStoppedDuringARefresh(t *testing.T) {
	env := sdktest.New(t)
	opts := fastOptions()
	opts.AnnounceEvery = time.Millisecond
	for i := range 30 {
		stop := env.Run(sdk.NewService(newFake(), opts))
		natstest.WaitFor(t, sdktest.Timeout, "announcement", func() bool {
			_, ok := env.Announcement("fake")
			return ok
		})
		time.Sleep(time.Duration(i%7) * time.Millisecond) //sleep-ok: land the stop at a different point of the 1ms refresh each run
		stop()
		if a, ok := env.Announcement("fake"); ok {
			t.Fatalf("run %d: announcement left after a clean shutdown: %v", i, a)
		}
	}
}
