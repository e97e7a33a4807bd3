package bench

import (
	"flag"
	"fmt"
	"os"
	"strings"
	"time"
)

// Config is capn-bench's command line (BindFlags).
type Config struct {
	Clusters       string // comma-separated fleet sizes
	Runs           int
	Out            string
	Timeout        time.Duration
	RepairMachines int
	Workers        int
	Trace          bool
	CPUProfile     string
	RepairFleet    int
	Bench          string // comma-separated benchmarks
	IdleClusters   string // comma-separated fleet sizes
	UpgradePool    int
	UpgradeBoot    time.Duration
	IdleHeartbeat  time.Duration
	IdleWindow     time.Duration
	IdleQuiet      time.Duration
	ReplayClients  int
	// RolloutClusters and RolloutSoak shape the rollout benchmark.
	RolloutClusters int
	RolloutSoak     time.Duration
	// The hosted benchmark (not in the default --bench: make bench-hosted).
	Hosted       string // comma-separated numbers of control planes, or auto
	KubeBin      string
	HostedSettle time.Duration
	HostedWindow time.Duration
	HostedWorker bool
	// The replicated and large benchmarks (not in the default --bench:
	// make bench-large).
	ReplicatedClusters string // comma-separated fleet sizes
	ReplicatedNodes    int
	LargeClusters      int
	LargeReference     int
	LargeTimeout       time.Duration
	LargeHeapProfile   string
	LargeProfileDir    string
	LargeProfileEvery  time.Duration
}

// defaultBench are the benchmarks make bench runs; hosted, which needs the
// Kubernetes binaries and half the machine's memory, runs when named.
const defaultBench = "fleet,repair,idle,upgrade,ingest,rollout"

// BindFlags defines capn-bench's flags on fs, with their defaults, into
// the Config it returns.
func BindFlags(fs *flag.FlagSet) *Config {
	c := &Config{}
	fs.StringVar(&c.Clusters, "clusters", "100,300,1000", "comma-separated fleet sizes (clusters of 1 control-plane + 9 worker machines)")
	fs.IntVar(&c.Runs, "runs", 3, "runs per figure; the report gives medians")
	fs.StringVar(&c.Out, "out", "", "write the markdown report here (default: stdout only)")
	fs.DurationVar(&c.Timeout, "timeout", 10*time.Minute, "give up on one fleet create after this long")
	fs.IntVar(&c.RepairMachines, "repair-machines", 20, "machines repaired one after another in the repair-latency benchmark (0 skips it)")
	fs.IntVar(&c.Workers, "workers", 0, "override the services' worker counts (0: their defaults)")
	fs.BoolVar(&c.Trace, "trace", false, "print each fleet create's progress every second")
	fs.StringVar(&c.CPUProfile, "cpuprofile", "", "write a CPU profile of the whole run here")
	fs.IntVar(&c.RepairFleet, "repair-fleet", 300, "clusters created in the background of the busy repair-latency runs (0 skips them)")
	fs.StringVar(&c.Bench, "bench", defaultBench, "comma-separated benchmarks to run: fleet, repair, idle, upgrade, ingest, rollout, hosted (hosted control planes' density: make bench-hosted), replicated (fleet create on the rendered 3-node JetStream cluster beside one node) and large (100,000 machines: make bench-large)")
	fs.StringVar(&c.IdleClusters, "idle-clusters", "100,1000", "comma-separated fleet sizes of the idle-cost benchmark")
	fs.IntVar(&c.UpgradePool, "upgrade-pool", 500, "machines in the pool of the rolling-upgrade benchmark")
	fs.DurationVar(&c.UpgradeBoot, "upgrade-boot", 5*time.Second, "the sim provider's boot latency in the rolling-upgrade benchmark")
	fs.DurationVar(&c.IdleHeartbeat, "idle-heartbeat", 30*time.Second, "heartbeat interval of each simulated node in the idle benchmark (the sim provider's default)")
	fs.DurationVar(&c.IdleQuiet, "idle-quiet", 5*time.Second, "the idle benchmark's window starts once the create's follow-up work has written nothing for this long (heartbeats and provider announcements aside)")
	fs.DurationVar(&c.IdleWindow, "idle-window", 30*time.Second, "how long the idle benchmark reads each program's CPU time")
	fs.IntVar(&c.ReplayClients, "replay-clients", replayClients, "clients publishing the replayed traffic")
	fs.IntVar(&c.RolloutClusters, "rollout-clusters", 1000, "clusters (1 control-plane + 1 worker machine) of the class a rollout moves in waves in the rollout benchmark")
	fs.DurationVar(&c.RolloutSoak, "rollout-soak", time.Second, "soak between the rollout benchmark's waves")
	fs.StringVar(&c.Hosted, "hosted", "auto", "comma-separated numbers of 1-replica hosted control planes the hosted benchmark runs at once, each on a fresh server; auto: half the available memory at 500 MiB each, at most 20")
	fs.StringVar(&c.KubeBin, "kube-bin", os.Getenv("CAPN_KUBE_BIN"), "directories of the Kubernetes binaries, colon-separated (make -s kube-bin; default $CAPN_KUBE_BIN, else make kube's cache): the hosted benchmark runs the newest version")
	fs.DurationVar(&c.HostedSettle, "hosted-settle", 15*time.Second, "how long the hosted benchmark lets the control planes settle once all are Ready, before its idle window")
	fs.DurationVar(&c.HostedWindow, "hosted-window", 30*time.Second, "how long the hosted benchmark reads each control plane's CPU time")
	fs.BoolVar(&c.HostedWorker, "hosted-worker", true, "the hosted benchmark also times one hosted cluster's kube-local worker to a Ready Node and measures one machine-based control plane, on the process provider")
	fs.StringVar(&c.ReplicatedClusters, "replicated-clusters", "100,1000", "comma-separated fleet sizes of the replicated benchmark")
	fs.IntVar(&c.ReplicatedNodes, "replicated-nodes", 3, "nodes of the rendered JetStream cluster in the replicated benchmark (streams and buckets with as many replicas), measured beside one in-process node and one rendered node: 1..3")
	fs.IntVar(&c.LargeClusters, "large-clusters", 10000, "clusters (1 control-plane + 9 workers) of the large benchmark's create")
	fs.IntVar(&c.LargeReference, "large-reference", 1000, "clusters of the large benchmark's reference create, run first (its CPU per machine is what the large one is compared with)")
	fs.DurationVar(&c.LargeTimeout, "large-timeout", 15*time.Minute, "give up on the large create after this long (reported with where it stopped)")
	fs.StringVar(&c.LargeHeapProfile, "large-heapprofile", "", "write a heap profile of the process here when the large create ends (completed or not)")
	fs.StringVar(&c.LargeProfileDir, "large-profile-dir", "", "write the large create's CPU profile into this `directory`, cut into segments of --large-profile-every (cpu-<from>-<to>s.pprof)")
	fs.DurationVar(&c.LargeProfileEvery, "large-profile-every", time.Minute, "length of each CPU profile segment --large-profile-dir writes")
	return c
}

// options is a Config with its lists parsed: what Run runs.
type options struct {
	Config
	sizes, idleSizes []int
	replicatedSizes  []int
	hostedSizes      []int           // 0: auto
	want             map[string]bool // by benchmark name
}

// options parses the lists of c, in the order capn-bench always did: the
// first mistake is the error.
func (c Config) options() (options, error) {
	o := options{Config: c, want: map[string]bool{}}
	var err error
	if o.sizes, err = sizesFlag("--clusters", c.Clusters); err != nil {
		return options{}, err
	}
	if o.idleSizes, err = sizesFlag("--idle-clusters", c.IdleClusters); err != nil {
		return options{}, err
	}
	if o.replicatedSizes, err = sizesFlag("--replicated-clusters", c.ReplicatedClusters); err != nil {
		return options{}, err
	}
	if c.ReplicatedNodes < 1 || c.ReplicatedNodes > 3 {
		return options{}, usageError{fmt.Errorf("--replicated-nodes: %d: the rendered deployment has 1 to 3 nodes", c.ReplicatedNodes)}
	}
	if c.LargeClusters < 1 {
		return options{}, usageError{fmt.Errorf("--large-clusters: %d is not a positive number", c.LargeClusters)}
	}
	if c.LargeReference < 1 {
		return options{}, usageError{fmt.Errorf("--large-reference: %d is not a positive number", c.LargeReference)}
	}
	if c.LargeTimeout <= 0 {
		return options{}, usageError{fmt.Errorf("--large-timeout: %s is not a positive duration", c.LargeTimeout)}
	}
	if c.LargeProfileDir != "" && c.LargeProfileEvery <= 0 {
		return options{}, usageError{fmt.Errorf("--large-profile-every: %s is not a positive duration", c.LargeProfileEvery)}
	}
	if c.RolloutClusters < 1 {
		return options{}, usageError{fmt.Errorf("--rollout-clusters: %d is not a positive number", c.RolloutClusters)}
	}
	for _, b := range strings.Split(c.Bench, ",") {
		switch b = strings.TrimSpace(b); b {
		case "fleet", "repair", "idle", "upgrade", "ingest", "rollout", "hosted", "replicated", "large":
			o.want[b] = true
		default:
			return options{}, usageError{fmt.Errorf("--bench: %q is not a benchmark (fleet, repair, idle, upgrade, ingest, rollout, hosted, replicated, large)", b)}
		}
	}
	for _, h := range strings.Split(c.Hosted, ",") {
		if h = strings.TrimSpace(h); h == "auto" {
			o.hostedSizes = append(o.hostedSizes, 0)
			continue
		}
		n, err := sizesFlag("--hosted", h)
		if err != nil {
			return options{}, usageError{fmt.Errorf("--hosted: %q is neither a positive number nor auto", h)}
		}
		o.hostedSizes = append(o.hostedSizes, n...)
	}
	if c.HostedWindow <= 0 {
		return options{}, usageError{fmt.Errorf("--hosted-window: %s is not a positive duration", c.HostedWindow)}
	}
	if c.HostedSettle < 0 {
		return options{}, usageError{fmt.Errorf("--hosted-settle: %s is negative", c.HostedSettle)}
	}
	return o, nil
}
