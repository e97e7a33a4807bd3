// Command remediator runs capn's remediator service on its own: repairs of
// unhealthy machines, guarded. See services/remediator.
package main

import (
	"github.com/capn-dev/capn/services/remediator"
	"github.com/capn-dev/capn/services/runtime"
)

func main() { runtime.Main(remediator.New(remediator.Config{})) }
