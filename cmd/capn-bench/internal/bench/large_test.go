package bench

import (
	"bytes"
	"context"
	"flag"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
)

// TestReplicatedDeployment runs a small fleet create on the rendered
// 3-node cluster: every stream and bucket has 3 replicas on every node,
// the services connect as their own users over TLS, no client is told of
// a permission violation, and the create's figures are counted.
func TestReplicatedDeployment(t *testing.T) {
	if testing.Short() {
		t.Skip("3 nats-server nodes: skipped with -short")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	dp, err := startDeployment(ctx, 3)
	if err != nil {
		t.Fatal(err)
	}
	defer dp.Close()
	for i, s := range dp.servers {
		jsz, err := s.Jsz(&server.JSzOptions{Accounts: true, Streams: true, Config: true})
		if err != nil {
			t.Fatal(err)
		}
		streams := 0
		for _, a := range jsz.AccountDetails {
			for _, st := range a.Streams {
				streams++
				if st.Config == nil || st.Config.Replicas != 3 {
					t.Errorf("node %d: stream %s: config %+v, want 3 replicas", i+1, st.Name, st.Config)
				}
			}
		}
		if streams < 5 {
			t.Errorf("node %d holds %d streams, want capn's topology on every node", i+1, streams)
		}
	}
	if u := dp.nc.ConnectedUrl(); !strings.HasPrefix(u, "tls://127.0.0.1:") {
		t.Errorf("the benchmark's connection is at %q, want TLS on 127.0.0.1", u)
	}
	r, err := fleetCreate(ctx, dp.fleetEnv, 3, 2*time.Minute, fleetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if r.Machines != 30 || r.KVWrites < 30 || r.Messages < 30 || r.CPU <= 0 || r.Elapsed <= 0 {
		t.Errorf("fleet create of 3 clusters: %+v, want 30 machines, at least one KV write and message each, CPU and time", r)
	}
	if v := dp.Violations(); len(v) > 0 {
		t.Errorf("permission violations: %v", v)
	}
}

// TestLargeBench runs the large benchmark through Run at a small size and
// checks the block it writes into the report file beside what is there.
func TestLargeBench(t *testing.T) {
	if testing.Short() {
		t.Skip("two fleet creates: skipped with -short")
	}
	out := filepath.Join(t.TempDir(), "benchmarks.md")
	if err := os.WriteFile(out, []byte("# Benchmarks\n\nwritten by people\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	fs := flag.NewFlagSet("capn-bench", flag.ContinueOnError)
	cfg := BindFlags(fs)
	if err := fs.Parse([]string{"--bench", "large", "--large-clusters", "3", "--large-reference", "1", "--out", out}); err != nil {
		t.Fatal(err)
	}
	var stdout, progress bytes.Buffer
	if err := Run(context.Background(), *cfg, &stdout, &progress); err != nil {
		t.Fatalf("%v\n%s", err, progress.String())
	}
	b, err := os.ReadFile(out)
	if err != nil {
		t.Fatal(err)
	}
	md := string(b)
	for _, want := range []string{"written by people", largeBeginMarker, largeEndMarker, "### 30 machines", "| machines | 10 | 30 | |", "| peak RSS, whole process |", "CPU per machine by service, 30 machines:"} {
		if !strings.Contains(md, want) {
			t.Errorf("report lacks %q:\n%s", want, md)
		}
	}
	if strings.Contains(md, beginMarker) {
		t.Errorf("the large benchmark alone wrote make bench's block:\n%s", md)
	}
}

// A large create that does not complete is reported with where it stopped.
func TestLargeMarkdownStopped(t *testing.T) {
	r := report{Machine: "m", LargeClusters: 10000, Large: &largeResult{
		Reference: fleetRun{Machines: 10000, Running: 10000, Elapsed: 30 * time.Second, CPU: 60},
		Large:     fleetRun{Machines: 100000, Running: 51234, Elapsed: 15 * time.Minute, CPU: 512.34, CPUByService: map[string]time.Duration{"cluster-planner": 100 * time.Second}},
		Err:       "10000 clusters: only 51234 of 100000 machines Running after 15m0s",
	}}
	md := r.largeMarkdown()
	for _, want := range []string{"### 100000 machines", "| machines | 10000 | did not complete: 51234 of 100000 Running after 900 s | completes |",
		"| CPU per Running machine | 6.00 ms | 10.00 ms | |", "The large create stopped: 10000 clusters: only 51234 of 100000", "CPU per Running machine by service, 51234 of 100000 machines Running: cluster-planner 1.95 ms"} {
		if !strings.Contains(md, want) {
			t.Errorf("report lacks %q:\n%s", want, md)
		}
	}
}

// The memory sampler sees 256 MiB allocated and touched during its
// measure, in the heap and in the resident set.
func TestMemSampler(t *testing.T) {
	m := startMemSampler(10 * time.Millisecond)
	buf := make([]byte, 256<<20)
	for i := 0; i < len(buf); i += 4096 {
		buf[i] = 1
	}
	p := m.stop()
	runtime.KeepAlive(buf)
	if p.HeapMiB < 256 || p.RSSMiB < 256 || p.GoMiB < 256 {
		t.Errorf("peaks %+v, want at least 256 MiB each", p)
	}
}

// A fleet create that times out returns what it did until then.
func TestFleetCreateTimesOut(t *testing.T) {
	if testing.Short() {
		t.Skip("a fleet create: skipped with -short")
	}
	heap := filepath.Join(t.TempDir(), "heap.pprof")
	r, err := measureFleetIn(context.Background(), 20, time.Millisecond, fleetOptions{memory: true, heapProfile: heap})
	if err == nil || !strings.Contains(err.Error(), "of 200 machines Running after 1ms") {
		t.Fatalf("error %v, want a timeout saying how many of the 200 machines were Running", err)
	}
	if r.Machines != 200 || r.Running >= 200 || r.CPU <= 0 || r.Memory == nil || r.Memory.RSSMiB <= 0 {
		t.Errorf("partial figures %+v (memory %+v)", r, r.Memory)
	}
	if fi, err := os.Stat(heap); err != nil || fi.Size() == 0 {
		t.Errorf("heap profile: %v", err)
	}
}

// rotate starts the URL list at node i.
func TestRotate(t *testing.T) {
	for i, want := range []string{"a,b,c", "b,c,a", "c,a,b", "a,b,c"} {
		if got := rotate("a,b,c", i); got != want {
			t.Errorf("rotate(a,b,c, %d) = %q, want %q", i, got, want)
		}
	}
	if got := rotate("a", 2); got != "a" {
		t.Errorf("rotate(a, 2) = %q", got)
	}
}

// composeOn keeps the rendered deployment's security (TLS, the auth
// callout) and refuses a node count it cannot render.
func TestComposeOn(t *testing.T) {
	d, err := composeOn(3, []int{20001, 20002, 20003, 20004, 20005, 20006}, t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	if len(d.Servers) != 3 || d.Replicas != 3 || !d.TLS || !d.NodeAgents || d.Servers[2].ClientPort != 20005 || d.Servers[2].RoutePort != 20006 || d.Servers[0].Listen != "127.0.0.1" {
		t.Errorf("composeOn(3) = %+v", d)
	}
	if _, err := composeOn(4, make([]int, 8), t.TempDir()); err == nil || !strings.Contains(err.Error(), "1 to 3 nodes") {
		t.Errorf("composeOn(4): %v, want the node count refused", err)
	}
}

// A replicated setup whose create timed out is a row of its own, and the
// other setups' rows stay.
func TestReplicatedMarkdownStopped(t *testing.T) {
	done := fleetRun{Machines: 10000, Running: 10000, Elapsed: 70 * time.Second, CPU: 64, KVWrites: 80000, Messages: 68000}
	r := report{Machine: "m", Runs: 1, Replicated: []replicatedResult{{Clusters: 1000, Setups: []replicatedSetup{
		{Name: "in-process, 1 node, R1", Runs: []fleetRun{done}},
		{Name: "rendered, 1 node, R1", Stopped: &fleetRun{Machines: 10000, Running: 9018, Elapsed: 10 * time.Minute, CPU: 300}},
	}}}}
	md := r.largeMarkdown()
	for _, want := range []string{"| 1000 | in-process, 1 node, R1 | 70.0 s | 143 | 8.0 | 6.8 | 0.91 | 6.40 ms | 1.00× |",
		"| 1000 | rendered, 1 node, R1 | did not complete: 9018 of 10000 Running after 600 s | | | | 0.50 | | |"} {
		if !strings.Contains(md, want) {
			t.Errorf("report lacks %q:\n%s", want, md)
		}
	}
}
