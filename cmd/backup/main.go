// Command backup runs capn's backup service on its own: consistent
// backups of the management plane (on request and on a schedule) and
// their restores. See services/backup.
package main

import (
	"github.com/capn-dev/capn/services/backup"
	"github.com/capn-dev/capn/services/daemon"
)

func main() { daemon.Main(backup.New(backup.Config{})) }
