package token

import (
	"fmt"
	"time"

	"google.golang.org/protobuf/types/known/durationpb"
)

const (
	// DefaultTTL is the lifetime of a bootstrap token, as Cluster API.
	DefaultTTL = 15 * time.Minute
	// MinTTL and MaxTTL bound a configured TTL: shorter than a minute
	// cannot outlive a boot; longer than a week keeps a join credential
	// alive long after any machine needs it.
	MinTTL = time.Minute
	MaxTTL = 7 * 24 * time.Hour
)

// TTL returns the effective TTL of a spec's token_ttl: DefaultTTL when
// unset or zero, an error when out of [MinTTL, MaxTTL] or malformed.
func TTL(d *durationpb.Duration) (time.Duration, error) {
	if d == nil || (d.Seconds == 0 && d.Nanos == 0) {
		return DefaultTTL, nil
	}
	if err := d.CheckValid(); err != nil {
		return 0, fmt.Errorf("token TTL: %w", err)
	}
	ttl := d.AsDuration()
	if ttl < MinTTL || ttl > MaxTTL {
		return 0, fmt.Errorf("token TTL %s: want between %s and %s (default %s)", ttl, MinTTL, MaxTTL, DefaultTTL)
	}
	return ttl, nil
}

// Expiry is when a token made at now with ttl expires.
func Expiry(now time.Time, ttl time.Duration) time.Time { return now.Add(ttl) }

// NeedsRenewal says whether the token of a machine that is still joining
// must be renewed: true when less than a third of ttl remains before
// expires (5 minutes of the default 15), so a renewal has two thirds of a
// TTL to land before kubeadm join can fail on an expired token. A token that
// has already expired needs renewal too.
func NeedsRenewal(expires time.Time, ttl time.Duration, now time.Time) bool {
	return expires.Sub(now) < ttl/3
}

// RenewAfter is how long from now the caller should check again: the
// moment NeedsRenewal turns true (zero if it already is).
func RenewAfter(expires time.Time, ttl time.Duration, now time.Time) time.Duration {
	d := expires.Sub(now) - ttl/3
	if d < 0 {
		return 0
	}
	return d
}
