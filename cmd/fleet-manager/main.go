// Command fleet-manager runs capn's fleet-manager service on its own:
// rollouts of class revisions, Kubernetes versions and variables to the
// clusters a label selector picks, in waves. See services/fleet-manager.
package main

import (
	"github.com/capn-dev/capn/services/daemon"
	fleetmanager "github.com/capn-dev/capn/services/fleet-manager"
)

func main() { daemon.Main(fleetmanager.New(fleetmanager.Config{})) }
