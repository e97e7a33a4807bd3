// Command maintenance runs capn's maintenance service on its own:
// auto-patch and pending upgrades inside maintenance windows, and
// hibernation schedules. See services/maintenance.
package main

import (
	"github.com/capn-dev/capn/services/daemon"
	"github.com/capn-dev/capn/services/maintenance"
)

func main() { daemon.Main(maintenance.New(maintenance.Config{})) }
