package process_test

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/capn-dev/capn/events/natstest"
	"github.com/capn-dev/capn/providers/conformance"
	"github.com/capn-dev/capn/providers/process"
	"github.com/capn-dev/capn/providers/sdk"
	capnv1 "github.com/capn-dev/capn/schemas/capn/v1alpha1"
)

func createRole(t *testing.T, p *process.Provider, cluster, machine, role string) *capnv1.InfraMachine {
	t.Helper()
	m, err := p.CreateMachine(context.Background(), &capnv1.CreateMachine{
		Cluster: cluster, Machine: machine, Role: role, Version: "v1.33.4", BootstrapChecksum: "sha256:00",
	})
	if err != nil {
		t.Fatal(err)
	}
	return m
}

// fakeAPIServer serves HTTPS on addr (a machine's address and the test's
// API server port), answering "<name> <path>". Its certificate is
// httptest's, valid for 127.0.0.1: what the client dials is the endpoint,
// and TLS passes through it to here.
func fakeAPIServer(t *testing.T, addr, name string) *httptest.Server {
	t.Helper()
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		t.Fatalf("the fake API server cannot listen on %s: %v", addr, err)
	}
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprintf(w, "%s %s", name, r.URL.Path)
	}))
	srv.Listener.Close()
	srv.Listener = ln
	srv.StartTLS()
	t.Cleanup(srv.Close)
	return srv
}

// over GETs url with a new connection each time; "" and the error when
// none answers as HTTPS or HTTP.
func over(client *http.Client, url string) (int, string, error) {
	resp, err := client.Get(url)
	if err != nil {
		return 0, "", err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b), err
}

func TestEndpointBalancesToTheControlPlanesAPIServer(t *testing.T) {
	port := freeTestPort(t)
	p, opts := newProvider(t, func(o *process.Options) { process.SetAPIServerPort(o, port) })
	ctx := context.Background()
	cp := createRole(t, p, "c1", "cp1", process.RoleControlPlane)
	w := createRole(t, p, "c1", "w1", "worker")
	ic, err := p.EnsureCluster(ctx, "c1", nil)
	if err != nil {
		t.Fatal(err)
	}
	if ic.GetMessage() != process.EndpointMessage || !strings.Contains(ic.GetMessage(), "load balancer") {
		t.Errorf("InfraCluster message %q", ic.GetMessage())
	}
	ep := net.JoinHostPort(ic.GetControlPlaneEndpoint().GetHost(), strconv.Itoa(int(ic.GetControlPlaneEndpoint().GetPort())))
	plain := &http.Client{Transport: &http.Transport{DisableKeepAlives: true}, Timeout: 5 * time.Second}
	placeholder := func() bool {
		code, body, err := over(plain, "http://"+ep+"/version")
		if err != nil || code != http.StatusServiceUnavailable || !strings.Contains(body, "no Kubernetes API server runs here yet") {
			return false
		}
		code, body, err = over(plain, "http://"+ep+"/healthz")
		return err == nil && code == http.StatusOK && strings.Contains(body, "placeholder control-plane endpoint of cluster c1")
	}
	if !placeholder() {
		t.Fatal("the endpoint of a cluster whose control plane runs no API server does not answer as the placeholder")
	}

	// A worker's API server is no backend; the control plane's is.
	fakeAPIServer(t, net.JoinHostPort(internalIP(w), strconv.Itoa(port)), "worker")
	apiserver := fakeAPIServer(t, net.JoinHostPort(internalIP(cp), strconv.Itoa(port)), "cp1")
	tlsClient := apiserver.Client()
	tlsClient.Transport.(*http.Transport).DisableKeepAlives = true
	tlsClient.Timeout = 5 * time.Second
	natstest.WaitFor(t, 10*time.Second, "the endpoint to reach cp1's API server", func() bool {
		_, body, err := over(tlsClient, "https://"+ep+"/version")
		return err == nil && body == "cp1 /version"
	})
	for i := range 5 {
		if code, body, err := over(tlsClient, "https://"+ep+"/api/v1/nodes"); err != nil || code != http.StatusOK || body != "cp1 /api/v1/nodes" {
			t.Errorf("request %d through the endpoint: %d %q %v", i, code, body, err)
		}
	}
	log, _ := os.ReadFile(filepath.Join(opts.StateDir, "clusters", "c1", "endpoint.log"))
	if !strings.Contains(string(log), "backend up") || !strings.Contains(string(log), internalIP(cp)) {
		t.Errorf("the endpoint did not log cp1's API server up:\n%s", log)
	}

	// The API server goes: the placeholder answers again.
	apiserver.Close()
	natstest.WaitFor(t, 10*time.Second, "the placeholder to answer again", placeholder)
}

// An endpoint started with another command line (an older provider's
// placeholder-only endpoint, or other options) is replaced by EnsureCluster.
func TestEndpointWithAnotherCommandLineIsReplaced(t *testing.T) {
	p, opts := newProvider(t, nil)
	ctx := context.Background()
	if _, err := p.EnsureCluster(ctx, "c1", nil); err != nil {
		t.Fatal(err)
	}
	pidPath := filepath.Join(opts.StateDir, "clusters", "c1", "endpoint.pid")
	before, _ := os.ReadFile(pidPath)
	port := freeTestPort(t)
	opts2 := opts
	process.SetAPIServerPort(&opts2, port)
	p2, err := process.New(opts2)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := p2.EnsureCluster(ctx, "c1", nil); err != nil {
		t.Fatal(err)
	}
	after, _ := os.ReadFile(pidPath)
	if string(after) == string(before) {
		t.Fatalf("the endpoint was kept: pid %s", after)
	}
	procs := nodeProcesses(opts.StateDir, "c1")
	if len(procs) != 1 || !strings.Contains(procs[0], "--backend-port="+strconv.Itoa(port)) {
		t.Errorf("endpoint processes: %v, want one with --backend-port=%d", procs, port)
	}
}

func freeTestPort(t *testing.T) int {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port
}

// A machine of a provider with --kube-bin runs on the binaries of its own
// version: its capn-node takes --kube-bin with that one directory of the
// list, --address and --provider-id, and the record says so. Real
// binaries ($CAPN_KUBE_BIN: every version make kube built), each version a
// machine.
func TestMachineWithKubeBinRuns(t *testing.T) {
	bins := conformance.KubeBins(t, "")
	p, opts := newProvider(t, func(o *process.Options) { o.KubeBin = conformance.JoinKubeBins(bins) })
	if got, want := p.KubernetesVersions(), kubeVersions(bins); !slices.Equal(got, want) {
		t.Errorf("KubernetesVersions %v, want %v", got, want)
	}
	for i, b := range bins {
		name := fmt.Sprintf("cp%d", i)
		m, err := p.CreateMachine(context.Background(), &capnv1.CreateMachine{
			Cluster: "c1", Machine: name, Role: process.RoleControlPlane, Version: b.Version, BootstrapChecksum: "sha256:00",
			BootstrapProvider: process.BootstrapKubeLocal,
		})
		if err != nil || m.GetStateValue() != sdk.StateRunning {
			t.Fatalf("create %s at %s: %v %v", name, b.Version, m, err)
		}
		// Past its flags' checks (a node that refuses them exits 2 at once).
		nodeLog := filepath.Join(machineDir(opts.StateDir, "c1", name), "node.log")
		natstest.WaitFor(t, 10*time.Second, "capn-node to start", func() bool {
			b, _ := os.ReadFile(nodeLog)
			return strings.Contains(string(b), "node agent starting") || strings.Contains(string(b), "usage:") ||
				strings.Contains(string(b), "flag provided but not defined")
		})
		got, err := p.Describe(context.Background(), "c1", name)
		if err != nil {
			log, _ := os.ReadFile(nodeLog)
			t.Fatalf("Describe: %v; node.log:\n%s", err, log)
		}
		if !strings.Contains(got.GetMessage(), "with --kube-bin") {
			t.Errorf("message %q", got.GetMessage())
		}
		var procs []string
		for _, proc := range nodeProcesses(opts.StateDir, "c1") {
			if strings.Contains(proc, "--machine="+name+" ") {
				procs = append(procs, proc)
			}
		}
		if len(procs) != 1 {
			t.Fatalf("processes %v, want %s's", procs, name)
		}
		for _, w := range []string{"--kube-bin=" + b.Dir + " ", "--address=" + internalIP(m), "--provider-id=" + m.GetProviderId()} {
			if !strings.Contains(procs[0]+" ", w) {
				t.Errorf("%s (%s) runs without %s: %s", name, b.Version, w, procs[0])
			}
		}
	}
}

func kubeVersions(bins []conformance.KubeBinDir) []string {
	out := make([]string, len(bins))
	for i, b := range bins {
		out[i] = b.Version
	}
	return out
}

// With --kube-bin, a kube-local machine of a version no directory holds is
// refused before anything is made (state Failed, the message naming the
// version and make kube); a machine of another bootstrap provider runs no
// Kubernetes, so its version needs no binaries: it runs, without
// --kube-bin. No binaries needed: the list is an empty directory.
func TestKubeLocalMachineOfAnUnbuiltVersionIsRefused(t *testing.T) {
	p, opts := newProvider(t, func(o *process.Options) { o.KubeBin = t.TempDir() })
	m, err := p.CreateMachine(context.Background(), &capnv1.CreateMachine{
		Cluster: "c1", Machine: "cp0", Role: process.RoleControlPlane, Version: "v1.35.0", BootstrapChecksum: "sha256:00",
		BootstrapProvider: process.BootstrapKubeLocal,
	})
	want := `Kubernetes v1.35.0 binaries are not built here (have none): run make kube KUBE_VERSIONS="v1.35.0"`
	if err != nil || m.GetStateValue() != sdk.StateFailed || !strings.HasPrefix(m.GetMessage(), want) {
		t.Fatalf("create: %v (%v), want state Failed with %q", m, err, want)
	}
	if _, err := os.Stat(machineDir(opts.StateDir, "c1", "cp0")); !os.IsNotExist(err) {
		t.Errorf("the refused machine has a directory: %v", err)
	}
	if _, err := p.Describe(context.Background(), "c1", "cp0"); err != sdk.ErrNotFound {
		t.Errorf("Describe of the refused machine: %v, want ErrNotFound", err)
	}
	w := create(t, p, "c1", "w0") // kubeadm's (no bootstrap provider), v1.33.4
	if w.GetStateValue() != sdk.StateRunning {
		t.Fatalf("a kubeadm machine at v1.33.4: %v", w)
	}
	for _, proc := range nodeProcesses(opts.StateDir, "c1") {
		if strings.Contains(proc, "--kube-bin") {
			t.Errorf("a machine that runs no Kubernetes got --kube-bin: %s", proc)
		}
	}
}
