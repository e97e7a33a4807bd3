// Command capn-bench measures capn at fleet scale against the NATS limit of
// the same machine, in the same run: first the baseline (KV puts of the
// same value size, JetStream async publishes) on a fresh embedded server,
// then capn's own figure on another fresh server, several runs each,
// reported as medians with their ratio. `make bench` runs it and writes
// docs/benchmarks.md.
package main

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

func main() {
	var (
		sizes   = flag.String("clusters", "100,300,1000", "comma-separated fleet sizes (clusters of 1 control-plane + 9 worker machines)")
		runs    = flag.Int("runs", 3, "runs per figure; the report gives medians")
		out     = flag.String("out", "", "write the markdown report here (default: stdout only)")
		timeout = flag.Duration("timeout", 10*time.Minute, "give up on one fleet create after this long")
		repairN = flag.Int("repair-machines", 20, "machines repaired one after another in the repair-latency benchmark (0 skips it)")
		workers = flag.Int("workers", 0, "override the services' worker counts (0: their defaults)")
		cpuProf = flag.String("cpuprofile", "", "write a CPU profile of the whole run here")
	)
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
	var ns []int
	for _, s := range strings.Split(*sizes, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(s))
		if err != nil || n < 1 {
			fmt.Fprintf(os.Stderr, "capn-bench: --clusters: %q is not a positive number\n", s)
			os.Exit(2)
		}
		ns = append(ns, n)
	}
	ctx := context.Background()
	rep := report{Started: time.Now().UTC(), Machine: machineInfo(), Runs: *runs}
	for _, n := range ns {
		fr := fleetResult{Clusters: n}
		for r := 1; r <= *runs; r++ {
			fmt.Fprintf(os.Stderr, "fleet %d clusters, run %d/%d: baseline…\n", n, r, *runs)
			b, err := measureBaseline(ctx)
			if err != nil {
				fail(err)
			}
			fr.Baselines = append(fr.Baselines, b)
			fmt.Fprintf(os.Stderr, "  baseline kv put %.0f/s (4 clients %.0f/s), js async pub %.0f/s; capn…\n", b.KVPut1, b.KVPut4, b.JSPubAsync)
			c, err := measureFleet(ctx, n, *timeout)
			if err != nil {
				fail(err)
			}
			fr.Runs = append(fr.Runs, c)
			fmt.Fprintf(os.Stderr, "  %d machines Running in %s (%.0f machines/s, %.1f KV writes and %.1f messages per machine, KV write rate %.0f/s)\n",
				c.Machines, c.Elapsed.Round(time.Millisecond), c.MachinesPerSec(), c.KVWritesPerMachine(), c.MsgsPerMachine(), c.KVWriteRate())
		}
		rep.Fleet = append(rep.Fleet, fr)
	}
	if *repairN > 0 {
		for r := 1; r <= *runs; r++ {
			fmt.Fprintf(os.Stderr, "repair latency, run %d/%d (remediator hold 1ms)…\n", r, *runs)
			res, err := measureRepair(ctx, *repairN, time.Millisecond)
			if err != nil {
				fail(err)
			}
			fmt.Fprintf(os.Stderr, "  p50 %s p99 %s over %d machines\n", res.pct(0.5), res.pct(0.99), len(res.Samples))
			rep.Repair = append(rep.Repair, res)
		}
		fmt.Fprintf(os.Stderr, "repair latency with the default 3s hold…\n")
		res, err := measureRepair(ctx, 5, 0)
		if err != nil {
			fail(err)
		}
		fmt.Fprintf(os.Stderr, "  p50 %s p99 %s over %d machines\n", res.pct(0.5), res.pct(0.99), len(res.Samples))
		rep.RepairDefault = res
	}
	md := rep.Markdown()
	fmt.Print(md)
	if *out != "" {
		if err := os.WriteFile(*out, []byte(md), 0o644); err != nil {
			fail(err)
		}
		fmt.Fprintf(os.Stderr, "wrote %s\n", *out)
	}
}

func fail(err error) {
	fmt.Fprintf(os.Stderr, "capn-bench: %v\n", err)
	os.Exit(1)
}
