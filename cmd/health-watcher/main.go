// Command health-watcher runs capn's health-watcher service on its own:
// node health from heartbeats, node conditions, problem events and drift,
// judged against each cluster's health policy. See services/health-watcher.
package main

import (
	"github.com/capn-dev/capn/services/daemon"
	"github.com/capn-dev/capn/services/health-watcher"
)

func main() { daemon.Main(healthwatcher.New(healthwatcher.Config{})) }
