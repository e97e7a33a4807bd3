package events_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/capn-dev/capn/events"
	capnv1 "github.com/capn-dev/capn/schemas/capn/v1alpha1"
)

func TestPublishAsyncStoresInOrderAndReports(t *testing.T) {
	_, _, js := setup(t)
	pub := events.NewPublisher(js, "capn/test")
	results := make(chan error, 4)
	done := func(err error) { results <- err }
	for _, phase := range []string{"Pending", "Bootstrapping", "Running"} {
		pub.PublishAsync(events.EventSubject("machine", "phase", "c1", "m1"), events.TypeMachineEvent+".phase", "phase-"+phase,
			&capnv1.MachineEvent{Cluster: "c1", Machine: "m1", Phase: phase}, done)
	}
	// A subject no stream stores: nobody acknowledges, and done says so.
	pub.PublishAsync("nowhere.at.all", "test", "lost-1", &capnv1.MachineEvent{}, done)
	var stored, failed int
	for range 4 {
		select {
		case err := <-results:
			if err == nil {
				stored++
			} else {
				failed++
			}
		case <-time.After(10 * time.Second):
			t.Fatal("an async publish never reported")
		}
	}
	if stored != 3 || failed != 1 {
		t.Fatalf("stored %d and failed %d, want 3 and 1", stored, failed)
	}
	s, err := js.Stream(context.Background(), events.StreamEvents)
	if err != nil {
		t.Fatal(err)
	}
	var phases []string
	for seq := uint64(1); seq <= 3; seq++ {
		m, err := s.GetMsg(context.Background(), seq)
		if err != nil {
			t.Fatal(err)
		}
		msg, err := events.FromMsg(m.Header, m.Data)
		if err != nil {
			t.Fatal(err)
		}
		phases = append(phases, msg.ID())
	}
	if got, want := strings.Join(phases, " "), "phase-Pending phase-Bootstrapping phase-Running"; got != want {
		t.Fatalf("stored %q, want %q in that order", got, want)
	}
}
