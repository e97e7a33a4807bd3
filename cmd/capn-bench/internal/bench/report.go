package bench

import (
	"fmt"
	"os"
	"runtime"
	"runtime/debug"
	"slices"
	"strings"
	"time"
)

type fleetResult struct {
	Clusters  int
	Baselines []baseline
	Runs      []fleetRun
}

type report struct {
	Started time.Time
	Machine string
	Runs    int
	Fleet   []fleetResult
	// Repair: runs with the remediator's hold at 1ms; RepairDefault: one
	// run with its default 3s hold.
	Repair        []repairResult
	RepairDefault repairResult
	Idle          []idleRun
	Upgrade       []upgradeRun
	Ingest        []ingestRun
	// RepairBusy: runs with the 1ms hold during a fleet create.
	RepairBusy []repairResult
	Rollout    []rolloutRun
	// Hosted: the hosted benchmark's runs, one a --hosted size, of
	// Kubernetes HostedVersion; HostedWorker: its worker and machine-based
	// figures (--hosted-worker).
	Hosted        []hostedRun
	HostedVersion string
	HostedWorker  *hostedWorkerRun
	// Replicated: the replicated benchmark, one entry a fleet size, on a
	// rendered cluster of ReplicatedNodes nodes; Large: the large one, of
	// LargeClusters clusters.
	Replicated      []replicatedResult
	ReplicatedNodes int
	Large           *largeResult
	LargeClusters   int
}

func median(xs []float64) float64 {
	if len(xs) == 0 {
		return 0
	}
	s := slices.Clone(xs)
	slices.Sort(s)
	if len(s)%2 == 1 {
		return s[len(s)/2]
	}
	return (s[len(s)/2-1] + s[len(s)/2]) / 2
}

func collect[T any](ts []T, f func(T) float64) []float64 {
	out := make([]float64, len(ts))
	for i, t := range ts {
		out[i] = f(t)
	}
	return out
}

// machineInfo names the CPU, cores, memory, Go and module versions.
func machineInfo() string {
	cpu := "unknown CPU"
	if b, err := os.ReadFile("/proc/cpuinfo"); err == nil {
		for _, l := range strings.Split(string(b), "\n") {
			if strings.HasPrefix(l, "model name") {
				cpu = strings.TrimSpace(strings.SplitN(l, ":", 2)[1])
				break
			}
		}
	}
	mem := ""
	if b, err := os.ReadFile("/proc/meminfo"); err == nil {
		var kb int
		fmt.Sscanf(strings.SplitN(string(b), "\n", 2)[0], "MemTotal: %d kB", &kb)
		mem = fmt.Sprintf(", %.0f GiB", float64(kb)/(1<<20))
	}
	vers := ""
	if bi, ok := debug.ReadBuildInfo(); ok {
		for _, d := range bi.Deps {
			if d.Path == "github.com/nats-io/nats-server/v2" || d.Path == "github.com/nats-io/nats.go" {
				vers += fmt.Sprintf(", %s %s", d.Path[strings.LastIndex(strings.TrimSuffix(d.Path, "/v2"), "/")+1:], d.Version)
			}
		}
	}
	return fmt.Sprintf("%s, %d cores%s, %s/%s, %s%s", cpu, runtime.NumCPU(), mem, runtime.GOOS, runtime.GOARCH, runtime.Version(), vers)
}

// Markdown renders the report.
func (r report) Markdown() string {
	var b strings.Builder
	fmt.Fprintf(&b, "Measured %s on %s. Every figure is the median of %d runs; each run first measures the NATS\n", r.Started.Format("2006-01-02 15:04 UTC"), r.Machine, r.Runs)
	fmt.Fprintf(&b, "baseline on a fresh embedded server (file storage, in-process connections, %d-byte values), then\n", valueSize)
	fmt.Fprintf(&b, "capn on another fresh server. Reproduce with `make bench` (or `go run ./cmd/capn-bench --clusters 100,300,1000 --runs 3`).\n\n")
	if len(r.Fleet) > 0 {
		r.fleetMarkdown(&b)
	}
	if len(r.Repair) > 0 {
		p50 := median(collect(r.Repair, func(x repairResult) float64 { return x.pct(0.5).Seconds() * 1000 }))
		p99 := median(collect(r.Repair, func(x repairResult) float64 { return x.pct(0.99).Seconds() * 1000 }))
		fmt.Fprintf(&b, "\n## Repair latency\n\n")
		fmt.Fprintf(&b, "One cluster on sim with %d workers whose policy calls `KernelDeadlock=True` unhealthy at once; each worker\n", len(r.Repair[0].Samples))
		fmt.Fprintf(&b, "in turn gets a node-problem-detector-shaped condition on its health subject, and the time to the\n")
		fmt.Fprintf(&b, "remediator's reboot command on `capn.provider.sim.machine.reboot` is measured (health-watcher →\n")
		fmt.Fprintf(&b, "`node.<c>.<m>` → remediator → provider command). The remediator holds a verdict before acting so\n")
		fmt.Fprintf(&b, "that failures arriving together meet the circuit breaker together; its default hold is 3 s.\n\n")
		fmt.Fprintf(&b, "| remediator hold | p50 | p99 | samples |\n| --- | --- | --- | --- |\n")
		fmt.Fprintf(&b, "| 1 ms (the machinery alone; idle; median of %d runs) | %.0f ms | %.0f ms | %d per run |\n", len(r.Repair), p50, p99, len(r.Repair[0].Samples))
		if len(r.RepairBusy) > 0 {
			bp50 := median(collect(r.RepairBusy, func(x repairResult) float64 { return x.pct(0.5).Seconds() * 1000 }))
			bp99 := median(collect(r.RepairBusy, func(x repairResult) float64 { return x.pct(0.99).Seconds() * 1000 }))
			during := collect(r.RepairBusy, func(x repairResult) float64 { return float64(x.During) })
			fmt.Fprintf(&b, "| 1 ms, during a fleet create of %d clusters (median of %d runs; %.0f of %d samples per run taken while the create was in progress) | %.0f ms | %.0f ms | %d per run |\n",
				r.RepairBusy[0].Fleet, len(r.RepairBusy), median(during), len(r.RepairBusy[0].Samples), bp50, bp99, len(r.RepairBusy[0].Samples))
		}
		if d := r.RepairDefault; len(d.Samples) > 0 {
			fmt.Fprintf(&b, "| 3 s (default; one run) | %.0f ms | %.0f ms | %d |\n", d.pct(0.5).Seconds()*1000, d.pct(0.99).Seconds()*1000, len(d.Samples))
		}
	}
	if len(r.Upgrade) > 0 {
		r.upgradeMarkdown(&b)
	}
	if len(r.Ingest) > 0 {
		r.ingestMarkdown(&b)
	}
	if len(r.Rollout) > 0 {
		r.rolloutMarkdown(&b)
	}
	if len(r.Idle) > 0 {
		r.idleMarkdown(&b)
	}
	return b.String()
}

// idleMarkdown renders the idle-cost runs: per fleet size, each program's
// median mCPU and RSS over the runs.
func (r report) idleMarkdown(b *strings.Builder) {
	fmt.Fprintf(b, "\n## Idle cost\n\n")
	fmt.Fprintf(b, "Each program runs as its own process (built from cmd/, as deployed) against an embedded server on\n")
	fmt.Fprintf(b, "loopback. N clusters of 10 machines are created on the sim provider; once every machine is Running\n")
	fmt.Fprintf(b, "and every cluster Ready, and once the create's follow-up work has ended (no KV write nor command or\n")
	fmt.Fprintf(b, "event for %s, heartbeats and provider announcements aside: the last came %s after the last machine was\n", r.Idle[0].Quiet, idleSettled(r.Idle))
	fmt.Fprintf(b, "Running), each process's CPU time (user + system, /proc/<pid>/stat) is\n")
	fmt.Fprintf(b, "read over a window of %s and its resident set (VmRSS) at the end. The sim provider is listed apart:\n", r.Idle[0].Window)
	fmt.Fprintf(b, "it also plays every node, publishing a heartbeat per machine every %s, which a real provider does not.\n", r.Idle[0].Heartbeat)
	fmt.Fprintf(b, "Those heartbeats (machines / %s a second) are most of the idle work: the health-watcher consumes\n", r.Idle[0].Heartbeat)
	fmt.Fprintf(b, "every one (the machine-manager follows its node records); `--idle-heartbeat` changes the interval.\n\n")
	var sizes []int
	for _, x := range r.Idle {
		if !slices.Contains(sizes, x.Clusters) {
			sizes = append(sizes, x.Clusters)
		}
	}
	fmt.Fprintf(b, "| program |")
	for _, n := range sizes {
		fmt.Fprintf(b, " %d clusters (%d machines): mCPU / RSS MiB |", n, n*10)
	}
	fmt.Fprintf(b, "\n| --- |%s\n", strings.Repeat(" --- |", len(sizes)))
	cell := func(n int, f func(idleRun) float64) float64 {
		var xs []float64
		for _, x := range r.Idle {
			if x.Clusters == n {
				xs = append(xs, f(x))
			}
		}
		return median(xs)
	}
	rows := r.Idle[0].Programs
	for i, p := range rows {
		fmt.Fprintf(b, "| %s |", p.Name)
		for _, n := range sizes {
			fmt.Fprintf(b, " %.1f / %.0f |", cell(n, func(x idleRun) float64 { return x.Programs[i].MilliC }), cell(n, func(x idleRun) float64 { return x.Programs[i].RSSMiB }))
		}
		fmt.Fprintf(b, "\n")
	}
	for _, core := range []bool{true, false} {
		name := "**capn's services together**"
		if !core {
			name = "**with the sim provider**"
		}
		fmt.Fprintf(b, "| %s |", name)
		for _, n := range sizes {
			fmt.Fprintf(b, " %.1f / %.0f |", cell(n, func(x idleRun) float64 { return x.sum(core, idleSample.cpu) }), cell(n, func(x idleRun) float64 { return x.sum(core, idleSample.rss) }))
		}
		fmt.Fprintf(b, "\n")
	}
	fmt.Fprintf(b, "\nMedians of %d runs per size.\n", len(r.Idle)/len(sizes))
}

// idleSettled is the range of the runs' settle times ("0.4–2.1 s").
func idleSettled(runs []idleRun) string {
	lo, hi := runs[0].Settled, runs[0].Settled
	for _, x := range runs {
		lo, hi = min(lo, x.Settled), max(hi, x.Settled)
	}
	if lo.Round(100*time.Millisecond) == hi.Round(100*time.Millisecond) {
		return fmt.Sprintf("%.1f s", hi.Seconds())
	}
	return fmt.Sprintf("%.1f–%.1f s", lo.Seconds(), hi.Seconds())
}

// byKindMarkdown lists what one fleet create published per machine, by
// kind, from its largest run.
func byKindMarkdown(b *strings.Builder, f fleetResult) {
	run := f.Runs[len(f.Runs)-1]
	type kv struct {
		k string
		n int
	}
	var rows []kv
	for k, n := range run.ByKind {
		rows = append(rows, kv{k, n})
	}
	slices.SortFunc(rows, func(a, b kv) int { return b.n - a.n })
	fmt.Fprintf(b, "\nWhat the services published per machine in the %d-cluster create (a core subscription on `$KV.>` and\n", f.Clusters)
	fmt.Fprintf(b, "`capn.>`; KV writes by bucket and the key's first token, messages by their subject's first three tokens):\n\n")
	fmt.Fprintf(b, "| kind | per machine |\n| --- | --- |\n")
	for _, r := range rows {
		if per := float64(r.n) / float64(run.Machines); per >= 0.05 {
			fmt.Fprintf(b, "| %s | %.2f |\n", r.k, per)
		}
	}
}

func (r report) fleetMarkdown(b *strings.Builder) {
	fmt.Fprintf(b, "## Fleet create\n\n")
	fmt.Fprintf(b, "N clusters of 1 control-plane + 9 worker machines on the sim provider with zero boot latency; the\n")
	fmt.Fprintf(b, "cluster-planner, machine-manager, bootstrapper, health-watcher and sim provider run as in `capn dev` (one\n")
	fmt.Fprintf(b, "process, each with its own NATS connection). Time is from the first cluster written to `desired` until every\n")
	fmt.Fprintf(b, "machine's observed phase is Running. KV writes and messages are what JetStream stored during the run. Cores used\n")
	fmt.Fprintf(b, "is the process's CPU time (the embedded server, the services and the benchmark's own watchers) over the time.\n\n")
	fmt.Fprintf(b, "| clusters | machines | time | machines/s | KV writes / machine | messages / machine | capn KV writes/s | NATS KV puts/s (1 client / 4 clients) | ratio to 4 clients | NATS JS async pub/s | cores used | CPU / machine |\n")
	fmt.Fprintf(b, "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |\n")
	for _, f := range r.Fleet {
		el := median(collect(f.Runs, func(x fleetRun) float64 { return x.Elapsed.Seconds() }))
		rate := median(collect(f.Runs, fleetRun.KVWriteRate))
		kv4 := median(collect(f.Baselines, func(x baseline) float64 { return x.KVPut4 }))
		fmt.Fprintf(b, "| %d | %d | %.1f s | %.0f | %.1f | %.1f | %.0f | %.0f / %.0f | %.0f%% | %.0f | %.2f | %.2f ms |\n",
			f.Clusters, f.Clusters*10, el,
			median(collect(f.Runs, fleetRun.MachinesPerSec)),
			median(collect(f.Runs, fleetRun.KVWritesPerMachine)),
			median(collect(f.Runs, fleetRun.MsgsPerMachine)),
			rate,
			median(collect(f.Baselines, func(x baseline) float64 { return x.KVPut1 })), kv4,
			100*rate/kv4,
			median(collect(f.Baselines, func(x baseline) float64 { return x.JSPubAsync })),
			median(collect(f.Runs, fleetRun.Cores)), median(collect(f.Runs, fleetRun.CPUPerMachine)))
	}
	fmt.Fprintf(b, "\n### The same traffic on NATS alone\n\n")
	fmt.Fprintf(b, "Each create's traffic replayed right after it on another fresh server: every message the services published\n")
	fmt.Fprintf(b, "during the create (in order, from a core subscription; a compare-and-set the server refused is stored as a put),\n")
	fmt.Fprintf(b, "published from %d clients (`--replay-clients`) each waiting for its store, like the 4-client baseline, to the same KV watchers\n", replayClients)
	fmt.Fprintf(b, "(same filters) and durable consumers (same configuration) that were open during the create — but with no\n")
	fmt.Fprintf(b, "service working between a delivery and the next write. Time runs until the last delivery; CPU is the process's over\n")
	fmt.Fprintf(b, "that time and 200 ms more (the wait that finds the last delivery). It is what this server (and the client\n")
	fmt.Fprintf(b, "library's receiving side) makes of exactly this traffic, published the way the baseline publishes: a design\n")
	fmt.Fprintf(b, "making these writes to these readers gets about this much and no more from it, so the ratio goal (capn's KV\n")
	fmt.Fprintf(b, "write rate against plain puts) is out of reach wherever the replay's own ratio is below it. More publishing\n")
	fmt.Fprintf(b, "clients change it little (`--replay-clients`; docs/benchmarks.md has a measurement).\n\n")
	fmt.Fprintf(b, "| clusters | replay time | replay KV writes/s | replay ratio to 4 clients | capn KV writes/s | capn / replay | replay CPU / machine | capn CPU / machine | watchers / durables | watch deliveries / KV write |\n")
	fmt.Fprintf(b, "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |\n")
	for _, f := range r.Fleet {
		rate := median(collect(f.Runs, fleetRun.KVWriteRate))
		rrate := median(collect(f.Runs, func(x fleetRun) float64 { return x.Replay.KVWriteRate() }))
		kv4 := median(collect(f.Baselines, func(x baseline) float64 { return x.KVPut4 }))
		rp := f.Runs[0].Replay
		fmt.Fprintf(b, "| %d | %.1f s | %.0f | %.0f%% | %.0f | %.0f%% | %.2f ms | %.2f ms | %d / %d | %.1f |\n",
			f.Clusters, median(collect(f.Runs, func(x fleetRun) float64 { return x.Replay.Elapsed.Seconds() })),
			rrate, 100*rrate/kv4, rate, 100*rate/rrate,
			median(collect(f.Runs, func(x fleetRun) float64 { return 1000 * x.Replay.CPU / float64(x.Machines) })),
			median(collect(f.Runs, fleetRun.CPUPerMachine)),
			rp.Watches, rp.Durables,
			median(collect(f.Runs, func(x fleetRun) float64 { return float64(x.Replay.WatchDelivered) / float64(x.Replay.KVWrites) })))
	}
	fmt.Fprintf(b, "\nRuns (time per run): ")
	for _, f := range r.Fleet {
		var ts []string
		for _, x := range f.Runs {
			ts = append(ts, x.Elapsed.Round(100*time.Millisecond).String())
		}
		fmt.Fprintf(b, "%d clusters: %s; ", f.Clusters, strings.Join(ts, ", "))
	}
	fmt.Fprintf(b, "\n")
	if last := r.Fleet[len(r.Fleet)-1]; len(last.Runs) > 0 && last.Runs[0].ByKind != nil {
		byKindMarkdown(b, last)
		cpuByServiceMarkdown(b, last)
	}
}

// cpuByServiceMarkdown lists the CPU per machine of each service in one
// fleet create (its last run), from a CPU profile of the create.
func cpuByServiceMarkdown(b *strings.Builder, f fleetResult) {
	run := f.Runs[len(f.Runs)-1]
	if len(run.CPUByService) == 0 {
		return // --cpuprofile: the run's own profile is the whole run's
	}
	type row struct {
		name string
		d    time.Duration
	}
	var rows []row
	var total time.Duration
	for k, d := range run.CPUByService {
		if k == "" {
			k = "NATS server and the benchmark's watchers (no service label)"
		}
		rows = append(rows, row{k, d})
		total += d
	}
	slices.SortFunc(rows, func(a, b row) int { return int(b.d - a.d) })
	fmt.Fprintf(b, "\nWhere the %d-cluster create's CPU went, per machine (a CPU profile of the create; every service's\n", f.Clusters)
	fmt.Fprintf(b, "goroutines carry the pprof label `service=<name>` that services/daemon gives them; sampled at 100 Hz):\n\n")
	fmt.Fprintf(b, "| service | CPU / machine | share |\n| --- | --- | --- |\n")
	for _, r := range rows {
		fmt.Fprintf(b, "| %s | %.2f ms | %.0f%% |\n", r.name, 1000*r.d.Seconds()/float64(run.Machines), 100*float64(r.d)/float64(total))
	}
	fmt.Fprintf(b, "| **all** | %.2f ms | |\n", 1000*total.Seconds()/float64(run.Machines))
}

func (r report) upgradeMarkdown(b *strings.Builder) {
	u := r.Upgrade[0]
	fmt.Fprintf(b, "\n## Rolling upgrade\n\n")
	fmt.Fprintf(b, "One cluster on sim (boot latency %s, no jitter): 1 control-plane machine and a pool of %d workers with\n", u.Boot, u.Pool)
	fmt.Fprintf(b, "maxSurge 10%% (%d) and maxUnavailable 0. Its Kubernetes version changes as `capn apply` would change it;\n", u.Surge)
	fmt.Fprintf(b, "the time runs until every machine runs the new version and the cluster is Ready. The control plane\n")
	fmt.Fprintf(b, "upgrades first (as in Cluster API), which adds one boot before the pool starts. The ideal for the pool\n")
	fmt.Fprintf(b, "is pool / surge × boot latency = %s.\n\n", u.Ideal())
	el := median(collect(r.Upgrade, func(x upgradeRun) float64 { return x.Elapsed.Seconds() }))
	cp := median(collect(r.Upgrade, func(x upgradeRun) float64 { return x.ControlCP.Seconds() }))
	ideal := u.Ideal().Seconds()
	fmt.Fprintf(b, "| machines | surge | boot | control plane upgraded after | whole cluster | ideal (pool) | over ideal | pool alone (whole − control plane) | pool over ideal |\n")
	fmt.Fprintf(b, "| --- | --- | --- | --- | --- | --- | --- | --- | --- |\n")
	fmt.Fprintf(b, "| %d | %d | %s | %.1f s | %.1f s | %.0f s | %.0f%% | %.1f s | %.0f%% |\n",
		u.Pool, u.Surge, u.Boot, cp, el, ideal, 100*(el/ideal-1), el-cp, 100*((el-cp)/ideal-1))
	var ts []string
	for _, x := range r.Upgrade {
		ts = append(ts, x.Elapsed.Round(100*time.Millisecond).String())
	}
	fmt.Fprintf(b, "\nMedian of %d runs: %s.\n", len(r.Upgrade), strings.Join(ts, ", "))
}

func (r report) ingestMarkdown(b *strings.Builder) {
	x := r.Ingest[0]
	fmt.Fprintf(b, "\n## Ingest\n\n")
	fmt.Fprintf(b, "The gateway alone on a fresh server; %d concurrent HTTP clients (keep-alive, in the same process, so\n", x.Clients)
	fmt.Fprintf(b, "they share the 2 cores) post CloudEvents of %d bytes of data with a generic type (stored on\n", len(ingestPayload))
	fmt.Fprintf(b, "`CAPN_INGEST`, routed nowhere else) for 5 s each: one event per request in binary mode, then batches of\n")
	fmt.Fprintf(b, "%d structured events. Each request is answered 202 only once JetStream stored every event. The baseline\n", x.Batch)
	fmt.Fprintf(b, "publishes the same payload onto the same stream straight through JetStream, on the same server just\n")
	fmt.Fprintf(b, "before: acknowledged one by one from %d goroutines (what the gateway does per request), and async.\n\n", x.Clients)
	med := func(f func(ingestRun) float64) float64 { return median(collect(r.Ingest, f)) }
	single, batched := med(func(x ingestRun) float64 { return x.Single }), med(func(x ingestRun) float64 { return x.Batched })
	syncPub, asyncPub := med(func(x ingestRun) float64 { return x.JSPubSync }), med(func(x ingestRun) float64 { return x.JSPubAsync })
	fmt.Fprintf(b, "| mode | gateway events/s | JetStream publish/s (acked one by one / async) | ratio to acked one by one | ratio to async |\n")
	fmt.Fprintf(b, "| --- | --- | --- | --- | --- |\n")
	fmt.Fprintf(b, "| single (binary) | %.0f | %.0f / %.0f | %.0f%% | %.0f%% |\n", single, syncPub, asyncPub, 100*single/syncPub, 100*single/asyncPub)
	fmt.Fprintf(b, "| batch of %d | %.0f | %.0f / %.0f | %.0f%% | %.0f%% |\n", x.Batch, batched, syncPub, asyncPub, 100*batched/syncPub, 100*batched/asyncPub)
	fmt.Fprintf(b, "\nMedians of %d runs.\n", len(r.Ingest))
}
