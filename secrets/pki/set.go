package pki

import (
	"errors"
	"fmt"
	"time"
)

// ErrCAConflict means a user-supplied CA differs from the cluster CA already
// stored: capn never replaces a cluster's CA.
var ErrCAConflict = errors.New("user-supplied CA differs from the cluster CA already in use")

// Options for Ensure.
type Options struct {
	// Now is the time validity is checked against and new certificates
	// start from.
	Now time.Time
	// UserCA is the cluster CA the user supplied (spec.bootstrap.ca), used
	// exactly as given instead of generating one.
	UserCA *KeyPair
}

// Ensure completes a cluster's PKI. Parts already in existing (stored
// earlier, or pre-loaded by the user) are checked and kept byte for byte;
// missing parts are generated, except the cluster CA when opts.UserCA is
// set, which is then used as is. It returns the complete set and the parts
// it added, in Parts() order; nothing added means nothing to write, which
// makes Ensure idempotent.
//
// A stored part that is broken or expired is an error, never replaced: the
// running cluster trusts it.
func Ensure(existing Set, opts Options) (Set, []Part, error) {
	now := opts.Now
	if now.IsZero() {
		return Set{}, nil, errors.New("ensure PKI: Options.Now is zero")
	}
	out := existing
	var added []Part

	switch {
	case !existing.CA.IsZero():
		if _, err := ParseCA(existing.CA, now); err != nil {
			return Set{}, nil, fmt.Errorf("stored cluster CA: %w", err)
		}
		if opts.UserCA != nil && !sameCertificate(existing.CA.CertPEM, opts.UserCA.CertPEM) {
			return Set{}, nil, ErrCAConflict
		}
	case opts.UserCA != nil:
		if _, err := ParseCA(*opts.UserCA, now); err != nil {
			return Set{}, nil, fmt.Errorf("user-supplied CA: %w", err)
		}
		out.CA = *opts.UserCA
		added = append(added, PartCA)
	default:
		kp, err := NewCA(CACommonName, now)
		if err != nil {
			return Set{}, nil, err
		}
		out.CA = kp
		added = append(added, PartCA)
	}

	for _, ca := range []struct {
		part Part
		cn   string
		kp   *KeyPair
	}{
		{PartEtcdCA, EtcdCACommonName, &out.EtcdCA},
		{PartFrontProxyCA, FrontProxyCACommonName, &out.FrontProxyCA},
	} {
		if !ca.kp.IsZero() {
			if _, err := ParseCA(*ca.kp, now); err != nil {
				return Set{}, nil, fmt.Errorf("stored %s: %w", ca.part, err)
			}
			continue
		}
		kp, err := NewCA(ca.cn, now)
		if err != nil {
			return Set{}, nil, err
		}
		*ca.kp = kp
		added = append(added, ca.part)
	}

	if !existing.ServiceAccount.IsZero() {
		if err := ParseServiceAccountKey(existing.ServiceAccount); err != nil {
			return Set{}, nil, fmt.Errorf("stored %w", err)
		}
	} else {
		sa, err := NewServiceAccountKey()
		if err != nil {
			return Set{}, nil, err
		}
		out.ServiceAccount = sa
		added = append(added, PartServiceAccount)
	}
	return out, added, nil
}
