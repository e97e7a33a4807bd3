package bench

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"runtime/pprof"
	"strings"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/capn-dev/capn/events"
	"github.com/capn-dev/capn/events/store"
	"github.com/capn-dev/capn/providers/sdk"
	"github.com/capn-dev/capn/providers/sim"
	capnv1 "github.com/capn-dev/capn/schemas/capn/v1alpha1"
	"github.com/capn-dev/capn/schemas/keys"
	"github.com/capn-dev/capn/schemas/manifest"
	"github.com/capn-dev/capn/secrets/seal"
	"github.com/capn-dev/capn/services/bootstrapper"
	"github.com/capn-dev/capn/services/cluster-planner"
	"github.com/capn-dev/capn/services/daemon"
	"github.com/capn-dev/capn/services/health-watcher"
	"github.com/capn-dev/capn/services/machine-manager"
)

// benchWorkers, when set, overrides the services' worker counts (to find
// good defaults); 0 keeps each service's default.
var benchWorkers = 0

// benchProfiling: the whole run is profiled (--cpuprofile), so a create
// cannot profile itself for its CPU by service.
var benchProfiling = false

// benchTrace prints a fleet create's progress every second (--trace).
var benchTrace = false

// fleetRun is one fleet create.
type fleetRun struct {
	Machines int
	Elapsed  time.Duration
	KVWrites uint64 // messages added to the KV streams
	Messages uint64 // messages added to capn's streams
	// ByKind counts what was published during the run by kind: a KV
	// bucket and the key's first token ("observed machine"), or a stream
	// subject's first three tokens.
	ByKind map[string]int
	// CPU is the process's CPU time during the create (server, services
	// and the benchmark's own watchers together), in seconds.
	CPU float64
	// CPUByService is the create's CPU by the pprof label service (""
	// for the server and the benchmark), from a CPU profile of the
	// create; empty when the whole run is profiled (--cpuprofile).
	CPUByService map[string]time.Duration
	// Replay is the same traffic stored by NATS alone (see replay.go).
	Replay replayRun

	traffic traffic // what the create asked of NATS, until replayed
}

func (r fleetRun) MachinesPerSec() float64     { return float64(r.Machines) / r.Elapsed.Seconds() }
func (r fleetRun) KVWritesPerMachine() float64 { return float64(r.KVWrites) / float64(r.Machines) }
func (r fleetRun) MsgsPerMachine() float64     { return float64(r.Messages) / float64(r.Machines) }
func (r fleetRun) KVWriteRate() float64        { return float64(r.KVWrites) / r.Elapsed.Seconds() }
func (r fleetRun) Cores() float64              { return r.CPU / r.Elapsed.Seconds() }
func (r fleetRun) CPUPerMachine() float64      { return 1000 * r.CPU / float64(r.Machines) } // ms

// fleetCluster is the benchmark's cluster: 1 control-plane + 9 workers.
func fleetCluster(i int) *capnv1.Cluster {
	c, err := benchCluster(fmt.Sprintf("fleet-%04d", i), "  - {name: md-0, provider: sim, replicas: 9}\n")
	if err != nil {
		panic(err)
	}
	return c
}

// benchCluster is a cluster on sim with one control-plane machine and the
// worker pools of poolsYAML (list items under spec.workerPools), decoded
// and defaulted as the gateway does, with a uid and generation 1.
func benchCluster(name, poolsYAML string) (*capnv1.Cluster, error) {
	c, err := manifest.Decode([]byte("apiVersion: capn.dev/v1alpha1\nkind: Cluster\nmetadata: {name: " + name + "}\n" +
		"spec:\n  kubernetesVersion: v1.34.2\n  controlPlane: {provider: sim, replicas: 1}\n  workerPools:\n" + poolsYAML))
	if err != nil {
		return nil, err
	}
	manifest.Default(c)
	c.Metadata.Uid, c.Metadata.Generation, c.Metadata.CreationTimestamp = "uid-"+name, 1, timestamppb.Now()
	return c, nil
}

// services are the programs of `capn dev`, each on its own in-process
// connection through daemon.Run, as capn dev runs them.
func services(ring *seal.Keyring, so sim.Options) []daemon.Service {
	return []daemon.Service{
		clusterplanner.New(clusterplanner.Config{Workers: benchWorkers}),
		machinemanager.New(machinemanager.Config{Workers: benchWorkers * 2}),
		bootstrapper.New(bootstrapper.Config{Keyring: ring, Workers: benchWorkers}),
		healthwatcher.New(healthwatcher.Config{}),
		sim.NewService(so, sdk.Options{Concurrency: benchWorkers * 2}),
	}
}

// measureFleet creates n clusters on a fresh server with every service
// running and times it until all n*10 machines are Running.
func measureFleet(ctx context.Context, n int, timeout time.Duration) (fleetRun, error) {
	key, _ := seal.GenerateKey()
	ring, _ := seal.NewKeyring(key)
	e, err := startEnv(ctx, events.DefaultTopology(1), services(ring, sim.Options{})...)
	if err != nil {
		return fleetRun{}, err
	}
	defer e.Close()
	js := e.js
	observed, desired := e.kv(ctx, events.BucketObserved), e.kv(ctx, events.BucketDesired)
	running := countRunning(ctx, observed)
	tap, err := startTap(e.nc)
	if err != nil {
		return fleetRun{}, err
	}
	defer tap.stop()
	before, err := streamMessages(ctx, js)
	if err != nil {
		return fleetRun{}, err
	}
	clusters := store.NewBucket(desired, store.New[capnv1.Cluster]())
	want := n * 10
	cpu0, err := cpuSeconds(os.Getpid())
	if err != nil {
		return fleetRun{}, err
	}
	var prof bytes.Buffer
	profiling := !benchProfiling && pprof.StartCPUProfile(&prof) == nil
	start := time.Now()
	for i := range n {
		if _, err := clusters.Create(ctx, keys.Cluster(fleetCluster(i).GetMetadata().GetName()), fleetCluster(i)); err != nil {
			return fleetRun{}, err
		}
	}
	deadline := time.After(timeout)
	lastTrace := start
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	for running.Load() < int64(want) {
		select {
		case <-deadline:
			return fleetRun{}, fmt.Errorf("%d clusters: only %d of %d machines Running after %s", n, running.Load(), want, timeout)
		case <-tick.C:
			if benchTrace && time.Since(lastTrace) >= time.Second {
				lastTrace = time.Now()
				fmt.Fprintf(os.Stderr, "  %5.1fs: %d of %d machines Running\n", time.Since(start).Seconds(), running.Load(), want)
			}
		}
	}
	elapsed := time.Since(start)
	if profiling {
		pprof.StopCPUProfile()
	}
	cpu1, err := cpuSeconds(os.Getpid())
	if err != nil {
		return fleetRun{}, err
	}
	after, err := streamMessages(ctx, js)
	if err != nil {
		return fleetRun{}, err
	}
	r := fleetRun{Machines: want, Elapsed: elapsed, CPU: cpu1 - cpu0, traffic: traffic{msgs: tap.stop()}}
	r.ByKind = byKind(r.traffic.msgs)
	if profiling {
		if r.CPUByService, err = cpuByLabel(prof.Bytes(), daemon.ProfileLabel); err != nil {
			return fleetRun{}, err
		}
	}
	if r.traffic.watches, r.traffic.durables, err = readers(ctx, js); err != nil {
		return fleetRun{}, err
	}
	for name, v := range after {
		d := v - before[name]
		if strings.HasPrefix(name, "KV_") {
			r.KVWrites += d
		} else {
			r.Messages += d
		}
	}
	return r, nil
}

// countRunning counts machines whose observed phase is Running, from one
// watcher on observed.
func countRunning(ctx context.Context, kv jetstream.KeyValue) *atomic.Int64 {
	return countPhase(ctx, kv, "machine.>", store.New[capnv1.MachineStatus](), capnv1.MachineRunning.Wire())
}

// countPhase counts the keys matching pattern whose value's phase is
// phase, from one watcher, as they change.
func countPhase[T interface {
	proto.Message
	GetPhase() string
}](ctx context.Context, kv jetstream.KeyValue, pattern string, newT func() T, phase string) *atomic.Int64 {
	var n atomic.Int64
	in := map[string]bool{}
	w, err := kv.Watch(ctx, pattern, jetstream.UpdatesOnly())
	if err != nil {
		panic(err)
	}
	go func() {
		for e := range w.Updates() {
			if e == nil {
				continue
			}
			v, err := store.Decode(e.Value(), newT)
			is := err == nil && e.Operation() == jetstream.KeyValuePut && v.GetPhase() == phase
			if is != in[e.Key()] {
				in[e.Key()] = is
				if is {
					n.Add(1)
				} else {
					n.Add(-1)
				}
			}
		}
	}()
	return &n
}

// streamMessages is the last sequence of every stream: messages ever added.
func streamMessages(ctx context.Context, js jetstream.JetStream) (map[string]uint64, error) {
	out := map[string]uint64{}
	names := js.StreamNames(ctx)
	for name := range names.Name() {
		s, err := js.Stream(ctx, name)
		if err != nil {
			return nil, err
		}
		info, err := s.Info(ctx)
		if err != nil {
			return nil, err
		}
		out[name] = info.State.LastSeq
	}
	return out, names.Err()
}

// byKind counts what was published by kind: a KV bucket and the key's
// first token ("KV observed machine"), or a subject's first three tokens.
func byKind(msgs []tapped) map[string]int {
	by := map[string]int{}
	for _, m := range msgs {
		toks := strings.SplitN(m.subject, ".", 5)
		kind := strings.Join(toks[:min(3, len(toks))], ".")
		switch {
		case toks[0] == "$KV" && len(toks) > 2:
			kind = "KV " + toks[1] + " " + toks[2]
		case m.subject == events.SubjectHealth || strings.HasPrefix(m.subject, events.SubjectHealth+"."):
			// capn.health.<cluster>.<machine>.<kind>: one kind, not one a cluster.
			kind = events.SubjectHealth + " (heartbeats and health reports)"
		}
		by[kind]++
	}
	return by
}
