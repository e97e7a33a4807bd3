package bench

import (
	"context"
	"fmt"
	"io"
	"maps"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/capn-dev/capn/events"
	"github.com/capn-dev/capn/events/embedded"
	"github.com/capn-dev/capn/events/store"
	"github.com/capn-dev/capn/kubeapi"
	"github.com/capn-dev/capn/providers/process"
	"github.com/capn-dev/capn/providers/sdk"
	capnv1 "github.com/capn-dev/capn/schemas/capn/v1alpha1"
	"github.com/capn-dev/capn/schemas/keys"
	"github.com/capn-dev/capn/schemas/manifest"
	"github.com/capn-dev/capn/secrets/clusterkubeconfig"
	"github.com/capn-dev/capn/secrets/seal"
	"github.com/capn-dev/capn/services/bootstrapper"
	"github.com/capn-dev/capn/services/cluster-planner"
	controlplanehosted "github.com/capn-dev/capn/services/controlplane-hosted"
	"github.com/capn-dev/capn/services/daemon"
	"github.com/capn-dev/capn/services/health-watcher"
	"github.com/capn-dev/capn/services/machine-manager"
)

// The hosted benchmark (issue 21): how many hosted control planes this
// machine holds. N clusters with a hosted control plane of one replica
// are applied at once to the desired bucket (defaulted and validated as
// the gateway does) on an embedded nats-server on loopback, with the
// cluster-planner and the bootstrapper in process and controlplane-hosted
// as its own program (cmd/controlplane-hosted, as deployed: its RSS and
// CPU are its own, its control planes are its children). Measured: first
// apply → all N Ready (Kamaji's measure), each control plane's apply →
// Ready, and once they settled each control plane's RSS and idle CPU
// (its processes, from /proc) and the service's. Then, on a fresh server
// with the process provider: one hosted cluster with one kube-local
// worker (apply → a Ready Node) and one machine-based kube-local control
// plane (its machine's RSS and idle CPU), the figure beside.

// hostedPrograms are the programs the hosted benchmark builds.
var hostedPrograms = []string{"controlplane-hosted", "capn-node"}

// Per-control-plane processes, by their executable's name, in the order
// the report lists them.
var hostedComponents = []string{"etcd", "kube-apiserver", "kube-controller-manager", "kube-scheduler"}

// hostedRun is one density measurement of N hosted control planes.
type hostedRun struct {
	N int
	// Picked says why, when --hosted auto chose N from AutoAvail (MiB
	// available then).
	Picked    string
	AutoAvail float64
	// Load is /proc/loadavg's 1-minute figure at the first apply and at
	// the end of the idle window.
	LoadStart, LoadEnd float64
	// Total: the first apply → the last of the N Ready; PerCP: each one's
	// apply → Ready (record initialized with every replica ready, and
	// the cluster Ready).
	Total time.Duration
	PerCP []time.Duration
	// Started: each one's apply → its record first written, which
	// controlplane-hosted does once the processes are started (the
	// planner's command, the PKI, the certificates, the spawn: capn's
	// part); the rest of PerCP is Kubernetes starting.
	Started []time.Duration
	// RSS (MiB) of each control plane's processes together, at the end of
	// the window, and by component (hostedComponents).
	RSS    []float64
	ByComp map[string][]float64
	// MilliC: each control plane's CPU over the window (mCPU).
	MilliC []float64
	// The controlplane-hosted program's own RSS (MiB) and mCPU.
	ServiceRSS, ServiceMilliC float64
	// MemAvailable (MiB) at the end of the window, the N running.
	MemAvailable   float64
	Settle, Window time.Duration
}

func (r hostedRun) perCPSeconds() []float64 {
	return collect(r.PerCP, func(d time.Duration) float64 { return d.Seconds() })
}

func (r hostedRun) startedSeconds() []float64 {
	return collect(r.Started, func(d time.Duration) float64 { return d.Seconds() })
}

// fitMemory is how many 1-replica control planes the machine would hold by
// memory: those running plus what MemAvailable takes at the median RSS.
func (r hostedRun) fitMemory() int {
	m := median(r.RSS)
	if m <= 0 {
		return r.N
	}
	return r.N + int(r.MemAvailable/m)
}

// fitCPU is how many idle control planes the machine's cores would hold.
func (r hostedRun) fitCPU(cores int) int {
	m := median(r.MilliC)
	if m <= 0 {
		return 0
	}
	return int(float64(cores) * 1000 / m)
}

// hostedWorkerRun is one hosted cluster with a worker, and one
// machine-based control plane, on the process provider.
type hostedWorkerRun struct {
	// Hosted cluster of 1 replica + 1 kube-local worker: apply → cluster
	// Ready, apply → the worker's Node Ready in its API server.
	ClusterReady, NodeReady time.Duration
	// Machine-based control plane (1 kube-local machine on the process
	// provider, no worker): apply → cluster Ready; the machine's
	// processes' RSS (MiB) by name (the control-plane components, kwok
	// standing in for its kubelet, capn-node its agent) and their mCPU
	// over the window.
	MachineReady  time.Duration
	MachineRSS    map[string]float64
	MachineMilliC float64
	Settle        time.Duration
	Window        time.Duration
}

// machineRSS is the RSS of the machine's control-plane components
// (hostedComponents, all false) or of all its processes: with kwok, its
// kubelet's stand-in, and capn-node, its agent (all true).
func (r hostedWorkerRun) machineRSS(all bool) float64 {
	t := 0.0
	for name, v := range r.MachineRSS {
		if all || slices.Contains(hostedComponents, name) {
			t += v
		}
	}
	return t
}

// machineOthers names the machine's processes besides the control-plane
// components, with their RSS ("kwok 30, capn-node 20").
func (r hostedWorkerRun) machineOthers() string {
	var out []string
	for _, name := range slices.Sorted(maps.Keys(r.MachineRSS)) {
		if !slices.Contains(hostedComponents, name) {
			out = append(out, fmt.Sprintf("%s %.0f", name, r.MachineRSS[name]))
		}
	}
	return strings.Join(out, ", ")
}

// runHosted runs the hosted benchmark: each --hosted size, then the worker
// and the machine-based figure (--hosted-worker).
func runHosted(ctx context.Context, o options, rep *report, w io.Writer) error {
	kubeBin, version, err := newestKubeBin(ctx, o.KubeBin)
	if err != nil {
		return err
	}
	rep.HostedVersion = version
	progs, err := os.MkdirTemp("", "capn-bench-bin-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(progs)
	fmt.Fprintf(w, "hosted: building %s…\n", strings.Join(hostedPrograms, ", "))
	if err := goBuild(ctx, progs, hostedPrograms...); err != nil {
		return err
	}
	for _, n := range o.hostedSizes {
		picked, avail := "", 0.0
		if n == 0 {
			if avail, err = memAvailableMiB(); err != nil {
				return err
			}
			n, picked = pickHosted(avail)
			fmt.Fprintf(w, "hosted: --hosted auto picked %d: %s\n", n, picked)
		}
		fmt.Fprintf(w, "hosted: %d hosted control planes (1 replica, Kubernetes %s)…\n", n, version)
		res, err := measureHosted(ctx, progs, kubeBin, version, n, o.HostedSettle, o.HostedWindow, o.Timeout, w)
		if err != nil {
			return err
		}
		res.Picked, res.AutoAvail = picked, avail
		fmt.Fprintf(w, "  %d Ready in %s (per control plane median %.1f s, p90 %.1f s; processes started after a median %.1f s, p90 %.1f s); RSS per control plane median %.0f MiB; idle %.1f mCPU each; controlplane-hosted %.0f MiB, %.1f mCPU; %.1f GiB available; load %.2f → %.2f\n",
			n, res.Total.Round(100*time.Millisecond), median(res.perCPSeconds()), percentile(res.perCPSeconds(), 0.9),
			median(res.startedSeconds()), percentile(res.startedSeconds(), 0.9), median(res.RSS), median(res.MilliC),
			res.ServiceRSS, res.ServiceMilliC, res.MemAvailable/1024, res.LoadStart, res.LoadEnd)
		rep.Hosted = append(rep.Hosted, res)
	}
	if o.HostedWorker {
		fmt.Fprintf(w, "hosted: one hosted cluster with a kube-local worker, and one machine-based control plane, on the process provider…\n")
		res, err := measureHostedWorker(ctx, progs, kubeBin, version, o.HostedSettle, o.HostedWindow, o.Timeout, w)
		if err != nil {
			return err
		}
		fmt.Fprintf(w, "  hosted + 1 worker: cluster Ready %.1f s, Node Ready %.1f s after apply; machine-based control plane Ready %.1f s, its machine %.0f MiB (control-plane components %.0f MiB; %s), %.1f mCPU\n",
			res.ClusterReady.Seconds(), res.NodeReady.Seconds(), res.MachineReady.Seconds(), res.machineRSS(true), res.machineRSS(false), res.machineOthers(), res.MachineMilliC)
		rep.HostedWorker = &res
	}
	return nil
}

// newestKubeBin is the directory of list (colon-separated; empty: the
// directories make kube caches) with every binary a hosted control plane
// and a kube-local machine run, of the newest Kubernetes version.
func newestKubeBin(ctx context.Context, list string) (dir, version string, err error) {
	dirs := filepath.SplitList(list)
	if list == "" {
		if home, err := os.UserHomeDir(); err == nil {
			dirs, _ = filepath.Glob(filepath.Join(home, ".cache", "capn", "kube", "k8s-*", "bin"))
		}
	}
	var best manifest.Version
	for _, d := range dirs {
		if d = strings.TrimSpace(d); d == "" || strings.HasSuffix(filepath.Dir(d), ".tmp") {
			continue
		}
		complete := true
		for _, b := range append(slices.Clone(controlplanehosted.Binaries), "kubectl", "kwok") {
			if _, err := os.Stat(filepath.Join(d, b)); err != nil {
				complete = false
			}
		}
		if !complete {
			continue
		}
		out, err := exec.CommandContext(ctx, filepath.Join(d, "kube-apiserver"), "--version").Output()
		f := strings.Fields(string(out))
		if err != nil || len(f) != 2 {
			continue
		}
		v, err := manifest.ParseVersion(f[1])
		if err != nil {
			continue
		}
		if dir == "" || v.Compare(best) > 0 {
			dir, version, best = d, f[1], v
		}
	}
	if dir == "" {
		return "", "", usageError{fmt.Errorf("--kube-bin: no directory of %q holds etcd, kube-apiserver, kube-controller-manager, kube-scheduler, kubectl and kwok: build them (make kube; make -s kube-bin prints the list) and pass it, or set CAPN_KUBE_BIN", list)}
	}
	abs, err := filepath.Abs(dir)
	return abs, version, err
}

// goBuild builds the programs of cmd/ into dir, from the module the
// benchmark runs in (make runs it from the repository's root; a test from
// its package's directory, below it).
func goBuild(ctx context.Context, dir string, programs ...string) error {
	args := []string{"build", "-o", dir + string(os.PathSeparator)}
	for _, p := range programs {
		args = append(args, "./cmd/"+p)
	}
	cmd := exec.CommandContext(ctx, "go", args...)
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
	cmd.Dir = moduleRoot()
	if out, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("go build of %s (run capn-bench from the repository's root): %v\n%s", strings.Join(programs, ", "), err, out)
	}
	return nil
}

// moduleRoot is the nearest directory at or above the working directory
// that holds a go.mod ("" — the working directory — if none does).
func moduleRoot() string {
	d, err := os.Getwd()
	if err != nil {
		return ""
	}
	for {
		if _, err := os.Stat(filepath.Join(d, "go.mod")); err == nil {
			return d
		}
		up := filepath.Dir(d)
		if up == d {
			return ""
		}
		d = up
	}
}

// hostedWorld is a listening embedded server with capn's topology, the
// in-process services and the controlplane-hosted program.
type hostedWorld struct {
	dir     string
	env     *env
	ring    *seal.Keyring
	hosted  *program
	hostDir string // the program's --hosted-data-dir
	ready   *readyWatch
	stopW   context.CancelFunc
}

// startHostedWorld starts the server in dir, the services svcs(ring) in
// process and controlplane-hosted from progs.
func startHostedWorld(ctx context.Context, dir, progs, kubeBin string, svcs func(ring *seal.Keyring, natsURL string) []daemon.Service) (*hostedWorld, error) {
	srv, err := embedded.Start(embedded.Options{StoreDir: filepath.Join(dir, "nats"), Port: -1, ServerName: "capn-bench-hosted"})
	if err != nil {
		return nil, err
	}
	stopSrv := func() { srv.Shutdown(); srv.WaitForShutdown() }
	key, err := seal.GenerateKey()
	if err != nil {
		stopSrv()
		return nil, err
	}
	ring, err := seal.NewKeyring(key)
	if err != nil {
		stopSrv()
		return nil, err
	}
	e, err := startEnvOn(ctx, srv, stopSrv, events.DefaultTopology(1), svcs(ring, srv.ClientURL())...)
	if err != nil {
		return nil, err
	}
	hw := &hostedWorld{dir: dir, env: e, ring: ring, hostDir: filepath.Join(dir, "hosted")}
	ops, err := freeAddr()
	if err != nil {
		e.Close()
		return nil, err
	}
	hw.hosted, err = startProgram(filepath.Join(progs, "controlplane-hosted"), filepath.Join(dir, "controlplane-hosted.log"),
		"--nats-url", srv.ClientURL(), "--http-addr", ops, "--log-level", "warn", "--log-format", "json", "--skip-provision",
		"--hosted-data-dir", hw.hostDir, "--kube-bin", kubeBin)
	if err != nil {
		e.Close()
		return nil, err
	}
	hc := &http.Client{Timeout: 2 * time.Second}
	if err := waitReady(ctx, time.Minute, 1, func() *http.Response {
		resp, _ := hc.Get("http://" + ops + "/readyz") // not listening yet: nil
		return resp
	}); err != nil {
		hw.Close()
		return nil, fmt.Errorf("controlplane-hosted: %w (log in %s)", err, hw.hosted.log)
	}
	wctx, cancel := context.WithCancel(ctx)
	hw.stopW = cancel
	if hw.ready, err = watchReady(wctx, e.kv(ctx, events.BucketObserved)); err != nil {
		hw.Close()
		return nil, err
	}
	return hw, nil
}

// Close stops the program (it stops its control planes), then the
// services and the server.
func (hw *hostedWorld) Close() {
	if hw.stopW != nil {
		hw.stopW()
	}
	hw.hosted.stop()
	// Its children die with it (the supervisor's Pdeathsig); any left
	// after a SIGKILL are the benchmark's own, found by their directory.
	for _, ps := range procsUnder(hw.hostDir) {
		for _, p := range ps {
			_ = syscall.Kill(p.PID, syscall.SIGKILL)
		}
	}
	hw.env.Close()
}

// apply writes a cluster from its manifest to the desired bucket,
// defaulted and validated as the gateway does, with a uid and generation
// 1; it returns when it was written.
func (hw *hostedWorld) apply(ctx context.Context, yaml string) (time.Time, error) {
	c, err := manifest.Decode([]byte(yaml))
	if err != nil {
		return time.Time{}, err
	}
	checked := manifest.Validator{}.Check(c)
	if err := checked.Err(); err != nil {
		return time.Time{}, fmt.Errorf("cluster %s: %w", c.GetMetadata().GetName(), err)
	}
	c = checked.Cluster()
	c.Metadata.Uid, c.Metadata.Generation, c.Metadata.CreationTimestamp = "uid-"+c.GetMetadata().GetName(), 1, timestamppb.Now()
	at := time.Now()
	_, err = store.NewBucket(hw.env.kv(ctx, events.BucketDesired), store.New[capnv1.Cluster]()).Create(ctx, keys.Cluster(c.GetMetadata().GetName()), c)
	return at, err
}

// hostedManifest is a cluster whose control plane is hosted (1 replica),
// with kube-local bootstrap data and the given worker pools.
func hostedManifest(name, version, poolsYAML string) string {
	return "apiVersion: capn.dev/v1alpha1\nkind: Cluster\nmetadata: {name: " + name + "}\nspec:\n  kubernetesVersion: " + version +
		"\n  bootstrap: {provider: kube-local}\n  controlPlane: {type: hosted, replicas: 1}\n  workerPools:" + poolsYAML + "\n"
}

// machineManifest is a cluster whose control plane is one kube-local
// machine on the process provider, with no worker.
func machineManifest(name, version string) string {
	return "apiVersion: capn.dev/v1alpha1\nkind: Cluster\nmetadata: {name: " + name + "}\nspec:\n  kubernetesVersion: " + version +
		"\n  bootstrap: {provider: kube-local}\n  controlPlane: {provider: process, replicas: 1}\n  workerPools: []\n"
}

// measureHosted creates n hosted clusters and measures them (hostedRun).
func measureHosted(ctx context.Context, progs, kubeBin, version string, n int, settle, window, timeout time.Duration, w io.Writer) (hostedRun, error) {
	dir, err := os.MkdirTemp("", "capn-bench-hosted-")
	if err != nil {
		return hostedRun{}, err
	}
	defer os.RemoveAll(dir)
	hw, err := startHostedWorld(ctx, dir, progs, kubeBin, func(ring *seal.Keyring, _ string) []daemon.Service {
		return []daemon.Service{
			clusterplanner.New(clusterplanner.Config{}),
			bootstrapper.New(bootstrapper.Config{Keyring: ring}),
		}
	})
	if err != nil {
		return hostedRun{}, err
	}
	defer hw.Close()
	names := make([]string, n)
	applied := map[string]time.Time{}
	r := hostedRun{N: n, Settle: settle, Window: window, ByComp: map[string][]float64{}}
	r.LoadStart = loadAverage()
	for i := range names {
		names[i] = fmt.Sprintf("hosted-%03d", i)
		at, err := hw.apply(ctx, hostedManifest(names[i], version, " []"))
		if err != nil {
			return hostedRun{}, err
		}
		applied[names[i]] = at
	}
	start := applied[names[0]]
	deadline := time.Now().Add(timeout)
	lastTrace := time.Now()
	if err := poll(ctx, 100*time.Millisecond, func() (bool, error) {
		done := hw.ready.count(names)
		if done == n {
			return true, nil
		}
		if !hw.hosted.running() {
			return false, fmt.Errorf("controlplane-hosted exited: %s (log in %s)", hw.hosted.exit(), hw.hosted.log)
		}
		if time.Now().After(deadline) {
			return false, fmt.Errorf("hosted: %d of %d control planes Ready after %s (logs in %s)", done, n, timeout, dir)
		}
		if time.Since(lastTrace) >= 10*time.Second {
			lastTrace = time.Now()
			fmt.Fprintf(w, "  %5.0fs: %d of %d started, %d Ready; load %.1f\n", time.Since(start).Seconds(), hw.ready.startedCount(names), n, done, loadAverage())
		}
		return false, nil
	}); err != nil {
		return hostedRun{}, keepLogs(dir, err)
	}
	var last time.Time
	for _, c := range names {
		at := hw.ready.at(c)
		r.PerCP = append(r.PerCP, at.Sub(applied[c]))
		r.Started = append(r.Started, hw.ready.startedAt(c).Sub(applied[c]))
		if at.After(last) {
			last = at
		}
	}
	r.Total = last.Sub(start)
	fmt.Fprintf(w, "  all %d Ready after %s; settling %s, then reading CPU over %s…\n", n, r.Total.Round(100*time.Millisecond), settle, window)
	time.Sleep(settle) //sleep-ok: the control planes' start-up work ends (leases taken, caches filled) before the idle window
	cps := procsUnder(hw.hostDir)
	for _, c := range names {
		if got := names2(cps[c]); !sameSet(got, hostedComponents) {
			return hostedRun{}, keepLogs(dir, fmt.Errorf("hosted control plane %s runs %v, want %v", c, got, hostedComponents))
		}
	}
	cost, err := measureWindow(window, hw.hosted.cmd.Process.Pid, cps)
	if err != nil {
		return hostedRun{}, keepLogs(dir, err)
	}
	for _, c := range names {
		r.RSS = append(r.RSS, cost.rss[c])
		r.MilliC = append(r.MilliC, cost.milliC[c])
		for comp, v := range cost.byName[c] {
			r.ByComp[comp] = append(r.ByComp[comp], v)
		}
	}
	r.ServiceRSS, r.ServiceMilliC = cost.selfRSS, cost.selfMilliC
	r.LoadEnd = loadAverage()
	if r.MemAvailable, err = memAvailableMiB(); err != nil {
		return hostedRun{}, err
	}
	return r, nil
}

// measureHostedWorker measures one hosted cluster with a kube-local
// worker and one machine-based control plane on the process provider.
func measureHostedWorker(ctx context.Context, progs, kubeBin, version string, settle, window, timeout time.Duration, w io.Writer) (hostedWorkerRun, error) {
	dir, err := os.MkdirTemp("", "capn-bench-hosted-")
	if err != nil {
		return hostedWorkerRun{}, err
	}
	defer os.RemoveAll(dir)
	state := filepath.Join(dir, "process")
	// Process machines run in sessions of their own and outlive the
	// provider: purge them after everything else stopped.
	defer func() {
		if err := process.Purge(process.Options{StateDir: state}); err != nil {
			fmt.Fprintf(w, "  purge the process provider's machines: %v\n", err)
		}
	}()
	hw, err := startHostedWorld(ctx, dir, progs, kubeBin, func(ring *seal.Keyring, natsURL string) []daemon.Service {
		return []daemon.Service{
			clusterplanner.New(clusterplanner.Config{}),
			machinemanager.New(machinemanager.Config{}),
			bootstrapper.New(bootstrapper.Config{Keyring: ring}),
			healthwatcher.New(healthwatcher.Config{Keyring: ring}),
			process.NewService(process.Options{
				NodeBinary: filepath.Join(progs, process.NodeBinaryName), StateDir: state, KubeBin: kubeBin, NodeNATSURL: natsURL,
				HeartbeatEvery: time.Second, WatchEvery: 250 * time.Millisecond, StopTimeout: 20 * time.Second, HealthPort: -1,
			}, sdk.Options{ReconcileEvery: time.Second, AnnounceEvery: time.Second}),
		}
	})
	if err != nil {
		return hostedWorkerRun{}, err
	}
	defer hw.Close()
	r := hostedWorkerRun{Settle: settle, Window: window, MachineRSS: map[string]float64{}}
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()

	// --- one hosted cluster with one kube-local worker ------------------
	const worker = "hosted-worker"
	applied, err := hw.apply(ctx, hostedManifest(worker, version, "\n  - {name: workers, provider: process, replicas: 1}"))
	if err != nil {
		return hostedWorkerRun{}, err
	}
	kc := kubeapi.NewClusterCache(kubeapi.ClusterCacheConfig{Timeout: 5 * time.Second,
		Kubeconfig: clusterkubeconfig.New(hw.env.kv(ctx, events.BucketDesired), hw.env.kv(ctx, events.BucketSecrets), hw.ring).Kubeconfig})
	var nodeAt time.Time
	last := ""
	if err := poll(ctx, 250*time.Millisecond, func() (bool, error) {
		if nodeAt.IsZero() {
			if !hw.hosted.running() {
				return false, fmt.Errorf("controlplane-hosted exited: %s", hw.hosted.exit())
			}
			if ok, why := readyNode(ctx, kc, worker); ok {
				nodeAt = time.Now()
			} else {
				last = why
			}
		}
		return !nodeAt.IsZero() && hw.ready.clusterReady(worker), nil
	}); err != nil {
		return hostedWorkerRun{}, keepLogs(dir, fmt.Errorf("hosted cluster with a worker: Node Ready %v (last: %s), cluster Ready %v: %w", !nodeAt.IsZero(), last, hw.ready.clusterReady(worker), err))
	}
	r.NodeReady, r.ClusterReady = nodeAt.Sub(applied), hw.ready.clusterAt(worker).Sub(applied)
	fmt.Fprintf(w, "  hosted cluster with a worker: Node Ready %.1f s, cluster Ready %.1f s after apply\n", r.NodeReady.Seconds(), r.ClusterReady.Seconds())

	// --- one machine-based control plane (a kube-local process machine) --
	const machines = "machine-cp"
	applied, err = hw.apply(ctx, machineManifest(machines, version))
	if err != nil {
		return hostedWorkerRun{}, err
	}
	if err := poll(ctx, 100*time.Millisecond, func() (bool, error) { return hw.ready.clusterReady(machines), nil }); err != nil {
		return hostedWorkerRun{}, keepLogs(dir, fmt.Errorf("machine-based control plane not Ready: %w", err))
	}
	r.MachineReady = hw.ready.clusterAt(machines).Sub(applied)
	time.Sleep(settle) //sleep-ok: the machine's start-up work ends before the idle window
	procs := procsUnder(filepath.Join(state, "clusters"))
	mine := map[string][]proc{machines: procs[machines]}
	if got := names2(mine[machines]); !containsAll(got, hostedComponents) {
		return hostedWorkerRun{}, keepLogs(dir, fmt.Errorf("the machine-based control plane's machine runs %v, want %v among them", got, hostedComponents))
	}
	cost, err := measureWindow(window, 0, mine)
	if err != nil {
		return hostedWorkerRun{}, keepLogs(dir, err)
	}
	r.MachineRSS, r.MachineMilliC = cost.byName[machines], cost.milliC[machines]
	return r, nil
}

// readyNode says whether cluster's API server has a Node whose Ready
// condition is True, or why not.
func readyNode(ctx context.Context, kc *kubeapi.ClusterCache, cluster string) (bool, string) {
	c, err := kc.Client(ctx, cluster)
	if err != nil {
		return false, err.Error()
	}
	var nodes struct {
		Items []struct {
			Metadata struct{ Name string }
			Status   struct {
				Conditions []struct{ Type, Status string }
			}
		}
	}
	if err := c.Get(ctx, "/api/v1/nodes", &nodes); err != nil {
		return false, err.Error()
	}
	for _, n := range nodes.Items {
		for _, cond := range n.Status.Conditions {
			if cond.Type == "Ready" && cond.Status == "True" {
				return true, ""
			}
		}
	}
	return false, fmt.Sprintf("%d Nodes, none Ready", len(nodes.Items))
}

// windowCost is what groups of processes cost over a window: RSS (MiB) at
// its end and mCPU, by group and by group and process name, and the same
// for one process of its own (self).
type windowCost struct {
	rss, milliC         map[string]float64
	byName              map[string]map[string]float64
	selfRSS, selfMilliC float64
}

// measureWindow reads the CPU time of every process of groups (and of
// self, unless 0) over window, and their RSS at its end. A process that
// exits during the window is an error: the figure would be wrong.
func measureWindow(window time.Duration, self int, groups map[string][]proc) (windowCost, error) {
	before := map[int]float64{}
	var pids []int
	for _, ps := range groups {
		for _, p := range ps {
			pids = append(pids, p.PID)
		}
	}
	if self != 0 {
		pids = append(pids, self)
	}
	for _, pid := range pids {
		t, err := cpuSeconds(pid)
		if err != nil {
			return windowCost{}, fmt.Errorf("pid %d before the window: %w", pid, err)
		}
		before[pid] = t
	}
	t0 := time.Now()
	time.Sleep(window) //sleep-ok: the measurement window
	el := time.Since(t0).Seconds()
	c := windowCost{rss: map[string]float64{}, milliC: map[string]float64{}, byName: map[string]map[string]float64{}}
	read := func(pid int) (mc, rss float64, err error) {
		t, err := cpuSeconds(pid)
		if err == nil {
			rss, err = rssMiB(pid)
		}
		if err != nil {
			return 0, 0, fmt.Errorf("pid %d exited during the window: %w", pid, err)
		}
		return 1000 * (t - before[pid]) / el, rss, nil
	}
	for g, ps := range groups {
		c.byName[g] = map[string]float64{}
		for _, p := range ps {
			mc, rss, err := read(p.PID)
			if err != nil {
				return windowCost{}, fmt.Errorf("%s %s: %w", g, p.Name, err)
			}
			c.rss[g] += rss
			c.milliC[g] += mc
			c.byName[g][p.Name] += rss
		}
	}
	if self != 0 {
		var err error
		if c.selfMilliC, c.selfRSS, err = read(self); err != nil {
			return windowCost{}, err
		}
	}
	return c, nil
}

func names2(ps []proc) []string {
	out := make([]string, len(ps))
	for i, p := range ps {
		out[i] = p.Name
	}
	return out
}

func sameSet(a, b []string) bool {
	a, b = slices.Clone(a), slices.Clone(b)
	slices.Sort(a)
	slices.Sort(b)
	return slices.Equal(a, b)
}

func containsAll(xs, want []string) bool {
	for _, w := range want {
		if !slices.Contains(xs, w) {
			return false
		}
	}
	return true
}

// loadAverage is the 1-minute load average (0 if unreadable).
func loadAverage() float64 {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return 0
	}
	var l float64
	_, _ = fmt.Sscanf(string(b), "%f", &l)
	return l
}

// keepLogs keeps dir's logs beside the error: the deferred removal of dir
// would take them.
func keepLogs(dir string, err error) error {
	keep, kerr := os.MkdirTemp("", "capn-bench-hosted-logs-")
	if kerr != nil {
		return err
	}
	_ = filepath.Walk(dir, func(p string, info os.FileInfo, werr error) error {
		if werr == nil && !info.IsDir() && strings.HasSuffix(p, ".log") {
			rel, _ := filepath.Rel(dir, p)
			dst := filepath.Join(keep, strings.ReplaceAll(rel, string(os.PathSeparator), "_"))
			if b, rerr := os.ReadFile(p); rerr == nil {
				_ = os.WriteFile(dst, b, 0o600)
			}
		}
		return nil
	})
	return fmt.Errorf("%w (logs kept in %s)", err, keep)
}

// readyWatch follows observed control-plane records and cluster statuses
// and remembers when each cluster's first became ready.
type readyWatch struct {
	mu      sync.Mutex
	started map[string]time.Time // record first written
	record  map[string]time.Time // record initialized, every replica ready
	cluster map[string]time.Time // cluster phase Ready
}

func watchReady(ctx context.Context, kv jetstream.KeyValue) (*readyWatch, error) {
	rw := &readyWatch{started: map[string]time.Time{}, record: map[string]time.Time{}, cluster: map[string]time.Time{}}
	for _, pattern := range []string{keys.ControlPlane("*"), keys.Cluster("*")} {
		wt, err := kv.Watch(ctx, pattern, jetstream.UpdatesOnly())
		if err != nil {
			return nil, err
		}
		go func() {
			for e := range wt.Updates() {
				if e == nil || e.Operation() != jetstream.KeyValuePut {
					continue
				}
				now := time.Now()
				k, err := keys.Parse(e.Key())
				if err != nil {
					continue
				}
				switch k.Kind {
				case keys.KindControlPlane:
					rec, err := store.Decode(e.Value(), store.New[capnv1.ControlPlaneRecord]())
					if err == nil {
						rw.mark(rw.started, k.Cluster, now)
					}
					if err == nil && rec.GetInitialized() && rec.GetReplicas() > 0 && rec.GetReadyReplicas() == rec.GetReplicas() {
						rw.mark(rw.record, k.Cluster, now)
					}
				case keys.KindCluster:
					st, err := store.Decode(e.Value(), store.New[capnv1.ClusterStatus]())
					if err == nil && st.GetPhase() == capnv1.ClusterReady.Wire() {
						rw.mark(rw.cluster, k.Cluster, now)
					}
				}
			}
		}()
	}
	return rw, nil
}

func (rw *readyWatch) mark(m map[string]time.Time, cluster string, at time.Time) {
	rw.mu.Lock()
	defer rw.mu.Unlock()
	if _, ok := m[cluster]; !ok {
		m[cluster] = at
	}
}

// at is when cluster was first both: record ready and cluster Ready (zero
// until then).
func (rw *readyWatch) at(cluster string) time.Time {
	rw.mu.Lock()
	defer rw.mu.Unlock()
	r, ok1 := rw.record[cluster]
	c, ok2 := rw.cluster[cluster]
	if !ok1 || !ok2 {
		return time.Time{}
	}
	if r.After(c) {
		return r
	}
	return c
}

func (rw *readyWatch) count(names []string) int {
	n := 0
	for _, c := range names {
		if !rw.at(c).IsZero() {
			n++
		}
	}
	return n
}

func (rw *readyWatch) startedCount(names []string) int {
	n := 0
	for _, c := range names {
		if !rw.startedAt(c).IsZero() {
			n++
		}
	}
	return n
}

func (rw *readyWatch) startedAt(cluster string) time.Time {
	rw.mu.Lock()
	defer rw.mu.Unlock()
	return rw.started[cluster]
}

func (rw *readyWatch) clusterAt(cluster string) time.Time {
	rw.mu.Lock()
	defer rw.mu.Unlock()
	return rw.cluster[cluster]
}

func (rw *readyWatch) clusterReady(cluster string) bool { return !rw.clusterAt(cluster).IsZero() }

// program is one of capn's programs run by the benchmark as its own
// process; it dies with the benchmark (Pdeathsig).
type program struct {
	cmd  *exec.Cmd
	log  string
	done chan struct{}
	err  error
}

func startProgram(path, logPath string, args ...string) (*program, error) {
	logf, err := os.Create(logPath)
	if err != nil {
		return nil, err
	}
	defer logf.Close()
	cmd := exec.Command(path, args...)
	cmd.Stdout, cmd.Stderr = logf, logf
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("start %s: %w", filepath.Base(path), err)
	}
	p := &program{cmd: cmd, log: logPath, done: make(chan struct{})}
	go func() { p.err = cmd.Wait(); close(p.done) }()
	return p, nil
}

func (p *program) running() bool {
	select {
	case <-p.done:
		return false
	default:
		return true
	}
}

func (p *program) exit() string {
	if p.running() {
		return "running"
	}
	if p.err == nil {
		return "exit status 0"
	}
	return p.err.Error()
}

// stop: SIGTERM, SIGKILL after a minute (controlplane-hosted stops every
// control plane it runs first).
func (p *program) stop() {
	if p == nil || !p.running() {
		return
	}
	_ = p.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-p.done:
	case <-time.After(time.Minute):
		_ = p.cmd.Process.Kill()
		<-p.done
	}
}
