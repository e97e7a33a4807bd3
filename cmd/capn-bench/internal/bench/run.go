// Package bench is capn-bench: it measures capn at fleet scale against
// the NATS limit of the same machine, in the same run, and writes the
// report `make bench` puts in docs/benchmarks.md.
package bench

import (
	"context"
	"errors"
	"fmt"
	"io"
	"maps"
	"os"
	"runtime/pprof"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/rs/zerolog"
)

// Run runs the benchmarks cfg names, with their progress on w, and prints
// the report on stdout (and into cfg.Out). A mistake in cfg is a
// usageError (ExitCode 2).
func Run(ctx context.Context, cfg Config, stdout, w io.Writer) error {
	if cfg.CPUProfile != "" {
		stop, err := startCPUProfile(cfg.CPUProfile)
		if err != nil {
			return err
		}
		defer stop()
	}
	zerolog.SetGlobalLevel(zerolog.WarnLevel)
	benchWorkers, benchTrace, replayClients, benchProfiling = cfg.Workers, cfg.Trace, cfg.ReplayClients, cfg.CPUProfile != ""
	o, err := cfg.options()
	if err != nil {
		return err
	}
	rep := report{Started: time.Now().UTC(), Machine: machineInfo(), Runs: cfg.Runs}
	for _, b := range benchmarks {
		if !o.want[b.name] {
			continue
		}
		if err := b.run(ctx, o, &rep, w); err != nil {
			return err
		}
	}
	// The hosted and the large benchmarks' reports have places of their
	// own in the output file (docs/benchmarks.md: "Hosted control planes",
	// "Round 4"); make bench's block is written only when one of its
	// benchmarks ran.
	blocks := []struct{ md, begin, end string }{}
	if slices.ContainsFunc(strings.Split(defaultBench, ","), func(b string) bool { return o.want[b] }) {
		blocks = append(blocks, struct{ md, begin, end string }{rep.Markdown(), beginMarker, endMarker})
	}
	if o.want["hosted"] {
		blocks = append(blocks, struct{ md, begin, end string }{rep.hostedMarkdown(), hostedBeginMarker, hostedEndMarker})
	}
	if o.want["replicated"] || o.want["large"] {
		blocks = append(blocks, struct{ md, begin, end string }{rep.largeMarkdown(), largeBeginMarker, largeEndMarker})
	}
	for _, b := range blocks {
		fmt.Fprint(stdout, b.md)
		if cfg.Out != "" {
			if err := writeReportBlock(cfg.Out, b.md, b.begin, b.end); err != nil {
				return err
			}
			fmt.Fprintf(w, "wrote %s\n", cfg.Out)
		}
	}
	return nil
}

// benchmarks are what --bench chooses from, in the order they run.
var benchmarks = []struct {
	name string
	run  func(ctx context.Context, o options, rep *report, w io.Writer) error
}{
	{"fleet", runFleet},
	{"repair", runRepair},
	{"upgrade", runUpgrade},
	{"ingest", runIngest},
	{"rollout", runRollout},
	{"idle", runIdle},
	{"hosted", runHosted},
	{"replicated", runReplicated},
	{"large", runLarge},
}

// runRollout measures a class revision rolled out in waves across
// o.RolloutClusters clusters, o.Runs times.
func runRollout(ctx context.Context, o options, rep *report, w io.Writer) error {
	for r := 1; r <= o.Runs; r++ {
		fmt.Fprintf(w, "class revision rolled out in waves to %d clusters (soak %s), run %d/%d…\n", o.RolloutClusters, o.RolloutSoak, r, o.Runs)
		res, err := measureRollout(ctx, o.RolloutClusters, o.RolloutSoak, o.Timeout, w)
		if err != nil {
			return err
		}
		fmt.Fprintf(w, "  completed in %s; median time beyond soak per wave %s\n", res.Elapsed.Round(time.Millisecond), res.medianOverhead().Round(time.Millisecond))
		rep.Rollout = append(rep.Rollout, res)
	}
	return nil
}

// runFleet measures the baseline, a fleet create and its replay, for each
// fleet size, o.Runs times.
func runFleet(ctx context.Context, o options, rep *report, w io.Writer) error {
	var err error
	for _, n := range o.sizes {
		fr := fleetResult{Clusters: n}
		for r := 1; r <= o.Runs; r++ {
			fmt.Fprintf(w, "fleet %d clusters, run %d/%d: baseline…\n", n, r, o.Runs)
			var b baseline
			pprof.Do(ctx, pprof.Labels("bench", "baseline"), func(ctx context.Context) { b, err = measureBaseline(ctx) })
			if err != nil {
				return err
			}
			fr.Baselines = append(fr.Baselines, b)
			fmt.Fprintf(w, "  baseline kv put %.0f/s (4 clients %.0f/s), js async pub %.0f/s; capn…\n", b.KVPut1, b.KVPut4, b.JSPubAsync)
			var c fleetRun
			pprof.Do(ctx, pprof.Labels("bench", "fleet"), func(ctx context.Context) { c, err = measureFleet(ctx, n, o.Timeout) })
			if err != nil {
				return err
			}
			fmt.Fprintf(w, "  %d machines Running in %s (%.0f machines/s, %.1f KV writes and %.1f messages per machine, KV write rate %.0f/s; %.2f cores, %.2f ms CPU per machine); replay…\n",
				c.Machines, c.Elapsed.Round(time.Millisecond), c.MachinesPerSec(), c.KVWritesPerMachine(), c.MsgsPerMachine(), c.KVWriteRate(), c.Cores(), c.CPUPerMachine())
			if len(c.CPUByService) > 0 {
				fmt.Fprintf(w, "  CPU per machine by service:")
				for _, k := range slices.Sorted(maps.Keys(c.CPUByService)) {
					name := k
					if name == "" {
						name = "(server and benchmark)"
					}
					fmt.Fprintf(w, " %s %.2f ms;", name, 1000*c.CPUByService[k].Seconds()/float64(c.Machines))
				}
				fmt.Fprintln(w)
			}
			pprof.Do(ctx, pprof.Labels("bench", "replay"), func(ctx context.Context) { c.Replay, err = measureReplay(ctx, c.traffic) })
			if err != nil {
				return err
			}
			c.traffic = traffic{}
			fr.Runs = append(fr.Runs, c)
			fmt.Fprintf(w, "  replay: %d messages to %d watchers and %d durables in %s: KV write rate %.0f/s, %.1f watch deliveries per KV write, %.2f ms CPU per machine\n",
				c.Replay.Published, c.Replay.Watches, c.Replay.Durables, c.Replay.Elapsed.Round(time.Millisecond), c.Replay.KVWriteRate(),
				float64(c.Replay.WatchDelivered)/float64(c.Replay.KVWrites), 1000*c.Replay.CPU/float64(c.Machines))
		}
		rep.Fleet = append(rep.Fleet, fr)
	}
	return nil
}

// runRepair measures repair latency: with a short remediator hold, with
// the default hold, and during a fleet create (o.RepairFleet clusters).
func runRepair(ctx context.Context, o options, rep *report, w io.Writer) error {
	if o.RepairMachines == 0 {
		return nil
	}
	for r := 1; r <= o.Runs; r++ {
		fmt.Fprintf(w, "repair latency, run %d/%d (remediator hold 1ms)…\n", r, o.Runs)
		res, err := measureRepair(ctx, o.RepairMachines, time.Millisecond, 0)
		if err != nil {
			return err
		}
		fmt.Fprintf(w, "  p50 %s p99 %s over %d machines\n", res.pct(0.5), res.pct(0.99), len(res.Samples))
		rep.Repair = append(rep.Repair, res)
	}
	fmt.Fprintf(w, "repair latency with the default 3s hold…\n")
	res, err := measureRepair(ctx, 5, 0, 0)
	if err != nil {
		return err
	}
	fmt.Fprintf(w, "  p50 %s p99 %s over %d machines\n", res.pct(0.5), res.pct(0.99), len(res.Samples))
	rep.RepairDefault = res
	if o.RepairFleet > 0 {
		for r := 1; r <= o.Runs; r++ {
			fmt.Fprintf(w, "repair latency during a fleet create of %d clusters, run %d/%d…\n", o.RepairFleet, r, o.Runs)
			res, err := measureRepair(ctx, o.RepairMachines, time.Millisecond, o.RepairFleet)
			if err != nil {
				return err
			}
			fmt.Fprintf(w, "  p50 %s p99 %s over %d machines (%d during the create)\n", res.pct(0.5), res.pct(0.99), len(res.Samples), res.During)
			rep.RepairBusy = append(rep.RepairBusy, res)
		}
	}
	return nil
}

// runUpgrade measures a rolling upgrade of a pool against its ideal.
func runUpgrade(ctx context.Context, o options, rep *report, w io.Writer) error {
	for r := 1; r <= o.Runs; r++ {
		fmt.Fprintf(w, "rolling upgrade of %d machines (boot %s), run %d/%d…\n", o.UpgradePool, o.UpgradeBoot, r, o.Runs)
		res, err := measureUpgrade(ctx, o.UpgradePool, o.UpgradeBoot, o.Timeout)
		if err != nil {
			return err
		}
		fmt.Fprintf(w, "  %s (control plane %s; ideal for the pool %s: %.0f%% over)\n", res.Elapsed.Round(time.Millisecond), res.ControlCP.Round(time.Millisecond), res.Ideal(), 100*(res.Elapsed.Seconds()/res.Ideal().Seconds()-1))
		rep.Upgrade = append(rep.Upgrade, res)
	}
	return nil
}

// runIngest measures CloudEvents ingest through the gateway.
func runIngest(ctx context.Context, o options, rep *report, w io.Writer) error {
	for r := 1; r <= o.Runs; r++ {
		fmt.Fprintf(w, "ingest through the gateway, run %d/%d…\n", r, o.Runs)
		res, err := measureIngest(ctx, 8, 100, 5*time.Second)
		if err != nil {
			return err
		}
		fmt.Fprintf(w, "  single %.0f/s, batches of %d %.0f/s; JetStream publish %.0f/s acknowledged one by one, %.0f/s async\n", res.Single, res.Batch, res.Batched, res.JSPubSync, res.JSPubAsync)
		rep.Ingest = append(rep.Ingest, res)
	}
	return nil
}

// runIdle builds the programs and measures each one's idle cost, for
// each idle fleet size.
func runIdle(ctx context.Context, o options, rep *report, w io.Writer) error {
	bin, err := os.MkdirTemp("", "capn-bench-bin-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(bin)
	fmt.Fprintf(w, "idle cost: building the programs…\n")
	if err := buildPrograms(ctx, bin); err != nil {
		return err
	}
	for _, n := range o.idleSizes {
		for r := 1; r <= o.Runs; r++ {
			fmt.Fprintf(w, "idle cost, %d clusters, run %d/%d…\n", n, r, o.Runs)
			res, err := measureIdle(ctx, bin, n, o.IdleHeartbeat, o.IdleQuiet, o.IdleWindow, o.Timeout)
			if err != nil {
				return err
			}
			fmt.Fprintf(w, "  settled %s after every machine was Running (no write for %s); ", res.Settled.Round(100*time.Millisecond), res.Quiet)
			fmt.Fprintf(w, "capn services %.1f mCPU, %.0f MiB RSS; with the sim provider %.1f mCPU, %.0f MiB\n",
				res.sum(true, idleSample.cpu), res.sum(true, idleSample.rss), res.sum(false, idleSample.cpu), res.sum(false, idleSample.rss))
			rep.Idle = append(rep.Idle, res)
		}
	}
	return nil
}

// startCPUProfile profiles the whole run into path; stop writes it.
func startCPUProfile(path string) (stop func(), err error) {
	f, err := os.Create(path)
	if err != nil {
		return nil, err
	}
	if err := pprof.StartCPUProfile(f); err != nil {
		return nil, err
	}
	return pprof.StopCPUProfile, nil
}

// The report replaces what lies between these markers in the output file,
// so that what people wrote around it (analysis, goals) stays.
const (
	beginMarker = "<!-- capn-bench:begin (generated by make bench; edit outside these markers) -->"
	endMarker   = "<!-- capn-bench:end -->"
)

// The hosted benchmark's report replaces what lies between these.
const (
	hostedBeginMarker = "<!-- capn-bench:hosted:begin (generated by make bench-hosted; edit outside these markers) -->"
	hostedEndMarker   = "<!-- capn-bench:hosted:end -->"
)

// writeReport writes md into path between the markers, or as the whole
// file (with the markers) when it has none.
func writeReport(path, md string) error {
	return writeReportBlock(path, md, beginMarker, endMarker)
}

// writeReportBlock writes md into path between begin and end, or, when
// the file has no such markers, appends them with md (the whole file when
// there is none).
func writeReportBlock(path, md, beginMarker, endMarker string) error {
	block := beginMarker + "\n" + md + endMarker + "\n"
	old, err := os.ReadFile(path)
	if err != nil && !os.IsNotExist(err) {
		return err
	}
	s := string(old)
	i, j := strings.Index(s, beginMarker), strings.Index(s, endMarker)
	switch {
	case i >= 0 && j > i:
		block = s[:i] + block + strings.TrimPrefix(s[j+len(endMarker):], "\n")
	case s != "":
		block = strings.TrimRight(s, "\n") + "\n\n" + block
	}
	return os.WriteFile(path, []byte(block), 0o644)
}

// sizesFlag parses a comma-separated list of positive numbers.
func sizesFlag(name, v string) ([]int, error) {
	var ns []int
	for _, s := range strings.Split(v, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(s))
		if err != nil || n < 1 {
			return nil, usageError{fmt.Errorf("%s: %q is not a positive number", name, s)}
		}
		ns = append(ns, n)
	}
	return ns, nil
}

// usageError is a mistake on the command line.
type usageError struct{ error }

func (e usageError) Unwrap() error { return e.error }

// ExitCode is the exit code for Run's error: 2 for a mistake on the
// command line, else 1.
func ExitCode(err error) int {
	if errors.As(err, new(usageError)) {
		return 2
	}
	return 1
}
