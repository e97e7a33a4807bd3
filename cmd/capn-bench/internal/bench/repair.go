package bench

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/capn-dev/capn/events"
	"github.com/capn-dev/capn/events/store"
	"github.com/capn-dev/capn/providers/sdk"
	"github.com/capn-dev/capn/providers/sim"
	capnv1 "github.com/capn-dev/capn/schemas/capn/v1alpha1"
	"github.com/capn-dev/capn/schemas/keys"
	"github.com/capn-dev/capn/secrets/seal"
	"github.com/capn-dev/capn/services/bootstrapper"
	"github.com/capn-dev/capn/services/cluster-planner"
	"github.com/capn-dev/capn/services/health-watcher"
	"github.com/capn-dev/capn/services/machine-manager"
	"github.com/capn-dev/capn/services/remediator"
)

// repairResult is the latency from a health event (a node condition
// published on the health subject) to the repair command (the provider's
// reboot) for each sampled machine.
type repairResult struct {
	Settle  time.Duration
	Samples []time.Duration
	// Fleet is the number of clusters created in the background while
	// sampling (0: idle); During is how many samples were taken while that
	// create was still in progress.
	Fleet, During int
}

func (r repairResult) pct(p float64) time.Duration {
	if len(r.Samples) == 0 {
		return 0
	}
	s := slices.Clone(r.Samples)
	slices.Sort(s)
	i := int(p * float64(len(s)-1))
	return s[i]
}

// measureRepair runs every service (health-watcher and remediator
// included) on a fresh server, brings up one cluster of `machines` workers
// whose policy calls KernelDeadlock=True unhealthy at once, then marks the
// workers unhealthy one after another and times each health event to the
// reboot command the remediator sends. settle is the remediator's
// deliberate hold before it acts (its default is 3s, so failures arriving
// together meet the circuit breaker together).
//
// With fleet > 0, a fleet create of that many clusters starts once the
// repair cluster is Ready, and the samples are spread over it.
func measureRepair(ctx context.Context, machines int, settle time.Duration, fleet int) (repairResult, error) {
	key, _ := seal.GenerateKey()
	ring, _ := seal.NewKeyring(key)
	e, err := startEnv(ctx, events.DefaultTopology(1),
		clusterplanner.New(clusterplanner.Config{}),
		machinemanager.New(machinemanager.Config{}),
		bootstrapper.New(bootstrapper.Config{Keyring: ring}),
		healthwatcher.New(healthwatcher.Config{}),
		remediator.New(remediator.Config{Timing: remediator.Timing{Settle: settle}}),
		sim.NewService(sim.Options{}, sdk.Options{}),
	)
	if err != nil {
		return repairResult{}, err
	}
	defer e.Close()
	nc, js := e.nc, e.js

	c, err := benchCluster("repair", fmt.Sprintf(`  - name: md-0
    provider: sim
    replicas: %d
    health:
      maxUnhealthy: "100%%"
      maxInFlight: %d
      unhealthyConditions:
      - {type: KernelDeadlock, status: "True", timeout: 0s}
`, machines, machines))
	if err != nil {
		return repairResult{}, err
	}
	desired, _ := js.KeyValue(ctx, events.BucketDesired)
	observed, _ := js.KeyValue(ctx, events.BucketObserved)
	if _, err := store.NewBucket(desired, store.New[capnv1.Cluster]()).Create(ctx, keys.Cluster("repair"), c); err != nil {
		return repairResult{}, err
	}
	statuses := store.NewBucket(observed, store.New[capnv1.ClusterStatus]())
	deadline := time.Now().Add(2 * time.Minute)
	if err := poll(ctx, 50*time.Millisecond, func() (bool, error) {
		st, _, err := statuses.Get(ctx, keys.Cluster("repair"))
		if err == nil && st.GetPhaseValue() == capnv1.ClusterReady {
			return true, nil
		}
		if time.Now().After(deadline) {
			return false, fmt.Errorf("repair cluster not Ready within 2 minutes (phase %q)", st.GetPhase())
		}
		return false, nil
	}); err != nil {
		return repairResult{}, err
	}
	workers, err := store.NewBucket(desired, store.New[capnv1.Machine]()).List(ctx, keys.MachinesOf("repair"))
	if err != nil {
		return repairResult{}, err
	}
	// A core subscription sees each reboot command as it is published to
	// the provider's work-queue stream.
	reboots := make(chan string, machines)
	sub, err := nc.Subscribe(events.ProviderSubject("sim", "machine", "reboot", "repair", "*"), func(m *nats.Msg) {
		reboots <- m.Subject[strings.LastIndex(m.Subject, ".")+1:]
	})
	if err != nil {
		return repairResult{}, err
	}
	defer func() { _ = sub.Unsubscribe() }()
	pub := events.NewPublisher(js, "bench/npd")
	res := repairResult{Settle: settle, Fleet: fleet}
	var running *atomic.Int64
	if fleet > 0 {
		running = countRunning(ctx, observed)
		clusters := store.NewBucket(desired, store.New[capnv1.Cluster]())
		go func() {
			for i := range fleet {
				c := fleetCluster(i)
				if _, err := clusters.Create(ctx, keys.Cluster(c.GetMetadata().GetName()), c); err != nil {
					return // the benchmark is over
				}
			}
		}()
		time.Sleep(time.Second) //sleep-ok: the samples are taken a second into the create, by design
	}
	inProgress := func() bool { return running != nil && running.Load() < int64(fleet*10) }
	for _, w := range workers {
		if fleet > 0 {
			time.Sleep(250 * time.Millisecond) //sleep-ok: spreads the samples over the create, by design
		}
		if w.Value.GetSpec().GetRole() != "worker" {
			continue
		}
		name := w.Value.GetMetadata().GetName()
		now := time.Now()
		nc := &capnv1.NodeConditions{Cluster: "repair", Machine: name, Source: "bench", Time: timestamppb.New(now),
			Conditions: []*capnv1.NodeCondition{{Type: "KernelDeadlock", Status: "True", Reason: "DockerHung", LastTransitionTime: timestamppb.New(now), LastHeartbeatTime: timestamppb.New(now)}}}
		if _, err := pub.Publish(ctx, events.HealthSubject("repair", name, "conditions"), events.TypeNodeConditions, "bench-"+name, nc); err != nil {
			return res, err
		}
	wait:
		for {
			select {
			case got := <-reboots:
				if got != name {
					continue // a repeat for a machine sampled before (the remediator re-drives its commands)
				}
				res.Samples = append(res.Samples, time.Since(now))
				if inProgress() {
					res.During++
				}
				break wait
			case <-time.After(30*time.Second + settle):
				return res, fmt.Errorf("no reboot of %s within %s of its health event", name, 30*time.Second+settle)
			}
		}
	}
	return res, nil
}
