// Command health-watcher runs capn's health-watcher service on its own:
// node health from heartbeats, node conditions, problem events and drift,
// judged against each cluster's health policy. See services/health-watcher.
package main

import (
	healthwatcher "github.com/capn-dev/capn/services/health-watcher"
	"github.com/capn-dev/capn/services/runtime"
)

func main() { runtime.Main(healthwatcher.New(healthwatcher.Config{})) }
