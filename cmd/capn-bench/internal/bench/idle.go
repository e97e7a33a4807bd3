package bench

import (
	"context"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/capn-dev/capn/events"
	"github.com/capn-dev/capn/events/embedded"
	"github.com/capn-dev/capn/events/store"
	capnv1 "github.com/capn-dev/capn/schemas/capn/v1alpha1"
	"github.com/capn-dev/capn/schemas/keys"
	"github.com/capn-dev/capn/secrets/seal"
)

// idleProgram is one of capn's programs as the idle benchmark runs it: its
// own process, as in a real deployment, so that its CPU time and RSS are
// its own.
type idleProgram struct {
	Name string   // the cmd/ directory
	Core bool     // one of capn's services (false: the sim provider, which simulates the nodes too)
	Args []string // beyond the runtime's flags
}

var idlePrograms = []idleProgram{
	{Name: "cluster-planner", Core: true},
	{Name: "machine-manager", Core: true},
	{Name: "bootstrapper", Core: true},
	{Name: "health-watcher", Core: true},
	{Name: "remediator", Core: true},
	{Name: "gateway", Core: true, Args: []string{"--addr", "127.0.0.1:0"}},
	{Name: "capn-provider-sim", Args: []string{"--sim-boot-latency", "0", "--sim-boot-jitter", "0"}}, // + --sim-heartbeat-every
}

// idleSample is one program's cost while nothing changes.
type idleSample struct {
	Name   string
	Core   bool
	MilliC float64 // mCPU over the window (CPU seconds per second × 1000)
	RSSMiB float64 // resident set at the end of the window
}

type idleRun struct {
	Clusters  int
	Heartbeat time.Duration // every simulated node's heartbeat interval
	Window    time.Duration
	// Quiet is how long no follow-up write must be seen before the window
	// starts; Settled is how long after every machine was Running and
	// every cluster Ready the last one was.
	Quiet, Settled time.Duration
	Programs       []idleSample
}

func (r idleRun) sum(core bool, f func(idleSample) float64) float64 {
	t := 0.0
	for _, p := range r.Programs {
		if p.Core || !core {
			t += f(p)
		}
	}
	return t
}

// buildPrograms builds every idle program into dir from the module the
// benchmark runs in (make bench runs it from the repository's root).
func buildPrograms(ctx context.Context, dir string) error {
	var names []string
	for _, p := range idlePrograms {
		names = append(names, p.Name)
	}
	return goBuild(ctx, dir, names...)
}

// measureIdle runs each program as its own process against an embedded
// server on loopback, creates n clusters, waits until every machine is
// Running and every cluster Ready, lets the fleet settle — until no
// follow-up write was seen for quiet (lastWrite) — then reads each
// process's CPU time over window and its resident set at the end.
func measureIdle(ctx context.Context, binDir string, n int, heartbeat, quiet, window, timeout time.Duration) (idleRun, error) {
	dir, err := os.MkdirTemp("", "capn-bench-idle-")
	if err != nil {
		return idleRun{}, err
	}
	defer os.RemoveAll(dir)
	srv, err := embedded.Start(embedded.Options{StoreDir: filepath.Join(dir, "nats"), Port: -1, ServerName: "capn-bench-idle"})
	if err != nil {
		return idleRun{}, err
	}
	defer func() { srv.Shutdown(); srv.WaitForShutdown() }()
	nc, err := nats.Connect(srv.ClientURL(), nats.Name("bench-idle"))
	if err != nil {
		return idleRun{}, err
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		return idleRun{}, err
	}
	if err := events.Provision(ctx, js, events.DefaultTopology(1)); err != nil {
		return idleRun{}, err
	}
	key, _ := seal.GenerateKey()
	keyFile := filepath.Join(dir, "secrets.key")
	if err := os.WriteFile(keyFile, []byte(key.Encode()), 0o600); err != nil {
		return idleRun{}, err
	}
	tokens := filepath.Join(dir, "tokens")
	if err := os.WriteFile(tokens, []byte("bench-token-0123456789abcdef0123 admin bench\n"), 0o600); err != nil {
		return idleRun{}, err
	}
	var procs []*exec.Cmd
	defer func() {
		for _, p := range procs {
			_ = p.Process.Signal(os.Interrupt)
		}
		for _, p := range procs {
			_ = p.Wait()
		}
	}()
	var opsAddrs []string // each program's /readyz
	for _, p := range idlePrograms {
		opsAddr, err := freeAddr()
		if err != nil {
			return idleRun{}, err
		}
		opsAddrs = append(opsAddrs, opsAddr)
		args := append([]string{"--nats-url", srv.ClientURL(), "--http-addr", opsAddr, "--log-level", "warn", "--log-format", "json", "--skip-provision"}, p.Args...)
		switch p.Name {
		case "bootstrapper":
			args = append(args, "--secrets-key-file", keyFile)
		case "capn-provider-sim":
			args = append(args, "--sim-heartbeat-every", heartbeat.String())
		case "gateway":
			args = append(args, "--secrets-key-file", keyFile, "--tokens-file", tokens)
		}
		cmd := exec.Command(filepath.Join(binDir, p.Name), args...)
		log, err := os.Create(filepath.Join(dir, p.Name+".log"))
		if err != nil {
			return idleRun{}, err
		}
		defer log.Close()
		cmd.Stdout, cmd.Stderr = log, log
		if err := cmd.Start(); err != nil {
			return idleRun{}, fmt.Errorf("start %s: %w", p.Name, err)
		}
		procs = append(procs, cmd)
	}

	observed, err := js.KeyValue(ctx, events.BucketObserved)
	if err != nil {
		return idleRun{}, err
	}
	desired, err := js.KeyValue(ctx, events.BucketDesired)
	if err != nil {
		return idleRun{}, err
	}
	wctx, stopWatch := context.WithCancel(ctx)
	defer stopWatch()
	running := countRunning(wctx, observed)
	ready := countReadyClusters(wctx, observed)
	// Every program connected and bound its consumers once it says ready.
	hc := &http.Client{Timeout: 2 * time.Second}
	for i, addr := range opsAddrs {
		if err := waitReady(ctx, time.Minute, 1, func() *http.Response {
			resp, _ := hc.Get("http://" + addr + "/readyz") // not listening yet: nil
			return resp
		}); err != nil {
			return idleRun{}, fmt.Errorf("%s: %w (logs in %s)", idlePrograms[i].Name, err, dir)
		}
	}
	last, err := watchWrites(nc)
	if err != nil {
		return idleRun{}, err
	}
	defer last.stop()
	clusters := store.NewBucket(desired, store.New[capnv1.Cluster]())
	for i := range n {
		c := fleetCluster(i)
		if _, err := clusters.Create(ctx, keys.Cluster(c.GetMetadata().GetName()), c); err != nil {
			return idleRun{}, err
		}
	}
	deadline := time.Now().Add(timeout)
	if err := poll(ctx, 100*time.Millisecond, func() (bool, error) {
		if running.Load() >= int64(n*10) && ready.Load() >= int64(n) {
			return true, nil
		}
		if time.Now().After(deadline) {
			return false, fmt.Errorf("idle %d clusters: %d of %d machines Running, %d of %d clusters Ready after %s (logs in %s)",
				n, running.Load(), n*10, ready.Load(), n, timeout, dir)
		}
		for i, p := range procs {
			if p.ProcessState != nil {
				return false, fmt.Errorf("%s exited: %s", idlePrograms[i].Name, p.ProcessState)
			}
		}
		return false, nil
	}); err != nil {
		return idleRun{}, err
	}
	stopWatch() // the benchmark's own watchers are not part of the idle cost
	// The create's follow-up work (status rewrites, timers a reconcile
	// asked for) ends some time after the last machine is Running: the
	// window starts once no write was seen for quiet.
	readyAt := time.Now()
	if err := poll(ctx, 100*time.Millisecond, func() (bool, error) {
		if time.Since(last.at()) >= quiet {
			return true, nil
		}
		if time.Now().After(deadline) {
			return false, fmt.Errorf("idle %d clusters: still writing %s after every machine was Running (last: %s)", n, time.Since(readyAt).Round(time.Second), last.subject())
		}
		return false, nil
	}); err != nil {
		return idleRun{}, err
	}
	settled := max(0, last.at().Sub(readyAt))
	last.stop()
	before := make([]float64, len(procs))
	for i, p := range procs {
		if before[i], err = cpuSeconds(p.Process.Pid); err != nil {
			return idleRun{}, err
		}
	}
	t0 := time.Now()
	time.Sleep(window) //sleep-ok: the measurement window
	el := time.Since(t0).Seconds()
	r := idleRun{Clusters: n, Heartbeat: heartbeat, Window: window, Quiet: quiet, Settled: settled}
	for i, p := range procs {
		after, err := cpuSeconds(p.Process.Pid)
		if err != nil {
			return idleRun{}, err
		}
		rss, err := rssMiB(p.Process.Pid)
		if err != nil {
			return idleRun{}, err
		}
		r.Programs = append(r.Programs, idleSample{Name: idlePrograms[i].Name, Core: idlePrograms[i].Core, MilliC: 1000 * (after - before[i]) / el, RSSMiB: rss})
	}
	return r, nil
}

// countReadyClusters counts clusters whose observed phase is Ready.
func countReadyClusters(ctx context.Context, kv jetstream.KeyValue) *atomic.Int64 {
	return countPhase(ctx, kv, "cluster.*", store.New[capnv1.ClusterStatus](), capnv1.ClusterReady.Wire())
}

// cpuSeconds is the user+system CPU time of a process so far.
func cpuSeconds(pid int) (float64, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0, err
	}
	ticks, err := parseStatCPU(string(b))
	if err != nil {
		return 0, fmt.Errorf("/proc/%d/stat: %w", pid, err)
	}
	return ticks / clockTicks, nil
}

// clockTicks is USER_HZ, 100 on every Linux that Go supports.
const clockTicks = 100

// rssMiB is a process's resident set (VmRSS).
func rssMiB(pid int) (float64, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0, err
	}
	mib, err := parseKiB(string(b), "VmRSS:")
	if err != nil {
		return 0, fmt.Errorf("/proc/%d/status: %w", pid, err)
	}
	return mib, nil
}

func (s idleSample) cpu() float64 { return s.MilliC }
func (s idleSample) rss() float64 { return s.RSSMiB }

// writeWatch is when the last write of the fleet's follow-up work was seen.
type writeWatch struct {
	subs []*nats.Subscription
	mu   sync.Mutex
	last time.Time
	subj string
}

// watchWrites follows every KV write and every message to capn's streams,
// from core subscriptions, but what recurs for as long as the fleet runs:
// the heartbeats (capn.health.>) and the providers' announcements and
// leases (observed provider.*), which a settled fleet keeps making.
func watchWrites(nc *nats.Conn) (*writeWatch, error) {
	w := &writeWatch{last: time.Now()}
	for _, subj := range []string{"$KV.>", "capn.>"} {
		sub, err := nc.Subscribe(subj, func(m *nats.Msg) {
			if !followUp(m.Subject) {
				return
			}
			w.mu.Lock()
			w.last, w.subj = time.Now(), m.Subject
			w.mu.Unlock()
		})
		if err != nil {
			w.stop()
			return nil, err
		}
		w.subs = append(w.subs, sub)
	}
	return w, nil
}

// followUp says whether a message on subj is a write of the create's
// follow-up work, not one of those a settled fleet keeps making.
func followUp(subj string) bool {
	return !strings.HasPrefix(subj, "capn.health.") && !strings.HasPrefix(subj, "$KV."+events.BucketObserved+"."+keys.ProviderPrefix)
}

func (w *writeWatch) at() time.Time {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.last
}

func (w *writeWatch) subject() string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.subj
}

func (w *writeWatch) stop() {
	for _, s := range w.subs {
		_ = s.Unsubscribe()
	}
	w.subs = nil
}
