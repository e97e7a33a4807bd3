// Command autoscaler-provider runs capn's autoscaler-provider service on
// its own: the upstream cluster autoscaler's externalgrpc cloud provider
// over mutual TLS. See services/autoscaler-provider and docs/autoscaling.md.
package main

import (
	autoscalerprovider "github.com/capn-dev/capn/services/autoscaler-provider"
	"github.com/capn-dev/capn/services/daemon"
)

func main() { daemon.Main(autoscalerprovider.New(autoscalerprovider.Config{})) }
