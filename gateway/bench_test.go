package gateway

import (
	"os"
	"testing"

	"google.golang.org/protobuf/encoding/protojson"

	capnv1 "github.com/capn-dev/capn/schemas/capn/v1alpha1"
	"github.com/capn-dev/capn/schemas/manifest"
)

// BenchmarkApplyDecode is apply's work on a body before the write, for the
// demo cluster manifest (examples/) applied over itself as stored: decode,
// default, validate against the stored cluster, as the handler does it.
func BenchmarkApplyDecode(b *testing.B) {
	y, err := os.ReadFile("../examples/demo-cluster.yaml")
	if err != nil {
		b.Fatal(err)
	}
	stored, err := manifest.Decode(y)
	if err != nil {
		b.Fatal(err)
	}
	manifest.Default(stored)
	j, err := protojson.Marshal(stored)
	if err != nil {
		b.Fatal(err)
	}
	s := &server{}
	for _, bc := range []struct {
		name string
		body []byte
	}{{"yaml", y}, {"json", j}} {
		b.Run(bc.name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				if _, err := applyEdge(s, bc.body, stored); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// applyEdge is what apply and writeCluster do with a body and the stored
// cluster before the compare-and-set: decode, the one check, the update
// rules against the stored cluster.
func applyEdge(s *server, body []byte, cur *capnv1.Cluster) (*capnv1.Cluster, error) {
	in, err := decodeApply(body)
	if err != nil {
		return nil, err
	}
	checked := s.validator.Check(in)
	if err := invalidSpec(checked.ValidateUpdate(cur), ""); err != nil {
		return nil, err
	}
	return checked.Cluster(), nil
}
