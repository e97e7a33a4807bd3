package capi

import (
	"os"
	"path/filepath"
	"testing"

	"google.golang.org/protobuf/proto"

	"github.com/capn-dev/capn/schemas/manifest"
)

// FuzzImport: Import never panics (with Classes or not), and whatever
// cluster, class and add-on sets it makes encode to manifests that decode back to the same. The seeds are the
// testdata manifests and the corpus under testdata/fuzz/FuzzImport.
func FuzzImport(f *testing.F) {
	files, _ := filepath.Glob("testdata/*.yaml")
	for _, file := range files {
		b, err := os.ReadFile(file)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b, "")
		f.Add(b, "sim")
	}
	f.Add([]byte(crsOnly), "")
	f.Fuzz(func(t *testing.T, data []byte, provider string) {
		// With Classes, the ClusterClass made round-trips too.
		if res, err := Import(data, Options{Provider: provider, Classes: true}); err == nil && res.Class != nil {
			y, err := manifest.EncodeMessage(res.Class)
			if err != nil {
				t.Fatalf("EncodeMessage: %v", err)
			}
			back, err := manifest.DecodeClusterClass(y)
			if err != nil || !proto.Equal(back, res.Class) {
				t.Fatalf("the imported class does not round-trip (%v):\n%s", err, y)
			}
		}
		res, err := Import(data, Options{Provider: provider})
		if err != nil {
			return
		}
		for _, set := range res.AddonSets {
			y, err := manifest.EncodeAddonSet(set)
			if err != nil {
				t.Fatalf("EncodeAddonSet: %v", err)
			}
			back, err := manifest.DecodeAddonSet(y)
			if err != nil || !proto.Equal(back, set) {
				t.Fatalf("the imported add-on set does not round-trip (%v):\n%s", err, y)
			}
		}
		if res.Cluster == nil {
			if len(res.AddonSets) == 0 {
				t.Fatal("neither a cluster nor an add-on set")
			}
			return
		}
		y, err := manifest.Encode(res.Cluster)
		if err != nil {
			t.Fatalf("Encode: %v", err)
		}
		back, err := manifest.Decode(y)
		if err != nil {
			t.Fatalf("the imported manifest does not decode: %v\n%s", err, y)
		}
		if !proto.Equal(back, res.Cluster) {
			t.Fatalf("the imported manifest does not round-trip:\n%s", y)
		}
		for _, n := range res.Notes {
			if n.Object == "" || n.Reason == "" {
				t.Fatalf("a note without object or reason: %+v", n)
			}
		}
	})
}
