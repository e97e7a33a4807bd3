package agent

import (
	"bufio"
	"bytes"
	"crypto/sha256"
	"crypto/x509"
	"encoding/hex"
	"encoding/json"
	"encoding/pem"
	"errors"
	"fmt"
	"io"
	"sort"
	"strings"

	yaml "go.yaml.in/yaml/v2"

	"github.com/capn-dev/capn/services/bootstrapper/bootstrap/kubelocal"
)

// Where the shipped bootstrap providers put the join material.
const (
	// KubeadmJoinConfig holds discovery.bootstrapToken.caCertHashes.
	KubeadmJoinConfig = "/run/kubeadm/kubeadm-join-config.yaml"
	// KubeadmInitConfig is the first control-plane machine's config.
	KubeadmInitConfig = "/run/kubeadm/kubeadm.yaml"
	// JoinEnv holds CAPN_CA_CERT_HASH (script provider).
	JoinEnv = "/run/capn/join.env"
	// KubeLocalConfig holds caCertHash (kube-local provider).
	KubeLocalConfig = kubelocal.ConfigPath
)

// CAFiles are the cluster CA certificates bootstrap data may carry:
// kubeadm's (control-plane machines) and the script provider's.
var CAFiles = []string{"/etc/kubernetes/pki/ca.crt", "/run/capn/ca.crt"}

// ErrJoinMaterial is a bootstrap whose join material does not hold
// together (no CA named, two CAs named, or not the pinned one).
var ErrJoinMaterial = errors.New("join material check failed")

// VerifyJoin checks the join material of a plan, as kubeadm's discovery
// would before trusting an API server: every CA the plan names — the
// caCertHashes of a kubeadm JoinConfiguration, CAPN_CA_CERT_HASH of
// join.env, caCertHash of kube-local.json, and the public key hash of every
// CA certificate it writes —
// must be one and the same CA, and that CA must be pin when pin is set.
// It returns that CA's hash (sha256:<hex> of its public key).
func VerifyJoin(p *Plan, pin string) (string, error) {
	named := map[string][]string{} // hash -> where
	var errs []error
	add := func(hash, where string) { named[strings.ToLower(hash)] = append(named[strings.ToLower(hash)], where) }

	if f, ok := p.File(KubeadmJoinConfig); ok {
		hashes, err := kubeadmCAHashes(f.Content)
		if err != nil {
			errs = append(errs, fmt.Errorf("%s: %w", KubeadmJoinConfig, err))
		}
		if err == nil && len(hashes) == 0 {
			errs = append(errs, fmt.Errorf("%s: no discovery.bootstrapToken.caCertHashes", KubeadmJoinConfig))
		}
		for _, h := range hashes {
			add(h, KubeadmJoinConfig)
		}
	}
	if f, ok := p.File(JoinEnv); ok {
		if h := envValue(f.Content, "CAPN_CA_CERT_HASH"); h != "" {
			add(h, JoinEnv)
		} else {
			errs = append(errs, fmt.Errorf("%s: no CAPN_CA_CERT_HASH", JoinEnv))
		}
	}
	if f, ok := p.File(KubeLocalConfig); ok {
		var kl struct {
			CACertHash string `json:"caCertHash"`
		}
		switch err := json.Unmarshal(f.Content, &kl); {
		case err != nil:
			errs = append(errs, fmt.Errorf("%s: %w", KubeLocalConfig, err))
		case kl.CACertHash == "":
			errs = append(errs, fmt.Errorf("%s: no caCertHash", KubeLocalConfig))
		default:
			add(kl.CACertHash, KubeLocalConfig)
		}
	}
	for _, at := range CAFiles {
		f, ok := p.File(at)
		if !ok {
			continue
		}
		h, err := CertHash(f.Content)
		if err != nil {
			errs = append(errs, fmt.Errorf("%s: %w", at, err))
			continue
		}
		add(h, at)
	}
	if err := errors.Join(errs...); err != nil {
		return "", fmt.Errorf("%w: %w", ErrJoinMaterial, err)
	}
	switch len(named) {
	case 0:
		return "", fmt.Errorf("%w: the bootstrap data names no cluster CA (no %s, %s or CA certificate)", ErrJoinMaterial, KubeadmJoinConfig, JoinEnv)
	case 1:
	default:
		var list []string
		for h, where := range named {
			list = append(list, fmt.Sprintf("%s (%s)", h, strings.Join(where, ", ")))
		}
		sort.Strings(list)
		return "", fmt.Errorf("%w: the bootstrap data names %d different CAs: %s", ErrJoinMaterial, len(named), strings.Join(list, "; "))
	}
	var hash string
	for h := range named {
		hash = h
	}
	if pin != "" && !strings.EqualFold(hash, pin) {
		return "", fmt.Errorf("%w: the bootstrap data names CA %s, but this machine was told to trust %s", ErrJoinMaterial, hash, pin)
	}
	return hash, nil
}

// CertHash is kubeadm's CA pin of a PEM certificate: sha256:<hex> of its
// DER SubjectPublicKeyInfo.
func CertHash(certPEM []byte) (string, error) {
	block, _ := pem.Decode(certPEM)
	if block == nil || block.Type != "CERTIFICATE" {
		return "", errors.New("not a PEM certificate")
	}
	c, err := x509.ParseCertificate(block.Bytes)
	if err != nil {
		return "", err
	}
	if !c.IsCA {
		return "", errors.New("the certificate is not a CA")
	}
	sum := sha256.Sum256(c.RawSubjectPublicKeyInfo)
	return "sha256:" + hex.EncodeToString(sum[:]), nil
}

// kubeadmCAHashes reads discovery.bootstrapToken.caCertHashes of the
// JoinConfiguration in a (multi-document) kubeadm config.
func kubeadmCAHashes(config []byte) ([]string, error) {
	type joinConfig struct {
		Kind      string `yaml:"kind"`
		Discovery struct {
			BootstrapToken struct {
				CACertHashes []string `yaml:"caCertHashes"`
			} `yaml:"bootstrapToken"`
		} `yaml:"discovery"`
	}
	dec := yaml.NewDecoder(bytes.NewReader(config))
	var out []string
	for {
		var doc joinConfig
		err := dec.Decode(&doc)
		if errors.Is(err, io.EOF) {
			return out, nil
		}
		if err != nil {
			return nil, err
		}
		if doc.Kind == "JoinConfiguration" {
			out = append(out, doc.Discovery.BootstrapToken.CACertHashes...)
		}
	}
}

// envValue reads NAME='value' (or NAME=value) from a shell variables file.
func envValue(env []byte, name string) string {
	sc := bufio.NewScanner(bytes.NewReader(env))
	for sc.Scan() {
		v, ok := strings.CutPrefix(strings.TrimSpace(sc.Text()), name+"=")
		if !ok {
			continue
		}
		if u, err := unquote(v); err == nil {
			return u
		}
		return v
	}
	return ""
}
