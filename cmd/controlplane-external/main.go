// Command controlplane-external runs capn's external control-plane
// implementation on its own: clusters whose control plane someone else
// runs (controlPlane.type: external). See services/controlplane-external.
package main

import (
	controlplaneexternal "github.com/capn-dev/capn/services/controlplane-external"
	"github.com/capn-dev/capn/services/daemon"
)

func main() { daemon.Main(controlplaneexternal.New(controlplaneexternal.Config{})) }
