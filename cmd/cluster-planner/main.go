// Command cluster-planner runs capn's cluster-planner service on its own.
// See services/cluster-planner.
package main

import (
	"github.com/capn-dev/capn/services/cluster-planner"
	"github.com/capn-dev/capn/services/daemon"
)

func main() { daemon.Main(clusterplanner.New(clusterplanner.Config{})) }
