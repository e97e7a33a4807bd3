package bench

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/capn-dev/capn/providers/conformance"
	"github.com/capn-dev/capn/schemas/manifest"
)

// The clusters the hosted benchmark applies pass the gateway's checks.
func TestHostedManifestsValidate(t *testing.T) {
	for name, y := range map[string]string{
		"hosted, no worker": hostedManifest("hosted-000", "v1.37.2", " []"),
		"hosted, 1 worker":  hostedManifest("hosted-worker", "v1.37.2", "\n  - {name: workers, provider: process, replicas: 1}"),
		"machine-based":     machineManifest("machine-cp", "v1.37.2"),
	} {
		c, err := manifest.Decode([]byte(y))
		if err != nil {
			t.Fatalf("%s: %v\n%s", name, err, y)
		}
		if err := (manifest.Validator{}).Check(c).Err(); err != nil {
			t.Errorf("%s: %v\n%s", name, err, y)
		}
	}
}

// TestHostedBenchOne runs the hosted benchmark's density measure with one
// control plane on the real binaries: the programs built, the control
// plane Ready, its 4 processes found and measured. Skipped with -short,
// and where CAPN_KUBE_BIN (make -s kube-bin) names no directory holding
// the binaries — as every other test on them, through
// conformance.KubeBins: a failure under CAPN_REQUIRE_KUBE=1.
func TestHostedBenchOne(t *testing.T) {
	if testing.Short() {
		t.Skip("runs a hosted control plane; skipped with -short")
	}
	ctx := context.Background()
	bins := conformance.KubeBins(t, "")
	bin, version := bins[len(bins)-1].Dir, bins[len(bins)-1].Version
	progs := t.TempDir()
	if err := goBuild(ctx, progs, "controlplane-hosted"); err != nil {
		t.Fatal(err)
	}
	var log strings.Builder
	r, err := measureHosted(ctx, progs, bin, version, 1, time.Second, 2*time.Second, 3*time.Minute, &log)
	if err != nil {
		t.Fatalf("%v\n%s", err, log.String())
	}
	t.Logf("%+v", r)
	if r.N != 1 || len(r.PerCP) != 1 || r.PerCP[0] <= 0 || r.Total != r.PerCP[0] {
		t.Errorf("times: N %d, per control plane %v, total %s", r.N, r.PerCP, r.Total)
	}
	// An API server alone takes well over 100 MiB; etcd, the
	// controller-manager and the scheduler tens each.
	if len(r.RSS) != 1 || r.RSS[0] < 150 || r.ByComp["kube-apiserver"][0] < 100 {
		t.Errorf("RSS %v MiB, by component %v", r.RSS, r.ByComp)
	}
	for _, c := range hostedComponents {
		if len(r.ByComp[c]) != 1 || r.ByComp[c][0] <= 1 {
			t.Errorf("%s: RSS %v MiB", c, r.ByComp[c])
		}
	}
	if len(r.MilliC) != 1 || r.MilliC[0] < 0 || r.ServiceRSS <= 1 || r.MemAvailable <= 0 {
		t.Errorf("mCPU %v, service RSS %v MiB, available %v MiB", r.MilliC, r.ServiceRSS, r.MemAvailable)
	}
	md := report{Started: time.Now(), Machine: "test", HostedVersion: version, Hosted: []hostedRun{r}}.hostedMarkdown()
	if !strings.Contains(md, "| capn, 1 | Kamaji (published) |") || !strings.Contains(md, "| 1 | 100 |") {
		t.Errorf("report:\n%s", md)
	}
}
