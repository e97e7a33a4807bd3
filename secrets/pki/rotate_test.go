package pki

import (
	"crypto/x509"
	"os/exec"
	"reflect"
	"strings"
	"testing"
	"time"
)

// The state machine walks every machine through each phase in order,
// holds where asked and resumes from there.
func TestRotationSteps(t *testing.T) {
	machines := []string{"cp-0", "cp-1", "w-0"}
	r := Rotation{Phase: PhaseTrust}
	var got []string
	for i := 0; i < 20; i++ {
		s := r.Next(machines, PhaseDone)
		switch s.Kind {
		case StepMachine:
			got = append(got, string(s.Phase)+":"+s.Machine)
			r = r.MachineDone(s.Machine)
		case StepAdvance:
			got = append(got, "advance:"+string(s.Phase))
			r = r.Advance()
		case StepHold:
			t.Fatalf("held at %s without being asked", s.Phase)
		case StepComplete:
			got = append(got, "complete")
			i = 20
		}
	}
	want := []string{
		"TrustBoth:cp-0", "TrustBoth:cp-1", "TrustBoth:w-0", "advance:TrustBoth",
		"Reissue:cp-0", "Reissue:cp-1", "Reissue:w-0", "advance:Reissue",
		"RemoveOld:cp-0", "RemoveOld:cp-1", "RemoveOld:w-0", "advance:RemoveOld",
		"complete",
	}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("steps\n got %v\nwant %v", got, want)
	}
}

func TestRotationHoldsAndResumes(t *testing.T) {
	machines := []string{"cp-0"}
	r := Rotation{Phase: PhaseTrust}
	if s := r.Next(machines, PhaseTrust); s.Kind != StepMachine || s.Machine != "cp-0" {
		t.Fatalf("first step %+v, want cp-0", s)
	}
	r = r.MachineDone("cp-0")
	r = r.MachineDone("cp-0") // idempotent
	if len(r.Done) != 1 {
		t.Fatalf("done %v after marking cp-0 twice", r.Done)
	}
	if s := r.Next(machines, PhaseTrust); s.Kind != StepHold || s.Phase != PhaseTrust {
		t.Fatalf("after TrustBoth with until TrustBoth: %+v, want hold", s)
	}
	// Continuing to Reissue advances.
	if s := r.Next(machines, PhaseReissue); s.Kind != StepAdvance {
		t.Fatalf("until Reissue: %+v, want advance", s)
	}
	r = r.Advance()
	if r.Phase != PhaseReissue || len(r.Done) != 0 {
		t.Fatalf("advanced to %+v", r)
	}
	// A machine added since (a scale) joins the phase.
	if s := r.Next([]string{"cp-0", "cp-1"}, PhaseDone); s.Machine != "cp-0" {
		t.Fatalf("%+v", s)
	}
	r = r.Advance().Advance()
	if r.Phase != PhaseDone || r.Next(machines, PhaseDone).Kind != StepComplete {
		t.Fatalf("after the last phase: %+v", r)
	}
	if (Rotation{}).Next(machines, PhaseDone).Kind != StepComplete {
		t.Fatal("no rotation must be complete")
	}
}

func TestParseRotationPhase(t *testing.T) {
	for in, want := range map[string]RotationPhase{"": PhaseDone, "TrustBoth": PhaseTrust, "Reissue": PhaseReissue, "RemoveOld": PhaseRemoveOld, "Done": PhaseDone} {
		got, err := ParseRotationPhase(in)
		if err != nil || got != want {
			t.Errorf("ParseRotationPhase(%q) = %q, %v; want %q", in, got, err, want)
		}
	}
	_, err := ParseRotationPhase("trust")
	if err == nil || !strings.Contains(err.Error(), "TrustBoth") {
		t.Fatalf("a bad phase: %v", err)
	}
}

// The cross-signed new CA lets a client that trusts only the old CA
// verify a leaf of the new one; without it (after RemoveOld) it does not;
// a client that trusts the bundle verifies both generations.
func TestCrossSignChains(t *testing.T) {
	oldKP, err := NewCA(CACommonName, now)
	if err != nil {
		t.Fatal(err)
	}
	nextKP, err := NewRotationCA(now)
	if err != nil {
		t.Fatal(err)
	}
	oldCA, _ := ParseCA(oldKP, now)
	nextCA, _ := ParseCA(nextKP, now)
	cross, err := CrossSign(oldCA, nextKP, now)
	if err != nil {
		t.Fatal(err)
	}
	crossCert, err := ParseCertificate(cross)
	if err != nil {
		t.Fatal(err)
	}
	if crossCert.Subject.String() != nextCA.Cert.Subject.String() || crossCert.Issuer.String() != oldCA.Cert.Subject.String() {
		t.Fatalf("cross-signed subject %s issuer %s", crossCert.Subject, crossCert.Issuer)
	}
	if err := crossCert.CheckSignatureFrom(oldCA.Cert); err != nil {
		t.Fatalf("the cross-signed certificate is not the old CA's: %v", err)
	}
	leafKP, err := IssueLeaf(nextCA, LeafRequest{CommonName: "kube-apiserver", DNSNames: []string{"localhost"}}, now)
	if err != nil {
		t.Fatal(err)
	}
	leaf, _ := ParseCertificate(leafKP.CertPEM)
	oldLeafKP, _ := IssueLeaf(oldCA, LeafRequest{CommonName: "kube-apiserver", DNSNames: []string{"localhost"}}, now)
	oldLeaf, _ := ParseCertificate(oldLeafKP.CertPEM)

	verify := func(c *x509.Certificate, roots []byte, inter []byte) error {
		rp := x509.NewCertPool()
		rp.AppendCertsFromPEM(roots)
		ip := x509.NewCertPool()
		if inter != nil {
			ip.AppendCertsFromPEM(inter)
		}
		_, err := c.Verify(x509.VerifyOptions{Roots: rp, Intermediates: ip, DNSName: "localhost", CurrentTime: now})
		return err
	}
	if err := verify(leaf, oldKP.CertPEM, cross); err != nil {
		t.Errorf("old-CA-only client, new leaf with the intermediate: %v", err)
	}
	if err := verify(leaf, oldKP.CertPEM, nil); err == nil {
		t.Error("old-CA-only client verified a new leaf without the intermediate")
	}
	if err := verify(leaf, nextKP.CertPEM, cross); err != nil {
		t.Errorf("new-CA client, new leaf with the intermediate: %v", err)
	}
	bundle := Bundle(oldKP.CertPEM, nextKP.CertPEM, oldKP.CertPEM)
	if err := verify(oldLeaf, bundle, nil); err != nil {
		t.Errorf("bundle client, old leaf: %v", err)
	}
	if err := verify(leaf, bundle, nil); err != nil {
		t.Errorf("bundle client, new leaf: %v", err)
	}
	if err := verify(oldLeaf, nextKP.CertPEM, nil); err == nil {
		t.Error("a client of the new CA alone verified an old leaf")
	}
	certs, err := BundleCertificates(bundle)
	if err != nil || len(certs) != 2 {
		t.Fatalf("bundle of old, new, old: %d certificates, %v; want 2", len(certs), err)
	}
	// openssl (what curl and most non-Go clients use) builds the same path.
	requireTool(t, "openssl")
	out, err := exec.Command("openssl", "verify", "-attime", itoa(now.Unix()), "-CAfile", writeTemp(t, "old.crt", oldKP.CertPEM),
		"-untrusted", writeTemp(t, "cross.crt", cross), writeTemp(t, "leaf.crt", leafKP.CertPEM)).CombinedOutput()
	if err != nil {
		t.Fatalf("openssl verify, old CA only, new leaf with the intermediate: %v\n%s", err, out)
	}
}

func TestMaterialFor(t *testing.T) {
	oldKP, _ := NewCA(CACommonName, now)
	nextKP, _ := NewRotationCA(now)
	cross := []byte("x")
	count := func(b []byte) int { c, _ := BundleCertificates(b); return len(c) }
	m, _ := MaterialFor(PhaseTrust, oldKP, nextKP, cross)
	if count(m.Bundle) != 2 || !m.Signer.Equal(oldKP) || m.Intermediate != nil {
		t.Errorf("TrustBoth: %d certs, signer old %v, intermediate %q", count(m.Bundle), m.Signer.Equal(oldKP), m.Intermediate)
	}
	m, _ = MaterialFor(PhaseReissue, oldKP, nextKP, cross)
	if count(m.Bundle) != 2 || !m.Signer.Equal(nextKP) || string(m.Intermediate) != "x" {
		t.Errorf("Reissue: %d certs, signer new %v", count(m.Bundle), m.Signer.Equal(nextKP))
	}
	m, _ = MaterialFor(PhaseRemoveOld, oldKP, nextKP, cross)
	if count(m.Bundle) != 1 || !m.Signer.Equal(nextKP) || m.Intermediate != nil {
		t.Errorf("RemoveOld: %d certs", count(m.Bundle))
	}
	if _, err := MaterialFor("x", oldKP, nextKP, cross); err == nil {
		t.Error("no error for an unknown phase")
	}
}

func TestRenewAt(t *testing.T) {
	nb := now
	na := now.Add(90 * time.Minute)
	if got := RenewAt(nb, na, 0); !got.Equal(now.Add(time.Hour)) {
		t.Errorf("two thirds of 90m: %s", got.Sub(now))
	}
	if got := RenewAt(nb, na, 10*time.Minute); !got.Equal(now.Add(80 * time.Minute)) {
		t.Errorf("renewBefore 10m: %s", got.Sub(now))
	}
}
