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
