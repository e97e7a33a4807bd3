// Package bench is capn-bench: it measures capn at fleet scale against
// the NATS limit of the same machine, in the same run, and writes the
// report `make bench` puts in docs/benchmarks.md.
package bench

import (
	"context"
	"flag"
	"fmt"
	"os"
	"runtime/pprof"
	"strconv"
	"strings"
	"time"

	"github.com/rs/zerolog"
)

// Main is capn-bench: it parses the command line, runs the benchmarks and
// prints the report; it exits the process on an error.
func Main() {
	var (
		sizes       = flag.String("clusters", "100,300,1000", "comma-separated fleet sizes (clusters of 1 control-plane + 9 worker machines)")
		runs        = flag.Int("runs", 3, "runs per figure; the report gives medians")
		out         = flag.String("out", "", "write the markdown report here (default: stdout only)")
		timeout     = flag.Duration("timeout", 10*time.Minute, "give up on one fleet create after this long")
		repairN     = flag.Int("repair-machines", 20, "machines repaired one after another in the repair-latency benchmark (0 skips it)")
		workers     = flag.Int("workers", 0, "override the services' worker counts (0: their defaults)")
		trace       = flag.Bool("trace", false, "print each fleet create's progress every second")
		cpuProf     = flag.String("cpuprofile", "", "write a CPU profile of the whole run here")
		repairFleet = flag.Int("repair-fleet", 300, "clusters created in the background of the busy repair-latency runs (0 skips them)")
		only        = flag.String("bench", "fleet,repair,idle,upgrade,ingest", "comma-separated benchmarks to run: fleet, repair, idle, upgrade, ingest")
		idleN       = flag.String("idle-clusters", "100,1000", "comma-separated fleet sizes of the idle-cost benchmark")
		upPool      = flag.Int("upgrade-pool", 500, "machines in the pool of the rolling-upgrade benchmark")
		upBoot      = flag.Duration("upgrade-boot", 5*time.Second, "the sim provider's boot latency in the rolling-upgrade benchmark")
		idleBeat    = flag.Duration("idle-heartbeat", 30*time.Second, "heartbeat interval of each simulated node in the idle benchmark (the sim provider's default)")
		idleWin     = flag.Duration("idle-window", 30*time.Second, "how long the idle benchmark reads each program's CPU time")
	)
	flag.IntVar(&replayClients, "replay-clients", replayClients, "clients publishing the replayed traffic")
	flag.Parse()
	if *cpuProf != "" {
		f, err := os.Create(*cpuProf)
		if err != nil {
			fail(err)
		}
		if err := pprof.StartCPUProfile(f); err != nil {
			fail(err)
		}
		defer pprof.StopCPUProfile()
	}
	zerolog.SetGlobalLevel(zerolog.WarnLevel)
	benchWorkers = *workers
	benchTrace = *trace
	ns, err := sizesFlag("--clusters", *sizes)
	if err != nil {
		usage(err)
	}
	idleNs, err := sizesFlag("--idle-clusters", *idleN)
	if err != nil {
		usage(err)
	}
	want := map[string]bool{}
	for _, b := range strings.Split(*only, ",") {
		switch b = strings.TrimSpace(b); b {
		case "fleet", "repair", "idle", "upgrade", "ingest":
			want[b] = true
		default:
			usage(fmt.Errorf("--bench: %q is not a benchmark (fleet, repair, idle, upgrade, ingest)", b))
		}
	}
	ctx := context.Background()
	rep := report{Started: time.Now().UTC(), Machine: machineInfo(), Runs: *runs}
	if want["fleet"] {
		for _, n := range ns {
			fr := fleetResult{Clusters: n}
			for r := 1; r <= *runs; r++ {
				fmt.Fprintf(os.Stderr, "fleet %d clusters, run %d/%d: baseline…\n", n, r, *runs)
				var b baseline
				pprof.Do(ctx, pprof.Labels("bench", "baseline"), func(ctx context.Context) { b, err = measureBaseline(ctx) })
				if err != nil {
					fail(err)
				}
				fr.Baselines = append(fr.Baselines, b)
				fmt.Fprintf(os.Stderr, "  baseline kv put %.0f/s (4 clients %.0f/s), js async pub %.0f/s; capn…\n", b.KVPut1, b.KVPut4, b.JSPubAsync)
				var c fleetRun
				pprof.Do(ctx, pprof.Labels("bench", "fleet"), func(ctx context.Context) { c, err = measureFleet(ctx, n, *timeout) })
				if err != nil {
					fail(err)
				}
				fmt.Fprintf(os.Stderr, "  %d machines Running in %s (%.0f machines/s, %.1f KV writes and %.1f messages per machine, KV write rate %.0f/s; %.2f cores, %.2f ms CPU per machine); replay…\n",
					c.Machines, c.Elapsed.Round(time.Millisecond), c.MachinesPerSec(), c.KVWritesPerMachine(), c.MsgsPerMachine(), c.KVWriteRate(), c.Cores(), c.CPUPerMachine())
				pprof.Do(ctx, pprof.Labels("bench", "replay"), func(ctx context.Context) { c.Replay, err = measureReplay(ctx, c.traffic) })
				if err != nil {
					fail(err)
				}
				c.traffic = traffic{}
				fr.Runs = append(fr.Runs, c)
				fmt.Fprintf(os.Stderr, "  replay: %d messages to %d watchers and %d durables in %s: KV write rate %.0f/s, %.1f watch deliveries per KV write, %.2f ms CPU per machine\n",
					c.Replay.Published, c.Replay.Watches, c.Replay.Durables, c.Replay.Elapsed.Round(time.Millisecond), c.Replay.KVWriteRate(),
					float64(c.Replay.WatchDelivered)/float64(c.Replay.KVWrites), 1000*c.Replay.CPU/float64(c.Machines))
			}
			rep.Fleet = append(rep.Fleet, fr)
		}
	}
	if want["repair"] && *repairN > 0 {
		for r := 1; r <= *runs; r++ {
			fmt.Fprintf(os.Stderr, "repair latency, run %d/%d (remediator hold 1ms)…\n", r, *runs)
			res, err := measureRepair(ctx, *repairN, time.Millisecond, 0)
			if err != nil {
				fail(err)
			}
			fmt.Fprintf(os.Stderr, "  p50 %s p99 %s over %d machines\n", res.pct(0.5), res.pct(0.99), len(res.Samples))
			rep.Repair = append(rep.Repair, res)
		}
		fmt.Fprintf(os.Stderr, "repair latency with the default 3s hold…\n")
		res, err := measureRepair(ctx, 5, 0, 0)
		if err != nil {
			fail(err)
		}
		fmt.Fprintf(os.Stderr, "  p50 %s p99 %s over %d machines\n", res.pct(0.5), res.pct(0.99), len(res.Samples))
		rep.RepairDefault = res
		if *repairFleet > 0 {
			for r := 1; r <= *runs; r++ {
				fmt.Fprintf(os.Stderr, "repair latency during a fleet create of %d clusters, run %d/%d…\n", *repairFleet, r, *runs)
				res, err := measureRepair(ctx, *repairN, time.Millisecond, *repairFleet)
				if err != nil {
					fail(err)
				}
				fmt.Fprintf(os.Stderr, "  p50 %s p99 %s over %d machines (%d during the create)\n", res.pct(0.5), res.pct(0.99), len(res.Samples), res.During)
				rep.RepairBusy = append(rep.RepairBusy, res)
			}
		}
	}
	if want["upgrade"] {
		for r := 1; r <= *runs; r++ {
			fmt.Fprintf(os.Stderr, "rolling upgrade of %d machines (boot %s), run %d/%d…\n", *upPool, *upBoot, r, *runs)
			res, err := measureUpgrade(ctx, *upPool, *upBoot, *timeout)
			if err != nil {
				fail(err)
			}
			fmt.Fprintf(os.Stderr, "  %s (control plane %s; ideal for the pool %s: %.0f%% over)\n", res.Elapsed.Round(time.Millisecond), res.ControlCP.Round(time.Millisecond), res.Ideal(), 100*(res.Elapsed.Seconds()/res.Ideal().Seconds()-1))
			rep.Upgrade = append(rep.Upgrade, res)
		}
	}
	if want["ingest"] {
		for r := 1; r <= *runs; r++ {
			fmt.Fprintf(os.Stderr, "ingest through the gateway, run %d/%d…\n", r, *runs)
			res, err := measureIngest(ctx, 8, 100, 5*time.Second)
			if err != nil {
				fail(err)
			}
			fmt.Fprintf(os.Stderr, "  single %.0f/s, batches of %d %.0f/s; JetStream publish %.0f/s acknowledged one by one, %.0f/s async\n", res.Single, res.Batch, res.Batched, res.JSPubSync, res.JSPubAsync)
			rep.Ingest = append(rep.Ingest, res)
		}
	}
	if want["idle"] {
		bin, err := os.MkdirTemp("", "capn-bench-bin-")
		if err != nil {
			fail(err)
		}
		defer os.RemoveAll(bin)
		fmt.Fprintf(os.Stderr, "idle cost: building the programs…\n")
		if err := buildPrograms(ctx, bin); err != nil {
			fail(err)
		}
		for _, n := range idleNs {
			for r := 1; r <= *runs; r++ {
				fmt.Fprintf(os.Stderr, "idle cost, %d clusters, run %d/%d…\n", n, r, *runs)
				res, err := measureIdle(ctx, bin, n, *idleBeat, 10*time.Second, *idleWin, *timeout)
				if err != nil {
					fail(err)
				}
				fmt.Fprintf(os.Stderr, "  capn services %.1f mCPU, %.0f MiB RSS; with the sim provider %.1f mCPU, %.0f MiB\n",
					res.sum(true, idleSample.cpu), res.sum(true, idleSample.rss), res.sum(false, idleSample.cpu), res.sum(false, idleSample.rss))
				rep.Idle = append(rep.Idle, res)
			}
		}
	}
	md := rep.Markdown()
	fmt.Print(md)
	if *out != "" {
		if err := writeReport(*out, md); err != nil {
			fail(err)
		}
		fmt.Fprintf(os.Stderr, "wrote %s\n", *out)
	}
}

// The report replaces what lies between these markers in the output file,
// so that what people wrote around it (analysis, goals) stays.
const (
	beginMarker = "<!-- capn-bench:begin (generated by make bench; edit outside these markers) -->"
	endMarker   = "<!-- capn-bench:end -->"
)

// writeReport writes md into path between the markers, or as the whole
// file (with the markers) when it has none.
func writeReport(path, md string) error {
	block := beginMarker + "\n" + md + endMarker + "\n"
	old, err := os.ReadFile(path)
	if err != nil && !os.IsNotExist(err) {
		return err
	}
	s := string(old)
	i, j := strings.Index(s, beginMarker), strings.Index(s, endMarker)
	if i >= 0 && j > i {
		block = s[:i] + block + strings.TrimPrefix(s[j+len(endMarker):], "\n")
	}
	return os.WriteFile(path, []byte(block), 0o644)
}

// sizesFlag parses a comma-separated list of positive numbers.
func sizesFlag(name, v string) ([]int, error) {
	var ns []int
	for _, s := range strings.Split(v, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(s))
		if err != nil || n < 1 {
			return nil, fmt.Errorf("%s: %q is not a positive number", name, s)
		}
		ns = append(ns, n)
	}
	return ns, nil
}

func usage(err error) {
	fmt.Fprintf(os.Stderr, "capn-bench: %v\n", err)
	os.Exit(2)
}

func fail(err error) {
	fmt.Fprintf(os.Stderr, "capn-bench: %v\n", err)
	os.Exit(1)
}
