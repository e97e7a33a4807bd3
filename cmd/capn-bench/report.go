package main

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
	fmt.Fprintf(&b, "# capn benchmarks\n\n")
	fmt.Fprintf(&b, "Measured %s on %s. Every figure is the median of %d runs; each run first measures the NATS\n", r.Started.Format("2006-01-02 15:04 UTC"), r.Machine, r.Runs)
	fmt.Fprintf(&b, "baseline on a fresh embedded server (file storage, in-process connections, %d-byte values), then\n", valueSize)
	fmt.Fprintf(&b, "capn on another fresh server. Reproduce with `make bench` (or `go run ./cmd/capn-bench --clusters 100,300,1000 --runs 3`).\n\n")
	fmt.Fprintf(&b, "## Fleet create\n\n")
	fmt.Fprintf(&b, "N clusters of 1 control-plane + 9 worker machines on the sim provider with zero boot latency; the\n")
	fmt.Fprintf(&b, "cluster-planner, machine-manager, bootstrapper and sim provider run as in `capn dev` (one process, each\n")
	fmt.Fprintf(&b, "with its own NATS connection). Time is from the first cluster written to `desired` until every\n")
	fmt.Fprintf(&b, "machine's observed phase is Running. KV writes and messages are what JetStream stored during the run.\n\n")
	fmt.Fprintf(&b, "| clusters | machines | time | machines/s | KV writes / machine | messages / machine | capn KV writes/s | NATS KV puts/s (1 client / 4 clients) | ratio to 4 clients | NATS JS async pub/s |\n")
	fmt.Fprintf(&b, "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |\n")
	for _, f := range r.Fleet {
		el := median(collect(f.Runs, func(x fleetRun) float64 { return x.Elapsed.Seconds() }))
		rate := median(collect(f.Runs, fleetRun.KVWriteRate))
		kv4 := median(collect(f.Baselines, func(x baseline) float64 { return x.KVPut4 }))
		fmt.Fprintf(&b, "| %d | %d | %.1f s | %.0f | %.1f | %.1f | %.0f | %.0f / %.0f | %.0f%% | %.0f |\n",
			f.Clusters, f.Clusters*10, el,
			median(collect(f.Runs, fleetRun.MachinesPerSec)),
			median(collect(f.Runs, fleetRun.KVWritesPerMachine)),
			median(collect(f.Runs, fleetRun.MsgsPerMachine)),
			rate,
			median(collect(f.Baselines, func(x baseline) float64 { return x.KVPut1 })), kv4,
			100*rate/kv4,
			median(collect(f.Baselines, func(x baseline) float64 { return x.JSPubAsync })))
	}
	fmt.Fprintf(&b, "\nRuns (time per run): ")
	for _, f := range r.Fleet {
		var ts []string
		for _, x := range f.Runs {
			ts = append(ts, x.Elapsed.Round(100*time.Millisecond).String())
		}
		fmt.Fprintf(&b, "%d clusters: %s; ", f.Clusters, strings.Join(ts, ", "))
	}
	fmt.Fprintf(&b, "\n")
	if len(r.Repair) > 0 {
		p50 := median(collect(r.Repair, func(x repairResult) float64 { return x.pct(0.5).Seconds() * 1000 }))
		p99 := median(collect(r.Repair, func(x repairResult) float64 { return x.pct(0.99).Seconds() * 1000 }))
		fmt.Fprintf(&b, "\n## Repair latency (idle)\n\n")
		fmt.Fprintf(&b, "One cluster on sim with %d workers whose policy calls `KernelDeadlock=True` unhealthy at once; each worker\n", len(r.Repair[0].Samples))
		fmt.Fprintf(&b, "in turn gets a node-problem-detector-shaped condition on its health subject, and the time to the\n")
		fmt.Fprintf(&b, "remediator's reboot command on `capn.provider.sim.machine.reboot` is measured (health-watcher →\n")
		fmt.Fprintf(&b, "`machine.unhealthy` → remediator → provider command). The remediator holds a verdict before acting so\n")
		fmt.Fprintf(&b, "that failures arriving together meet the circuit breaker together; its default hold is 3 s.\n\n")
		fmt.Fprintf(&b, "| remediator hold | p50 | p99 | samples |\n| --- | --- | --- | --- |\n")
		fmt.Fprintf(&b, "| 1 ms (the machinery alone; median of %d runs) | %.0f ms | %.0f ms | %d per run |\n", len(r.Repair), p50, p99, len(r.Repair[0].Samples))
		if d := r.RepairDefault; len(d.Samples) > 0 {
			fmt.Fprintf(&b, "| 3 s (default; one run) | %.0f ms | %.0f ms | %d |\n", d.pct(0.5).Seconds()*1000, d.pct(0.99).Seconds()*1000, len(d.Samples))
		}
		fmt.Fprintf(&b, "\nNot yet measured: repair latency during a fleet create.\n")
	}
	return b.String()
}
