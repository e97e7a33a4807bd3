package bench

import (
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/capn-dev/capn/events/natstest"
)

func TestParseStatCPU(t *testing.T) {
	// A command name with a space and a parenthesis: the fields count
	// from the last closing parenthesis. utime 1500, stime 250.
	stat := "4242 (kube-api (x) 1) S 1 4242 4242 0 -1 4194560 95 0 0 0 1500 250 0 0 20 0 12 0 100 1000 200 18446744073709551615"
	got, err := parseStatCPU(stat)
	if err != nil || got != 1750 {
		t.Errorf("parseStatCPU = %v, %v; want 1750 ticks", got, err)
	}
	for _, bad := range []string{"", "4242 no parenthesis", "4242 (etcd) S 1 2 3", "4242 (etcd) S 1 4242 4242 0 -1 4194560 95 0 0 0 x 250 0"} {
		if _, err := parseStatCPU(bad); err == nil {
			t.Errorf("parseStatCPU(%q): no error", bad)
		}
	}
	// This process's own stat parses, and its CPU time only grows.
	a, err := cpuSeconds(os.Getpid())
	if err != nil {
		t.Fatal(err)
	}
	for end := time.Now().Add(50 * time.Millisecond); time.Now().Before(end); {
	}
	if b, err := cpuSeconds(os.Getpid()); err != nil || b < a {
		t.Errorf("cpuSeconds went from %v to %v (%v)", a, b, err)
	}
}

func TestParseKiB(t *testing.T) {
	status := "Name:\tetcd\nVmPeak:\t  900000 kB\nVmRSS:\t   47104 kB\nRssAnon:\t 30000 kB\n"
	if got, err := parseKiB(status, "VmRSS:"); err != nil || got != 46 {
		t.Errorf("VmRSS = %v, %v; want 46 MiB", got, err)
	}
	meminfo := "MemTotal:       24684544 kB\nMemFree:        17235968 kB\nMemAvailable:   23868416 kB\n"
	if got, err := parseKiB(meminfo, "MemAvailable:"); err != nil || math.Abs(got-23309) > 0.01 {
		t.Errorf("MemAvailable = %v, %v; want 23309 MiB", got, err)
	}
	if _, err := parseKiB(status, "MemAvailable:"); err == nil || err.Error() != "no MemAvailable: line" {
		t.Errorf("a missing line: %v", err)
	}
	if _, err := parseKiB("VmRSS:\t47 MB\n", "VmRSS:"); err == nil || !strings.Contains(err.Error(), `"47 MB": want a number of kB`) {
		t.Errorf("another unit: %v", err)
	}
	if got, err := rssMiB(os.Getpid()); err != nil || got <= 1 {
		t.Errorf("this process's RSS = %v MiB, %v", got, err)
	}
}

func TestOwnerUnder(t *testing.T) {
	root := "/tmp/b/hosted"
	for _, tt := range []struct {
		argv []string
		want string
	}{
		{[]string{"/k/bin/etcd", "--name=etcd-0", "--data-dir=/tmp/b/hosted/c1/etcd-0"}, "c1"},
		{[]string{"/k/bin/kube-apiserver", "--client-ca-file=/tmp/b/hosted/hosted-007/pki/ca.crt"}, "hosted-007"},
		{[]string{"/k/bin/kube-scheduler", "--kubeconfig", "/tmp/b/hosted/c2"}, "c2"},
		{[]string{"/k/bin/etcd", "--data-dir=/tmp/b/hosted2/c1/etcd-0"}, ""}, // another root that starts alike
		{[]string{"/k/bin/etcd", "--data-dir=/tmp/b/hosted/"}, ""},
		{[]string{"sleep", "60"}, ""},
	} {
		if got := ownerUnder(tt.argv, root+"/"); got != tt.want {
			t.Errorf("ownerUnder(%q) = %q, want %q", tt.argv, got, tt.want)
		}
	}
}

// procsUnder finds a real process by the directory its command line
// names, and nothing once it is gone.
func TestProcsUnder(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("reads /proc")
	}
	root := t.TempDir()
	file := filepath.Join(root, "c7", "data")
	if err := os.MkdirAll(filepath.Dir(file), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(file, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command("tail", "-f", file)
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() { _ = cmd.Wait(); close(done) }()
	defer func() { _ = cmd.Process.Kill(); <-done }()
	var got map[string][]proc
	natstest.WaitFor(t, 5*time.Second, "tail -f under the root", func() bool {
		got = procsUnder(root)
		return len(got["c7"]) == 1
	})
	if p := got["c7"][0]; p.PID != cmd.Process.Pid || p.Owner != "c7" || p.Name != "tail" || len(got) != 1 {
		t.Fatalf("procsUnder = %+v, want pid %d (tail) owned by c7", got, cmd.Process.Pid)
	}
	_ = cmd.Process.Kill()
	<-done
	if got := procsUnder(root); len(got) != 0 {
		t.Fatalf("after the kill: %+v", got)
	}
}

func TestPercentileAndMedian(t *testing.T) {
	xs := []float64{9, 1, 8, 2, 7, 3, 6, 4, 5, 10}
	for _, tt := range []struct{ p, want float64 }{{0.5, 5}, {0.9, 9}, {1, 10}, {0.01, 1}} {
		if got := percentile(xs, tt.p); got != tt.want {
			t.Errorf("percentile(%v) = %v, want %v", tt.p, got, tt.want)
		}
	}
	if got := median(xs); got != 5.5 {
		t.Errorf("median = %v, want 5.5", got)
	}
	if got := percentile([]float64{4.2}, 0.9); got != 4.2 {
		t.Errorf("percentile of one = %v", got)
	}
	if percentile(nil, 0.9) != 0 || median(nil) != 0 {
		t.Error("of nothing: not 0")
	}
	if xs[0] != 9 {
		t.Error("percentile sorted its input")
	}
}

func TestPickHosted(t *testing.T) {
	for _, tt := range []struct {
		avail float64
		want  int
		why   string
	}{
		{23309, 20, "22.8 GiB available; half of it at 500 MiB per control plane (the earlier measure) is 23, capped at 20"},
		{8192, 8, "8.0 GiB available; half of it at 500 MiB per control plane (the earlier measure) is 8"},
		{600, 1, "is 0, run 1 anyway"},
	} {
		n, why := pickHosted(tt.avail)
		if n != tt.want || !strings.Contains(why, tt.why) {
			t.Errorf("pickHosted(%v) = %d, %q; want %d, %q", tt.avail, n, why, tt.want, tt.why)
		}
	}
}

func TestHostedEstimates(t *testing.T) {
	r := hostedRun{N: 10, RSS: []float64{480, 470, 500}, MilliC: []float64{40, 50, 60}, MemAvailable: 4800}
	if got := r.fitMemory(); got != 20 {
		t.Errorf("fitMemory = %d, want 10 running + 4800/480", got)
	}
	if got := r.fitCPU(2); got != 40 {
		t.Errorf("fitCPU(2) = %d, want 2000/50", got)
	}
	if got := humanDuration(7*time.Minute + 30*time.Second); got != "7 min 30 s" {
		t.Errorf("humanDuration = %q", got)
	}
}
