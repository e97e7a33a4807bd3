package kube

import (
	"bytes"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/capn-dev/capn/secrets/pki"
)

// Cluster CA rotation on one machine (see pki.Rotation for the phases and
// services/backup for who drives them). The machine's files:
//
//	pki/ca.crt, ca.key     the signing CA: what leaves are issued from and
//	                       the controller-manager signs with (a worker has
//	                       the certificate only)
//	pki/ca-bundle.crt      the trust bundle: the API server's and the
//	                       controller-manager's client CA, the
//	                       controller-manager's root CA (the Pods'
//	                       kube-root-ca.crt) and every kubeconfig's CA data
//	pki/ca-intermediate.crt  the new CA cross-signed by the old, served by
//	                       the API server after its certificate (Reissue)
//
// Without a rotation the bundle is ca.crt and there is no intermediate.
// The API server reloads its client CA file and serving certificate by
// itself (dynamic file reloading, v1.19+), so it is never restarted and
// the cluster's API never goes away; the controller-manager, scheduler
// and kwok read their kubeconfigs once, so they are restarted, one
// machine at a time.

// CAPhase is what a rotation phase gives a machine.
type CAPhase struct {
	Phase string
	// Bundle is the trust bundle.
	Bundle []byte
	// Signer is the signing CA: with its key on a control plane, the
	// certificate alone on a worker.
	Signer pki.KeyPair
	// Intermediate is the API server's chain after its certificate.
	Intermediate []byte
	// NodeClient is a worker's client certificate of the signing CA.
	NodeClient pki.KeyPair
}

// CAPhaseResult says what a phase changed on the machine.
type CAPhaseResult struct {
	Issued, Restarted []string
}

// CABundlePath is the trust bundle's file.
func (l Layout) CABundlePath() string { return filepath.Join(l.PKIDir(), "ca-bundle.crt") }

// CAIntermediatePath is the API server's intermediate's file.
func (l Layout) CAIntermediatePath() string { return filepath.Join(l.PKIDir(), "ca-intermediate.crt") }

// caPinPath records the hash of a CA a rotation installed: a worker's
// node config still pins the CA it was created with.
func (r *Runtime) caPinPath() string { return filepath.Join(r.opts.DataDir, "capn-node", "ca-pin") }

// rotatedPin is the hash of the CA a rotation installed ("" if none).
func (r *Runtime) rotatedPin() string {
	b, err := os.ReadFile(r.caPinPath())
	if err != nil {
		return ""
	}
	return strings.TrimSpace(string(b))
}

// trustBundle is the trust bundle, or ca.crt when no rotation wrote one.
func trustBundle(l Layout) ([]byte, error) {
	b, err := os.ReadFile(l.CABundlePath())
	if err == nil {
		return b, nil
	}
	if !errors.Is(err, os.ErrNotExist) {
		return nil, err
	}
	return os.ReadFile(filepath.Join(l.PKIDir(), "ca.crt"))
}

// intermediate is the API server's intermediate ("" without one).
func intermediate(l Layout) ([]byte, error) {
	b, err := os.ReadFile(l.CAIntermediatePath())
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	return b, err
}

// ensureBundle writes the trust bundle from ca.crt when there is none
// (a machine created before rotation existed, or a new one).
func ensureBundle(l Layout) error {
	if _, err := os.Stat(l.CABundlePath()); err == nil {
		return nil
	}
	ca, err := os.ReadFile(filepath.Join(l.PKIDir(), "ca.crt"))
	if err != nil {
		return err
	}
	return writeFile(l.CABundlePath(), ca, 0o644)
}

// Check refuses a phase that cannot be right: the bundle must parse and
// hold the signer, a control plane needs the signer's key.
func (p CAPhase) Check(controlPlane bool, now time.Time) error {
	certs, err := pki.BundleCertificates(p.Bundle)
	if err != nil {
		return fmt.Errorf("phase %s: %w", p.Phase, err)
	}
	signer, err := pki.ParseCertificate(p.Signer.CertPEM)
	if err != nil {
		return fmt.Errorf("phase %s: signer: %w", p.Phase, err)
	}
	if !slices.ContainsFunc(certs, signer.Equal) {
		return fmt.Errorf("phase %s: the signing CA %q is not in the trust bundle", p.Phase, signer.Subject.CommonName)
	}
	if controlPlane {
		if _, err := pki.ParseCA(p.Signer, now); err != nil {
			return fmt.Errorf("phase %s: signer: %w", p.Phase, err)
		}
	}
	if len(p.Intermediate) > 0 {
		ic, err := pki.ParseCertificate(p.Intermediate)
		if err != nil {
			return fmt.Errorf("phase %s: intermediate: %w", p.Phase, err)
		}
		if !bytes.Equal(ic.RawSubjectPublicKeyInfo, signer.RawSubjectPublicKeyInfo) {
			return fmt.Errorf("phase %s: the intermediate is not the signing CA's cross-signed certificate", p.Phase)
		}
	}
	if len(p.NodeClient.CertPEM) > 0 {
		c, err := pki.ParseCertificate(p.NodeClient.CertPEM)
		if err != nil {
			return fmt.Errorf("phase %s: node client: %w", p.Phase, err)
		}
		if err := c.CheckSignatureFrom(signer); err != nil {
			return fmt.Errorf("phase %s: the node client certificate is not the signing CA's: %w", p.Phase, err)
		}
	}
	return nil
}

// WriteCAFiles writes the phase's files under l; it returns whether any
// changed.
func WriteCAFiles(l Layout, p CAPhase, controlPlane bool) (bool, error) {
	changed := false
	put := func(path string, data []byte, mode os.FileMode) error {
		cur, err := os.ReadFile(path)
		if err == nil && bytes.Equal(cur, data) {
			return nil
		}
		changed = true
		return writeFile(path, data, mode)
	}
	dir := l.PKIDir()
	if controlPlane {
		// The key first: a crash in between leaves a pair ParseCA refuses
		// and the phase, asked again, writes both.
		if err := put(filepath.Join(dir, "ca.key"), p.Signer.KeyPEM, 0o600); err != nil {
			return changed, err
		}
	}
	if err := put(filepath.Join(dir, "ca.crt"), p.Signer.CertPEM, 0o644); err != nil {
		return changed, err
	}
	if err := put(l.CABundlePath(), p.Bundle, 0o644); err != nil {
		return changed, err
	}
	if len(p.Intermediate) > 0 {
		return changed, put(l.CAIntermediatePath(), p.Intermediate, 0o644)
	}
	if err := os.Remove(l.CAIntermediatePath()); err == nil {
		changed = true
	} else if !errors.Is(err, os.ErrNotExist) {
		return changed, err
	}
	return changed, nil
}

// ApplyCAPhase applies a rotation phase to this machine: it writes the
// CA files, issues every leaf anew that the phase changes, restarts the
// components that read them only at start, and waits until the API
// server answers with the new credentials. Asked again with the same
// phase it changes nothing (a retry after a lost answer).
func (r *Runtime) ApplyCAPhase(ctx context.Context, p CAPhase) (CAPhaseResult, error) {
	r.rotating.Lock()
	defer r.rotating.Unlock()
	cp := r.cfg.IsControlPlane()
	var res CAPhaseResult
	if err := p.Check(cp, r.Now()); err != nil {
		return res, err
	}
	if !r.ready.Load() {
		return res, errors.New("the API server is not ready here: a rotation phase waits for a machine that runs")
	}
	changed, err := WriteCAFiles(r.layout, p, cp)
	if err != nil {
		return res, err
	}
	hash, err := pki.CACertHash(p.Signer.CertPEM)
	if err != nil {
		return res, err
	}
	if hash != r.cfg.CACertHash {
		if err := writeFile(r.caPinPath(), []byte(hash+"\n"), 0o600); err != nil {
			return res, err
		}
	}
	var restart []string
	kubeconfig := r.layout.AdminKubeconfig()
	if cp {
		leaves, err := Leaves(r.cfg, mustAddr(r.opts.Address))
		if err != nil {
			return res, err
		}
		iss, err := IssueAll(r.layout, r.cfg.Cluster, serverURL(r.opts.Address, r.opts.Ports.APIServer), leaves, r.Now())
		if err != nil {
			return res, err
		}
		res.Issued = iss.Issued
		if changed || len(iss.Issued) > 0 {
			restart = []string{"kube-controller-manager", "kube-scheduler", "kwok"}
		}
	} else {
		kubeconfig = r.layout.KubeconfigPath("kubelet")
		w, err := r.rewriteNodeKubeconfig(p)
		if err != nil {
			return res, err
		}
		if w {
			res.Issued = append(res.Issued, "kubelet")
		}
		if changed || w {
			restart = []string{"kwok"}
		}
	}
	if len(restart) > 0 {
		res.Restarted = r.restart(restart...)
	}
	if err := r.reloadClient(kubeconfig); err != nil {
		return res, err
	}
	// The API server reloads its files within about a minute (it checks
	// them every minute, and at once on a file event): wait until this
	// machine's own credentials of the phase are accepted.
	wctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	if !r.retry(wctx, "reach the API server with the phase's credentials", func() error {
		r.mu.Lock()
		c := r.client
		r.mu.Unlock()
		if c == nil {
			return errors.New("no client yet")
		}
		var v struct{}
		return c.Get(wctx, "/api/v1/nodes/"+r.cfg.NodeName, &v)
	}) {
		return res, fmt.Errorf("phase %s: the API server did not accept this machine's new credentials within 2m", p.Phase)
	}
	if cp && !r.retry(wctx, "see the API server serve its new certificate", r.servesOwnCertificate) {
		return res, fmt.Errorf("phase %s: the API server did not serve its new certificate within 2m", p.Phase)
	}
	r.opts.Log.Info().Str("phase", p.Phase).Strs("issued", res.Issued).Strs("restarted", res.Restarted).Msg("CA rotation phase applied")
	return res, nil
}

// rewriteNodeKubeconfig gives a worker's kubeconfig the phase's bundle
// and, in Reissue, its new client certificate.
func (r *Runtime) rewriteNodeKubeconfig(p CAPhase) (bool, error) {
	path := r.layout.KubeconfigPath("kubelet")
	kc, err := readKubeconfig(path)
	if err != nil {
		return false, err
	}
	client := kc.Client()
	if len(p.NodeClient.CertPEM) > 0 {
		client = p.NodeClient
	}
	if bytes.Equal(kc.caData(), p.Bundle) && client.Equal(kc.Client()) {
		return false, nil
	}
	data, err := RenderKubeconfig(r.cfg.Cluster, NodeUser(r.cfg.NodeName), kc.server(), p.Bundle, client)
	if err != nil {
		return false, err
	}
	return true, writeFile(path, data, 0o600)
}

// restart stops and starts again the named children that run.
func (r *Runtime) restart(names ...string) []string {
	var out []string
	for _, p := range r.sup.Halt(names...) {
		if err := r.sup.Start(p); err != nil {
			r.opts.Log.Error().Err(err).Str("process", p.Name).Msg("cannot start again after a CA rotation phase")
			continue
		}
		out = append(out, p.Name)
	}
	return out
}

// reloadClient gives the runtime's client the kubeconfig's credentials.
func (r *Runtime) reloadClient(path string) error {
	kc, err := ReadKubeconfig(path)
	if err != nil {
		return err
	}
	r.mu.Lock()
	c := r.client
	r.mu.Unlock()
	if c == nil {
		return nil
	}
	pair := kc.Client()
	return c.Reload(kc.CA(), pair.CertPEM, pair.KeyPEM)
}

// LeafExpiry is one leaf certificate of the machine and when it ends.
type LeafExpiry struct {
	Name      string
	Issuer    string
	NotBefore time.Time
	NotAfter  time.Time
}

// LeafExpiries lists the machine's leaf certificates (files and
// kubeconfigs), soonest end first.
func (r *Runtime) LeafExpiries() ([]LeafExpiry, error) {
	var out []LeafExpiry
	add := func(name string, certPEM []byte) {
		if c, err := pki.ParseCertificate(certPEM); err == nil {
			out = append(out, LeafExpiry{Name: name, Issuer: c.Issuer.CommonName, NotBefore: c.NotBefore, NotAfter: c.NotAfter})
		}
	}
	if r.cfg.IsControlPlane() {
		leaves, err := Leaves(r.cfg, mustAddr(r.opts.Address))
		if err != nil {
			return nil, err
		}
		for _, leaf := range leaves {
			if leaf.Kubeconfig {
				if kc, err := readKubeconfig(r.layout.KubeconfigPath(leaf.Name)); err == nil {
					add(leaf.Name, kc.certData())
				}
				continue
			}
			b, err := os.ReadFile(filepath.Join(r.layout.PKIDir(), filepath.FromSlash(leaf.Name)+".crt"))
			if err == nil {
				add(leaf.Name, b)
			}
		}
	} else if kc, err := readKubeconfig(r.layout.KubeconfigPath("kubelet")); err == nil {
		add("kubelet", kc.certData())
	}
	slices.SortFunc(out, func(a, b LeafExpiry) int { return a.NotAfter.Compare(b.NotAfter) })
	return out, nil
}

// RenewLeaves issues anew every control-plane leaf due for renewal at now
// (renewBefore ahead of its end, or at two thirds of its lifetime) and
// restarts the components that read them only at start. A worker's
// client certificate is renewed by its own CSR (ensureNodeCredentials).
func (r *Runtime) RenewLeaves(ctx context.Context, renewBefore time.Duration) (CAPhaseResult, error) {
	r.rotating.Lock()
	defer r.rotating.Unlock()
	var res CAPhaseResult
	if !r.cfg.IsControlPlane() {
		return res, nil
	}
	leaves, err := Leaves(r.cfg, mustAddr(r.opts.Address))
	if err != nil {
		return res, err
	}
	now := r.Now()
	iss, err := IssueDue(r.layout, r.cfg.Cluster, serverURL(r.opts.Address, r.opts.Ports.APIServer), leaves, now, renewBefore)
	if err != nil {
		return res, err
	}
	res.Issued = iss
	if len(iss) == 0 {
		return res, nil
	}
	var restart []string
	for _, n := range iss {
		switch n {
		case "controller-manager":
			restart = append(restart, "kube-controller-manager")
		case "scheduler":
			restart = append(restart, "kube-scheduler")
		case "admin":
			restart = append(restart, "kwok")
		case "etcd/server", "etcd/peer":
			// etcd reloads its certificates per connection.
		}
	}
	if len(restart) > 0 {
		res.Restarted = r.restart(restart...)
	}
	if slices.Contains(iss, "admin") {
		if err := r.reloadClient(r.layout.AdminKubeconfig()); err != nil {
			return res, err
		}
	}
	r.opts.Log.Info().Strs("renewed", iss).Strs("restarted", res.Restarted).Msg("leaf certificates renewed before expiry")
	return res, nil
}

// IssueDue issues anew the leaves whose renewal time has come at now
// (renewBefore ahead of their end, or two thirds into their lifetime) and
// returns their names.
func IssueDue(l Layout, cluster, server string, leaves []Leaf, now time.Time, renewBefore time.Duration) ([]string, error) {
	var due []Leaf
	for _, leaf := range leaves {
		var certPEM []byte
		if leaf.Kubeconfig {
			kc, err := readKubeconfig(l.KubeconfigPath(leaf.Name))
			if err == nil {
				certPEM = kc.certData()
			}
		} else {
			certPEM, _ = os.ReadFile(filepath.Join(l.PKIDir(), filepath.FromSlash(leaf.Name)+".crt"))
		}
		c, err := pki.ParseCertificate(certPEM)
		if err != nil || !now.Before(pki.RenewAt(c.NotBefore, c.NotAfter, renewBefore)) {
			due = append(due, leaf)
		}
	}
	if len(due) == 0 {
		return nil, nil
	}
	for _, leaf := range due {
		if err := removeLeaf(l, leaf); err != nil {
			return nil, err
		}
	}
	res, err := IssueAll(l, cluster, server, due, now)
	return res.Issued, err
}

// removeLeaf deletes a leaf so that IssueAll issues it anew.
func removeLeaf(l Layout, leaf Leaf) error {
	paths := []string{l.KubeconfigPath(leaf.Name)}
	if !leaf.Kubeconfig {
		base := filepath.Join(l.PKIDir(), filepath.FromSlash(leaf.Name))
		paths = []string{base + ".crt"}
	}
	for _, p := range paths {
		if err := os.Remove(p); err != nil && !errors.Is(err, os.ErrNotExist) {
			return err
		}
	}
	return nil
}

// mustAddr parses an address Options.Validate checked.
func mustAddr(s string) netip.Addr { return netip.MustParseAddr(s) }

// servesOwnCertificate is nil once the API server serves the certificate
// chain of pki/apiserver.crt (it reloads the file by itself).
func (r *Runtime) servesOwnCertificate() error {
	want, err := os.ReadFile(filepath.Join(r.layout.PKIDir(), "apiserver.crt"))
	if err != nil {
		return err
	}
	certs, err := pki.BundleCertificates(want)
	if err != nil {
		return err
	}
	d := &net.Dialer{Timeout: 5 * time.Second}
	// Only the bytes served are compared: nothing is sent on this
	// connection, so it needs no verification.
	conn, err := tls.DialWithDialer(d, "tcp", net.JoinHostPort(r.opts.Address, fmt.Sprint(r.opts.Ports.APIServer)), &tls.Config{InsecureSkipVerify: true}) //nolint:gosec // compared byte for byte below, nothing sent
	if err != nil {
		return err
	}
	defer conn.Close()
	got := conn.ConnectionState().PeerCertificates
	if len(got) != len(certs) {
		return fmt.Errorf("the API server serves %d certificates, apiserver.crt has %d", len(got), len(certs))
	}
	for i := range got {
		if !got[i].Equal(certs[i]) {
			return fmt.Errorf("the API server serves another certificate than apiserver.crt (%s)", got[i].Subject)
		}
	}
	return nil
}
