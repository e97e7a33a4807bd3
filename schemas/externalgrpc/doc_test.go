package externalgrpc

import (
	"crypto/sha256"
	"encoding/hex"
	"os"
	"strings"
	"testing"
)

// The proto is upstream's, unchanged: a local edit would change what the
// autoscaler and capn agree on without anyone saying so.
func TestProtoIsUpstreams(t *testing.T) {
	b, err := os.ReadFile("externalgrpc.proto")
	if err != nil {
		t.Fatal(err)
	}
	sum := sha256.Sum256(b)
	if got := hex.EncodeToString(sum[:]); got != UpstreamSHA256 {
		t.Errorf("externalgrpc.proto has SHA-256 %s, upstream's at %s is %s: take the file as it is upstream (doc.go)", got, UpstreamCommit, UpstreamSHA256)
	}
}

// The Makefile builds the autoscaler of the commit the proto came from.
func TestMakefileBuildsTheProtosCommit(t *testing.T) {
	b, err := os.ReadFile("../../Makefile")
	if err != nil {
		t.Fatal(err)
	}
	for line := range strings.SplitSeq(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, "AUTOSCALER_COMMIT ?= "); ok {
			if strings.TrimSpace(v) != UpstreamCommit {
				t.Errorf("the Makefile builds the autoscaler of %s, the proto is of %s", v, UpstreamCommit)
			}
			return
		}
	}
	t.Error("the Makefile pins no AUTOSCALER_COMMIT")
}
