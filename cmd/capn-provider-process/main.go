// Command capn-provider-process runs the process infrastructure provider
// (providers/process): each machine is a capn-node process on this host
// with its own data directory and 127.a.b.x address. capn-node runs no
// kubelet: it fetches and checks its bootstrap data and heartbeats.
// Machines outlive this program: a restart reads them back from
// --process-state-dir. Flags: the runtime's, --process-* and --provider-*
// (see -h); each also reads its CAPN_* environment variable.
package main

import (
	"github.com/capn-dev/capn/providers/process"
	"github.com/capn-dev/capn/providers/sdk"
	"github.com/capn-dev/capn/services/daemon"
)

func main() {
	daemon.Main(process.NewService(process.Options{}, sdk.Options{}))
}
