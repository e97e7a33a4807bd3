package builtin_test

import (
	"slices"
	"testing"

	"github.com/capn-dev/capn/schemas/manifest"
	"github.com/capn-dev/capn/services/bootstrapper/bootstrap/builtin"
)

// The gateway's manifest validation and the bootstrapper's registry must
// accept the same names, or a cluster passes one and fails the other.
func TestManifestKnowsEveryBuiltinProvider(t *testing.T) {
	names := builtin.Registry().Names()
	known := slices.Sorted(slices.Values(manifest.KnownBootstrapProviders))
	if !slices.Equal(names, known) {
		t.Fatalf("builtin registry %v, manifest.KnownBootstrapProviders %v", names, known)
	}
	if builtin.Default != manifest.DefaultBootstrapProvider {
		t.Fatalf("default %q vs manifest %q", builtin.Default, manifest.DefaultBootstrapProvider)
	}
}
