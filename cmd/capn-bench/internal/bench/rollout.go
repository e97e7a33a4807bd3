package bench

import (
	"context"
	"fmt"
	"io"
	"net"
	"os"
	"strings"
	"sync"
	"time"

	"github.com/capn-dev/capn/events"
	"github.com/capn-dev/capn/events/store"
	"github.com/capn-dev/capn/gateway"
	"github.com/capn-dev/capn/gateway/api"
	"github.com/capn-dev/capn/gateway/client"
	"github.com/capn-dev/capn/providers/sim"
	capnv1 "github.com/capn-dev/capn/schemas/capn/v1alpha1"
	"github.com/capn-dev/capn/schemas/keys"
	"github.com/capn-dev/capn/secrets/seal"
	fleetmanager "github.com/capn-dev/capn/services/fleet-manager"
	"github.com/capn-dev/capn/services/fleet-manager/wave"
)

// rolloutWaves are the rollout benchmark's waves: the canary,
// 10%, 50%, the rest.
var rolloutWaves = []string{"2", "10%", "50%", "100%"}

// rolloutRun is one class revision rolled out across a fleet in waves.
type rolloutRun struct {
	Clusters int
	Soak     time.Duration
	// Create is the time until every cluster of revision 1 was Ready.
	Create time.Duration
	Waves  []waveRun
	// Elapsed is from the rollout's create until it was Completed.
	Elapsed time.Duration
	// KVWrites are the messages added to the KV streams during the
	// rollout; Machines the machines it replaced.
	KVWrites uint64
	Machines int
	// Load is the 1-minute load average when the rollout finished.
	Load string
	// Baseline is the same run's NATS figure.
	Baseline baseline
}

// waveRun is one wave, by the fleet-manager's own stamps (started,
// finished: its clock is the real one here).
type waveRun struct {
	Clusters int
	Wall     time.Duration // started → finished (includes the soak)
}

// BeyondSoak is the wave's time beyond its soak: moving its clusters,
// their machines replaced and Ready, and the fleet-manager noticing.
func (w waveRun) BeyondSoak(soak time.Duration) time.Duration { return w.Wall - soak }

// medianOverhead is the median of the waves' time beyond the soak.
func (r rolloutRun) medianOverhead() time.Duration {
	return time.Duration(median(collect(r.Waves, func(w waveRun) float64 { return float64(w.BeyondSoak(r.Soak)) })))
}

// rolloutClass is the benchmark's class: a sim control plane of one
// machine and a pool of one worker (the cheapest cluster with a pool).
const rolloutClass = `apiVersion: capn.dev/v1alpha1
kind: ClusterClass
metadata: {name: bench}
spec:
  template:
    kubernetesVersion: v1.34.2
    controlPlane: {provider: sim, replicas: 1}
  poolClasses:
  - {name: general, template: {provider: sim}}
`

// measureRollout creates n clusters of one class through the gateway,
// waits until all are Ready, applies the class's revision 2 (a new
// Kubernetes patch version: every machine is replaced) and rolls it out
// with the waves rolloutWaves and soak, timing each wave by the
// fleet-manager's stamps.
func measureRollout(ctx context.Context, n int, soak, timeout time.Duration, w io.Writer) (rolloutRun, error) {
	r := rolloutRun{Clusters: n, Soak: soak}
	var err error
	if r.Baseline, err = measureBaseline(ctx); err != nil {
		return r, err
	}
	key, _ := seal.GenerateKey()
	ring, _ := seal.NewKeyring(key)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return r, err
	}
	token, err := gateway.GenerateToken()
	if err != nil {
		return r, err
	}
	gw := gateway.New(gateway.Options{Listener: ln, Keyring: ring, RateLimit: -1,
		Tokens: []gateway.Token{{Name: "bench", Secret: token, Scopes: []api.Scope{api.ScopeAdmin}}}})
	svcs := append(services(ring, sim.Options{}), fleetmanager.New(fleetmanager.Config{Tick: 200 * time.Millisecond}), gw)
	e, err := startEnv(ctx, events.DefaultTopology(1), svcs...)
	if err != nil {
		return r, err
	}
	defer e.Close()
	cl, err := client.New("http://"+ln.Addr().String(), client.WithToken(token))
	if err != nil {
		return r, err
	}
	if _, _, err := cl.ApplyClass(ctx, []byte(rolloutClass)); err != nil {
		return r, fmt.Errorf("class: %w", err)
	}
	statuses := store.NewBucket(e.kv(ctx, events.BucketObserved), store.New[capnv1.ClusterStatus]())
	names := make([]string, n)
	start := time.Now()
	var wg sync.WaitGroup
	errs := make(chan error, 8)
	for k := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := k; i < n; i += 8 {
				names[i] = fmt.Sprintf("r%04d", i)
				m := fmt.Sprintf("apiVersion: capn.dev/v1alpha1\nkind: Cluster\nmetadata: {name: %s, labels: {fleet: bench}}\nspec:\n  topology: {class: bench, pools: [{name: md-0, class: general, replicas: 1}]}\n", names[i])
				if _, _, err := cl.Apply(ctx, []byte(m)); err != nil {
					errs <- fmt.Errorf("cluster %s: %w", names[i], err)
					return
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	if err := <-errs; err != nil {
		return r, err
	}
	ready := func(gen int64) (int, error) {
		got := 0
		for _, name := range names {
			st, _, err := statuses.Get(ctx, keys.Cluster(name))
			if err == nil && st.GetObservedGeneration() >= gen && st.GetPhaseValue() == capnv1.ClusterReady {
				got++
			}
		}
		return got, nil
	}
	deadline := time.Now().Add(timeout)
	if err := poll(ctx, time.Second, func() (bool, error) {
		got, _ := ready(1)
		if time.Now().After(deadline) {
			return false, fmt.Errorf("rollout benchmark: %d of %d clusters Ready after %s", got, n, timeout)
		}
		return got == n, nil
	}); err != nil {
		return r, err
	}
	r.Create = time.Since(start)
	fmt.Fprintf(w, "  %d clusters of revision 1 Ready in %s; revision 2 rolled out…\n", n, r.Create.Round(time.Millisecond))

	v2 := strings.Replace(rolloutClass, "v1.34.2", "v1.34.3", 1)
	if _, _, err := cl.ApplyClass(ctx, []byte(v2)); err != nil {
		return r, fmt.Errorf("class revision 2: %w", err)
	}
	before, err := streamMessages(ctx, e.js)
	if err != nil {
		return r, err
	}
	ro := fmt.Sprintf("apiVersion: capn.dev/v1alpha1\nkind: Rollout\nmetadata: {name: bench}\nspec:\n  clusterSelector: {matchLabels: {fleet: bench}}\n  change: {class: bench}\n  waves: [%s]\n  soak: %s\n  readyTimeout: 30m\n",
		`"`+strings.Join(rolloutWaves, `", "`)+`"`, soak)
	start = time.Now()
	if _, err := cl.CreateRollout(ctx, []byte(ro)); err != nil {
		return r, fmt.Errorf("rollout: %w", err)
	}
	rollouts := store.NewBucket(e.kv(ctx, events.BucketObserved), store.New[capnv1.RolloutStatus]())
	var st *capnv1.RolloutStatus
	seen := -1
	deadline = time.Now().Add(timeout)
	if err := poll(ctx, 100*time.Millisecond, func() (bool, error) {
		st, _, _ = rollouts.Get(ctx, keys.Rollout("bench"))
		for _, wv := range st.GetWaves() {
			if i := int(wv.GetIndex()); i > seen && wv.GetState() == wave.WaveDone {
				seen = i
				fmt.Fprintf(w, "  wave %d (%d clusters) done after %s\n", i, len(wv.GetClusters()), wv.GetFinished().AsTime().Sub(wv.GetStarted().AsTime()).Round(time.Millisecond))
			}
		}
		switch st.GetPhase() {
		case wave.PhaseCompleted:
			return true, nil
		case wave.PhaseHalted, wave.PhaseAborted:
			return false, fmt.Errorf("rollout benchmark: the rollout %s: %s", st.GetPhase(), st.GetHaltReason())
		}
		if time.Now().After(deadline) {
			return false, fmt.Errorf("rollout benchmark: not Completed after %s (phase %s, wave %d)", timeout, st.GetPhase(), st.GetCurrentWave())
		}
		return false, nil
	}); err != nil {
		return r, err
	}
	r.Elapsed = time.Since(start)
	for _, wv := range st.GetWaves() {
		r.Waves = append(r.Waves, waveRun{Clusters: len(wv.GetClusters()), Wall: wv.GetFinished().AsTime().Sub(wv.GetStarted().AsTime())})
	}
	after, err := streamMessages(ctx, e.js)
	if err != nil {
		return r, err
	}
	for name, v := range after {
		if strings.HasPrefix(name, "KV_") {
			r.KVWrites += v - before[name]
		}
	}
	r.Machines = 2 * n
	if b, err := os.ReadFile("/proc/loadavg"); err == nil {
		r.Load = strings.Fields(string(b))[0]
	}
	return r, nil
}

// rolloutMarkdown renders the rollout runs.
func (r report) rolloutMarkdown(b *strings.Builder) {
	x := r.Rollout[0]
	fmt.Fprintf(b, "\n## Class revision rolled out in waves\n\n")
	fmt.Fprintf(b, "%d clusters of one class on sim (1 control-plane machine and a pool of 1 worker each), created\n", x.Clusters)
	fmt.Fprintf(b, "through the gateway; then the class's revision 2 (a new Kubernetes patch version, so every one of\n")
	fmt.Fprintf(b, "the %d machines is replaced) is rolled out by a `Rollout` in waves %s with a soak of %s.\n", x.Machines, strings.Join(rolloutWaves, ", "), x.Soak)
	fmt.Fprintf(b, "A wave's wall time is from the fleet-manager's start of it to its finish (its clusters moved, their\n")
	fmt.Fprintf(b, "machines replaced, all Ready at the revision, then the soak); *beyond soak* is that minus the soak.\n")
	fmt.Fprintf(b, "The NATS figure is the same run's baseline (KV puts from one client, on a fresh server).\n\n")
	fmt.Fprintf(b, "| run | wave | clusters | wall time | beyond soak |\n| --- | --- | --- | --- | --- |\n")
	for i, x := range r.Rollout {
		for j, w := range x.Waves {
			fmt.Fprintf(b, "| %d | %d (%s) | %d | %.1f s | %.1f s |\n", i+1, j, rolloutWaves[min(j, len(rolloutWaves)-1)], w.Clusters, w.Wall.Seconds(), w.BeyondSoak(x.Soak).Seconds())
		}
	}
	fmt.Fprintf(b, "\n| run | fleet create (rev 1 Ready) | rollout, create to Completed | median time beyond soak per wave | KV writes per replaced machine | capn KV write rate | NATS KV put baseline | load average at the end |\n")
	fmt.Fprintf(b, "| --- | --- | --- | --- | --- | --- | --- | --- |\n")
	for i, x := range r.Rollout {
		fmt.Fprintf(b, "| %d | %.1f s | %.1f s | %.1f s | %.1f | %.0f/s | %.0f/s | %s |\n", i+1, x.Create.Seconds(), x.Elapsed.Seconds(), x.medianOverhead().Seconds(),
			float64(x.KVWrites)/float64(x.Machines), float64(x.KVWrites)/x.Elapsed.Seconds(), x.Baseline.KVPut1, x.Load)
	}
}
