//go:build linux

package process_test

import (
	"bytes"
	"context"
	"encoding/xml"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/capn-dev/capn/providers/process/realnode"
)

// The upstream conformance subset TestRealNodesConformance runs (issue
// 26): the [Conformance] specs of pods, Services, DNS, ConfigMaps,
// Secrets and Deployments.
const conformanceFocus = `\[sig-(node|network|storage|apps)\] (Pods|Pods Extended|Services|DNS|ConfigMap|Secrets|Projected configMap|Projected secret|Deployment) .*\[Conformance\]`

// conformanceSkips are the chosen specs not run here, and why.
var conformanceSkips = []struct{ re, why string }{
	{`\[Serial\]|\[Disruptive\]`, "need the cluster to themselves or break nodes; the subset runs specs in parallel on a shared host"},
	{`Deployment should run the lifecycle of a Deployment|Deployment RecreateDeployment should delete old pods and create new ones|Pods should run through the lifecycle of Pods and PodStatus`,
		"run agnhost 2.55 (the manifest's AgnhostPrev), the test/images/agnhost VERSION of no k8s.io/kubernetes release on the module proxy that was checked (v1.32.13, v1.33.0, v1.33.4, v1.33.6, v1.33.13: 2.53; v1.34.0, v1.34.4: 2.56; v1.35.4: 2.59; v1.36.3, v1.36.5: 2.63.0; v1.37.2: 2.66.1): not built, and another agnhost is not retagged as it"},
}

// conformanceSkip is conformanceSkips as one --ginkgo.skip expression.
func conformanceSkip() string {
	var res []string
	for _, s := range conformanceSkips {
		res = append(res, s.re)
	}
	return strings.Join(res, "|")
}

// junitCase is a spec of the JUnit report e2e.test writes
// (<report dir>/junit_01.xml).
type junitCase struct {
	Name    string  `xml:"name,attr"`
	Status  string  `xml:"status,attr"`
	Time    float64 `xml:"time,attr"`
	Skipped *struct {
		Message string `xml:"message,attr"`
	} `xml:"skipped"`
	Failure *struct {
		Text string `xml:",chardata"`
	} `xml:"failure"`
	Error *struct {
		Text string `xml:",chardata"`
	} `xml:"error"`
}

// conformanceResult sorts a report's specs: those focus chose, and of
// them those skip left out (not run, by choice), and of the rest those
// that passed, failed, or skipped themselves (e2eskipper: a condition of
// the cluster, e.g. "at least 2 schedulable nodes").
type conformanceResult struct {
	chosen, notRun, passed, failed, skipped []junitCase
}

func sortConformance(cases []junitCase, focus, skip *regexp.Regexp) conformanceResult {
	var r conformanceResult
	for _, c := range cases {
		if !focus.MatchString(c.Name) {
			continue
		}
		r.chosen = append(r.chosen, c)
		switch {
		case skip.MatchString(c.Name):
			r.notRun = append(r.notRun, c)
		case c.Status == "passed":
			r.passed = append(r.passed, c)
		case c.Status == "skipped":
			r.skipped = append(r.skipped, c)
		default: // failed, panicked, timedout, interrupted, aborted
			r.failed = append(r.failed, c)
		}
	}
	return r
}

func readJUnit(file string) ([]junitCase, error) {
	b, err := os.ReadFile(file)
	if err != nil {
		return nil, err
	}
	var report struct {
		Suites []struct {
			Cases []junitCase `xml:"testcase"`
		} `xml:"testsuite"`
	}
	if err := xml.Unmarshal(b, &report); err != nil {
		return nil, fmt.Errorf("%s: %w", file, err)
	}
	var cases []junitCase
	for _, s := range report.Suites {
		cases = append(cases, s.Cases...)
	}
	if len(cases) == 0 {
		return nil, fmt.Errorf("%s: no testcase", file)
	}
	return cases, nil
}

// needE2E reads what hack/e2e.sh built (CAPN_E2E_DIR): e2e.test, ginkgo
// and the images.
func needE2E(t *testing.T) (dir string, images []realnode.Image) {
	t.Helper()
	dir = os.Getenv("CAPN_E2E_DIR")
	images, err := realnode.ReadImages(dir)
	if dir == "" || err != nil {
		t.Fatalf("CAPN_E2E_DIR %q has no images.txt (make e2e; CAPN_E2E_DIR=$(hack/e2e.sh --print-path)): %v", dir, err)
	}
	for _, b := range []string{"e2e.test", "ginkgo"} {
		if _, err := os.Stat(filepath.Join(dir, "bin", b)); err != nil {
			t.Fatalf("CAPN_E2E_DIR %q has no bin/%s (make e2e): %v", dir, b, err)
		}
	}
	return dir, images
}

func tail(s string, lines int) string {
	l := strings.Split(strings.TrimRight(s, "\n"), "\n")
	if len(l) > lines {
		l = l[len(l)-lines:]
	}
	return strings.Join(l, "\n")
}

// TestRealNodesConformance runs a subset of the upstream Kubernetes
// conformance tests — e2e.test of the same Kubernetes version, built from
// the Go module proxy by hack/e2e.sh — against a cluster capn made:
// newRealWorld's `capn apply` of a kubeadm cluster of 1 control plane
// and 2 workers on the process provider in node mode, with the e2e images
// (agnhost, busybox, glibc-dns-testing; FROM scratch) imported into every
// node besides kubeadm's, and the kubeconfig `capn kubeconfig` hands out.
// It runs the [Conformance] specs of conformanceFocus but
// conformanceSkips, in parallel (ginkgo --procs, CAPN_E2E_PROCS, default
// 4), reads the JUnit report, logs the chosen, passed, failed, self-skipped
// and not-run counts and names, fails when a chosen spec fails or none
// passes, and then deletes the cluster with `capn delete --wait` and
// checks nothing of the nodes is left.
//
// Long (about ten minutes): it runs only with CAPN_E2E=1 (make
// conformance), and then fails, rather than skips, without what it needs.
func TestRealNodesConformance(t *testing.T) {
	if os.Getenv("CAPN_E2E") != "1" {
		t.Skip("the upstream conformance subset takes about ten minutes: make conformance (CAPN_E2E=1)")
	}
	t.Setenv("CAPN_REQUIRE_NODESTACK", "1")
	_, kubeadmDir := needRealNodes(t)
	dir, e2eImages := needE2E(t)
	e2eTest, ginkgo := filepath.Join(dir, "bin", "e2e.test"), filepath.Join(dir, "bin", "ginkgo")
	focus := regexp.MustCompile(conformanceFocus)
	skip := regexp.MustCompile(conformanceSkip())
	procs := 4
	if v := os.Getenv("CAPN_E2E_PROCS"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 || n > 32 {
			t.Fatalf("CAPN_E2E_PROCS %q: want a number of parallel e2e.test processes from 1 to 32", v)
		}
		procs = n
	}
	reportDir := os.Getenv("CAPN_E2E_REPORT_DIR")
	if reportDir == "" {
		reportDir = t.TempDir()
	} else if err := os.MkdirAll(reportDir, 0o755); err != nil {
		t.Fatal(err)
	}

	// The images the chosen specs run are imported, under references
	// e2e.test lists (--list-images): agnhost, busybox and
	// glibc-dns-testing from hack/e2e.sh, pause (the same tag) from
	// hack/nodeimages.sh.
	listOut, err := exec.Command(e2eTest, "--list-images").Output()
	if err != nil {
		t.Fatalf("%s --list-images: %v", e2eTest, err)
	}
	listed := strings.Fields(string(listOut))
	kubeadmImages, err := realnode.ReadImages(kubeadmDir)
	if err != nil {
		t.Fatal(err)
	}
	var refs []string
	for _, im := range e2eImages {
		if !slices.Contains(listed, im.Ref) {
			t.Fatalf("CAPN_E2E_DIR's %s is not an image %s runs (another version? make e2e):\n%s", im.Ref, e2eTest, strings.Join(listed, "\n"))
		}
		refs = append(refs, im.Ref)
	}
	for _, im := range kubeadmImages {
		if strings.Contains(im.Ref, "/pause:") && slices.Contains(listed, im.Ref) {
			refs = append(refs, im.Ref)
		}
	}
	for _, name := range []string{"/e2e-test-images/agnhost:", "/e2e-test-images/busybox:", "/e2e-test-images/glibc-dns-testing:", "/pause:"} {
		if !slices.ContainsFunc(refs, func(r string) bool { return strings.Contains(r, name) }) {
			t.Fatalf("no %s image that e2e.test runs among CAPN_E2E_DIR's and CAPN_NODEIMAGES' %v", name, refs)
		}
	}

	began := time.Now()
	r := newRealWorld(t, e2eImages, realManifest, 3)
	up := time.Since(began)
	// e2e.test execs in pods with kubectl: the newest of CAPN_KUBE_BIN
	// (KUBE_VERSIONS lists the nodes' version last), the cluster's.
	kubectl := filepath.Join(r.k.Bin, "kubectl")
	timeout := 60 * time.Minute
	if d, ok := t.Deadline(); ok {
		// Time left for the delete and the checks after it.
		timeout = time.Until(d) - 8*time.Minute
	}
	if timeout < 5*time.Minute {
		t.Fatalf("%s left of go test's -timeout: the subset needs about ten minutes (make conformance)", timeout.Round(time.Second))
	}
	ctx, cancel := context.WithTimeout(context.Background(), timeout+time.Minute)
	defer cancel()
	args := []string{
		"--procs=" + strconv.Itoa(procs), "--timeout=" + timeout.Round(time.Second).String(), "--no-color",
		"--focus=" + conformanceFocus, "--skip=" + conformanceSkip(),
		e2eTest, "--",
		"--kubeconfig=" + r.k.Kubeconfig, "--provider=skeleton", "--report-dir=" + reportDir,
		"--kubectl-path=" + kubectl,
		// e2e.test waits for the kube-system pods (kube-proxy on each
		// node, CoreDNS, the control plane's static pods).
		"--minStartupPods=4",
	}
	logFile, err := os.Create(filepath.Join(reportDir, "ginkgo.log"))
	if err != nil {
		t.Fatal(err)
	}
	defer logFile.Close()
	// One writer (Stdout and Stderr are the same), read after Run.
	out := &bytes.Buffer{}
	cmd := exec.CommandContext(ctx, ginkgo, args...)
	cmd.Stdout = io.MultiWriter(out, logFile)
	cmd.Stderr = cmd.Stdout
	cmd.Env = append(os.Environ(), "KUBECONFIG="+r.k.Kubeconfig)
	ran := time.Now()
	runErr := cmd.Run()
	took := time.Since(ran).Round(time.Second)
	cases, err := readJUnit(filepath.Join(reportDir, "junit_01.xml"))
	if err != nil {
		t.Fatalf("ginkgo %s: %v after %s, and no JUnit report: %v\n%s", strings.Join(args, " "), runErr, took, err, tail(out.String(), 80))
	}
	res := sortConformance(cases, focus, skip)
	names := func(cs []junitCase, why func(junitCase) string) string {
		var b strings.Builder
		for _, c := range cs {
			fmt.Fprintf(&b, "  %s (%.0fs)%s\n", c.Name, c.Time, why(c))
		}
		return b.String()
	}
	none := func(junitCase) string { return "" }
	t.Logf("upstream conformance subset (%s) on capn's cluster %s (up %s after start) in %s with %d processes: %d chosen, %d passed, %d failed, %d skipped by the specs, %d not run here; report %s\npassed:\n%s",
		e2eTest, r.name, up.Round(time.Second), took, procs, len(res.chosen), len(res.passed), len(res.failed), len(res.skipped), len(res.notRun), reportDir, names(res.passed, none))
	t.Logf("skipped by the specs themselves:\n%s", names(res.skipped, func(c junitCase) string {
		if c.Skipped != nil {
			return ": " + c.Skipped.Message
		}
		return ""
	}))
	t.Logf("not run here (conformanceSkips):\n%s", names(res.notRun, func(c junitCase) string {
		for _, s := range conformanceSkips {
			if regexp.MustCompile(s.re).MatchString(c.Name) {
				return ": " + s.why
			}
		}
		return ""
	}))
	for _, c := range res.failed {
		text := ""
		if c.Failure != nil {
			text = c.Failure.Text
		} else if c.Error != nil {
			text = c.Error.Text
		}
		t.Errorf("FAILED (%s): %s\n%s", c.Status, c.Name, tail(text, 30))
	}
	if len(res.passed) == 0 {
		t.Errorf("no chosen spec passed (%d chosen): %v\n%s", len(res.chosen), runErr, tail(out.String(), 80))
	}
	if runErr != nil && len(res.failed) == 0 {
		// A suite-level failure (BeforeSuite, a report) fails no spec.
		t.Errorf("ginkgo: %v, with no failed spec:\n%s", runErr, tail(out.String(), 80))
	}
	r.deleteAndCheck()
}

// TestConformanceReportSorting checks how TestRealNodesConformance reads a
// JUnit report e2e.test writes: the specs focus chose, those skip leaves
// out, and the rest by status.
func TestConformanceReportSorting(t *testing.T) {
	report := `<?xml version="1.0" encoding="UTF-8"?>
<testsuites tests="5" disabled="0" errors="0" failures="1" time="60">
  <testsuite name="Kubernetes e2e suite" package="/" tests="5" disabled="0" skipped="2" errors="0" failures="1" time="60">
    <testcase name="[It] [sig-network] DNS should provide DNS for services [Conformance]" classname="Kubernetes e2e suite" status="passed" time="31.5"></testcase>
    <testcase name="[It] [sig-network] Services should serve a basic endpoint from pods [Conformance]" classname="Kubernetes e2e suite" status="failed" time="12"><failure type="failed">[FAILED] service not reachable</failure></testcase>
    <testcase name="[It] [sig-network] Services should have session affinity work for NodePort service [LinuxOnly] [Conformance]" classname="Kubernetes e2e suite" status="skipped" time="1"><skipped message="skipped - Requires at least 2 nodes"></skipped></testcase>
    <testcase name="[It] [sig-apps] Deployment should run the lifecycle of a Deployment [Conformance]" classname="Kubernetes e2e suite" status="skipped" time="0"><skipped message="skipped"></skipped></testcase>
    <testcase name="[It] [sig-storage] CSI Mock volume expansion should expand volume" classname="Kubernetes e2e suite" status="skipped" time="0"><skipped message="skipped"></skipped></testcase>
    <testcase name="[It] [sig-node] Pods should be submitted and removed [NodeConformance] [Conformance]" classname="Kubernetes e2e suite" status="passed" time="4"></testcase>
  </testsuite>
</testsuites>`
	file := filepath.Join(t.TempDir(), "junit_01.xml")
	if err := os.WriteFile(file, []byte(report), 0o644); err != nil {
		t.Fatal(err)
	}
	cases, err := readJUnit(file)
	if err != nil {
		t.Fatal(err)
	}
	r := sortConformance(cases, regexp.MustCompile(conformanceFocus), regexp.MustCompile(conformanceSkip()))
	if len(r.chosen) != 5 || len(r.passed) != 2 || len(r.failed) != 1 || len(r.skipped) != 1 || len(r.notRun) != 1 {
		t.Fatalf("chosen %d passed %d failed %d skipped %d not run %d; want 5 2 1 1 1", len(r.chosen), len(r.passed), len(r.failed), len(r.skipped), len(r.notRun))
	}
	if r.failed[0].Failure == nil || !strings.Contains(r.failed[0].Failure.Text, "service not reachable") ||
		r.skipped[0].Skipped == nil || r.skipped[0].Skipped.Message != "skipped - Requires at least 2 nodes" {
		t.Fatalf("failed %+v, skipped %+v", r.failed[0], r.skipped[0])
	}
	if _, err := readJUnit(filepath.Join(t.TempDir(), "none.xml")); err == nil {
		t.Fatal("a missing report read as one")
	}
	if err := os.WriteFile(file, []byte(`<testsuites></testsuites>`), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := readJUnit(file); err == nil || !strings.Contains(err.Error(), "no testcase") {
		t.Fatalf("an empty report: %v", err)
	}
}
