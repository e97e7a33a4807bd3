package sim

import (
	"fmt"
	"testing"
	"time"

	"github.com/capn-dev/capn/events"
	"github.com/capn-dev/capn/events/natstest"
	"github.com/capn-dev/capn/providers/sdk"
	"github.com/capn-dev/capn/providers/sdk/sdktest"
	capnv1 "github.com/capn-dev/capn/schemas/capn/v1alpha1"
)

// sdkOptions keep the tests quick.
func sdkOptions() sdk.Options {
	return sdk.Options{ReconcileEvery: 250 * time.Millisecond, AnnounceEvery: 100 * time.Millisecond, Instance: "test"}
}

// start runs a new sim provider with opts through the SDK and
// daemon.Run, and returns it with its stop.
func start(t *testing.T, env *sdktest.Env, opts Options) (*Provider, func()) {
	t.Helper()
	p, err := New(opts)
	if err != nil {
		t.Fatal(err)
	}
	stop := env.Run(sdk.NewService(p, sdkOptions()))
	natstest.WaitFor(t, sdktest.Timeout, "provider announced", func() bool {
		_, ok := env.Announcement(Name)
		return ok
	})
	return p, stop
}

func createReq(c, m, version string) *capnv1.CreateMachine {
	return &capnv1.CreateMachine{Cluster: c, Machine: m, Role: "worker", Version: version}
}

func create(env *sdktest.Env, c, m, version string) {
	env.T.Helper()
	env.Send(Name, sdk.KindMachine, "create", fmt.Sprintf("create-%s-%s", c, m), createReq(c, m, version))
}

func power(env *sdktest.Env, c, m, action string) {
	env.T.Helper()
	env.Send(Name, sdk.KindMachine, action, fmt.Sprintf("%s-%s-%s-%d", action, c, m, time.Now().UnixNano()),
		&capnv1.MachinePower{Cluster: c, Machine: m, Action: action})
}

// beats counts the heartbeats stored for a machine (the health stream
// keeps the latest 5 per subject).
func beats(env *sdktest.Env, c, m string) uint64 {
	env.T.Helper()
	return env.Count(events.StreamHealth, events.HealthSubject(c, m, HeartbeatKind))
}

// lastBeatID is the id of a machine's last heartbeat ("" if none).
func lastBeatID(env *sdktest.Env, c, m string) string {
	env.T.Helper()
	_, id, _ := env.LastHeartbeat(c, m)
	return id
}

// waitNewBeats waits until a machine publishes n heartbeats after the one
// with id after (ids are unique per heartbeat; the stream keeps 5).
func waitNewBeats(env *sdktest.Env, c, m string, n int) {
	env.T.Helper()
	seen := map[string]bool{lastBeatID(env, c, m): true}
	natstest.WaitFor(env.T, sdktest.Timeout, fmt.Sprintf("%d new heartbeats of %s/%s", n, c, m), func() bool {
		seen[lastBeatID(env, c, m)] = true
		return len(seen)-1 >= n
	})
}
