package conformance

import (
	"encoding/json"
	"fmt"
	"slices"
	"strconv"
	"testing"
	"time"
)

// workerNames are the workers among machines, sorted.
func workerNames(machines map[string]KubeMachine) []string {
	var out []string
	for name, m := range machines {
		if m.Pool == kubeWorkerPool {
			out = append(out, name)
		}
	}
	slices.Sort(out)
	return out
}

// scaleWorkers is the kubeadm check's scale step: `capn scale` takes the
// workers pool 2 → 3 (a new real node joins: Nodes Ready), `kubectl
// rollout restart` spreads web one pod per worker, and 3 → 2: capn picks
// a worker, drains its Node first (the machine's DrainStarted and
// DrainSucceeded events, as `capn events` shows them; its web pod evicted
// and one running on another worker, the Deployment back at 3/3 — the
// least it had on the way is logged), deletes the Node, and nothing of
// the machine is left (Leftovers). It returns the Running machines after
// and how long each way took.
func (s *suite) scaleWorkers(t *testing.T, e *Env, k *KubeCluster, w *webApp, machines map[string]KubeMachine) (map[string]KubeMachine, time.Duration, time.Duration) {
	t.Helper()
	cps := len(k.ControlPlane(machines))
	scaleTo := func(n int) {
		k.Capn.CLI("scale", e.Cluster, "--pool", kubeWorkerPool, "--replicas", strconv.Itoa(n))
	}

	// --- up to 3 ----------------------------------------------------------
	s0 := time.Now()
	scaleTo(3)
	Poll(t, "3 Running workers", 12*time.Minute, func() error {
		machines = k.Running()
		if len(workerNames(machines)) != 3 || len(machines) != cps+3 {
			return fmt.Errorf("Running machines %v, want %d control planes and 3 workers", kubeNames(machines), cps)
		}
		return nil
	})
	k.Clusters.WaitReady(e.Cluster, 5*time.Minute)
	k.WaitNodes(machines, 5*time.Minute)
	up := time.Since(s0)
	t.Logf("workers pool scaled to 3 in %.1fs: capn Ready, the new worker's Node Ready; Nodes %v", up.Seconds(), kubeNames(machines))

	// web one pod per worker, so that whichever capn removes runs one.
	Poll(t, "kubectl rollout restart deployment/web", time.Minute, func() error {
		_, err := k.Kubectl("rollout", "restart", "deployment/web", "-n", "default")
		return err
	})
	Poll(t, "the restarted web rolled out", 5*time.Minute, func() error {
		_, err := k.Kubectl("rollout", "status", "deployment/web", "-n", "default", "--timeout=30s")
		return err
	})
	before := w.wait(t, "web's 3 pods, one per worker", 3*time.Minute, machines, 3)
	t.Logf("web restarted, one pod per worker: %v", before)

	// --- down to 2: the removed worker is drained first -------------------
	s0 = time.Now()
	scaleTo(2)
	var victim string
	var after map[string]KubeMachine
	var pods []webPod
	least := 3
	Poll(t, "2 Running workers, the removed one gone from capn, web's 3 pods serving on the others", 15*time.Minute, func() (err error) {
		if n, err := w.available(); err == nil && n < least {
			least = n
		}
		after = k.Running()
		for name, m := range machines {
			if _, ok := after[name]; !ok && m.Pool == kubeWorkerPool && victim == "" {
				victim = name
			}
		}
		if victim == "" {
			return fmt.Errorf("no worker of %v is being removed", kubeNames(machines))
		}
		if _, ok := k.Clusters.UIDs(e.Cluster)[victim]; ok {
			return fmt.Errorf("machine %s is being deleted (%s)", victim, k.Clusters.machineSummary(e.Cluster))
		}
		if len(workerNames(after)) != 2 || len(after) != cps+2 {
			return fmt.Errorf("Running machines %v, want %d control planes and 2 workers", kubeNames(after), cps)
		}
		pods, err = w.serving(after, 2)
		return err
	})
	k.WaitNodes(after, 3*time.Minute)
	down := time.Since(s0)

	// Drained before it went: the machine's timeline says so.
	out := k.Capn.CLI("events", e.Cluster, "-o", "json", "--limit", "10000")
	var tl struct {
		Items []struct {
			Time    time.Time `json:"time"`
			Entity  string    `json:"entity"`
			Object  string    `json:"object"`
			Reason  string    `json:"reason"`
			Message string    `json:"message"`
		} `json:"items"`
	}
	if err := json.Unmarshal([]byte(out), &tl); err != nil {
		t.Fatalf("capn events -o json: %v\n%s", err, out)
	}
	drain := map[string]string{}
	for _, ev := range tl.Items {
		if ev.Entity == "machine" && ev.Object == victim && (ev.Reason == "DrainStarted" || ev.Reason == "DrainSucceeded") {
			drain[ev.Reason] = ev.Time.Format(time.RFC3339) + " " + ev.Message
		}
	}
	if drain["DrainStarted"] == "" || drain["DrainSucceeded"] == "" {
		t.Fatalf("capn events shows no drain of %s before its deletion (DrainStarted %q, DrainSucceeded %q)", victim, drain["DrainStarted"], drain["DrainSucceeded"])
	}
	// Its pod was evicted: none of web's pods now is one it ran.
	all, err := w.pods()
	if err != nil {
		t.Fatal(err)
	}
	for _, b := range before {
		if b.Node != victim {
			continue
		}
		for _, p := range all {
			if p.Name == b.Name {
				t.Fatalf("web's pod %s of the removed worker %s is still there: %v", b, victim, p)
			}
		}
	}
	s.waitNothingOf(t, e, victim)
	t.Logf("workers pool scaled to 2 in %.1fs: capn removed %s — %s; %s; its web pod evicted, web's pods now %v (Deployment's availableReplicas, read about every second on the way, never below %d/3; 3/3 after); its Node deleted, nothing of it left",
		down.Seconds(), victim, drain["DrainStarted"], drain["DrainSucceeded"], pods, least)
	return after, up, down
}
