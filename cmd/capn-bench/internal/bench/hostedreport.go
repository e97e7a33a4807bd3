package bench

import (
	"fmt"
	"runtime"
	"slices"
	"strings"
	"time"
)

// Kamaji's published figure (https://kamaji.clastix.io/reference/benchmark/):
// 100 tenant control planes reconciled in about 7 min 30 s, on EKS, with
// one shared etcd DataStore, Kamaji and the DataStore on their own node
// pool.
const (
	kamajiCPs  = 100
	kamajiTime = 7*time.Minute + 30*time.Second
	kamajiURL  = "https://kamaji.clastix.io/reference/benchmark/"
)

// hostedMarkdown renders the hosted benchmark: a column per run beside
// Kamaji's figure, then the worker and the machine-based control plane.
func (r report) hostedMarkdown() string {
	var b strings.Builder
	fmt.Fprintf(&b, "Measured %s on %s; Kubernetes %s (`make kube`'s build). Reproduce with `make bench-hosted`\n", r.Started.Format("2006-01-02 15:04 UTC"), r.Machine, r.HostedVersion)
	fmt.Fprintf(&b, "(`go run ./cmd/capn-bench --bench hosted --hosted auto --kube-bin \"$(make -s kube-bin)\"`).\n\n")
	if len(r.Hosted) > 0 {
		h := r.Hosted[0]
		fmt.Fprintf(&b, "N clusters with a hosted control plane of 1 replica are applied at once to the desired bucket\n")
		fmt.Fprintf(&b, "(defaulted and validated as the gateway does) on an embedded nats-server on loopback; the\n")
		fmt.Fprintf(&b, "cluster-planner and the bootstrapper run in process, `controlplane-hosted` as its own program, whose\n")
		fmt.Fprintf(&b, "children are every control plane's etcd, kube-apiserver, kube-controller-manager and kube-scheduler.\n")
		fmt.Fprintf(&b, "Ready: the record initialized with its API server answering `/readyz`, and the cluster Ready. RSS: VmRSS\n")
		fmt.Fprintf(&b, "summed over a control plane's 4 processes; idle CPU: their user + system time over %s, from %s after the\n", h.Window, h.Settle)
		fmt.Fprintf(&b, "last was Ready (both from /proc). Kamaji's figure is its published benchmark ([%s](%s)):\n", "reference/benchmark", kamajiURL)
		fmt.Fprintf(&b, "%d tenant control planes on EKS sharing one etcd DataStore, a node pool of their own.\n\n", kamajiCPs)
		fmt.Fprintf(&b, "| |")
		for _, x := range r.Hosted {
			fmt.Fprintf(&b, " capn, %d |", x.N)
		}
		fmt.Fprintf(&b, " Kamaji (published) |\n| --- |%s --- |\n", strings.Repeat(" --- |", len(r.Hosted)))
		row := func(name, kamaji string, f func(hostedRun) string) {
			fmt.Fprintf(&b, "| %s |", name)
			for _, x := range r.Hosted {
				fmt.Fprintf(&b, " %s |", f(x))
			}
			fmt.Fprintf(&b, " %s |\n", kamaji)
		}
		row("control planes created at once", fmt.Sprint(kamajiCPs), func(x hostedRun) string {
			if x.Picked != "" {
				return fmt.Sprintf("%d (`--hosted auto`: %.0f%% of %.1f GiB available at %.0f MiB each, at most %d)", x.N, 100*hostedAutoShare, x.AutoAvail/1024, hostedAutoPerCP, hostedAutoCeiling)
			}
			return fmt.Sprint(x.N)
		})
		row("**first apply → all Ready**", "~"+humanDuration(kamajiTime), func(x hostedRun) string { return "**" + humanDuration(x.Total) + "**" })
		row("control planes Ready per minute", fmt.Sprintf("%.1f", kamajiCPs/kamajiTime.Minutes()), func(x hostedRun) string {
			return fmt.Sprintf("%.1f", float64(x.N)/x.Total.Minutes())
		})
		row("each one's apply → Ready: median / p90", "—", func(x hostedRun) string {
			return fmt.Sprintf("%.1f s / %.1f s", median(x.perCPSeconds()), percentile(x.perCPSeconds(), 0.9))
		})
		row("of which apply → processes started (record first written): median / p90", "—", func(x hostedRun) string {
			return fmt.Sprintf("%.1f s / %.1f s", median(x.startedSeconds()), percentile(x.startedSeconds(), 0.9))
		})
		row("load average (1 min): at the first apply → at the end", "— (dedicated nodes)", func(x hostedRun) string {
			return fmt.Sprintf("%.1f → %.1f", x.LoadStart, x.LoadEnd)
		})
		row("**RSS per control plane**: median (min–max)", "—", func(x hostedRun) string {
			return fmt.Sprintf("**%.0f MiB** (%.0f–%.0f)", median(x.RSS), slices.Min(x.RSS), slices.Max(x.RSS))
		})
		row("of which etcd / kube-apiserver / controller-manager / scheduler (medians)", "—", func(x hostedRun) string {
			var parts []string
			for _, c := range hostedComponents {
				parts = append(parts, fmt.Sprintf("%.0f", median(x.ByComp[c])))
			}
			return strings.Join(parts, " / ") + " MiB"
		})
		row("**idle CPU per control plane**: median (max)", "—", func(x hostedRun) string {
			return fmt.Sprintf("**%.0f mCPU** (%.0f)", median(x.MilliC), slices.Max(x.MilliC))
		})
		row("controlplane-hosted itself: RSS / idle CPU", "—", func(x hostedRun) string {
			return fmt.Sprintf("%.0f MiB / %.1f mCPU", x.ServiceRSS, x.ServiceMilliC)
		})
		row("memory available with all running (MemAvailable)", "—", func(x hostedRun) string {
			return fmt.Sprintf("%.1f GiB", x.MemAvailable/1024)
		})
		row(fmt.Sprintf("how many fit (estimate): by memory (running + available / median RSS); by CPU (%d cores × 1000 / idle mCPU)", runtime.NumCPU()), "—", func(x hostedRun) string {
			return fmt.Sprintf("~%d; ~%d", x.fitMemory(), x.fitCPU(runtime.NumCPU()))
		})
	}
	if x := r.HostedWorker; x != nil {
		fmt.Fprintf(&b, "\nOn a fresh server with the machine-manager, the health-watcher and the process provider in process as\n")
		fmt.Fprintf(&b, "well: one hosted cluster with one kube-local worker (a process machine whose capn-node runs the worker's\n")
		fmt.Fprintf(&b, "components; the Node read through the admin kubeconfig at the record's endpoint), then one machine-based\n")
		fmt.Fprintf(&b, "control plane, a kube-local process machine with no worker (the figure a hosted control plane replaces;\n")
		fmt.Fprintf(&b, "its RSS and CPU read as above, %s after it was Ready, over %s).\n\n", x.Settle, x.Window)
		fmt.Fprintf(&b, "| one cluster | |\n| --- | --- |\n")
		fmt.Fprintf(&b, "| hosted control plane + 1 kube-local worker: apply → cluster Ready | %.1f s |\n", x.ClusterReady.Seconds())
		fmt.Fprintf(&b, "| hosted control plane + 1 kube-local worker: **apply → the worker's Node Ready** | **%.1f s** |\n", x.NodeReady.Seconds())
		fmt.Fprintf(&b, "| machine-based control plane (1 kube-local machine): apply → cluster Ready | %.1f s |\n", x.MachineReady.Seconds())
		var parts []string
		for _, c := range hostedComponents {
			parts = append(parts, fmt.Sprintf("%.0f", x.MachineRSS[c]))
		}
		fmt.Fprintf(&b, "| machine-based control plane: **its machine's RSS**: the control-plane components (etcd / kube-apiserver / controller-manager / scheduler: %s MiB) / all its processes (with %s MiB) | **%.0f MiB** / %.0f MiB |\n",
			strings.Join(parts, " / "), x.machineOthers(), x.machineRSS(false), x.machineRSS(true))
		fmt.Fprintf(&b, "| machine-based control plane: its machine's idle CPU | %.0f mCPU |\n", x.MachineMilliC)
	}
	return b.String()
}

// humanDuration is "7 min 30 s", "48.2 s".
func humanDuration(d time.Duration) string {
	if d < time.Minute {
		return fmt.Sprintf("%.1f s", d.Seconds())
	}
	d = d.Round(time.Second)
	return fmt.Sprintf("%d min %d s", int(d.Minutes()), int(d.Seconds())%60)
}
