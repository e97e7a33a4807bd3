// Package autoscaler is the end-to-end proof of autoscaling
// (docs/autoscaling.md): the real upstream cluster-autoscaler (make
// autoscaler) against a real Kubernetes cluster capn made with the process
// provider and kube-local bootstrap, talking to capn's autoscaler-provider
// over mutual TLS.
package autoscaler

import (
	"testing"

	"github.com/capn-dev/capn/providers/conformance"
)

// TestMain removes the programs the test builds.
func TestMain(m *testing.M) { conformance.Main(m) }
