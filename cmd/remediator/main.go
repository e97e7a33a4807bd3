// Command remediator runs capn's remediator service on its own: repairs of
// unhealthy machines, guarded. See services/remediator.
package main

import (
	"github.com/capn-dev/capn/services/daemon"
	"github.com/capn-dev/capn/services/remediator"
)

func main() { daemon.Main(remediator.New(remediator.Config{})) }
