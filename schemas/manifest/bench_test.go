package manifest

import (
	"os"
	"testing"

	"google.golang.org/protobuf/encoding/protojson"
)

// BenchmarkDecode decodes the demo cluster manifest (examples/), as YAML
// and as the JSON the CLI and the dashboard send.
func BenchmarkDecode(b *testing.B) {
	y, err := os.ReadFile("../../examples/demo-cluster.yaml")
	if err != nil {
		b.Fatal(err)
	}
	c, err := Decode(y)
	if err != nil {
		b.Fatal(err)
	}
	j, err := protojson.Marshal(c)
	if err != nil {
		b.Fatal(err)
	}
	for _, bc := range []struct {
		name string
		body []byte
	}{{"yaml", y}, {"json", j}} {
		b.Run(bc.name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				if _, err := Decode(bc.body); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
