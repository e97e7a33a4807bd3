package kube_test

import (
	"crypto/x509"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/capn-dev/capn/cmd/capn-node/kube"
	"github.com/capn-dev/capn/secrets/pki"
	"github.com/capn-dev/capn/services/bootstrapper/bootstrap/bootstraptest"
)

// A control plane's files through the three phases of a CA rotation:
// what each phase issues anew, what the kubeconfigs trust, and that the
// API server's chain verifies for a client of the old CA until the old CA
// is removed.
func TestCAPhaseFiles(t *testing.T) {
	set := bootstraptest.PKI(t)
	cfg, dir := machine{}.render(t, set)
	l := kube.Layout{RootFS: filepath.Join(dir, "rootfs")}
	leaves, _ := kube.Leaves(cfg, netip.MustParseAddr("127.0.0.1"))
	const server = "https://127.0.0.1:6443"
	now := time.Now()
	if _, err := kube.IssueAll(l, "kl", server, leaves, now); err != nil {
		t.Fatal(err)
	}
	old := set.CA
	next, err := pki.NewRotationCA(now)
	if err != nil {
		t.Fatal(err)
	}
	oldCA, _ := pki.ParseCA(old, now)
	cross, err := pki.CrossSign(oldCA, next, now)
	if err != nil {
		t.Fatal(err)
	}
	apply := func(phase pki.RotationPhase) kube.IssueResult {
		t.Helper()
		m, err := pki.MaterialFor(phase, old, next, cross)
		if err != nil {
			t.Fatal(err)
		}
		p := kube.CAPhase{Phase: string(phase), Bundle: m.Bundle, Signer: m.Signer, Intermediate: m.Intermediate}
		if err := p.Check(true, now); err != nil {
			t.Fatal(err)
		}
		if _, err := kube.WriteCAFiles(l, p, true); err != nil {
			t.Fatal(err)
		}
		changed, err := kube.WriteCAFiles(l, p, true)
		if err != nil || changed {
			t.Fatalf("writing phase %s again: changed %v, %v", phase, changed, err)
		}
		res, err := kube.IssueAll(l, "kl", server, leaves, now)
		if err != nil {
			t.Fatal(err)
		}
		again, err := kube.IssueAll(l, "kl", server, leaves, now)
		if err != nil || len(again.Issued) != 0 {
			t.Fatalf("phase %s issued %v on a second run (%v)", phase, again.Issued, err)
		}
		slices.Sort(res.Issued)
		return res
	}
	kubeconfigCAs := func() int {
		t.Helper()
		kc, err := kube.ReadKubeconfig(l.AdminKubeconfig())
		if err != nil {
			t.Fatal(err)
		}
		certs, err := pki.BundleCertificates(kc.CA())
		if err != nil {
			t.Fatal(err)
		}
		return len(certs)
	}
	// verifyAPI verifies the API server's certificate file as a client
	// that trusts roots, with the file's chain as intermediates.
	verifyAPI := func(roots []byte) error {
		b, err := os.ReadFile(filepath.Join(l.PKIDir(), "apiserver.crt"))
		if err != nil {
			t.Fatal(err)
		}
		certs, err := pki.BundleCertificates(b)
		if err != nil {
			t.Fatal(err)
		}
		rp, ip := x509.NewCertPool(), x509.NewCertPool()
		rp.AppendCertsFromPEM(roots)
		for _, c := range certs[1:] {
			ip.AddCert(c)
		}
		_, err = certs[0].Verify(x509.VerifyOptions{Roots: rp, Intermediates: ip, DNSName: "localhost", CurrentTime: now})
		return err
	}

	// TrustBoth: only the kubeconfigs change (their CA data); no leaf of
	// another CA, no serving certificate.
	res := apply(pki.PhaseTrust)
	if want := []string{"admin", "controller-manager", "scheduler"}; !slices.Equal(res.Issued, want) {
		t.Errorf("TrustBoth issued %v, want %v", res.Issued, want)
	}
	if n := kubeconfigCAs(); n != 2 {
		t.Errorf("TrustBoth: admin.conf trusts %d CAs, want 2", n)
	}
	if err := verifyAPI(old.CertPEM); err != nil {
		t.Errorf("TrustBoth: an old-CA client: %v", err)
	}

	// Reissue: every leaf of the cluster CA, nothing of etcd's or the
	// front proxy's; the serving certificate carries the intermediate.
	res = apply(pki.PhaseReissue)
	if want := []string{"admin", "apiserver", "apiserver-kubelet-client", "controller-manager", "scheduler"}; !slices.Equal(res.Issued, want) {
		t.Errorf("Reissue issued %v, want %v", res.Issued, want)
	}
	if err := verifyAPI(old.CertPEM); err != nil {
		t.Errorf("Reissue: an old-CA client must still verify the API server: %v", err)
	}
	if err := verifyAPI(next.CertPEM); err != nil {
		t.Errorf("Reissue: a new-CA client: %v", err)
	}
	verify(t, l, "ca", "apiserver-kubelet-client", x509.ExtKeyUsageClientAuth, "")

	// RemoveOld: the kubeconfigs trust the new CA alone, the chain is
	// gone, and an old-CA client no longer verifies the API server.
	res = apply(pki.PhaseRemoveOld)
	if want := []string{"admin", "controller-manager", "scheduler"}; !slices.Equal(res.Issued, want) {
		t.Errorf("RemoveOld issued %v, want %v", res.Issued, want)
	}
	if n := kubeconfigCAs(); n != 1 {
		t.Errorf("RemoveOld: admin.conf trusts %d CAs, want 1", n)
	}
	if err := verifyAPI(old.CertPEM); err == nil {
		t.Error("RemoveOld: an old-CA client still verifies the API server")
	}
	if err := verifyAPI(next.CertPEM); err != nil {
		t.Errorf("RemoveOld: a new-CA client: %v", err)
	}
	if _, err := os.Stat(l.CAIntermediatePath()); !os.IsNotExist(err) {
		t.Errorf("RemoveOld left the intermediate: %v", err)
	}
}

// A phase whose signer is not in its bundle, or whose control-plane
// signer has no key, is refused before anything is written.
func TestCAPhaseCheck(t *testing.T) {
	now := time.Now()
	a, _ := pki.NewCA("a", now)
	b, _ := pki.NewCA("b", now)
	if err := (kube.CAPhase{Phase: "Reissue", Bundle: a.CertPEM, Signer: b}).Check(true, now); err == nil {
		t.Error("a signer outside the bundle was accepted")
	}
	if err := (kube.CAPhase{Phase: "Reissue", Bundle: pki.Bundle(a.CertPEM, b.CertPEM), Signer: pki.KeyPair{CertPEM: b.CertPEM}}).Check(true, now); err == nil {
		t.Error("a control-plane signer without its key was accepted")
	}
	if err := (kube.CAPhase{Phase: "Reissue", Bundle: pki.Bundle(a.CertPEM, b.CertPEM), Signer: pki.KeyPair{CertPEM: b.CertPEM}}).Check(false, now); err != nil {
		t.Errorf("a worker's phase: %v", err)
	}
	if err := (kube.CAPhase{Phase: "Reissue", Bundle: pki.Bundle(a.CertPEM, b.CertPEM), Signer: b, Intermediate: a.CertPEM}).Check(true, now); err == nil {
		t.Error("an intermediate of another key was accepted")
	}
}

// Leaves are renewed once two thirds of their lifetime have passed, or
// renewBefore ahead of their end; the clock is injected, no waiting.
func TestIssueDue(t *testing.T) {
	set := bootstraptest.PKI(t)
	cfg, dir := machine{}.render(t, set)
	l := kube.Layout{RootFS: filepath.Join(dir, "rootfs")}
	leaves, _ := kube.Leaves(cfg, netip.MustParseAddr("127.0.0.1"))
	const server = "https://127.0.0.1:6443"
	t0 := time.Now()
	if _, err := kube.IssueAll(l, "kl", server, leaves, t0); err != nil {
		t.Fatal(err)
	}
	day := 24 * time.Hour
	due := func(at time.Time, renewBefore time.Duration) []string {
		t.Helper()
		got, err := kube.IssueDue(l, "kl", server, leaves, at, renewBefore)
		if err != nil {
			t.Fatal(err)
		}
		return got
	}
	if got := due(t0.Add(200*day), 0); len(got) != 0 {
		t.Fatalf("200 days into 365: renewed %v", got)
	}
	if got := due(t0.Add(250*day), 60*day); len(got) != 0 {
		t.Fatalf("250 days in, renewBefore 60d: renewed %v", got)
	}
	t1 := t0.Add(250 * day)
	if got := due(t1, 0); len(got) != len(leaves) {
		t.Fatalf("250 days into 365: renewed %v, want all %d", got, len(leaves))
	}
	// The renewed leaves are valid from t1: nothing is due right after.
	if got := due(t1.Add(day), 0); len(got) != 0 {
		t.Fatalf("a day after renewal: renewed %v", got)
	}
	b, _ := os.ReadFile(filepath.Join(l.PKIDir(), "apiserver.crt"))
	c, _ := pki.ParseCertificate(b)
	if c.NotBefore.Before(t1.Add(-time.Hour)) {
		t.Errorf("the renewed apiserver certificate starts %s, want about %s", c.NotBefore, t1)
	}
}
