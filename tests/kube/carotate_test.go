package kube_test

import (
	"fmt"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"sigs.k8s.io/yaml"

	"github.com/capn-dev/capn/providers/conformance"
	"github.com/capn-dev/capn/providers/sdk/sdktest"
	capnpki "github.com/capn-dev/capn/secrets/pki"
)

// caRotateManifest: one kube-local control plane and one worker on the
// process provider.
const caRotateManifest = `apiVersion: capn.dev/v1alpha1
kind: Cluster
metadata:
  name: %s
spec:
  kubernetesVersion: %s
  bootstrap:
    provider: kube-local
  controlPlane:
    provider: process
    replicas: 1
  workerPools:
  - name: workers
    provider: process
    replicas: 1
`

// TestRotateCAThroughCapn is issue 22's CA rotation proof with real
// binaries: a kube-local cluster (1 control plane, 1 worker) capn made on
// the process provider; its admin kubeconfig kept as "old"; `capn
// rotate-ca` run phase by phase (--until, --continue). At every phase a
// fresh kubeconfig from `capn kubeconfig` lists both Nodes Ready; the old
// one works through TrustBoth and Reissue — checked without pause by a
// loop of kubectl while the phases run — and is refused once the old CA is
// removed; both Nodes stay Ready.
func TestRotateCAThroughCapn(t *testing.T) {
	bin := conformance.KubeBin(t, "")
	if testing.Short() {
		t.Skip("runs a capn deployment and a 2-machine Kubernetes cluster; skipped with -short")
	}
	env := sdktest.New(t)
	c := conformance.StartCapn(t, env.Server.URL())
	startProcessProvider(t, bin, env.Server.URL())
	k := conformance.NewKubeCluster(t, c, env.JS, bin, fmt.Sprintf("ca%d", time.Now().UnixNano()%1e6))
	k.Apply(fmt.Sprintf(caRotateManifest, k.Name, k.Version))
	k.Clusters.WaitReady(k.Name, 10*time.Minute)
	k.FetchKubeconfig()
	old := k.Kubeconfig + ".old"
	if b, err := os.ReadFile(k.Kubeconfig); err != nil {
		t.Fatal(err)
	} else if err := os.WriteFile(old, b, 0o600); err != nil {
		t.Fatal(err)
	}
	readyWith := func(kubeconfig string) (int, error) {
		out, err := k.Run("kubectl", "--kubeconfig="+kubeconfig, "--request-timeout=20s", "get", "nodes", "-o",
			`jsonpath={range .items[*]}{.status.conditions[?(@.type=="Ready")].status}{"\n"}{end}`)
		return strings.Count(out, "True"), err
	}
	twoReady := func(kubeconfig string) func() error {
		return func() error {
			n, err := readyWith(kubeconfig)
			if err != nil || n != 2 {
				return fmt.Errorf("%d Ready Nodes, %v", n, err)
			}
			return nil
		}
	}
	conformance.Poll(t, "two Ready Nodes", 3*time.Minute, twoReady(k.Kubeconfig))

	// The old kubeconfig, without pause, while TrustBoth and Reissue run.
	var mu sync.Mutex
	var calls int
	var failures []string
	stop, stopped := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(stopped)
		for {
			select {
			case <-stop:
				return
			default:
			}
			n, err := readyWith(old)
			mu.Lock()
			calls++
			if err != nil || n != 2 {
				failures = append(failures, fmt.Sprintf("%s: %d Ready, %v", time.Now().Format(time.TimeOnly), n, err))
			}
			mu.Unlock()
		}
	}()
	// fresh fetches a kubeconfig now and checks both Nodes are Ready with it;
	// it returns its client certificate's issuer and how many CAs it trusts.
	fresh := func(phase string) (string, int) {
		t.Helper()
		k.FetchKubeconfig()
		conformance.Poll(t, "two Ready Nodes with a fresh kubeconfig after "+phase, time.Minute, twoReady(k.Kubeconfig))
		b, err := os.ReadFile(k.Kubeconfig)
		if err != nil {
			t.Fatal(err)
		}
		var doc struct {
			Clusters []struct {
				Cluster struct {
					CA []byte `json:"certificate-authority-data"`
				} `json:"cluster"`
			} `json:"clusters"`
			Users []struct {
				User struct {
					Cert []byte `json:"client-certificate-data"`
				} `json:"user"`
			} `json:"users"`
		}
		if err := yaml.Unmarshal(b, &doc); err != nil {
			t.Fatal(err)
		}
		cert, err := capnpki.ParseCertificate(doc.Users[0].User.Cert)
		if err != nil {
			t.Fatal(err)
		}
		cas, err := capnpki.BundleCertificates(doc.Clusters[0].Cluster.CA)
		if err != nil {
			t.Fatal(err)
		}
		return cert.Issuer.CommonName, len(cas)
	}

	began := time.Now()
	out := c.CLI("rotate-ca", k.Name, "--until", "TrustBoth")
	t.Logf("%s", strings.TrimSpace(out))
	if !strings.Contains(out, "phase TrustBoth, Held") {
		t.Fatalf("capn rotate-ca --until TrustBoth:\n%s", out)
	}
	if iss, n := fresh("TrustBoth"); iss != capnpki.CACommonName || n != 1 {
		t.Errorf("TrustBoth: a fresh kubeconfig's client is %q's, trusting %d CAs; want the old CA's", iss, n)
	}
	conformance.Poll(t, "the old kubeconfig after TrustBoth", time.Minute, twoReady(old))

	out = c.CLI("rotate-ca", k.Name, "--continue", "--until", "Reissue")
	t.Logf("%s", strings.TrimSpace(out))
	if !strings.Contains(out, "phase Reissue, Held") {
		t.Fatalf("capn rotate-ca --continue --until Reissue:\n%s", out)
	}
	if iss, n := fresh("Reissue"); !strings.HasPrefix(iss, capnpki.CACommonName+"-") || n != 2 {
		t.Errorf("Reissue: a fresh kubeconfig's client is %q's, trusting %d CAs; want the new CA's, trusting both", iss, n)
	}
	conformance.Poll(t, "the old kubeconfig after Reissue", time.Minute, twoReady(old))
	close(stop)
	<-stopped
	mu.Lock()
	t.Logf("the old kubeconfig listed the Nodes %d times through TrustBoth and Reissue (%.1fs), %d failures", calls, time.Since(began).Seconds(), len(failures))
	if len(failures) > 0 || calls < 5 {
		t.Errorf("the old kubeconfig failed during TrustBoth and Reissue (%d of %d calls): %v", len(failures), calls, failures)
	}
	mu.Unlock()

	out = c.CLI("rotate-ca", k.Name, "--continue")
	t.Logf("%s", strings.TrimSpace(out))
	if !strings.Contains(out, "phase Done, Complete") {
		t.Fatalf("capn rotate-ca --continue:\n%s", out)
	}
	if iss, n := fresh("RemoveOld"); !strings.HasPrefix(iss, capnpki.CACommonName+"-") || n != 1 {
		t.Errorf("done: a fresh kubeconfig's client is %q's, trusting %d CAs; want the new CA's alone", iss, n)
	}
	// The API server re-reads its client CA file and serving certificate
	// on a file event, else within a minute.
	var err error
	conformance.Poll(t, "the old kubeconfig refused (x509 or 401) after RemoveOld", 2*time.Minute, func() error {
		_, err = readyWith(old)
		if err == nil || !(strings.Contains(err.Error(), "x509") || strings.Contains(err.Error(), "certificate") || strings.Contains(err.Error(), "Unauthorized")) {
			return fmt.Errorf("still answered: %v", err)
		}
		return nil
	})
	// The old client certificate with the new CA as trust: the TLS
	// handshake succeeds and the API server refuses the certificate (its
	// client CA file no longer has the old CA).
	mixed := k.Kubeconfig + ".old-client"
	{
		var oldDoc, newDoc map[string]any
		for path, doc := range map[string]*map[string]any{old: &oldDoc, k.Kubeconfig: &newDoc} {
			b, err := os.ReadFile(path)
			if err != nil {
				t.Fatal(err)
			}
			if err := yaml.Unmarshal(b, doc); err != nil {
				t.Fatal(err)
			}
		}
		oldDoc["clusters"] = newDoc["clusters"]
		b, err := yaml.Marshal(oldDoc)
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(mixed, b, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	conformance.Poll(t, "the old client certificate refused (401) after RemoveOld", 2*time.Minute, func() error {
		_, err := readyWith(mixed)
		if err == nil || !(strings.Contains(err.Error(), "Unauthorized") || strings.Contains(err.Error(), "provide credentials")) {
			return fmt.Errorf("not refused with 401: %v", err)
		}
		return nil
	})
	conformance.Poll(t, "two Ready Nodes after the rotation", 2*time.Minute, twoReady(k.Kubeconfig))
	desc := c.CLI("describe", "cluster", k.Name)
	if !strings.Contains(desc, "CA rotation:") || !strings.Contains(desc, "Complete") || !strings.Contains(desc, "Earliest expiry:") {
		t.Errorf("capn describe cluster after the rotation:\n%s", desc)
	}
	t.Logf("CA rotated in %.1fs; the old kubeconfig is refused: %v", time.Since(began).Seconds(), err)
}
