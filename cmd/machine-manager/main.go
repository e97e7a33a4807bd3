// Command machine-manager runs capn's machine-manager service on its own:
// each machine's life from bootstrap to deletion. See services/machine-manager.
package main

import (
	machinemanager "github.com/capn-dev/capn/services/machine-manager"
	"github.com/capn-dev/capn/services/runtime"
)

func main() { runtime.Main(machinemanager.New(machinemanager.Config{})) }
