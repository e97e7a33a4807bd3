// Command capn-provider-docker runs the docker infrastructure provider
// (providers/docker): each machine is a container of the capn-node image
// (built locally FROM scratch by `make images`; never pulled) on a bridge
// network of its cluster, reaching capn's NATS through a relay socket.
// capn-node runs no kubelet: it fetches and checks its bootstrap data and
// heartbeats. Flags: the runtime's, --docker-* and --provider-* (see -h);
// each also reads its CAPN_* environment variable.
package main

import (
	"github.com/capn-dev/capn/providers/docker"
	"github.com/capn-dev/capn/providers/sdk"
	"github.com/capn-dev/capn/services/daemon"
)

func main() {
	daemon.Main(docker.NewService(docker.Options{}, sdk.Options{}))
}
