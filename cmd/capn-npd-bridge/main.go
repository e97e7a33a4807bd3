// Command capn-npd-bridge runs beside node-problem-detector on a node and
// publishes the node's conditions and problems to capn. See
// cmd/capn-npd-bridge/bridge and docs/health.md.
package main

import (
	"github.com/capn-dev/capn/cmd/capn-npd-bridge/bridge"
	"github.com/capn-dev/capn/services/daemon"
)

func main() { daemon.Main(bridge.NewService(bridge.Config{})) }
