package bench

import (
	"context"
	"fmt"
	"os"
	"runtime"
	"runtime/pprof"
	"strings"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
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
	// Running is how many were Running at the end: Machines, unless the
	// create timed out (measureFleetIn's error then).
	Running  int
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
	// Created is how long writing the n clusters to desired took (the
	// services already at work meanwhile).
	Created time.Duration
	// Memory is the process's peak resident set and Go heap during the
	// create, when sampled (fleetOptions.memory).
	Memory *memPeak

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
	return measureFleetIn(ctx, n, timeout, fleetOptions{tap: true})
}

// fleetOptions say what a fleet create records beside its time, traffic
// counts and CPU.
type fleetOptions struct {
	// tap records every message published (for the replay and the
	// breakdown by kind): memory that grows with the fleet.
	tap bool
	// memory samples the process's resident set and Go heap during the
	// create (fleetRun.Memory).
	memory bool
	// heapProfile, when set, is where the create writes a heap profile
	// of the process once it ends (completed or timed out).
	heapProfile string
	// progress prints the count of Running machines (and with memory the
	// resident set) this often; 0: every second with --trace, else never.
	progress time.Duration
	// profileDir, when set, is where the create's CPU profile is written
	// in segments of profileEvery (createProfile).
	profileDir   string
	profileEvery time.Duration
}

// measureFleetIn is measureFleet on a fresh in-process server (capn dev's
// way), recording what o says.
func measureFleetIn(ctx context.Context, n int, timeout time.Duration, o fleetOptions) (fleetRun, error) {
	key, _ := seal.GenerateKey()
	ring, _ := seal.NewKeyring(key)
	e, err := startEnv(ctx, events.DefaultTopology(1), services(ring, sim.Options{})...)
	if err != nil {
		return fleetRun{}, err
	}
	defer e.Close()
	fe := fleetEnv{nc: e.nc, js: e.js, counts: func(ctx context.Context) (map[string]uint64, error) { return streamMessages(ctx, e.js) }}
	return fleetCreate(ctx, fe, n, timeout, o)
}

// fleetEnv is where a fleet create runs: the benchmark's own connection
// (it creates the clusters in desired and watches observed) and how to
// read how many messages every stream ever got.
type fleetEnv struct {
	nc     *nats.Conn
	js     jetstream.JetStream
	counts func(context.Context) (map[string]uint64, error)
}

// fleetCreate creates n clusters in e, whose services are running, and
// times it until all n*10 machines are Running.
func fleetCreate(ctx context.Context, e fleetEnv, n int, timeout time.Duration, o fleetOptions) (fleetRun, error) {
	js := e.js
	observed, err := js.KeyValue(ctx, events.BucketObserved)
	if err != nil {
		return fleetRun{}, fmt.Errorf("bucket %s: %w", events.BucketObserved, err)
	}
	desired, err := js.KeyValue(ctx, events.BucketDesired)
	if err != nil {
		return fleetRun{}, fmt.Errorf("bucket %s: %w", events.BucketDesired, err)
	}
	running := countRunning(ctx, observed)
	var tp *tap
	if o.tap {
		if tp, err = startTap(e.nc); err != nil {
			return fleetRun{}, err
		}
		defer tp.stop()
	}
	before, err := e.counts(ctx)
	if err != nil {
		return fleetRun{}, err
	}
	clusters := store.NewBucket(desired, store.New[capnv1.Cluster]())
	want := n * 10
	var mem *memSampler
	if o.memory {
		mem = startMemSampler(250 * time.Millisecond)
	}
	cpu0, err := cpuSeconds(os.Getpid())
	if err != nil {
		return fleetRun{}, err
	}
	var prof *createProfile
	if !benchProfiling {
		prof = startCreateProfile(o.profileDir, o.profileEvery)
	}
	stopProfile := func() error {
		if prof == nil {
			return nil
		}
		return prof.stop()
	}
	defer func() { _ = stopProfile() }() // an early return's error is the one reported
	every := o.progress
	if every == 0 && benchTrace {
		every = time.Second
	}
	start := time.Now()
	progress := func() string {
		s := fmt.Sprintf("%6.1fs: %d of %d machines Running", time.Since(start).Seconds(), running.Load(), want)
		if mem != nil {
			m := mem.now()
			s += fmt.Sprintf("; RSS %.0f MiB, Go heap %.0f MiB", m.RSSMiB, m.HeapMiB)
		}
		return s
	}
	for i := range n {
		if _, err := clusters.Create(ctx, keys.Cluster(fleetCluster(i).GetMetadata().GetName()), fleetCluster(i)); err != nil {
			return fleetRun{}, fmt.Errorf("create cluster %d of %d: %w", i+1, n, err)
		}
		if every > 0 && (i+1)%1000 == 0 {
			fmt.Fprintf(os.Stderr, "  %s (%d of %d clusters created)\n", progress(), i+1, n)
		}
	}
	created := time.Since(start)
	deadline := time.After(timeout)
	lastTrace := start
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	var timedOut error
	ran := int64(0)
wait:
	for ran = running.Load(); ran < int64(want); ran = running.Load() {
		select {
		case <-deadline:
			timedOut = fmt.Errorf("%d clusters: only %d of %d machines Running after %s (clusters created in %s)", n, ran, want, timeout, created.Round(time.Millisecond))
			break wait
		case <-tick.C:
			if prof != nil {
				if err := prof.tick(); err != nil {
					return fleetRun{}, err
				}
			}
			if every > 0 && time.Since(lastTrace) >= every {
				lastTrace = time.Now()
				fmt.Fprintf(os.Stderr, "  %s\n", progress())
			}
		}
	}
	elapsed := time.Since(start)
	if err := stopProfile(); err != nil {
		return fleetRun{}, err
	}
	if o.heapProfile != "" {
		if err := writeHeapProfile(o.heapProfile); err != nil {
			return fleetRun{}, err
		}
	}
	cpu1, err := cpuSeconds(os.Getpid())
	if err != nil {
		return fleetRun{}, err
	}
	r := fleetRun{Machines: want, Running: int(min(ran, int64(want))), Elapsed: elapsed, Created: created, CPU: cpu1 - cpu0}
	if mem != nil {
		r.Memory = mem.stop()
	}
	if timedOut != nil {
		// What the create did until then: its CPU (by service) and memory
		// say where it was stuck.
		if prof != nil {
			r.CPUByService, _ = prof.byLabel(daemon.ProfileLabel)
		}
		return r, timedOut
	}
	after, err := e.counts(ctx)
	if err != nil {
		return fleetRun{}, err
	}
	if tp != nil {
		r.traffic = traffic{msgs: tp.stop()}
		r.ByKind = byKind(r.traffic.msgs)
		if r.traffic.watches, r.traffic.durables, err = readers(ctx, js); err != nil {
			return fleetRun{}, err
		}
	}
	if prof != nil {
		if r.CPUByService, err = prof.byLabel(daemon.ProfileLabel); err != nil {
			return fleetRun{}, err
		}
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

// writeHeapProfile writes the process's heap profile (in use as of a
// fresh GC) to path.
func writeHeapProfile(path string) error {
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	runtime.GC()
	if err := pprof.WriteHeapProfile(f); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}
