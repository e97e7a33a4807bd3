package bench

import (
	"cmp"
	"context"
	"fmt"
	"io"
	"maps"
	"slices"
	"strings"
	"time"
)

// The benchmarks beyond make bench's time (make bench-large): a fleet
// create on the rendered 3-node JetStream cluster beside the single-node
// ones, and 100,000 machines.

// replicatedResult is one fleet size's creates, each setup o.Runs times.
type replicatedResult struct {
	Clusters int
	Setups   []replicatedSetup
}

// replicatedSetup is one way of running the same fleet create.
type replicatedSetup struct {
	Name string // "in-process, 1 node, R1", "rendered, 3 nodes, R3"
	Runs []fleetRun
	// Stopped is a create of this setup that timed out (its partial
	// figures); the setup's other runs are skipped, the next setups run.
	Stopped *fleetRun
}

// setups of the replicated benchmark, in the order they run: capn dev's
// in-process server (make bench's fleet figure, without its traffic tap),
// then the rendered deployment with one node and with nodes nodes.
func replicatedSetups(nodes int) []string {
	out := []string{"in-process, 1 node, R1", "rendered, 1 node, R1"}
	if nodes > 1 {
		out = append(out, fmt.Sprintf("rendered, %d nodes, R%d", nodes, nodes))
	}
	return out
}

// runReplicated measures, for each --replicated-clusters size, o.Runs
// fleet creates on each setup, one after another in the same run.
func runReplicated(ctx context.Context, o options, rep *report, w io.Writer) error {
	rep.ReplicatedNodes = o.ReplicatedNodes
	for _, n := range o.replicatedSizes {
		res := replicatedResult{Clusters: n}
		for si, name := range replicatedSetups(o.ReplicatedNodes) {
			s := replicatedSetup{Name: name}
			for r := 1; r <= o.Runs; r++ {
				fmt.Fprintf(w, "fleet %d clusters on %s, run %d/%d…\n", n, name, r, o.Runs)
				var c fleetRun
				var err error
				switch si {
				case 0:
					c, err = measureFleetIn(ctx, n, o.Timeout, fleetOptions{})
				case 1:
					c, err = measureFleetDeployed(ctx, 1, n, o.Timeout)
				default:
					c, err = measureFleetDeployed(ctx, o.ReplicatedNodes, n, o.Timeout)
				}
				if err != nil && c.Machines > 0 && c.Running < c.Machines {
					fmt.Fprintf(w, "  did not complete: %v\n", err)
					s.Stopped = &c
					break
				}
				if err != nil {
					return fmt.Errorf("%s: %w", name, err)
				}
				fmt.Fprintf(w, "  %d machines Running in %s (%.0f machines/s, %.1f KV writes and %.1f messages per machine; %.2f cores, %.2f ms CPU per machine)\n",
					c.Machines, c.Elapsed.Round(time.Millisecond), c.MachinesPerSec(), c.KVWritesPerMachine(), c.MsgsPerMachine(), c.Cores(), c.CPUPerMachine())
				s.Runs = append(s.Runs, c)
			}
			res.Setups = append(res.Setups, s)
		}
		rep.Replicated = append(rep.Replicated, res)
	}
	return nil
}

// measureFleetDeployed is a fleet create of n clusters on a fresh
// rendered deployment of nodes nodes.
func measureFleetDeployed(ctx context.Context, nodes, n int, timeout time.Duration) (fleetRun, error) {
	dp, err := startDeployment(ctx, nodes)
	if err != nil {
		return fleetRun{}, err
	}
	defer dp.Close()
	r, err := fleetCreate(ctx, dp.fleetEnv, n, timeout, fleetOptions{})
	if v := dp.Violations(); err == nil && len(v) > 0 {
		err = fmt.Errorf("%d permission violations, the first: %s", len(v), v[0])
	}
	return r, err
}

// largeResult is the large benchmark: the reference create
// (--large-reference clusters) and the large one, once each, in one run.
type largeResult struct {
	Reference, Large fleetRun
	// Err is why the large create did not complete ("" when it did).
	Err string
}

// runLarge creates o.LargeReference clusters, then o.LargeClusters, each
// on a fresh in-process server, sampling memory; the large create's
// progress is printed every 10 seconds. A large create that does not
// complete is a result (reported with where it stopped), not an error.
func runLarge(ctx context.Context, o options, rep *report, w io.Writer) error {
	res := &largeResult{}
	rep.Large, rep.LargeClusters = res, o.LargeClusters
	fmt.Fprintf(w, "large: reference fleet create of %d clusters…\n", o.LargeReference)
	ref, err := measureFleetIn(ctx, o.LargeReference, o.Timeout, fleetOptions{memory: true, progress: 10 * time.Second})
	if err != nil {
		return fmt.Errorf("large: reference create: %w", err)
	}
	res.Reference = ref
	printLarge(w, ref)
	fmt.Fprintf(w, "large: fleet create of %d clusters (%d machines; timeout %s)…\n", o.LargeClusters, 10*o.LargeClusters, o.LargeTimeout)
	big, err := measureFleetIn(ctx, o.LargeClusters, o.LargeTimeout, fleetOptions{memory: true, progress: 10 * time.Second, heapProfile: o.LargeHeapProfile,
		profileDir: o.LargeProfileDir, profileEvery: o.LargeProfileEvery})
	if err != nil {
		if big.Machines == 0 {
			return fmt.Errorf("large: %w", err)
		}
		res.Large, res.Err = big, err.Error()
		fmt.Fprintf(w, "  did not complete: %v\n", err)
		printLarge(w, big)
		return nil
	}
	res.Large = big
	printLarge(w, big)
	return nil
}

func printLarge(w io.Writer, c fleetRun) {
	if c.Running < c.Machines {
		fmt.Fprintf(w, "  %d of %d machines Running after %s (clusters written in %s; %.2f cores, %.2f ms CPU per Running machine)",
			c.Running, c.Machines, c.Elapsed.Round(time.Millisecond), c.Created.Round(time.Millisecond), c.Cores(), 1000*c.CPU/float64(max(c.Running, 1)))
	} else {
		fmt.Fprintf(w, "  %d machines Running in %s (clusters written in %s; %.0f machines/s, %.1f KV writes and %.1f messages per machine; %.2f cores, %.2f ms CPU per machine)",
			c.Machines, c.Elapsed.Round(time.Millisecond), c.Created.Round(time.Millisecond), c.MachinesPerSec(), c.KVWritesPerMachine(), c.MsgsPerMachine(), c.Cores(), c.CPUPerMachine())
	}
	if m := c.Memory; m != nil {
		fmt.Fprintf(w, "; peak RSS %.0f MiB, Go heap %.0f MiB, Go runtime %.0f MiB", m.RSSMiB, m.HeapMiB, m.GoMiB)
	}
	fmt.Fprintln(w)
	if len(c.CPUByService) > 0 {
		fmt.Fprintf(w, "  CPU per machine by service: %s\n", serviceCPU(c))
	}
}

// serviceCPU is a create's CPU per Running machine by service, largest
// first.
func serviceCPU(c fleetRun) string {
	running := c.Running
	if running <= 0 {
		running = c.Machines
	}
	ks := slices.Collect(maps.Keys(c.CPUByService))
	slices.SortFunc(ks, func(a, b string) int { return cmp.Compare(c.CPUByService[b], c.CPUByService[a]) })
	var parts []string
	for _, k := range ks {
		name := k
		if name == "" {
			name = "server and benchmark"
		}
		parts = append(parts, fmt.Sprintf("%s %.2f ms", name, 1000*c.CPUByService[k].Seconds()/float64(running)))
	}
	return strings.Join(parts, ", ")
}

// The large benchmarks' report replaces what lies between these.
const (
	largeBeginMarker = "<!-- capn-bench:large:begin (generated by make bench-large; edit outside these markers) -->"
	largeEndMarker   = "<!-- capn-bench:large:end -->"
)

// largeMarkdown is the report of the replicated and large benchmarks.
func (r report) largeMarkdown() string {
	var b strings.Builder
	fmt.Fprintf(&b, "Generated by `make bench-large` (capn-bench) on %s.\n\n", r.Started.Format("2006-01-02 15:04 UTC"))
	fmt.Fprintf(&b, "Machine: %s.\n\n", r.Machine)
	if len(r.Replicated) > 0 {
		fmt.Fprintf(&b, "### Fleet create on a replicated JetStream cluster\n\n")
		fmt.Fprintf(&b, "Clusters of 1 control-plane + 9 worker sim machines, apply → all Running, median of %d run(s) each, in one run. "+
			"*In-process*: one embedded server, services on in-process connections (`capn dev`, make bench's fleet figure without its traffic tap). "+
			"*Rendered*: the configuration capn-nats-config renders for docker-compose.yaml on 127.0.0.1 (TLS on client and route ports, one nkey user per component, the auth callout), "+
			"streams and buckets with one replica per node provisioned by the init user, each service on a TCP+TLS connection of its own user to a node (round robin), `--skip-provision`. "+
			"All nodes and services run in the benchmark's one process: CPU is the process's, servers included.\n\n", r.Runs)
		b.WriteString("| clusters | setup | apply → all Running | machines/s | KV writes per machine | messages per machine | cores | CPU per machine | vs in-process |\n")
		b.WriteString("| ---: | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: |\n")
		for _, res := range r.Replicated {
			base := 0.0
			for i, s := range res.Setups {
				if s.Stopped != nil && len(s.Runs) == 0 {
					fmt.Fprintf(&b, "| %d | %s | did not complete: %d of %d Running after %.0f s | | | | %.2f | | |\n", res.Clusters, s.Name,
						s.Stopped.Running, s.Stopped.Machines, s.Stopped.Elapsed.Seconds(), s.Stopped.Cores())
					continue
				}
				el := median(collect(s.Runs, func(c fleetRun) float64 { return c.Elapsed.Seconds() }))
				if i == 0 {
					base = el
				}
				fmt.Fprintf(&b, "| %d | %s | %.1f s | %.0f | %.1f | %.1f | %.2f | %.2f ms | %.2f× |\n", res.Clusters, s.Name, el,
					median(collect(s.Runs, fleetRun.MachinesPerSec)), median(collect(s.Runs, fleetRun.KVWritesPerMachine)),
					median(collect(s.Runs, fleetRun.MsgsPerMachine)), median(collect(s.Runs, fleetRun.Cores)),
					median(collect(s.Runs, fleetRun.CPUPerMachine)), el/base)
			}
		}
		b.WriteString("\n")
	}
	if l := r.Large; l != nil {
		ref := l.Reference
		fmt.Fprintf(&b, "### %d machines\n\n", 10*r.LargeClusters)
		fmt.Fprintf(&b, "One in-process server and the services in the benchmark's process (as `capn dev`), once each, the reference create (%d machines) first. "+
			"Peak RSS is the whole process's during the create — the NATS server, every service (cluster-planner, machine-manager, bootstrapper, health-watcher), "+
			"the sim provider with its simulated machines, and the benchmark's watcher — from the kernel's high-water mark reset at the start; "+
			"Go heap is the highest live-and-unswept heap sampled every 250 ms, Go runtime the memory the runtime held.\n\n", ref.Machines)
		b.WriteString("| figure | reference | large | goal |\n| --- | ---: | ---: | --- |\n")
		big := l.Large
		if l.Err != "" {
			fmt.Fprintf(&b, "| machines | %d | did not complete: %d of %d Running after %.0f s | completes |\n", ref.Machines, big.Running, big.Machines, big.Elapsed.Seconds())
			fmt.Fprintf(&b, "| apply → all Running | %.1f s | — | ≤ 3 min |\n", ref.Elapsed.Seconds())
			fmt.Fprintf(&b, "| CPU per Running machine | %.2f ms | %.2f ms | |\n", ref.CPUPerMachine(), 1000*big.CPU/float64(max(big.Running, 1)))
			memoryRows(&b, ref, big)
			fmt.Fprintf(&b, "\nThe large create stopped: %s\n\n", l.Err)
			cpuByServiceLines(&b, ref, big)
			return b.String()
		}
		fmt.Fprintf(&b, "| machines | %d | %d | |\n", ref.Machines, big.Machines)
		fmt.Fprintf(&b, "| apply → all Running | %.1f s | %.1f s | ≤ 3 min |\n", ref.Elapsed.Seconds(), big.Elapsed.Seconds())
		fmt.Fprintf(&b, "| clusters written to desired | %.1f s | %.1f s | |\n", ref.Created.Seconds(), big.Created.Seconds())
		fmt.Fprintf(&b, "| machines/s | %.0f | %.0f | |\n", ref.MachinesPerSec(), big.MachinesPerSec())
		fmt.Fprintf(&b, "| KV writes, messages per machine | %.1f, %.1f | %.1f, %.1f | |\n", ref.KVWritesPerMachine(), ref.MsgsPerMachine(), big.KVWritesPerMachine(), big.MsgsPerMachine())
		fmt.Fprintf(&b, "| cores | %.2f | %.2f | |\n", ref.Cores(), big.Cores())
		fmt.Fprintf(&b, "| CPU per machine | %.2f ms | %.2f ms (%.2f×) | ≤ 1.3× |\n", ref.CPUPerMachine(), big.CPUPerMachine(), big.CPUPerMachine()/ref.CPUPerMachine())
		memoryRows(&b, ref, big)
		b.WriteString("\n")
		cpuByServiceLines(&b, ref, big)
	}
	return b.String()
}

func memoryRows(b *strings.Builder, ref, big fleetRun) {
	if ref.Memory != nil && big.Memory != nil {
		fmt.Fprintf(b, "| peak RSS, whole process | %.0f MiB | %.0f MiB | ≤ 2.5 GiB |\n", ref.Memory.RSSMiB, big.Memory.RSSMiB)
		fmt.Fprintf(b, "| peak Go heap / Go runtime | %.0f / %.0f MiB | %.0f / %.0f MiB | |\n", ref.Memory.HeapMiB, ref.Memory.GoMiB, big.Memory.HeapMiB, big.Memory.GoMiB)
	}
}

func cpuByServiceLines(b *strings.Builder, runs ...fleetRun) {
	for _, c := range runs {
		switch {
		case len(c.CPUByService) == 0:
		case c.Running > 0 && c.Running < c.Machines:
			fmt.Fprintf(b, "CPU per Running machine by service, %d of %d machines Running: %s.\n\n", c.Running, c.Machines, serviceCPU(c))
		default:
			fmt.Fprintf(b, "CPU per machine by service, %d machines: %s.\n\n", c.Machines, serviceCPU(c))
		}
	}
}
