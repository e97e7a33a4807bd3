package bench

import (
	"testing"
	"time"

	"github.com/capn-dev/capn/events/natstest"
)

// The idle benchmark's settle ends after the last write of the create's
// follow-up work: heartbeats and provider announcements, which go on for
// as long as the fleet runs, do not count; any other KV write, command or
// event does.
func TestFollowUpWrites(t *testing.T) {
	for subj, want := range map[string]bool{
		"$KV.observed.machine.c1.m1":         true,
		"$KV.observed.cluster.c1":            true,
		"$KV.secrets.bootstrap.c1.m1":        true,
		"$KV.desired.machine.c1.m1":          true,
		"capn.evt.machine.running.c1.m1":     true,
		"capn.cmd.bootstrap.generate.c1.m1":  true,
		"capn.provider.sim.machine.create.c": true,
		"capn.health.c1.m1.heartbeat":        false,
		"$KV.observed.provider.sim":          false,
	} {
		if got := followUp(subj); got != want {
			t.Errorf("followUp(%q) = %v, want %v", subj, got, want)
		}
	}
}

func TestWatchWritesFollowsTheLastWrite(t *testing.T) {
	srv := natstest.Start(t)
	nc, _ := srv.Connect(t)
	w, err := watchWrites(nc)
	if err != nil {
		t.Fatal(err)
	}
	defer w.stop()
	start := w.at()
	// Within one subscription deliveries keep their order: once the event
	// after the heartbeat is seen, the heartbeat was passed over.
	for _, subj := range []string{"capn.health.c1.m1.heartbeat", "capn.evt.machine.running.c1.m1"} {
		if err := nc.Publish(subj, []byte("x")); err != nil {
			t.Fatal(err)
		}
	}
	natstest.WaitFor(t, 5*time.Second, "the event seen", func() bool { return w.subject() == "capn.evt.machine.running.c1.m1" })
	if !w.at().After(start) {
		t.Fatalf("last write %s, not after the start %s", w.at(), start)
	}
	for _, subj := range []string{"$KV.observed.provider.sim", "$KV.observed.machine.c1.m1"} {
		if err := nc.Publish(subj, []byte("x")); err != nil {
			t.Fatal(err)
		}
	}
	natstest.WaitFor(t, 5*time.Second, "the machine write seen", func() bool { return w.subject() == "$KV.observed.machine.c1.m1" })
}
