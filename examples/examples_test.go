// Package examples holds manifests that work with capn dev; this test keeps
// them valid as the schema evolves.
package examples

import (
	"bytes"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/capn-dev/capn/schemas/manifest"
	"github.com/capn-dev/capn/services/bootstrapper/bootstrap/builtin"
)

func TestExamplesAreValid(t *testing.T) {
	files, _ := filepath.Glob("*.yaml")
	if len(files) == 0 {
		t.Fatal("no example manifests")
	}
	for _, f := range files {
		t.Run(f, func(t *testing.T) {
			b, err := os.ReadFile(f)
			if err != nil {
				t.Fatal(err)
			}
			if bytes.Contains(b, []byte("\nkind: "+manifest.KindAddonSet+"\n")) {
				s, err := manifest.DecodeAddonSet(b)
				if err != nil {
					t.Fatal(err)
				}
				manifest.DefaultAddonSet(s)
				if err := manifest.ValidateAddonSet(s); err != nil {
					t.Fatalf("%s: %v", f, err)
				}
				return
			}
			cs, err := manifest.DecodeAll(b)
			if err != nil {
				t.Fatal(err)
			}
			for _, c := range cs {
				manifest.Default(c)
				if err := manifest.Validate(c); err != nil {
					t.Fatalf("%s: %v", f, err)
				}
				// And as the bootstrapper will render it, per pool and os.
				if err := builtin.Registry().ValidateCluster(c.GetSpec(), time.Now()); err != nil {
					t.Fatalf("%s: bootstrap: %v", f, err)
				}
			}
		})
	}
}
