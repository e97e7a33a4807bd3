// Command addon-manager runs capn's addon-manager service on its own: add-on
// sets applied to the workload clusters they select, with server-side
// apply. See services/addon-manager.
package main

import (
	"github.com/capn-dev/capn/services/addon-manager"
	"github.com/capn-dev/capn/services/daemon"
)

func main() { daemon.Main(addonmanager.New(addonmanager.Config{})) }
