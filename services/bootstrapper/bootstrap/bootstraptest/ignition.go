package bootstraptest

import (
	"testing"

	ignition "github.com/coreos/ignition/v2/config/v3_4"
	"github.com/coreos/ignition/v2/config/v3_4/types"
)

// Ignition validates an Ignition config with Ignition's own parser
// (github.com/coreos/ignition/v2, config/v3_4: the spec version, every
// field's type, data URLs, modes, paths, systemd unit syntax), as
// CloudInitSchema does with cloud-init: the config must parse with no
// error and a report with no entry (not even a warning). It returns the
// parsed config for the caller's own checks.
//
// The parser is imported only here, and this package only by tests, so
// no capn program links Ignition (tests/arch checks it).
func Ignition(t testing.TB, data []byte) types.Config {
	t.Helper()
	cfg, rpt, err := ignition.Parse(data)
	if err != nil {
		t.Fatalf("ignition rejects the config: %v\n%s\n--- config ---\n%s", err, rpt.String(), data)
	}
	if len(rpt.Entries) > 0 {
		t.Fatalf("ignition reports on the config:\n%s\n--- config ---\n%s", rpt.String(), data)
	}
	return cfg
}
