// Command capn-provider-sim runs the simulated infrastructure provider
// (providers/sim): machines are records in memory whose simulated nodes
// publish heartbeats. Flags: the runtime's, --sim-* and --provider-* (see
// -h); each also reads its CAPN_* environment variable.
package main

import (
	"github.com/capn-dev/capn/providers/sdk"
	"github.com/capn-dev/capn/providers/sim"
	"github.com/capn-dev/capn/services/daemon"
)

func main() {
	daemon.Main(sim.NewService(sim.DefaultOptions(), sdk.Options{}))
}
