package kube_test

import (
	"testing"

	"github.com/capn-dev/capn/providers/conformance"
)

// TestMain removes the programs the tests build (conformance.BuildTemp,
// conformance.StartCapn).
func TestMain(m *testing.M) { conformance.Main(m) }
