package pki

import (
	"bytes"
	"crypto/rand"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"fmt"
	"slices"
	"time"
)

// A cluster CA rotation rolls a new cluster CA (PartCA) through three
// phases, each done on every machine before the next begins:
//
//	PhaseTrust     every machine trusts both CAs (the trust bundle, old and
//	               new, in the API server's client CA file, the
//	               controller-manager's root CA and every kubeconfig's CA
//	               data); every leaf is still the old CA's.
//	PhaseReissue   the new CA signs: every leaf is issued anew from it. The
//	               API server serves its new certificate with the new CA
//	               cross-signed by the old as intermediate, so a client
//	               that trusts only the old CA still verifies it.
//	PhaseRemoveOld the old CA leaves every bundle, the cross-signed
//	               intermediate leaves the API server's chain: a client
//	               certificate of the old CA is refused from then on.
//
// Rotation is the pure state machine the backup service drives
// (services/backup, rotateca.go); it knows nothing of NATS or files.

// RotationPhase names a phase of a CA rotation.
type RotationPhase string

// The phases, in order, and Done once the last is complete.
const (
	PhaseTrust     RotationPhase = "TrustBoth"
	PhaseReissue   RotationPhase = "Reissue"
	PhaseRemoveOld RotationPhase = "RemoveOld"
	PhaseDone      RotationPhase = "Done"
)

// RotationPhases lists the three phases in order.
func RotationPhases() []RotationPhase {
	return []RotationPhase{PhaseTrust, PhaseReissue, PhaseRemoveOld}
}

// ParseRotationPhase reads a phase name; "" is PhaseDone (run to the end).
func ParseRotationPhase(s string) (RotationPhase, error) {
	if s == "" {
		return PhaseDone, nil
	}
	for _, p := range append(RotationPhases(), PhaseDone) {
		if string(p) == s {
			return p, nil
		}
	}
	return "", fmt.Errorf("%q is not a phase: want one of %s, %s, %s or %s", s, PhaseTrust, PhaseReissue, PhaseRemoveOld, PhaseDone)
}

func phaseIndex(p RotationPhase) int {
	if p == PhaseDone {
		return len(RotationPhases())
	}
	return slices.Index(RotationPhases(), p)
}

// Rotation is where a rotation is: the phase under way and the machines
// that completed it.
type Rotation struct {
	Phase RotationPhase
	// Done are the machines that completed Phase, in the order they did.
	Done []string
}

// StepKind says what a rotation does next.
type StepKind int

// The steps.
const (
	// StepMachine: run Phase on Machine.
	StepMachine StepKind = iota + 1
	// StepAdvance: every machine completed Phase; begin the next phase.
	StepAdvance
	// StepHold: the phase asked to stop after is complete; wait for an
	// operator to continue.
	StepHold
	// StepComplete: the rotation is done.
	StepComplete
)

// Step is what to do next.
type Step struct {
	Kind    StepKind
	Phase   RotationPhase
	Machine string
}

// Next is the rotation's next step for the cluster's machines (control
// planes first, in the order given), stopping once phase until is
// complete (PhaseDone: run to the end). Machines are taken one at a time:
// a machine that fails stops the rotation there, the others untouched.
func (r Rotation) Next(machines []string, until RotationPhase) Step {
	if r.Phase == PhaseDone || r.Phase == "" {
		return Step{Kind: StepComplete, Phase: PhaseDone}
	}
	for _, m := range machines {
		if !slices.Contains(r.Done, m) {
			return Step{Kind: StepMachine, Phase: r.Phase, Machine: m}
		}
	}
	if phaseIndex(r.Phase) >= phaseIndex(until) {
		return Step{Kind: StepHold, Phase: r.Phase}
	}
	return Step{Kind: StepAdvance, Phase: r.Phase}
}

// MachineDone records that machine completed the current phase.
func (r Rotation) MachineDone(machine string) Rotation {
	if !slices.Contains(r.Done, machine) {
		r.Done = append(slices.Clone(r.Done), machine)
	}
	return r
}

// Advance begins the phase after the current one (Done after the last).
func (r Rotation) Advance() Rotation {
	i := phaseIndex(r.Phase)
	next := PhaseDone
	if i >= 0 && i+1 < len(RotationPhases()) {
		next = RotationPhases()[i+1]
	}
	return Rotation{Phase: next}
}

// Complete is true once the phase is over on every machine.
func (r Rotation) Complete(machines []string) bool {
	for _, m := range machines {
		if !slices.Contains(r.Done, m) {
			return false
		}
	}
	return true
}

// RotationMaterial is what the machines are given in a phase: the bundle
// they trust, the CA that signs (with its key, for control planes) and the
// API server's intermediate.
type RotationMaterial struct {
	// Bundle is the trust bundle: old and new CA (PhaseTrust,
	// PhaseReissue), the new CA alone (PhaseRemoveOld).
	Bundle []byte
	// Signer is the CA leaves are issued from: the old one in PhaseTrust,
	// the new one after.
	Signer KeyPair
	// Intermediate is the new CA cross-signed by the old (PhaseReissue
	// only): the API server serves it after its certificate.
	Intermediate []byte
}

// MaterialFor is the material of phase p for a rotation from old to
// next, with cross the new CA cross-signed by the old.
func MaterialFor(p RotationPhase, old, next KeyPair, cross []byte) (RotationMaterial, error) {
	switch p {
	case PhaseTrust:
		return RotationMaterial{Bundle: Bundle(old.CertPEM, next.CertPEM), Signer: old}, nil
	case PhaseReissue:
		return RotationMaterial{Bundle: Bundle(old.CertPEM, next.CertPEM), Signer: next, Intermediate: cross}, nil
	case PhaseRemoveOld, PhaseDone:
		return RotationMaterial{Bundle: Bundle(next.CertPEM), Signer: next}, nil
	}
	return RotationMaterial{}, fmt.Errorf("no material for phase %q", p)
}

// NewRotationCA makes the CA a rotation rolls in: a new key, valid
// CAValidity from now, named "kubernetes-<time>" so that it is told apart
// from the CA it replaces (and from its cross-signed copy's issuer) in
// every chain and log.
func NewRotationCA(now time.Time) (KeyPair, error) {
	return NewCA(CACommonName+"-"+now.UTC().Format("20060102T150405Z"), now)
}

// CrossSign is next's certificate (same subject, same key, same key id)
// signed by old: a client that trusts only old verifies a leaf of next
// through it. It is valid no longer than either CA.
func CrossSign(old *CA, next KeyPair, now time.Time) ([]byte, error) {
	if old == nil {
		return nil, errors.New("cross-sign: no signing CA")
	}
	n, err := ParseCA(next, now)
	if err != nil {
		return nil, fmt.Errorf("cross-sign: new CA: %w", err)
	}
	serial, err := newSerial()
	if err != nil {
		return nil, err
	}
	tmpl := &x509.Certificate{
		SerialNumber:          serial,
		Subject:               n.Cert.Subject,
		SubjectKeyId:          n.Cert.SubjectKeyId,
		NotBefore:             n.Cert.NotBefore,
		NotAfter:              n.Cert.NotAfter,
		KeyUsage:              n.Cert.KeyUsage,
		BasicConstraintsValid: true,
		IsCA:                  true,
	}
	if tmpl.NotAfter.After(old.Cert.NotAfter) {
		tmpl.NotAfter = old.Cert.NotAfter
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, old.Cert, n.Cert.PublicKey, old.Key)
	if err != nil {
		return nil, fmt.Errorf("cross-sign: %w", err)
	}
	return encodeCert(der), nil
}

// Bundle is the certificates of the PEMs given, each once, in order.
func Bundle(pems ...[]byte) []byte {
	var out bytes.Buffer
	var seen [][]byte
	for _, p := range pems {
		for _, der := range certDERs(p) {
			if slices.ContainsFunc(seen, func(b []byte) bool { return bytes.Equal(b, der) }) {
				continue
			}
			seen = append(seen, der)
			out.Write(encodeCert(der))
		}
	}
	return out.Bytes()
}

// BundleCertificates parses every certificate of a PEM bundle.
func BundleCertificates(bundle []byte) ([]*x509.Certificate, error) {
	var out []*x509.Certificate
	for _, der := range certDERs(bundle) {
		c, err := x509.ParseCertificate(der)
		if err != nil {
			return nil, fmt.Errorf("bundle: %w", err)
		}
		out = append(out, c)
	}
	if len(out) == 0 {
		return nil, errors.New("bundle: no certificate")
	}
	return out, nil
}

func certDERs(p []byte) [][]byte {
	var out [][]byte
	for {
		var b *pem.Block
		b, p = pem.Decode(p)
		if b == nil {
			return out
		}
		if b.Type == "CERTIFICATE" {
			out = append(out, b.Bytes)
		}
	}
}

// RenewAt is when a leaf valid from notBefore to notAfter is renewed:
// renewBefore ahead of its end when set, else once two thirds of its
// lifetime have passed.
func RenewAt(notBefore, notAfter time.Time, renewBefore time.Duration) time.Time {
	if renewBefore > 0 {
		return notAfter.Add(-renewBefore)
	}
	return notBefore.Add(notAfter.Sub(notBefore) * 2 / 3)
}
