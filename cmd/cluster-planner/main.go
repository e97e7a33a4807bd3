// Command cluster-planner runs capn's cluster-planner service on its own.
// See services/cluster-planner.
package main

import (
	clusterplanner "github.com/capn-dev/capn/services/cluster-planner"
	"github.com/capn-dev/capn/services/runtime"
)

func main() { runtime.Main(clusterplanner.New(clusterplanner.Config{})) }
