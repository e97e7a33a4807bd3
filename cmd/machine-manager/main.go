// Command machine-manager runs capn's machine-manager service on its own:
// each machine's life from bootstrap to deletion. See services/machine-manager.
package main

import (
	"github.com/capn-dev/capn/services/daemon"
	"github.com/capn-dev/capn/services/machine-manager"
)

func main() { daemon.Main(machinemanager.New(machinemanager.Config{})) }
